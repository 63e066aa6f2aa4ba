"""Log compaction with Kafka's semantics: ``Cleaner`` cleans one log, ``LogCleaner`` runs
threads that keep picking the dirtiest compacted log.

Terms (Kafka's): the *clean* section of a log lies below its cleaner checkpoint (``first
dirty``, kept in ``cleaner-offset-checkpoint`` in the data directory), the *dirty* section
from there to the *first uncleanable offset* (the last stable offset, the active segment and
``min.compaction.lag.ms`` bound it; always a segment base offset). The dirty ratio is dirty
bytes / (clean + dirty bytes), counted in whole segments.

Invariants of a clean:
- The offset map (key digest -> latest offset) is built over the dirty section, whole batches
  at a time, stopping before a batch that might not fit the memory budget
  (``log.cleaner.dedupe.buffer.size`` / ``log.cleaner.threads``); it always takes at least
  one batch. Its end ``end`` (a batch boundary) becomes the new checkpoint: the rest of the
  dirty section waits for the next round.
- Every inactive segment from the first to the one holding ``end`` is rewritten, grouped as
  Kafka's groupSegmentsBySize does (consecutive segments whose sizes, index sizes and offset
  range fit one segment merge into one). Batches at or past ``end`` are copied byte for byte.
- Below ``end`` a record is kept iff it has a key, no later record of that key lies in
  [first dirty, end), and it is not a tombstone whose batch's delete horizon has passed. The
  clean section holds one record per key (earlier cleans made it so), so every removed
  record has a newer record of its key still in the log; an expired tombstone's older
  values went in the clean that first kept it. Records keep their offsets (compacted logs
  have gaps), so each key's latest record keeps its original offset.
- Tombstone horizon, KIP-534 style: a kept batch holding tombstones and no horizon yet is
  rewritten with horizon = clean start time + ``delete.retention.ms`` (attribute bit 6,
  baseTimestamp; record timestamps unchanged); a clean at or after it drops them.
- Transactions (``clean_txns``, Kafka's rules; only below the last stable offset, so every
  transaction met is complete): batches of aborted transactions are not mapped and go
  (empty if they must stay, as below); a marker stays while the pass has seen data of its
  transaction, then gets a delete horizon (as a tombstone batch does) and goes after it; the
  ABORT markers kept carry their ``.txnindex`` entries into the cleaned segment. So a
  read_committed reader reads the same records of each key before and after a clean.
- Rewritten batches keep baseOffset, lastOffsetDelta, codec (kept records are re-compressed
  with it), attributes, producer id/epoch/base sequence, timestamp type, partition leader
  epoch and baseTimestamp (unless a horizon replaces it), so kept records are copied as byte
  ranges of the decompressed records section (``sparklog.record.records.splice_batch``),
  never decoded into objects. A batch keeping all its records and needing no horizon is
  copied byte for byte; control batches are kept as they are.
- Both passes walk records through the offset map (``offset_map.new_offset_map``: compiled
  when the extension was built): the first maps keys only, the second asks which records
  stay; neither makes a Python object per record in the compiled map.
- A batch losing all its records stays as an empty batch (header only, no codec, recordCount
  0, lastOffsetDelta and max timestamp kept, as Kafka's writeEmptyHeader) when it is its
  producer's latest batch, so the producer's sequence state can be rebuilt from the log, or
  the last batch of its group, so a cleaned segment ends exactly where the segments it
  replaces ended (``PartitionLog`` recovery of a swap relies on it).
- Swaps go through ``PartitionLog.replace_segments`` (crash-safe; under the log's lock for
  a few renames and one directory fsync). Everything else runs without that lock:
  segments are read through descriptors of the cleaner's own, new files are written under
  ``.cleaned`` names, so appends, reads and retention carry on. If the log was closed or
  deleted, or retention took segments meanwhile, the clean aborts and swaps nothing more.
- The checkpoint is written after the last swap of a clean; a crash before it leaves the
  older checkpoint, which only means more work next time.
- A clean that fails on a full disk (ENOSPC, EIO) deletes its ``.cleaned`` files, swaps
  nothing more, warns and backs off ``log.cleaner.backoff.ms``; its thread lives on and
  cleans the log once space returns.

``LogCleaner``: a log is cleaned by one thread at a time; a round picks, among compacted logs
with dirty bytes, the one with the highest dirty ratio above ``min.cleanable.dirty.ratio``
(or any whose oldest dirty record is older than ``max.compaction.lag.ms``), and a thread
with nothing to clean sleeps ``log.cleaner.backoff.ms``. Replaced segments are deleted by
the cleaner after ``file.delete.delay.ms``, so fetches already sending from them complete.
The logs dict is read with ``list(dict.items())``, atomic under the GIL. ``activity`` says
what the threads did last (rounds, cleans, the last clean's figures) for the broker's metrics:
it is replaced whole under the lock after each round, never edited, so any thread may read it.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import crc32c

from sparklog.errors import CorruptRecordError, KafkaStorageError
from sparklog.record.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_TIMESTAMP,
    BatchHeader,
    parse_header,
    validate_batch,
)
from sparklog.record.control import batch_marker
from sparklog.record.records import Retained, records_section, splice_batch
from sparklog.storage.checkpoint import read_checkpoint, write_checkpoint
from sparklog.storage.clean_txns import TransactionTracker
from sparklog.storage.index import OffsetIndex, TimeIndex
from sparklog.storage.log import CLEANED_SUFFIX, CrashPoint, PartitionLog, no_crash
from sparklog.storage.log_manager import LogManager
from sparklog.storage.offset_map import KeyOffsets, new_offset_map
from sparklog.storage.segment import FILE_EXTENSIONS, INT32_MAX, LogSegment, segment_name

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
READ_CHUNK = WRITE_CHUNK = 1 << 20
TopicPartition = tuple[str, int]


class CleanAborted(Exception):
    """The clean stopped early: the cleaner is stopping, or the log changed under it."""


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    """The broker's ``log.cleaner.*`` settings, with Kafka's defaults."""

    enable: bool = True
    backoff_ms: int = 15000
    dedupe_buffer_size: int = 134217728
    threads: int = 1

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> CleanerConfig:
        default = cls()
        return cls(
            enable=props.get("log.cleaner.enable", "true").strip().lower() == "true",
            backoff_ms=int(props.get("log.cleaner.backoff.ms", default.backoff_ms)),
            dedupe_buffer_size=int(props.get("log.cleaner.dedupe.buffer.size",
                                             default.dedupe_buffer_size)),
            threads=max(1, int(props.get("log.cleaner.threads", default.threads))),
        )


@dataclass(frozen=True, slots=True)
class LogToClean:
    """A log's clean and dirty sections as of one moment (Kafka's LogToClean)."""

    tp: TopicPartition
    log: PartitionLog
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    needs_compaction_now: bool

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    @property
    def cleanable(self) -> bool:
        """Worth a clean: dirty bytes, and a ratio above the minimum or a lag past the maximum."""
        return self.dirty_bytes > 0 and (
            self.needs_compaction_now
            or self.dirty_ratio > self.log.config.get("min.cleanable.dirty.ratio")
        )


def log_to_clean(tp: TopicPartition, partition_log: PartitionLog, checkpoint: int | None,
                 now_ms: int) -> LogToClean:
    """Measure a log; a checkpoint outside [log start, log end] restarts at the log start."""
    start, end = partition_log.log_start_offset, partition_log.log_end_offset
    first_dirty = checkpoint if checkpoint is not None and start <= checkpoint <= end else start
    first_uncleanable = partition_log.first_uncleanable_offset(first_dirty, now_ms)
    segments = partition_log.segments
    dirty = [s for s in segments[:-1] if s.next_offset > first_dirty]
    clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty)
    dirty_bytes = sum(s.size for s in dirty if s.base_offset < first_uncleanable)
    max_lag = partition_log.config.get("max.compaction.lag.ms")
    first_times = [t for t in (s.first_batch_timestamp() for s in dirty) if t > 0]
    needs_now = bool(first_times) and min(first_times) < now_ms - max_lag
    return LogToClean(tp, partition_log, first_dirty, first_uncleanable, clean_bytes,
                      dirty_bytes, needs_now)


def group_segments_by_size(segments: Sequence[LogSegment], max_size: int,
                           max_index_bytes: int) -> list[list[LogSegment]]:
    """Kafka's groupSegmentsBySize: runs of consecutive segments whose summed log sizes and
    index sizes fit one segment and whose offsets stay within int32 of the first."""
    groups: list[list[LogSegment]] = []
    log_bytes = offset_index_bytes = time_index_bytes = 0
    for segment in segments:
        size = segment.size
        offset_index = segment.offset_index.entries * OffsetIndex.ENTRY.size
        time_index = segment.time_index.entries * TimeIndex.ENTRY.size
        if groups and (
            log_bytes + size <= max_size
            and offset_index_bytes + offset_index <= max_index_bytes
            and time_index_bytes + time_index <= max_index_bytes
            and segment.next_offset - 1 - groups[-1][0].base_offset <= INT32_MAX
        ):
            groups[-1].append(segment)
            log_bytes += size
            offset_index_bytes += offset_index
            time_index_bytes += time_index
        else:
            groups.append([segment])
            log_bytes, offset_index_bytes, time_index_bytes = size, offset_index, time_index
    return groups


def empty_batch(header: BatchHeader) -> bytes:
    """What Kafka's writeEmptyHeader writes for a batch whose records all went: the same
    offsets, producer fields, leader epoch and flags, no codec, both timestamps the max."""
    attributes = header.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_MASK)
    batch = bytearray(HEADER.pack(
        header.base_offset, HEADER_SIZE - LOG_OVERHEAD, header.leader_epoch, MAGIC_V2, 0,
        attributes, header.last_offset_delta, header.max_timestamp, header.max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence, 0,
    ))
    struct.pack_into(">I", batch, CRC_OFFSET, crc32c.crc32c(batch[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def read_batches(segment: LogSegment) -> Iterator[tuple[BatchHeader, bytes]]:
    """CRC-checked batches of an inactive segment, read sequentially in chunks through a
    descriptor of our own; each comes with the buffer its header's position refers to."""
    with open(segment.log_path, "rb", buffering=0) as file:
        left, pending = segment.size, b""
        while left > 0:
            chunk = file.read(min(READ_CHUNK, left))
            if not chunk:
                raise CorruptRecordError(f"{segment.log_path} is shorter than {segment.size}")
            left -= len(chunk)
            buf, position = pending + chunk, 0
            while len(buf) - position >= HEADER_SIZE:
                if parse_header(buf, position).size > len(buf) - position and left > 0:
                    break  # the batch continues in the next chunk
                header = validate_batch(buf, position)
                yield header, buf
                position += header.size
            pending = buf[position:]
        if pending:
            raise CorruptRecordError(f"{segment.log_path} ends inside a batch")


