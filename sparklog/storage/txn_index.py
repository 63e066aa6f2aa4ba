"""A segment's aborted-transaction index: ``<base>.txnindex`` in Kafka's file format.

Entries are 34 bytes, big-endian: version int16 (0), producer id int64, first offset int64
(the transaction's first offset in this partition), last offset int64 (its ABORT marker),
last stable offset int64 (the partition's LSO once the transaction completed).

Invariants:
- A segment's index holds one entry per ABORT marker the segment holds, in marker order; an
  entry is written when its marker is appended (or, after a crash, when the segment is
  recovered and producer state is replayed over it).
- Derived data, like the offset and time indexes: not checksummed; a torn tail (a partial
  entry) is dropped when the file is opened, and ``reset`` empties it before a rebuild.
- Entries are few (one per aborted transaction) and kept in memory; the file is appended to
  (through the open-file cache, ``file_handles``: opened at the first append) and fsynced
  with its segment. An append that cannot reach the file (a full disk) is kept in memory
  and the file rewritten whole at the next append, flush or close that can.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import NamedTuple

from sparklog.storage.file_handles import CachedFile, NamedFile

ENTRY = struct.Struct(">hqqqq")
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex(NamedFile):
    __slots__ = ("_behind", "_file", "entries")

    def __init__(self, directory: str | Path, name: str,
                 present: AbstractSet[str] | None = None) -> None:
        """``present``: the directory's file names, if listed already (none: look)."""
        super().__init__(directory, name)
        # no list until there is an entry: most segments hold no aborted transaction
        self.entries: list[AbortedTxn] | tuple[()] = ()
        self._file: CachedFile | None = None  # opened at the first append
        self._behind = False  # an append failed to reach the file: rewrite it whole
        if present is not None and name not in present:
            return
        try:
            with open(self.where, "rb") as file:
                data = file.read()
        except FileNotFoundError:
            return
        whole = len(data) - len(data) % ENTRY.size
        if whole:
            self.entries = [AbortedTxn(*ENTRY.unpack_from(data, pos)[1:])
                            for pos in range(0, whole, ENTRY.size)]
        if whole != len(data):  # a torn entry: not one the log can stand behind
            os.truncate(self.where, whole)

    def append(self, txn: AbortedTxn) -> None:
        if isinstance(self.entries, tuple):
            self.entries = []
        self.entries.append(txn)
        if self._behind:
            self._write_whole()
            return
        try:
            handle = self._writable().handle()
            os.write(handle.fd, ENTRY.pack(VERSION, *txn))
        except OSError:  # a full disk: kept in memory, the file written whole at the next try
            self._behind = True

    def _writable(self) -> CachedFile:
        file = self._file
        if file is None:
            file = self._file = CachedFile(self.where, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        file.dirty = True
        return file

    def _write_whole(self) -> None:
        """Write every entry again (after a failed append); stays behind while that fails."""
        try:
            handle = self._writable().handle()
            os.ftruncate(handle.fd, 0)
            os.write(handle.fd, b"".join(ENTRY.pack(VERSION, *t) for t in self.entries))
            self._behind = False
        except OSError:
            self._behind = True

    def extend(self, txns: Iterable[AbortedTxn]) -> None:
        for txn in txns:
            self.append(txn)

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions overlapping [fetch_offset, upper_bound), and whether the search
        is complete: an entry whose last stable offset reached ``upper_bound`` means every
        transaction that could overlap the range had ended by then (Kafka's rule), so later
        indexes hold none."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def reset(self) -> None:
        """Empty the index (before it is rebuilt from the log)."""
        if not self.entries and self._file is None:
            return  # no file, or an empty one (a torn entry alone was cut when read)
        self.entries = ()
        self._behind = False
        if self._file is not None:
            handle = self._file.handle()
            os.ftruncate(handle.fd, 0)
        elif os.path.exists(self.where):
            os.truncate(self.where, 0)

    def flush(self) -> None:
        if self._behind:
            self._write_whole()
        if self._file is not None:
            self._file.sync()

    def close(self) -> None:
        if self._behind:
            self._write_whole()
        if self._file is not None:
            self._file.close()
            self._file = None

    def rename(self, path: Path) -> None:
        if os.path.exists(self.where):
            os.replace(self.where, path)
        self._moved(path)
        if self._file is not None:
            self._file.path = os.fspath(path)

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
