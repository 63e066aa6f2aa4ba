"""Sparse offset and time indexes of one segment, in Kafka's file formats.

``.index`` entries are 8 bytes: relative offset int32, file position int32 (big-endian).
``.timeindex`` entries are 12 bytes: timestamp int64, relative offset int32.

Invariants:
- Entries are strictly increasing in their key (offset, resp. timestamp) and the offset index
  also in position; an append that would break this is ignored (time index) or refused
  (offset index), so a binary search is always valid.
- Indexes are derived data: neither is checksummed, and after an unclean shutdown the segment
  rebuilds them from the log. ``sanity_check`` catches a torn or garbled file.
- Only the active segment's entries live in Python memory (a bytearray mirrored to the file
  with ``pwrite``); a closed index is searched through a read-only ``mmap``, so memory stays
  bounded however many segments a partition has. An active index's file is made with its
  first entry (a new partition creates one file, its log); a sealed index always has one
  (unless the disk was full: below).
- Files are opened through the open-file cache (``file_handles``): the active index's
  descriptor and a closed index's map are each one cached file, reopened when used after
  an eviction; an index costs no descriptor at rest.
- A failed write of the file (a full disk) never fails an append: the active index keeps its
  entries in memory, drops the file (``_lost``: nothing is written to it again, so no hole
  or stale entry) and writes it whole when closed; a file that still cannot be written is
  left missing, and the segment rebuilds it from its log at load.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import struct
from collections.abc import Set as AbstractSet
from pathlib import Path

from sparklog.storage.file_handles import OPEN_FILES, CachedFile, NamedFile

log = logging.getLogger(__name__)


class CorruptIndexError(Exception):
    """The index file is inconsistent and must be rebuilt from its segment."""


class _SparseIndex(NamedFile):
    __slots__ = (
        "_active",
        "_entries",
        "_file",
        "_last",
        "_lost",
        "_map",
        "base_offset",
        "max_entries",
    )
    ENTRY: struct.Struct

    def __init__(self, directory: str | Path, name: str, base_offset: int, max_bytes: int,
                 present: AbstractSet[str] | None = None) -> None:
        """``present``: the directory's file names, if listed already (none: look)."""
        super().__init__(directory, name)
        self.base_offset = base_offset
        self.max_entries = max(1, max_bytes // self.ENTRY.size)
        self._active: bytearray | None = None  # entries of a writable index
        self._map: mmap.mmap | None = None  # entries of a read-only index, while cached
        self._file: CachedFile | None = None  # a writable index's file
        self._lost = False  # a write of the active index's file failed: kept in memory only
        self._entries = 0
        if present is None or name in present:
            with contextlib.suppress(FileNotFoundError):
                self._entries = os.stat(self.where).st_size // self.ENTRY.size
        self._last: tuple[int, int] | None = None  # cached last entry (appends compare to it)

    # -- buffers -------------------------------------------------------------------------
    def _buffer(self) -> bytes | bytearray | mmap.mmap:
        """The entries: in memory when writable, else a map through the open-file cache
        (the caller's reference keeps it valid if the cache evicts it meanwhile)."""
        if self._active is not None:
            return self._active
        buffer = self._map
        if buffer is None:
            size = self._entries * self.ENTRY.size
            if size == 0:
                return b""
            buffer = self._map = OPEN_FILES.map(self.where, size)
        OPEN_FILES.touch(self)
        return buffer

    def evict(self) -> None:
        """The open-file cache needs the room: drop the map (a reader keeps its own)."""
        self._map = None

    def open_for_append(self) -> None:
        """Make this the active segment's index: entries move into memory, appends go to disk."""
        if self._active is not None:
            return
        size = self._entries * self.ENTRY.size
        try:
            on_disk = os.stat(self.where).st_size
        except FileNotFoundError:
            on_disk = 0  # the file is made with the first entry
        data = self.path.read_bytes()[:size] if size else b""
        self._release_map()
        self._active = bytearray(data)
        if on_disk != size:  # a torn entry at the end
            handle = self._writable().handle()
            os.ftruncate(handle.fd, size)

    def _writable(self) -> CachedFile:
        """The active index's file (its ``CachedFile`` made at the first write: an idle
        partition's index costs no object for it)."""
        if self._file is None:
            self._file = CachedFile(self.where, os.O_RDWR | os.O_CREAT)
        return self._file

    def _release_map(self) -> None:
        OPEN_FILES.forget(self)
        self._map = None

    # -- queries -------------------------------------------------------------------------
    @property
    def entries(self) -> int:
        return self._entries

    @property
    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    def entry(self, n: int) -> tuple[int, int]:
        return self.ENTRY.unpack_from(self._buffer(), n * self.ENTRY.size)

    def last(self) -> tuple[int, int] | None:
        """The last entry as stored (relative fields), or None when empty."""
        if self._last is None and self._entries:
            self._last = self.entry(self._entries - 1)
        return self._last

    def _floor(self, key: int) -> int:
        """Index of the last entry whose key is <= key, or -1."""
        buf, unpack, size = self._buffer(), self.ENTRY.unpack_from, self.ENTRY.size
        lo, hi = 0, self._entries - 1
        found = -1
        while lo <= hi:
            mid = (lo + hi) // 2
            if unpack(buf, mid * size)[0] <= key:
                found, lo = mid, mid + 1
            else:
                hi = mid - 1
        return found

    # -- updates -------------------------------------------------------------------------
    def _append_entry(self, key: int, value: int) -> None:
        if self._active is None:
            raise RuntimeError(f"index {self.path} is not open for append")
        if self._entries >= self.max_entries:
            raise CorruptIndexError(f"index {self.path} is full")
        packed = self.ENTRY.pack(key, value)
        if not self._lost:
            try:
                file = self._writable()
                handle = file.handle()
                os.pwrite(handle.fd, packed, len(self._active))
                file.dirty = True
            except OSError as exc:
                self._lose_file(exc)
        self._active += packed
        self._entries += 1
        self._last = (key, value)

    def _lose_file(self, exc: OSError) -> None:
        """Writing the file failed (a full disk): the entries stay in memory, where the active
        segment's lookups read them, and the file goes until ``close`` writes it whole (if
        that fails too, the segment rebuilds the missing index from its log at load)."""
        log.warning("%s: %s; the index is kept in memory", self.path, exc.strerror)
        self._lost = True
        if self._file is not None:
            self._file.close()
            self._file = None
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)

    def truncate_entries(self, count: int) -> None:
        """Keep only the first ``count`` entries (recovery after a truncated log)."""
        count = min(count, self._entries)
        if count == self._entries and self._active is not None:
            return  # the file holds exactly the entries (``open_for_append``): nothing to cut
        self._entries = count
        self._last = None
        size = count * self.ENTRY.size
        if self._active is not None:
            del self._active[size:]
            if not self._lost and (self._file is not None or os.path.exists(self.where)):
                try:  # (else the file is made at the first entry, or written whole at close)
                    handle = self._writable().handle()
                    os.ftruncate(handle.fd, size)
                except OSError as exc:
                    self._lose_file(exc)
        else:
            self._release_map()
            if os.path.exists(self.where):
                os.truncate(self.where, size)

    def _check_size(self) -> None:
        if os.path.exists(self.where) and os.stat(self.where).st_size % self.ENTRY.size:
            raise CorruptIndexError(
                f"{self.path} size is not a multiple of {self.ENTRY.size} bytes"
            )

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self.truncate_entries(0)

    def flush(self) -> None:
        if self._file is not None:
            try:
                self._file.sync()
            except OSError as exc:
                self._lose_file(exc)

    def close(self) -> None:
        """Turn read-only (the file keeps exactly the valid entries) and release the file;
        entries are read through a map again when next searched."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._lost and self._active is not None:
            self._write_whole(self._active)
        self._lost = False
        self._active = None
        self._release_map()

    def _write_whole(self, entries: bytearray) -> None:
        """Write a lost file again from memory; none (rebuilt at load) if that fails too."""
        try:
            self.path.write_bytes(entries)
        except OSError as exc:
            log.warning("%s: %s; rebuilt from the log when the segment is next loaded",
                        self.path, exc.strerror)
            with contextlib.suppress(OSError):
                self.path.unlink(missing_ok=True)

    def seal(self) -> None:
        """Close for good as a sealed segment's index: its file exists, entries or not
        (unless the disk is full: then it is rebuilt at load)."""
        self.close()
        if not self._entries and not os.path.exists(self.where):
            with contextlib.suppress(OSError):
                self.path.touch()

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def rename(self, path: Path) -> None:
        """Rename the file; an open map stays valid (it follows the inode), so a reader on
        another thread may keep searching this index while the cleaner renames it. An
        active index without entries may have no file yet: then only its name changes."""
        if self._entries or os.path.exists(self.where):
            os.replace(self.path, path)
        self._moved(path)
        if self._file is not None:
            self._file.path = os.fspath(path)


class OffsetIndex(_SparseIndex):
    """Maps an offset to the file position of a batch at or before it."""

    __slots__ = ()
    ENTRY = struct.Struct(">ii")

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or below ``offset``; (base, 0) if none."""
        n = self._floor(offset - self.base_offset)
        if n < 0:
            return self.base_offset, 0
        rel, pos = self.entry(n)
        return self.base_offset + rel, pos

    @property
    def last_offset(self) -> int:
        last = self.last()
        return self.base_offset if last is None else self.base_offset + last[0]

    def append(self, offset: int, position: int) -> None:
        last = self.last()
        if last is not None:
            rel, pos = last
            if offset - self.base_offset <= rel or position <= pos:
                raise CorruptIndexError(
                    f"offset index entry ({offset}, {position}) is not above the last one "
                    f"({self.base_offset + rel}, {pos})"
                )
        self._append_entry(offset - self.base_offset, position)

    def sanity_check(self, log_size: int) -> None:
        """Kafka's cheap check: whole entries, and the last one inside the segment."""
        self._check_size()
        if self._entries:
            rel, pos = self.entry(self._entries - 1)
            if rel < 0 or pos >= max(log_size, 1):
                raise CorruptIndexError(f"{self.path} last entry ({rel}, {pos}) is past the log")

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= ``offset``."""
        self.truncate_entries(self._floor(offset - self.base_offset - 1) + 1)


class TimeIndex(_SparseIndex):
    """Maps a timestamp to the offset of the segment's largest timestamp so far."""

    __slots__ = ()
    ENTRY = struct.Struct(">qi")

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry at or below ``timestamp``; (-1, base) if none."""
        n = self._floor(timestamp)
        if n < 0:
            return -1, self.base_offset
        ts, rel = self.entry(n)
        return ts, self.base_offset + rel

    @property
    def last_entry(self) -> tuple[int, int]:
        last = self.last()
        return (-1, self.base_offset) if last is None else (last[0], self.base_offset + last[1])

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Append unless the timestamp does not grow (entries stay strictly increasing)."""
        last = self.last()
        if last is not None and (timestamp <= last[0] or offset - self.base_offset <= last[1]):
            return
        self._append_entry(timestamp, offset - self.base_offset)

    def sanity_check(self, log_size: int) -> None:
        """Whole entries, and the last entry not older than the first."""
        self._check_size()
        if self._entries > 1 and self.entry(self._entries - 1)[0] < self.entry(0)[0]:
            raise CorruptIndexError(f"{self.path} timestamps decrease")

    def truncate_to(self, offset: int) -> None:
        """Drop entries pointing at offsets >= ``offset``."""
        keep = 0
        while keep < self._entries and self.base_offset + self.entry(keep)[1] < offset:
            keep += 1
        self.truncate_entries(keep)