@dataclass
class CleanResult:
    """What one clean did; ``end_offset`` is the new cleaner checkpoint."""

    tp: TopicPartition
    first_dirty: int
    end_offset: int
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    map_entries: int = 0
    segments_before: int = 0
    segments_after: int = 0
    seconds: float = 0.0
    ratio_before: float = 0.0
    ratio_after: float = 0.0

    def describe(self) -> str:
        topic, partition = self.tp
        rate = self.bytes_read / 1e6 / self.seconds if self.seconds else 0.0
        return (f"cleaned {topic}-{partition} (dirty offsets [{self.first_dirty}, "
                f"{self.end_offset})): {self.bytes_read} -> {self.bytes_written} bytes, "
                f"{self.segments_before} -> {self.segments_after} segments, "
                f"{self.records_read} -> {self.records_kept} records in {self.seconds:.2f} s "
                f"({rate:.1f} MB/s); dirty ratio {self.ratio_before:.3f} -> "
                f"{self.ratio_after:.3f}")


@dataclass(frozen=True, slots=True)
class CleanerActivity:
    """The cleaner threads' last round (end time), how many cleans they made, the last one."""

    last_round_ms: int
    cleans: int = 0
    last_clean: CleanResult | None = None


@dataclass
class _Pass:
    """The fixed inputs of one clean's rewrite pass."""

    end: int
    now_ms: int
    horizon_ms: int
    protected: dict[int, int]  # producer id -> offset of its latest batch
    txns: TransactionTracker


