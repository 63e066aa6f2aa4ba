"""One log segment: a ``.log`` file of record batches plus its ``.index``, ``.timeindex`` and
``.txnindex``.

Invariants:
- The ``.log`` file holds whole, CRC-valid batches back to back, with offsets strictly
  increasing; ``size`` is the byte length of that valid prefix. Appends are one ``writev``
  of already-validated batches, so a reader on the same thread never sees half a batch, and a
  torn tail after a crash is found and cut by ``recover``. Disk blocks may be reserved past
  the end of the file (``reservation``): the file size stays exactly ``size``, and the blocks
  are given back when the segment is sealed or closed.
- A failed append (a full disk: ENOSPC, EIO, or a short write) keeps nothing: the file is cut
  back to ``size`` and ``KafkaStorageError`` raised; while the cut itself fails, appends are
  refused. Space coming back needs nothing more: the next append simply works.
- An offset index entry (batch last offset, batch position) is added whenever more than
  ``index.interval.bytes`` were appended since the last entry; the time index gets
  (largest timestamp so far, its offset) at the same points. Both are rebuilt by ``recover``.
- The ``.txnindex`` lists the transactions aborted by markers in this segment; the
  partition log writes it and rebuilds it after a recovery (it knows the transactions'
  first offsets, from producer state); ``recover`` rebuilds the other two indexes.
- Reads return file ranges (``FileSlice``) that start on a batch boundary; nothing is copied
  into Python memory except 61-byte headers while searching.
- Files are opened when used, through the process's open-file cache (``file_handles``),
  which closes the least recently used: a segment at rest costs no descriptor. Every
  system call takes the descriptor object (``_handle``) into a local variable first, and a
  ``FileSlice`` holds it, so an eviction meanwhile never closes a descriptor in use nor
  lets its number be reused under a read or a ``sendfile``.
- ``close`` releases the files for good: a second close does nothing, and a closed segment
  is never reopened (the flusher thread's ``flush`` of a segment deleted meanwhile does
  nothing; a read raises EBADF, as a closed descriptor did).
"""

from __future__ import annotations

import errno
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

from sparklog.errors import KafkaError, KafkaStorageError
from sparklog.record.batch import (
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    Buffer,
    check_header,
    crc_matches,
    parse_header,
)
from sparklog.record.control import Marker, batch_marker
from sparklog.record.records import decode_records
from sparklog.storage.config import LogConfig
from sparklog.storage.file_handles import OPEN_FILES, CachedFile, Descriptor
from sparklog.storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from sparklog.storage.reservation import BlockReservation
from sparklog.storage.txn_index import TransactionIndex

log = logging.getLogger(__name__)

LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX = ".log", ".index", ".timeindex"
TXNINDEX_SUFFIX = ".txnindex"
FILE_EXTENSIONS = (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX, LOG_SUFFIX)
"""A segment's files, the log last: renames and deletes go in this order, so the log's name
tells the state of the whole segment."""
DELETED_SUFFIX = ".deleted"
INT32_MAX = (1 << 31) - 1


def segment_name(base_offset: int) -> str:
    """Kafka's file name stem: the base offset zero-padded to 20 digits."""
    return f"{base_offset:020d}"


@dataclass(frozen=True, slots=True)
class FileSlice:
    """Bytes [position, position + length) of a segment file, starting on a batch boundary.

    It holds the segment's ``Descriptor``: the file stays open while the slice is in use (a
    ``sendfile`` under way), however the open-file cache evicts meanwhile."""

    path: str
    handle: Descriptor
    position: int
    length: int
    first_offset: int

    @property
    def fd(self) -> int:
        return self.handle.fd

    def read(self) -> bytes:
        return os.pread(self.handle.fd, self.length, self.position)

    def may_pin(self) -> bool:
        """Whether this slice may keep its descriptor until it is sent (zero-copy), else
        its bytes are read now (``file_handles.OpenFiles.may_pin``)."""
        return OPEN_FILES.may_pin()


