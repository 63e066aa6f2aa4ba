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
  and fsynced with its segment. An append that cannot reach the file (a full disk) is kept
  in memory and the file rewritten whole at the next append, flush or close that can.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

ENTRY = struct.Struct(">hqqqq")
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        data = path.read_bytes() if path.exists() else b""
        whole = len(data) - len(data) % ENTRY.size
        self.entries: list[AbortedTxn] = [
            AbortedTxn(*ENTRY.unpack_from(data, pos)[1:]) for pos in range(0, whole, ENTRY.size)]
        self._fd: int | None = None
        self._behind = False  # an append failed to reach the file: rewrite it whole
        if whole != len(data):  # a torn entry: not one the log can stand behind
            os.truncate(path, whole)

    def _file(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def append(self, txn: AbortedTxn) -> None:
        self.entries.append(txn)
        if self._behind:
            self._write_whole()
            return
        try:
            os.write(self._file(), ENTRY.pack(VERSION, *txn))
        except OSError:  # a full disk: kept in memory, the file written whole at the next try
            self._behind = True

    def _write_whole(self) -> None:
        """Write every entry again (after a failed append); stays behind while that fails."""
        try:
            os.ftruncate(self._file(), 0)
            os.write(self._file(), b"".join(ENTRY.pack(VERSION, *t) for t in self.entries))
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
        self.entries = []
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
        elif self.path.exists():
            os.truncate(self.path, 0)

    def flush(self) -> None:
        if self._behind:
            self._write_whole()
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._behind:
            self._write_whole()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