class Cleaner:
    """Cleans one log at a time with its offset map (one per cleaner thread)."""

    def __init__(self, offset_map: KeyOffsets, *, crash_point: CrashPoint = no_crash,
                 stopping: Callable[[], bool] = lambda: False) -> None:
        self.offset_map = offset_map
        self.crash_point = crash_point
        self.stopping = stopping

    def clean(self, to_clean: LogToClean, now_ms: int,
              replaced: list[LogSegment]) -> CleanResult:
        """Clean the log; the segments swapped out (renamed ``.deleted``) are added to
        ``replaced`` as they go, even if the clean aborts later: the caller deletes them once
        reads in flight are done with them."""
        partition_log = to_clean.log
        started = time.monotonic()
        segments = partition_log.inactive_segments()
        with partition_log.lock:
            protected = partition_log.producer_state.last_data_offsets()
        end = self._build_offset_map(partition_log, segments, to_clean.first_dirty,
                                     to_clean.first_uncleanable)
        self.crash_point("map_built")
        config = partition_log.config
        cleaned = [s for s in segments if s.base_offset < end]
        batch_pass = _Pass(end, now_ms, now_ms + config.get("delete.retention.ms"), protected,
                           _tracker(partition_log, cleaned[0].base_offset if cleaned else end,
                                    cleaned[-1].next_offset if cleaned else end))
        result = CleanResult(to_clean.tp, to_clean.first_dirty, end,
                             map_entries=len(self.offset_map))
        for group in group_segments_by_size(cleaned, config.segment_bytes,
                                            config.segment_index_bytes):
            new = self._clean_group(partition_log, group, batch_pass, result)
            if not partition_log.replace_segments(group, new, self.crash_point):
                new.delete()
                raise CleanAborted(f"{partition_log.directory.name} changed during the clean")
            replaced += group
            result.segments_before += len(group)
            result.segments_after += 1
        result.seconds = time.monotonic() - started
        return result

    def _check_stop(self, partition_log: PartitionLog) -> None:
        if self.stopping() or partition_log.closed:
            raise CleanAborted(f"clean of {partition_log.directory.name} stopped")

    def _build_offset_map(self, partition_log: PartitionLog, segments: list[LogSegment],
                          first_dirty: int, first_uncleanable: int) -> int:
        """Map the dirty section's keys; return where the map ends (a batch boundary)."""
        offset_map = self.offset_map
        offset_map.clear()
        end = first_dirty
        txns = _tracker(partition_log, first_dirty, first_uncleanable)
        for segment in segments:
            if segment.base_offset >= first_uncleanable:
                break
            if segment.next_offset <= first_dirty:
                continue
            for header, buf in read_batches(segment):
                self._check_stop(partition_log)
                if header.last_offset < first_dirty:
                    continue
                if header.is_control:
                    txns.on_marker(header, batch_marker(buf, header))
                elif not txns.on_data(header):  # aborted data is never kept: not mapped
                    if len(offset_map) and not offset_map.has_room_for(header.record_count):
                        return end
                    offset_map.add_keys(records_section(buf, header), header)
                end = header.next_offset
        return end

    def _clean_group(self, partition_log: PartitionLog, group: list[LogSegment],
                     batch_pass: _Pass, result: CleanResult) -> LogSegment:
        """Write the group's kept batches to a fsynced ``<base>.log.cleaned`` segment."""
        self._check_stop(partition_log)
        last = group[-1]
        mtime = os.stat(last.log_path).st_mtime_ns
        new = _cleaned_segment(partition_log, group[0].base_offset, batch_pass.now_ms)
        try:
            new.open_for_append()
            writer = _SegmentWriter(new)
            for segment in group:
                result.bytes_read += segment.size
                for header, buf in read_batches(segment):
                    self._check_stop(partition_log)
                    kept = self._filter(buf, header, batch_pass, result,
                                        group_end=header.next_offset == last.next_offset)
                    if kept is not None:
                        writer.add(kept)
            writer.flush()
            new.txn_index.extend(batch_pass.txns.take_retained())
            if new.next_offset != last.next_offset:
                raise CorruptRecordError(
                    f"cleaned segment ends at {new.next_offset}, not {last.next_offset}")
            os.utime(new.log_path, ns=(mtime, mtime))  # time-based retention falls back on it
            new.close_for_append()
            result.bytes_written += new.size
            self.crash_point("cleaned_written")
        except Exception:
            new.delete()
            raise
        return new

    def _filter(self, buf: bytes, header: BatchHeader, batch_pass: _Pass,
                result: CleanResult, *, group_end: bool) -> bytes | memoryview | None:
        """The batch as it stays in the log, or None if it goes."""
        whole = memoryview(buf)[header.position : header.position + header.size]
        if header.is_control:
            if not batch_pass.txns.on_marker(header, batch_marker(buf, header)):
                return whole
            return self._expire_marker(buf, header, batch_pass, group_end=group_end)
        if batch_pass.txns.on_data(header):
            result.records_read += header.record_count
            return _dropped(header, batch_pass, group_end=group_end)
        if header.base_offset >= batch_pass.end:
            return whole
        section = records_section(buf, header)
        horizon = header.delete_horizon_ms
        retained = self.offset_map.retained(section, header,
                                            drop_tombstones=0 <= horizon <= batch_pass.now_ms)
        result.records_read += retained.records
        result.records_kept += retained.kept
        if not retained.kept:
            return _dropped(header, batch_pass, group_end=group_end)
        needs_horizon = horizon < 0 and retained.tombstones
        if retained.kept == retained.records and not needs_horizon:
            return whole
        return splice_batch(header, section, retained,
                            batch_pass.horizon_ms if needs_horizon else NO_TIMESTAMP)


    @staticmethod
    def _expire_marker(buf: bytes, header: BatchHeader, batch_pass: _Pass, *,
                       group_end: bool) -> bytes | memoryview | None:
        """A marker that may go: it gets a delete horizon, stays until then, then goes (an
        emptied control batch holds nothing to wait for)."""
        horizon = header.delete_horizon_ms
        if header.record_count and horizon < 0:
            section = records_section(buf, header)
            whole = Retained(header.record_count, header.record_count, False,
                             header.max_timestamp - header.base_timestamp, [0, len(section)])
            return splice_batch(header, section, whole, batch_pass.horizon_ms)
        if header.record_count and horizon > batch_pass.now_ms:
            return memoryview(buf)[header.position : header.position + header.size]
        return _dropped(header, batch_pass, group_end=group_end)