class LogSegment:
    """A segment file and its indexes; only the partition's last segment is appended to."""

    __slots__ = (
        "_bytes_since_index_entry",
        "_config",
        "_first_batch_timestamp",
        "_index_interval_bytes",
        "_log",
        "_reservation",
        "_roll_after_ms",
        "_segment_bytes",
        "_torn",
        "base_offset",
        "closed",
        "created_ms",
        "directory",
        "max_timestamp",
        "next_offset",
        "offset_index",
        "offset_of_max_timestamp",
        "size",
        "time_index",
        "txn_index",
    )

    def __init__(self, directory: str | Path, base_offset: int, config: LogConfig, now_ms: int,
                 *, suffix: str = "", present: AbstractSet[str] | None = None) -> None:
        """Open (or create) the files ``<base>.log<suffix>`` and its indexes; the log cleaner
        writes segments with a ``.cleaned`` suffix and recovery reopens ``.swap`` ones.
        ``present``: the directory's file names, when the caller listed them (an index
        file not among them is not looked for)."""
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self._log = CachedFile(os.path.join(directory, self._name(LOG_SUFFIX, suffix)),
                               os.O_RDWR | os.O_CREAT | os.O_APPEND)
        self.closed = False
        handle = self._log.handle()
        self.size = os.fstat(handle.fd).st_size
        self._reservation: BlockReservation | None = None  # from the first append
        self.created_ms = now_ms
        self.offset_index = OffsetIndex(directory, self._name(INDEX_SUFFIX, suffix), base_offset,
                                        config.segment_index_bytes, present)
        self.time_index = TimeIndex(directory, self._name(TIMEINDEX_SUFFIX, suffix), base_offset,
                                    config.segment_index_bytes, present)
        self.txn_index = TransactionIndex(directory, self._name(TXNINDEX_SUFFIX, suffix),
                                          present)
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self._first_batch_timestamp: int | None = None
        self._bytes_since_index_entry = 0
        self._torn = False  # a partial write could not be cut back yet

    # -- loading and recovery ------------------------------------------------------------
    def load(self) -> None:
        """Open after a clean shutdown: trust the indexes if sane, else rebuild them."""
        try:
            self.offset_index.sanity_check(self.size)
            self.time_index.sanity_check(self.size)
            self._check_index_ends()
        except CorruptIndexError:
            self.recover()
            self.offset_index.seal()  # read-only again: only the active segment's stay open
            self.time_index.seal()
            return
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry
        _, position = self.offset_index.lookup(self.offset_index.last_offset)
        for header in self.iter_headers(position):
            self._observe(header)
        # The scan began at the last indexed batch, not the first: read that one lazily.
        self._first_batch_timestamp = None

    def _check_index_ends(self) -> None:
        """A few preads beyond the files' own checks: the offset index has entries if the
        log is longer than ``index.interval.bytes``, the time index if the offset index
        has, and both indexes' first and last entries
        name the batches they point at, so a missing, zeroed or garbled index is rebuilt
        rather than trusted."""
        offsets, times = self.offset_index, self.time_index
        if offsets.entries == 0 and self.size > self._index_interval_bytes:
            # (an active segment's index files are made with their first entry)
            raise CorruptIndexError(f"{offsets.path} is missing or empty for {self.size} "
                                    "bytes of log")
        if offsets.entries and not times.entries:  # both get their first entry together
            raise CorruptIndexError(f"{times.path} is missing or empty")
        for n in (0, offsets.entries - 1) if offsets.entries else ():
            relative, position = offsets.entry(n)
            header = self.read_header(position)
            if header is None or header.last_offset != self.base_offset + relative:
                raise CorruptIndexError(f"{offsets.path} entry {n} names no batch")
        if offsets.entries > 1:
            first, last = offsets.entry(0), offsets.entry(offsets.entries - 1)
            if first[0] >= last[0] or first[1] >= last[1]:
                raise CorruptIndexError(f"{offsets.path} entries do not increase")
        for n in (0, times.entries - 1) if times.entries else ():
            timestamp, relative = times.entry(n)
            if (timestamp, relative) == (-1, 0):  # written while no batch had a timestamp
                continue
            header = self.translate_offset(self.base_offset + relative)
            if header is None or (header.last_offset, header.max_timestamp) != (
                self.base_offset + relative, timestamp
            ):
                raise CorruptIndexError(f"{times.path} entry {n} names no batch")

    def recover(self) -> int:
        """Validate every batch, rebuild both indexes and cut any invalid tail.

        Returns the number of bytes truncated. Memory use is one batch at a time.
        """
        self.offset_index.open_for_append()
        self.time_index.open_for_append()
        self.offset_index.reset()
        self.time_index.reset()
        self.next_offset, self.max_timestamp = self.base_offset, -1
        self.offset_of_max_timestamp, self._bytes_since_index_entry = self.base_offset, 0
        self._first_batch_timestamp = None
        handle = self._handle()
        file_size = os.fstat(handle.fd).st_size
        valid, last_offset = 0, self.base_offset - 1
        while valid < file_size:
            header = self._read_valid_batch(valid, file_size)
            if header is None or header.base_offset <= last_offset:
                break
            self._index_batch(header, valid)
            valid += header.size
            last_offset = header.last_offset
        if valid < file_size:
            os.ftruncate(handle.fd, valid)
        self.size = valid
        return file_size - valid

    def truncate_to(self, offset: int) -> None:
        """Cut the file at the batch holding ``offset`` (every later byte goes) and rebuild
        the indexes: a follower dropping a divergent tail. The segment is appendable after."""
        position = self.position_of(offset)
        handle = self._handle()
        os.ftruncate(handle.fd, position)
        self.recover()

    def _read_valid_batch(self, position: int, file_size: int) -> BatchHeader | None:
        head = self._pread(HEADER_SIZE, position)
        if len(head) < HEADER_SIZE:
            return None
        header = parse_header(head)
        try:
            check_header(header, file_size - position, from_producer=False)
        except KafkaError:
            return None
        if header.last_offset - self.base_offset > INT32_MAX:
            return None
        data = self._pread(header.size, position)
        if len(data) < header.size or not crc_matches(data, header):
            return None
        return header

    # -- appends -------------------------------------------------------------------------
    def open_for_append(self) -> None:
        self.offset_index.open_for_append()
        self.time_index.open_for_append()

    def must_roll(self, incoming_bytes: int, incoming_max_timestamp: int, last_offset: int,
                  now_ms: int) -> bool:
        """Kafka's roll rule, for a non-empty segment: size, relative offsets about to
        overflow, a full index, or age (from the first batch's timestamp, else creation)."""
        size = self.size
        if size == 0:
            return False
        if (size + incoming_bytes > self._segment_bytes
                or last_offset - self.base_offset > INT32_MAX
                or self.offset_index.is_full or self.time_index.is_full):
            return True
        first = self.first_batch_timestamp()
        if first >= 0 and incoming_max_timestamp >= 0:
            waited = incoming_max_timestamp - first
        else:
            waited = now_ms - self.created_ms
        return waited > self._roll_after_ms

    def append(self, buffers: list[Buffer], headers: Sequence[BatchHeader]) -> None:
        """Append validated, offset-assigned batches, back to back, given as ``buffers`` (one
        ``writev``); header positions are relative to the start of those bytes."""
        position = self.size
        size = headers[-1].position + headers[-1].batch_length + LOG_OVERHEAD
        if self._torn:
            self._cut_back(position)
            if self._torn:
                raise KafkaStorageError(f"{self.log_path} still ends in a partial write")
        handle = self._handle()
        reservation = self._reservation
        if reservation is None:
            reservation = self._reservation = BlockReservation()
        try:
            reservation.ensure(handle.fd, position, position + size)
            written = os.writev(handle.fd, buffers)
        except OSError as exc:
            self._cut_back(position)
            raise KafkaStorageError(f"writing {self.log_path}: {exc.strerror}") from exc
        self._log.dirty = True
        if written != size:
            self._cut_back(position)
            raise KafkaStorageError(f"short write to {self.log_path}: {written} of {size} "
                                    "bytes (the disk is full)")
        for header in headers:
            self._index_batch(header, position + header.position)
        self.size = position + size

    def _cut_back(self, position: int) -> None:
        """Drop a partial write: the file ends at ``position`` again (shrinking a file needs
        no space, so this works on a full disk)."""
        try:
            handle = self._handle()
            os.ftruncate(handle.fd, position)
            self._torn = False
        except OSError as exc:  # appends stop until it works (at the latest, recovery)
            self._torn = True
            log.warning("%s: cannot cut a partial write back to %d bytes: %s", self.log_path,
                        position, exc.strerror)

    def _observe(self, header: BatchHeader) -> None:
        last_offset = header.base_offset + header.last_offset_delta
        self.next_offset = last_offset + 1
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self._first_batch_timestamp is None:
            self._first_batch_timestamp = header.max_timestamp

    def _index_batch(self, header: BatchHeader, position: int) -> None:
        self._observe(header)
        self._bytes_since_index_entry += header.batch_length + LOG_OVERHEAD
        if self._bytes_since_index_entry > self._index_interval_bytes:
            # A full index stays as it is (lookups scan on from its last entry): one request
            # of many batches, or a recovery under a smaller segment.index.bytes or
            # index.interval.bytes, can need more entries than the roll check left room for.
            if not self.offset_index.is_full:
                self.offset_index.append(self.next_offset - 1, position)
            if not self.time_index.is_full:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index_entry = 0

    def largest_timestamp(self) -> int:
        """Largest record timestamp, or the file's modification time if none (Kafka's rule)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.stat(self._log.path).st_mtime * 1000)

    def first_batch_timestamp(self) -> int:
        if self._first_batch_timestamp is None:
            header = self.read_header(0)
            self._first_batch_timestamp = -1 if header is None else header.max_timestamp
        return self._first_batch_timestamp

    # -- reads ---------------------------------------------------------------------------
    def read_header(self, position: int) -> BatchHeader | None:
        if position + HEADER_SIZE > self.size:
            return None
        return BatchHeader(*HEADER.unpack(self._pread(HEADER_SIZE, position)),
                           position=position)

    def iter_headers(self, position: int = 0, end: int | None = None) -> Iterator[BatchHeader]:
        """Headers of the batches in [position, end), with absolute file positions."""
        end = self.size if end is None else end
        while position < end:
            header = self.read_header(position)
            if header is None:
                return
            yield header
            position += header.size

    def marker(self, header: BatchHeader) -> Marker | None:
        """The marker of the control batch at ``header.position`` (None for an emptied one)."""
        data = self._pread(header.size, header.position)
        return batch_marker(data, parse_header(data))

    def translate_offset(self, offset: int, start_position: int = 0) -> BatchHeader | None:
        """The first batch whose last offset is >= ``offset`` (searching from the index)."""
        _, position = self.offset_index.lookup(offset)
        for header in self.iter_headers(max(position, start_position)):
            if header.last_offset >= offset:
                return header
        return None

    def read(
        self, offset: int, max_bytes: int, max_position: int | None = None
    ) -> FileSlice | None:
        """Bytes from the batch holding ``offset``: at least that batch, else <= max_bytes.

        As in Kafka, the range may end inside a batch when ``max_bytes`` cuts it; clients
        drop a partial trailing batch. Nothing past ``max_position`` is returned.
        """
        limit = self.size if max_position is None else min(max_position, self.size)
        header = self.translate_offset(offset)
        if header is None or header.position >= limit:
            return None
        length = max(min(max_bytes, limit - header.position), header.size)
        return FileSlice(self._log.path, self._handle(), header.position, length,
                         header.base_offset)

    def position_of(self, offset: int) -> int:
        """File position of the batch holding ``offset``, or the end if it is past the log."""
        header = self.translate_offset(offset)
        return self.size if header is None else header.position

    def find_offset_by_timestamp(self, timestamp: int, min_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record >= both arguments, or None."""
        if self.max_timestamp < timestamp:
            return None
        _, index_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(index_offset, min_offset))
        for header in self.iter_headers(position):
            if header.max_timestamp < timestamp or header.last_offset < min_offset:
                continue
            data = self._pread(header.size, header.position)
            for record in decode_records(data, parse_header(data)):
                if record.timestamp >= timestamp and record.offset >= min_offset:
                    return record.offset, record.timestamp
        return None

    def max_timestamp_record(self) -> tuple[int, int, int] | None:
        """(offset, timestamp, batch leader epoch) of the first record holding this segment's
        largest timestamp (KIP-734: the first batch reaching it, then its first record with
        that timestamp, as Kafka's ``offsetOfMaxTimestamp``), None without timestamps."""
        if self.max_timestamp < 0:
            return None
        header = self.translate_offset(self.offset_of_max_timestamp)
        if header is None:
            return None
        data = self._pread(header.size, header.position)
        offset = next((r.offset for r in decode_records(data, parse_header(data))
                       if r.timestamp == header.max_timestamp), header.last_offset)
        return offset, header.max_timestamp, header.leader_epoch

    # -- lifecycle -----------------------------------------------------------------------
    def _handle(self) -> Descriptor:
        """The log file's descriptor, reopened if the open-file cache closed it; keep it in
        a local variable while a system call uses its number."""
        if self.closed:
            raise OSError(errno.EBADF, f"segment {self.log_path} is closed")
        return self._log.handle()

    def _pread(self, length: int, position: int) -> bytes:
        handle = self._handle()
        return os.pread(handle.fd, length, position)

    @property
    def log_path(self) -> Path:
        return Path(self._log.path)

    @property
    def is_open(self) -> bool:
        """The log file has a descriptor in the open-file cache now."""
        return self._log.is_open

    def flush(self) -> None:
        if not self.closed:  # closed: deleted, or its log flushed it before closing
            self._log.sync()
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close_for_append(self) -> None:
        """The segment stops being active: fsync it and turn its indexes read-only."""
        self.flush()
        self.seal()

    def seal(self) -> None:
        """Turn the indexes read-only (written out, not fsynced: they are rebuilt if lost)
        and give back the disk blocks reserved past the end."""
        self._release_reservation()
        self.offset_index.seal()
        self.time_index.seal()

    def _release_reservation(self) -> None:
        reservation = self._reservation
        if reservation is not None and not self.closed:
            if reservation.needs_release(self.size):
                handle = self._handle()
                reservation.release(handle.fd, self.size)
            self._reservation = None

    def close(self) -> None:
        """Release every file; reads already holding the descriptor (a ``FileSlice``) keep
        it until they are done. Nothing reopens a closed segment."""
        self._release_reservation()
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        self.closed = True
        self._log.close()

    def _name(self, extension: str, suffix: str) -> str:
        """The file's name, interned: every partition's first segment has the same names,
        kept once for 100,000 partitions rather than three strings each."""
        return sys.intern(f"{segment_name(self.base_offset)}{extension}{suffix}")

    def _path(self, extension: str, suffix: str) -> Path:
        return Path(self.directory, self._name(extension, suffix))

    def change_suffix(self, suffix: str) -> None:
        """Rename the files ``<base>.log<suffix>`` etc., the indexes first and the log last
        (its name tells what state the segment is in); open descriptors and index maps keep
        serving reads."""
        self.offset_index.rename(self._path(INDEX_SUFFIX, suffix))
        self.time_index.rename(self._path(TIMEINDEX_SUFFIX, suffix))
        self.txn_index.rename(self._path(TXNINDEX_SUFFIX, suffix))
        path = self._path(LOG_SUFFIX, suffix)
        os.replace(self._log.path, path)
        self._log.path = os.fspath(path)

    def mark_deleted(self) -> None:
        """Rename the files ``*.deleted``; the open descriptor keeps serving reads."""
        self.change_suffix(DELETED_SUFFIX)

    def delete(self) -> None:
        self.close()
        for path in (self.offset_index.path, self.time_index.path, self.txn_index.path,
                     self.log_path):
            path.unlink(missing_ok=True)

    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        """Set the config, caching what every append reads."""
        self._config = config
        self._segment_bytes = config.segment_bytes
        self._index_interval_bytes = config.index_interval_bytes
        self._roll_after_ms = config.segment_ms - config.get("segment.jitter.ms")

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path.name}, size={self.size}, next={self.next_offset})"

