"""Sparse offset and time indexes of one segment, in Kafka's file formats.

``.index`` entries are 8 bytes: relative offset int32, file position int32 (big-endian).
``.timeindex`` entries are 12 bytes: timestamp int64, relative offset int32.

Invariants:
- Entries are strictly increasing in their key (offset, resp. timestamp) and the offset index
  also in position; an append that would break this is ignored (time index) or refused
  (offset index), so a binary search is always valid.
- Indexes are derived data: neither is checksummed, and after an unclean shutdown the segment
  rebuilds them from the log. ``sanity_check`` catches a torn or garbled file.
- Only the active segment's entries live in Python memory (a bytearray mirrored to the file);
  a closed index is searched through a read-only ``mmap``, so memory stays bounded however
  many segments a partition has.
- A failed write of the file (a full disk) never fails an append: the active index keeps its
  entries in memory, drops the file and writes it whole when closed; a file that still
  cannot be written is left missing, and the segment rebuilds it from its log at load.
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import struct
from pathlib import Path

log = logging.getLogger(__name__)


class CorruptIndexError(Exception):
    """The index file is inconsistent and must be rebuilt from its segment."""


class _SparseIndex:
    ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_bytes // self.ENTRY.size)
        self._active: bytearray | None = None  # entries of a writable index
        self._map: mmap.mmap | memoryview | None = None  # entries of a read-only index
        self._file = None
        size = path.stat().st_size if path.exists() else 0
        self._entries = size // self.ENTRY.size
        self._last: tuple[int, int] | None = None  # cached last entry (appends compare to it)

    # -- buffers -------------------------------------------------------------------------
    def _buffer(self) -> bytes | bytearray | mmap.mmap | memoryview:
        if self._active is not None:
            return self._active
        if self._map is None:
            size = self._entries * self.ENTRY.size
            if size == 0:
                self._map = memoryview(b"")
            else:
                with open(self.path, "rb") as f:
                    self._map = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        return self._map

    def open_for_append(self) -> None:
        """Make this the active segment's index: entries move into memory, appends go to disk."""
        if self._active is not None:
            return
        size = self._entries * self.ENTRY.size
        data = self.path.read_bytes()[:size] if self.path.exists() else b""
        self._release_map()
        self._active = bytearray(data)
        self._file = open(self.path, "r+b" if self.path.exists() else "w+b")
        self._file.truncate(size)
        self._file.seek(size)

    def _release_map(self) -> None:
        if isinstance(self._map, mmap.mmap):
            self._map.close()
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
        self._active += packed
        if self._file is not None:
            try:
                self._file.write(packed)
            except OSError as exc:
                self._lose_file(exc)
        self._entries += 1
        self._last = (key, value)

    def _lose_file(self, exc: OSError) -> None:
        """Writing the file failed (a full disk): the entries stay in memory, where the active
        segment's lookups read them, and the file goes until ``close`` writes it whole (if
        that fails too, the segment rebuilds the missing index from its log at load)."""
        log.warning("%s: %s; the index is kept in memory", self.path, exc.strerror)
        file, self._file = self._file, None
        with contextlib.suppress(OSError):
            if file is not None:
                file.close()  # closes the descriptor even when flushing its buffer fails
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)

    def truncate_entries(self, count: int) -> None:
        """Keep only the first ``count`` entries (recovery after a truncated log)."""
        count = min(count, self._entries)
        self._entries = count
        self._last = None
        size = count * self.ENTRY.size
        if self._active is not None:
            del self._active[size:]
            if self._file is not None:
                try:
                    self._file.flush()
                    self._file.truncate(size)
                    self._file.seek(size)
                except OSError as exc:
                    self._lose_file(exc)
        else:
            self._release_map()
            if self.path.exists():
                os.truncate(self.path, size)

    def _check_size(self) -> None:
        if self.path.exists() and self.path.stat().st_size % self.ENTRY.size:
            raise CorruptIndexError(
                f"{self.path} size is not a multiple of {self.ENTRY.size} bytes"
            )

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self.truncate_entries(0)

    def flush(self) -> None:
        if self._file is not None:
            try:
                self._file.flush()
                os.fsync(self._file.fileno())
            except OSError as exc:
                self._lose_file(exc)

    def close(self) -> None:
        """Flush and turn read-only; the file keeps exactly the valid entries."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError as exc:
                self._lose_file(exc)
            self._file = None
        if self._active is not None and not self.path.exists():
            self._write_whole(self._active)
        elif not self.path.exists():
            with contextlib.suppress(OSError):  # missing: rebuilt at load
                self.path.touch()
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

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def rename(self, path: Path) -> None:
        """Rename the file; an open map stays valid (it follows the inode), so a reader on
        another thread may keep searching this index while the cleaner renames it."""
        os.replace(self.path, path)
        self.path = path


class OffsetIndex(_SparseIndex):
    """Maps an offset to the file position of a batch at or before it."""

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