def _dropped(header: BatchHeader, batch_pass: _Pass, *, group_end: bool) -> bytes | None:
    """What stays of a batch losing all its records: an empty batch where the segment must
    end at it or its producer's state needs it, else nothing."""
    if group_end or batch_pass.protected.get(header.producer_id) == header.last_offset:
        return empty_batch(header)
    return None


def _tracker(partition_log: PartitionLog, start: int, end: int) -> TransactionTracker:
    """The transactions of a pass over [start, end): the aborted ones overlapping it."""
    with partition_log.lock:
        return TransactionTracker(partition_log.aborted_transactions(start, end))


def _cleaned_segment(partition_log: PartitionLog, base_offset: int, now_ms: int) -> LogSegment:
    """A new, empty ``.cleaned`` segment (replacing any leftover of a failed clean)."""
    for extension in FILE_EXTENSIONS:
        stale = partition_log.directory / f"{segment_name(base_offset)}{extension}{CLEANED_SUFFIX}"
        stale.unlink(missing_ok=True)
    return LogSegment(partition_log.dir_path, base_offset, partition_log.config, now_ms,
                      suffix=CLEANED_SUFFIX)


class _SegmentWriter:
    """Buffers kept batches and appends them to the cleaned segment a chunk at a time."""

    def __init__(self, segment: LogSegment) -> None:
        self.segment = segment
        self.buffer = bytearray()
        self.headers: list[BatchHeader] = []

    def add(self, batch: bytes | memoryview) -> None:
        position = len(self.buffer)
        self.buffer += batch
        self.headers.append(parse_header(self.buffer, position))
        if len(self.buffer) >= WRITE_CHUNK:
            self.flush()

    def flush(self) -> None:
        if self.buffer:
            self.segment.append([self.buffer], self.headers)
            self.buffer, self.headers = bytearray(), []


class LogCleaner:
    """The cleaner threads of a LogManager, its cleaner checkpoint and delayed deletions."""

    def __init__(self, manager: LogManager, config: CleanerConfig | None = None, *,
                 crash_point: CrashPoint = no_crash,
                 offset_map: Callable[[int], KeyOffsets] = new_offset_map) -> None:
        """``offset_map`` makes a cleaner's map from its memory budget (compiled when built)."""
        self.manager = manager
        self.config = config or CleanerConfig()
        self.crash_point = crash_point
        self._offset_map = offset_map
        self.checkpoint_path = manager.data_dir / CLEANER_CHECKPOINT
        self._lock = threading.Lock()  # checkpoints, in-progress and uncleanable sets, deletes
        self._checkpoints = {tp: offset for tp, offset in
                             read_checkpoint(self.checkpoint_path).items() if tp in manager.logs}
        self._in_progress: set[TopicPartition] = set()
        self._uncleanable: set[TopicPartition] = set()
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.activity = CleanerActivity(manager.now_ms())
        manager.on_log_deleted.append(self._forget)

    @property
    def map_bytes(self) -> int:
        return self.config.dedupe_buffer_size // self.config.threads

    def checkpoint(self, tp: TopicPartition) -> int | None:
        with self._lock:
            return self._checkpoints.get(tp)

    @property
    def dead_threads(self) -> int:
        """Cleaner threads that ended although the cleaner was not stopped."""
        return sum(not thread.is_alive() for thread in self._threads)

    @property
    def uncleanable(self) -> int:
        """Logs found corrupt and no longer cleaned until restart."""
        with self._lock:
            return len(self._uncleanable)

    # -- threads -------------------------------------------------------------------------
    def start(self) -> None:
        for n in range(self.config.threads):
            cleaner = self._new_cleaner()
            thread = threading.Thread(target=self._run, args=(cleaner,),
                                      name=f"log-cleaner-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("started %d log cleaner thread(s), %d-byte offset map each (%s)",
                 self.config.threads, self.map_bytes, type(cleaner.offset_map).__name__)

    def stop(self) -> None:
        """Stop the threads (a clean in progress aborts), then delete replaced segments."""
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self._threads = []
        self._delete_due(force=True)

    def _run(self, cleaner: Cleaner) -> None:
        while not self._stop.is_set():
            result = None
            try:
                result = self.clean_filthiest(cleaner)
            except Exception:
                log.exception("log cleaner round failed")
            self._round_done(result)
            self._delete_due()
            if result is None:
                self._stop.wait(self.config.backoff_ms / 1000)

    def _round_done(self, result: CleanResult | None) -> None:
        with self._lock:
            before = self.activity
            self.activity = CleanerActivity(self.manager.now_ms(),
                                            before.cleans + (result is not None),
                                            result or before.last_clean)

    # -- cleaning ------------------------------------------------------------------------
    def filthiest(self) -> LogToClean | None:
        """The compacted log most worth cleaning now, not being cleaned already."""
        now = self.manager.now_ms()
        with self._lock:
            candidates = [
                to_clean for tp, partition_log in list(self.manager.logs.items())
                if partition_log.config.compact and tp not in self._in_progress
                and tp not in self._uncleanable and not partition_log.closed
                for to_clean in (log_to_clean(tp, partition_log, self._checkpoints.get(tp), now),)
                if to_clean.cleanable
            ]
            if not candidates:
                return None
            chosen = max(candidates, key=lambda c: c.dirty_ratio)
            self._in_progress.add(chosen.tp)
            return chosen

    def clean_filthiest(self, cleaner: Cleaner | None = None) -> CleanResult | None:
        """One round: clean the filthiest log, if any is cleanable."""
        to_clean = self.filthiest()
        if to_clean is None:
            return None
        return self._clean(to_clean, cleaner or self._new_cleaner())

    def clean_log(self, tp: TopicPartition) -> CleanResult | None:
        """Clean one log now, whatever its dirty ratio (tests and tools)."""
        partition_log = self.manager.get_log(*tp)
        with self._lock:
            if tp in self._in_progress:
                return None
            self._in_progress.add(tp)
            checkpoint = self._checkpoints.get(tp)
        to_clean = log_to_clean(tp, partition_log, checkpoint, self.manager.now_ms())
        return self._clean(to_clean, self._new_cleaner())

    def _new_cleaner(self) -> Cleaner:
        return Cleaner(self._offset_map(self.map_bytes), crash_point=self.crash_point,
                       stopping=self._stop.is_set)

    def _clean(self, to_clean: LogToClean, cleaner: Cleaner) -> CleanResult | None:
        tp = to_clean.tp
        now = self.manager.now_ms()
        replaced: list[LogSegment] = []
        try:
            result = cleaner.clean(to_clean, now, replaced)
            with self._lock:
                if self.manager.logs.get(tp) is to_clean.log:
                    self._checkpoints[tp] = result.end_offset
                    self._write_checkpoints()
            self.crash_point("checkpoint_written")
            after = log_to_clean(tp, to_clean.log, result.end_offset, self.manager.now_ms())
            result.ratio_before, result.ratio_after = to_clean.dirty_ratio, after.dirty_ratio
            log.info("%s", result.describe())
            return result
        except CleanAborted as exc:
            log.info("%s", exc)
            return None
        except (OSError, KafkaStorageError) as exc:
            if to_clean.log.closed:
                log.info("%s-%d was deleted during its clean", *tp)
            else:  # a full disk: its partial files are gone; the thread backs off (no result)
                log.warning("%s-%d: clean failed (%s); tried again after log.cleaner.backoff.ms",
                            *tp, exc)
            return None
        except CorruptRecordError:
            log.exception("%s-%d is corrupt: not cleaning it again until restart", *tp)
            with self._lock:
                self._uncleanable.add(tp)
            return None
        finally:
            delay = to_clean.log.config.get("file.delete.delay.ms")
            with self._lock:
                self._pending_deletes += [(now + delay, s) for s in replaced]
                self._in_progress.discard(tp)
            self._delete_due()

    # -- bookkeeping ---------------------------------------------------------------------
    def _write_checkpoints(self) -> None:
        write_checkpoint(self.checkpoint_path, self._checkpoints)

    def _forget(self, tp: TopicPartition) -> None:
        """A log was deleted: drop its checkpoint (a new log of that name starts dirty)."""
        with self._lock:
            if self._checkpoints.pop(tp, None) is not None:
                self._write_checkpoints()
            self._uncleanable.discard(tp)

    def _delete_due(self, *, force: bool = False) -> None:
        now = self.manager.now_ms()
        with self._lock:
            due = [s for at, s in self._pending_deletes if force or at <= now]
            self._pending_deletes = [(at, s) for at, s in self._pending_deletes
                                     if not (force or at <= now)]
        for segment in due:
            segment.delete()
