"""A partition log: the directory ``<topic>-<partition>/`` and its ordered segments.

Invariants:
- Segments are sorted by base offset and never overlap; only the last (active) one is
  appended to. ``log_start_offset <= log_end_offset`` always, and every offset below the log
  start offset is unreadable (OFFSET_OUT_OF_RANGE) even while its segment still exists.
- ``append`` takes the one batch a producer sent for the partition and validates it
  (framing, CRC, record count, size, producer sequence) before writing anything, so it is
  stored whole or not at all; when single records are at fault (a null key on a compacted
  topic, a timestamp out of range) the error lists them (``record_errors``: index in the
  batch and reason), computed only on that failure path; offsets are assigned by rewriting
  baseOffset and the leader epoch, the batch bytes are otherwise kept as sent.
- The recovery point is the offset below which everything was fsynced. After an unclean
  shutdown every segment from the one holding the recovery point is re-validated, a torn or
  corrupt tail is truncated, and later segments are dropped; after a clean shutdown the
  indexes are only sanity-checked.
- Transactions (KIP-98): producer state tracks each producer's open transaction; the last
  stable offset is the first offset of the oldest open one, else the log end.
  ``append_marker`` writes the COMMIT or ABORT marker a transaction coordinator asks for;
  an ABORT indexes its transaction in the marker's segment (``.txnindex``: producer, first
  offset, marker offset, and the stable offset right after the marker), which is what
  ``aborted_transactions`` answers read_committed fetches from. After an unclean shutdown
  the txn indexes of the recovered segments are rebuilt while producer state is replayed
  from a snapshot at or before the first of them.
- Retention and DeleteRecords remove whole segments only; the active segment is rolled
  first when it must go.
- A write that fails for want of space or an I/O error (ENOSPC, EIO) keeps nothing: the
  segment cuts a partial batch back (``segment.py``), a roll that cannot create its segment
  leaves the old one active, producer state is untouched, and the caller gets
  ``KafkaStorageError`` (KAFKA_STORAGE_ERROR) with the reason kept in ``storage_error`` until
  the next write works; reads go on meanwhile, and writing resumes by itself when space
  returns.
- ``appended_records`` and ``appended_bytes`` count what ``append`` stored since the log was
  opened (a duplicate is not stored, so not counted): two integer additions per batch, read
  by the broker's metrics (Kafka's MessagesInPerSec and BytesInPerSec).
- Threads: the event loop appends, reads and applies retention; the log cleaner's thread
  swaps cleaned segments in. ``lock`` serialises every change of ``segments`` (roll,
  retention, ``replace_segments``) and of producer state; the cleaner holds it for a few
  renames and one directory fsync per swap, never while it reads or writes data.
  ``segments`` is replaced, never edited in place, except for the roll's append at the
  end, so readers take one reference to it and need no lock.
- Compaction swaps are crash-safe: cleaned data is written whole to ``<base>.log.cleaned``
  (and indexes) and fsynced, renamed ``.swap`` (the commit point), the replaced segments are
  renamed ``.deleted``, then the swap gets its final name. A cleaned segment ends exactly
  where the segments it replaces ended (the cleaner keeps their last batch, empty if need
  be), so at load a ``.swap`` replaces the segments with a base offset in [its base, its
  next offset); ``.cleaned`` files are dropped.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from sparklog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
)
from sparklog.record.batch import (
    LOG_OVERHEAD,
    BatchHeader,
    complete_batches,
    end_of,
    parse_header,
    prepare_append,
    split_batches,
    validate_produced,
)
from sparklog.record.control import ControlType, marker_batch
from sparklog.record.records import decode_records
from sparklog.storage.checkpoint import fsync_directory
from sparklog.storage.config import LogConfig
from sparklog.storage.producer_state import (
    CompletedTxn,
    ProducerStateManager,
    VerificationStateEntry,
)
from sparklog.storage.segment import (
    DELETED_SUFFIX,
    FILE_EXTENSIONS,
    LOG_SUFFIX,
    FileSlice,
    LogSegment,
)
from sparklog.storage.txn_index import AbortedTxn

log = logging.getLogger(__name__)

CLEANED_SUFFIX, SWAP_SUFFIX = ".cleaned", ".swap"
SNAPSHOT_MIN_BYTES = 1 << 20
# Files left by an interrupted delete; removed at load (after interrupted swaps are settled).
_LEFTOVER_SUFFIXES = (DELETED_SUFFIX, ".tmp")

# fsyncs of rolled segments, off the request path (one thread: flushes stay in roll order).
_FLUSHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="segment-flusher")

CrashPoint = Callable[[str], None]
"""Fault-injection hook: the cleaner calls it with a step name after each step of a clean
and of its swaps; a test replaces it to crash there."""


def no_crash(step: str) -> None:
    """The production crash point: every step goes ahead."""


class AppendInfo(NamedTuple):
    """What a Produce response needs to know about an append (a NamedTuple: built on every
    append, several times cheaper than a frozen dataclass)."""

    base_offset: int
    last_offset: int
    log_append_time: int  # -1 for CreateTime topics
    log_start_offset: int
    duplicate: bool = False


class PartitionLog:
    def __init__(
        self,
        directory: Path | str,
        config: LogConfig,
        *,
        now_ms: int,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
    ) -> None:
        # The directory as a string, shared by the segments, indexes and producer state: a
        # Path object each (parts list, interned parts) cost 350 bytes a partition.
        self.dir_path = os.fspath(directory)
        self.config = config
        self.lock = threading.RLock()
        self.closed = False
        self.segments: list[LogSegment] = []
        self.producer_state = ProducerStateManager(self.dir_path)
        self.recovery_point = recovery_point
        self._unflushed = 0
        self._last_flush_ms = now_ms
        self._pending_flushes: list[Future[None]] = []
        self.appended_records = 0
        self.appended_bytes = 0
        self.storage_error: str | None = None  # why the last write failed; None once one works
        recovered, names = self._load(now_ms, clean_shutdown)
        self.log_start_offset = max(log_start_offset, self.segments[0].base_offset)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self.recovery_point = min(max(self.recovery_point, 0), self.log_end_offset)
        self._rebuild_producer_state(recovered, names)

    # -- loading -------------------------------------------------------------------------
    def _load(self, now_ms: int, clean: bool) -> tuple[list[LogSegment], list[str]]:
        """Open every segment (the directory made if there is none); return the ones
        recovered (their txn indexes need a rebuild) and the directory's file names as
        listed before: one listing says which files exist to every step of the load, for
        100,000 partitions load at start (a stat or a failed open per file and partition
        took a third of a restart)."""
        recovered = []
        try:
            names = os.listdir(self.dir_path)
        except FileNotFoundError:
            self.directory.mkdir(parents=True)
            names = []
        if any(name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX)) for name in names):
            self._settle_interrupted_swaps(now_ms)
            names = os.listdir(self.dir_path)
        for name in names:
            if name.endswith(_LEFTOVER_SUFFIXES):
                os.unlink(os.path.join(self.dir_path, name))
        bases = sorted(int(name[:-len(LOG_SUFFIX)]) for name in names
                       if name.endswith(LOG_SUFFIX) and name[:-len(LOG_SUFFIX)].isdigit())
        truncated = False
        present = frozenset(names)
        for base in bases:
            segment = LogSegment(self.dir_path, base, self.config, now_ms, present=present)
            if truncated:
                log.warning("%s: dropping segment %s after a truncated one", self.directory, base)
                segment.delete()
                continue
            is_last = base == bases[-1]
            next_base = None if is_last else bases[bases.index(base) + 1]
            needs_recovery = not clean and (next_base is None or next_base > self.recovery_point)
            if needs_recovery:
                recovered.append(segment)
                cut = segment.recover()
                if cut:
                    log.warning("%s: truncated %d bytes of torn or corrupt data from %s",
                                self.directory, cut, segment.log_path.name)
                    truncated = True
                if not is_last:
                    segment.close_for_append()
            else:
                segment.load()
            self.segments.append(segment)
        if not self.segments:
            self.segments.append(LogSegment(self.dir_path, 0, self.config, now_ms))
        self.active.open_for_append()
        return [s for s in recovered if s in self.segments], names

    def _settle_interrupted_swaps(self, now_ms: int) -> None:
        """Finish what a crash cut short in ``replace_segments``: drop uncommitted
        ``.cleaned`` files; complete each committed ``.swap`` (delete the segments it
        replaces that still have their final names, then rename it), and drop index swaps
        whose log never became one. Running this again after a crash here is harmless."""
        for path in list(self.directory.iterdir()):
            if path.suffix == CLEANED_SUFFIX:
                path.unlink()
        for path in sorted(self.directory.glob(f"*{LOG_SUFFIX}{SWAP_SUFFIX}")):
            swap = LogSegment(self.dir_path, int(path.name.split(".")[0]), self.config, now_ms,
                              suffix=SWAP_SUFFIX)
            swap.recover()  # fsynced whole before its rename: this only rebuilds the indexes
            swap.close_for_append()
            for old in self.directory.glob(f"*{LOG_SUFFIX}"):
                if old.stem.isdigit() and swap.base_offset <= int(old.stem) < swap.next_offset:
                    for extension in FILE_EXTENSIONS:
                        old.with_suffix(extension).unlink(missing_ok=True)
            swap.change_suffix("")
            swap.close()
            log.warning("%s: completed the interrupted swap of cleaned segment %s",
                        self.directory, swap.log_path.name)
        for path in list(self.directory.iterdir()):
            if path.suffix == SWAP_SUFFIX:
                path.unlink()

    def _rebuild_producer_state(self, recovered: list[LogSegment],
                                names: list[str] | None = None) -> None:
        """Replay batch headers after a snapshot (among ``names``, the directory's files, if
        listed already);
        the txn indexes of ``recovered`` segments are rebuilt on the way (the replay starts
        at or before the first of them)."""
        limit = min([s.base_offset for s in recovered] + [self.log_end_offset])
        start = max(self.producer_state.load_snapshot(limit, self.log_end_offset, names),
                    self.log_start_offset)
        rebuilt = {id(s) for s in recovered}
        for segment in recovered:
            segment.txn_index.reset()
        end = self.log_end_offset
        if start >= end:
            return  # the snapshot is at the log end: nothing to replay
        for segment in self.segments[_segment_at(self.segments, start):]:
            _, position = segment.offset_index.lookup(start)
            for header in segment.iter_headers(position):
                if header.last_offset >= start:
                    completed = self.producer_state.update(header, *_marker_of(segment, header))
                    if completed is not None and completed.aborted and id(segment) in rebuilt:
                        segment.txn_index.append(self._aborted_txn(completed))
        if names is not None:
            self.producer_state.replayed_to(end, names)

    # -- offsets -------------------------------------------------------------------------
    @property
    def directory(self) -> Path:
        return Path(self.dir_path)

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active.next_offset

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest ongoing transaction, else the log end (here, the
        high watermark)."""
        first = self.producer_state.first_unstable_offset()
        return self.log_end_offset if first is None else first

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound): what a
        read_committed fetch of that range must tell the client to drop."""
        segments = self.segments
        found: list[AbortedTxn] = []
        for segment in segments[_segment_at(segments, fetch_offset):]:
            more, complete = segment.txn_index.collect(fetch_offset, upper_bound)
            found += more
            if complete:
                break
        return found

    def _aborted_txn(self, completed: CompletedTxn) -> AbortedTxn:
        """The index entry of an aborted transaction, with the last stable offset right after
        its marker (a replay runs after the whole log is loaded: never read the log end)."""
        after_marker = completed.last_offset + 1
        first_unstable = self.producer_state.first_unstable_offset()
        stable = after_marker if first_unstable is None else min(first_unstable, after_marker)
        return AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                          stable)

    def inactive_segments(self) -> list[LogSegment]:
        """Every segment but the active one, as of now."""
        with self.lock:
            return self.segments[:-1]

    def first_uncleanable_offset(self, first_dirty: int, now_ms: int) -> int:
        """Where compaction must stop (a segment base offset): never into the segment
        holding the last stable offset (an open transaction's data and everything after it
        stay dirty) nor into the active segment, nor at a dirty segment holding a record
        younger than ``min.compaction.lag.ms``."""
        segments = self.segments
        bound = segments[_segment_at(segments, self.last_stable_offset)].base_offset
        lag = self.config.get("min.compaction.lag.ms")
        if lag > 0:
            for segment in segments[:-1]:
                if segment.next_offset > first_dirty and (
                    segment.largest_timestamp() > now_ms - lag
                ):
                    bound = min(bound, segment.base_offset)
                    break
        return bound

    # -- appends -------------------------------------------------------------------------
    def append(self, records: bytes | bytearray | memoryview, *, now_ms: int,
               leader_epoch: int = 0, verify: bool = False,
               guard: VerificationStateEntry | None = None) -> AppendInfo:
        """Validate and append the one batch a producer sent for this partition; ``verify``
        (a client's Produce) refuses a transactional batch without an ongoing transaction
        or the ``guard`` of its verification (``producer_state``, KIP-890)."""
        header = validate_produced(records)
        self._validate(records, header, now_ms)
        duplicate = self.producer_state.check(header, verify=verify, guard=guard)
        if duplicate is not None:
            return AppendInfo(duplicate.first_offset, duplicate.last_offset, -1,
                              self.log_start_offset, True)
        if self._compact:
            _require_keys(records, header)
        append_time = now_ms if self._log_append_time else -1
        return self._write(records, header, now_ms, leader_epoch, append_time)

    def append_marker(self, kind: ControlType, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int, *, now_ms: int, leader_epoch: int = 0) -> AppendInfo:
        """Append the COMMIT or ABORT marker ending ``producer_id``'s transaction (a partition
        leader does this for the transaction coordinator: WriteTxnMarkers). A marker from an
        epoch older than the producer's is fenced; an ABORT indexes the transaction it ends."""
        batch = marker_batch(kind, producer_id, producer_epoch, coordinator_epoch, now_ms)
        header = parse_header(batch)
        self.producer_state.check(header)
        return self._write(batch, header, now_ms, leader_epoch, -1,
                           (kind == ControlType.ABORT, coordinator_epoch))

    def _write(self, records: bytes | bytearray | memoryview, header: BatchHeader, now_ms: int,
               leader_epoch: int, append_time: int,
               marker: tuple[bool, int] = (False, -1)) -> AppendInfo:
        """Assign offsets to one validated batch and write it; update producer state."""
        with self.lock:
            active = self.segments[-1]
            buffers, header = prepare_append(records, header, active.next_offset, leader_epoch,
                                             append_time)
            try:
                if active.must_roll(header.batch_length + LOG_OVERHEAD, header.max_timestamp,
                                    header.base_offset + header.last_offset_delta, now_ms):
                    active = self.roll(now_ms)
                active.append(buffers, (header,))
            except (OSError, KafkaStorageError) as exc:
                raise self._storage_failure("append", exc) from exc
            self.storage_error = None
            completed = self.producer_state.update(header, *marker)
            if completed is not None and completed.aborted:
                active.txn_index.append(self._aborted_txn(completed))
        self._unflushed += header.record_count
        self.appended_records += header.record_count
        self.appended_bytes += header.size
        if self._unflushed >= self._flush_messages:
            try:
                self.flush(now_ms)
            except OSError as exc:
                raise self._storage_failure("flush", exc) from exc
        return AppendInfo(header.base_offset, header.base_offset + header.last_offset_delta,
                          append_time, self.log_start_offset, False)

    def _storage_failure(self, action: str, exc: OSError | KafkaStorageError
                         ) -> KafkaStorageError:
        """The error to raise for a failed write (a full disk), noted in ``storage_error``
        until a write works again."""
        if isinstance(exc, KafkaStorageError):
            self.storage_error = str(exc)
            return exc
        self.storage_error = f"{action} to {self.directory.name}: {exc.strerror}"
        return KafkaStorageError(self.storage_error)

    def append_as_follower(self, records: bytes | bytearray | memoryview, *, now_ms: int) -> None:
        """Append batches whose offsets are already assigned (restores, tools, tests)."""
        headers = split_batches(records)
        if headers and headers[0].base_offset < self.log_end_offset:
            raise InvalidRecordError(
                f"batch offset {headers[0].base_offset} is below the log end {self.log_end_offset}"
            )
        with self.lock:
            try:
                if self.active.must_roll(len(records), max(h.max_timestamp for h in headers),
                                         headers[-1].last_offset, now_ms):
                    self.roll(now_ms)
                active = self.active
                position = active.size
                active.append([records], headers)
            except (OSError, KafkaStorageError) as exc:
                raise self._storage_failure("replica append", exc) from exc
            self.storage_error = None
            for header in headers:
                completed = self.producer_state.update(header, *_marker_of(
                    active, header._replace(position=position + header.position)))
                if completed is not None and completed.aborted:
                    active.txn_index.append(self._aborted_txn(completed))

    def truncate_to(self, offset: int) -> None:
        """Drop every batch from the one holding ``offset`` on (a follower's divergent tail,
        KIP-101): later segments go, the segment holding it is cut and becomes the active
        one, and producer state is rebuilt from a snapshot at or below the new end."""
        with self.lock:
            if offset >= self.log_end_offset:
                return
            keep = [s for s in self.segments if s.base_offset < offset] or self.segments[:1]
            for segment in self.segments[len(keep):]:
                segment.delete()
            keep[-1].truncate_to(offset)
            self.segments = keep
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
            self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
            self._rebuild_producer_state([keep[-1]])
        log.warning("%s: truncated to offset %d", self.directory.name, self.log_end_offset)

    def _validate(self, records: bytes | bytearray | memoryview, header: BatchHeader,
                  now_ms: int) -> None:
        if header.size > self._max_message_bytes:
            raise MessageTooLargeError(
                f"record batch of {header.size} bytes exceeds max.message.bytes "
                f"{self._max_message_bytes}"
            )
        if header.is_control:
            raise InvalidRecordError("producers may not send control batches")
        if not self._log_append_time and header.max_timestamp >= 0:
            ahead = header.max_timestamp - now_ms
            if ahead > self._timestamp_after_ms or -ahead > self._timestamp_before_ms:
                self._reject_timestamps(records, header, now_ms)

    def _reject_timestamps(self, records: bytes | bytearray | memoryview, header: BatchHeader,
                           now_ms: int) -> None:
        """Raise INVALID_TIMESTAMP naming each record whose timestamp is out of range."""
        low, high = now_ms - self._timestamp_before_ms, now_ms + self._timestamp_after_ms
        decoded = decode_records(records, header)
        errors = tuple(
            (index, f"Timestamp {r.timestamp} of message with offset {index} is out of range. "
                    f"The timestamp should be within [{low}, {high}]")
            for index, r in enumerate(decoded) if not low <= r.timestamp <= high)
        raise InvalidTimestampError(
            f"timestamp {header.max_timestamp} is out of the allowed range around broker time "
            f"{now_ms}: {len(errors)} of {len(decoded)} records rejected",
            record_errors=errors)

    def roll(self, now_ms: int) -> LogSegment:
        """Start a new active segment at the log end; the old one is fsynced and sealed."""
        with self.lock:
            if self.active.size == 0:
                return self.active
            offset = self.log_end_offset
            old = self.active
            new = LogSegment(self.dir_path, offset, self.config, now_ms)
            try:
                new.open_for_append()
            except OSError:  # a full disk: the old segment stays the active one
                new.delete()
                raise
            old.seal()
            self.segments.append(new)
            snapshot = self.producer_state.snapshot(offset)
            self._pending_flushes = [f for f in self._pending_flushes if not f.done()]
            self._pending_flushes.append(
                _FLUSHER.submit(self._flush_rolled, old, offset, snapshot))
            return new

    def _flush_rolled(self, segment: LogSegment, offset: int, snapshot: bytes) -> None:
        """On the flusher thread: fsync a rolled segment, write the producer snapshot taken
        at the roll, then advance the recovery point (Kafka flushes rolled segments
        asynchronously too, so a roll never stalls the request path on a large fsync)."""
        try:
            segment.flush()
            self.producer_state.write_snapshot(offset, snapshot)
        except OSError:  # closed meanwhile: deleted by retention, or the topic was deleted
            return
        self.recovery_point = max(self.recovery_point, offset)

    def await_rolled_flushes(self) -> None:
        """Wait until every rolled segment is fsynced (and its snapshot written)."""
        for future in self._pending_flushes:
            future.result()
        self._pending_flushes = []

    def replace_segments(self, old: list[LogSegment], new: LogSegment,
                         crash_point: CrashPoint = no_crash) -> bool:
        """Swap ``new``, a ``.cleaned`` segment written and fsynced whole, in for ``old``,
        consecutive inactive segments (see the module invariants for the protocol).

        Returns False, renaming nothing, when ``old`` is no longer in the log (retention or a
        topic deletion got there first). After a swap the caller deletes ``old`` (renamed
        ``.deleted``) once reads in flight are done with them.
        """
        with self.lock:
            segments = self.segments
            start = next((i for i, s in enumerate(segments) if s is old[0]), len(segments))
            end = start + len(old)
            if self.closed or end >= len(segments) or any(
                a is not b for a, b in zip(segments[start:end], old, strict=True)
            ):
                return False
            new.change_suffix(SWAP_SUFFIX)
            fsync_directory(self.directory)
            crash_point("swap_committed")
            for segment in old:
                segment.mark_deleted()
                crash_point("old_deleted")
            new.change_suffix("")
            self.segments = [*segments[:start], new, *segments[end:]]
        fsync_directory(self.directory)
        crash_point("swap_done")
        return True

    # -- reads ---------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> FileSlice | None:
        """Batches from the one holding ``offset``; None when there is nothing yet.

        ``max_offset`` (exclusive, e.g. the high watermark) bounds what is returned.
        """
        end = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}] "
                f"of {self.directory.name}"
            )
        segments = self.segments
        for segment in segments[_segment_at(segments, offset):]:
            if offset >= end:
                return None
            if segment.base_offset >= end:
                return None
            max_position = segment.position_of(end) if end < segment.next_offset else None
            found = segment.read(max(offset, segment.base_offset), max_bytes, max_position)
            if found is not None:
                return found
        return None

    def batches(self, buffer_bytes: int) -> Iterator[bytes]:
        """Every whole batch from the log start to the log end, in offset order, each as its
        own bytes; reads ``buffer_bytes`` at a time (a larger batch in one read of its own)."""
        offset = self.log_start_offset
        while offset < self.log_end_offset:
            found = self.read(offset, buffer_bytes)
            if found is None:
                return
            data = found.read()
            header = None
            for header in complete_batches(data):  # a batch cut short is read again
                yield data[header.position:end_of(header)]
                offset = header.next_offset
            if header is None:
                raise CorruptRecordError(f"no whole batch at offset {offset} of {self}")

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp >= ``timestamp``."""
        segments = self.segments
        for segment in segments[_segment_at(segments, self.log_start_offset):]:
            found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
            if found is not None:
                return found
        return None

    def max_timestamp_record(self) -> tuple[int, int, int] | None:
        """(offset, timestamp, batch leader epoch) of the record with the largest timestamp
        in the segments from the one holding the log start on (the first one on a tie;
        ListOffsets -3, KIP-734; as in Kafka, the first segment's records below the log start
        count too), or None."""
        segments = self.segments[_segment_at(self.segments, self.log_start_offset):]
        best = max(segments, key=lambda s: s.max_timestamp, default=None)
        return None if best is None else best.max_timestamp_record()

    # -- retention -----------------------------------------------------------------------
    def delete_records(self, offset: int) -> int:
        """Advance the log start offset (DeleteRecords); returns the new low watermark."""
        if offset < 0 or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"cannot delete records before {offset}: log end is {self.log_end_offset}"
            )
        self.log_start_offset = max(self.log_start_offset, offset)
        return self.log_start_offset

    def expired_segments(self, now_ms: int) -> list[LogSegment]:
        """Detach and return the segments that retention or the log start offset remove.

        The caller deletes them (after ``file.delete.delay.ms``, so in-flight reads finish).
        """
        with self.lock:
            doomed = 0
            # Segments entirely below the log start offset (DeleteRecords), never the active one.
            while doomed < len(self.segments) - 1 and (
                self.segments[doomed + 1].base_offset <= self.log_start_offset
            ):
                doomed += 1
            if self.config.delete:
                doomed = max(doomed, self._expired_by_time(now_ms), self._expired_by_size())
            if doomed == 0:
                return []
            if doomed == len(self.segments):
                self.roll(now_ms)
            removed, self.segments = self.segments[:doomed], self.segments[doomed:]
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
            return removed

    def _expired_by_time(self, now_ms: int) -> int:
        retention = self.config.retention_ms
        if retention < 0:
            return 0
        count = 0
        for segment in self.segments:
            if segment.size == 0 or now_ms - segment.largest_timestamp() <= retention:
                break
            count += 1
        return count

    def _expired_by_size(self) -> int:
        limit = self.config.retention_bytes
        if limit < 0:
            return 0
        excess, count = self.size - limit, 0
        for segment in self.segments[:-1]:
            if excess - segment.size < 0:
                break
            excess -= segment.size
            count += 1
        return count

    # -- durability ----------------------------------------------------------------------
    def flush(self, now_ms: int, *, sync: bool = True) -> None:
        """fsync everything appended so far; the recovery point becomes the log end.
        ``sync`` False: the caller syncs the whole filesystem before it writes the recovery
        point anywhere (a clean shutdown of many logs)."""
        self.await_rolled_flushes()
        if sync:
            self.active.flush()
        self.recovery_point = self.log_end_offset
        self._unflushed = 0
        self._last_flush_ms = now_ms

    def flush_if_due(self, now_ms: int) -> None:
        if self._unflushed and now_ms - self._last_flush_ms >= self.config.flush_ms:
            self.flush(now_ms)

    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        """Set the config, caching what the append path reads on every request."""
        self._config = config
        self._compact = config.compact
        self._log_append_time = config.log_append_time
        self._max_message_bytes = config.max_message_bytes
        self._flush_messages = config.flush_messages
        self._timestamp_after_ms = config.get("message.timestamp.after.max.ms")
        self._timestamp_before_ms = config.get("message.timestamp.before.max.ms")

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for segment in self.segments:
            segment.config = config

    def close(self, now_ms: int, *, sync: bool = True) -> None:
        """Clean close: fsync, snapshot producer state, release files. A log without
        producer state and under ``SNAPSHOT_MIN_BYTES`` writes no snapshot: replaying its
        batch headers at the next start costs less than a file per partition at every
        shutdown (100,000 small partitions); nor does one whose snapshot at its log end is
        on disk already (written or loaded, nothing appended since). ``sync`` False leaves
        every fsync to the caller, who syncs the filesystem once for all its logs
        (``LogManager.close``)."""
        self.flush(now_ms, sync=sync)
        state, end = self.producer_state, self.log_end_offset
        if (state.producers or self.size > SNAPSHOT_MIN_BYTES) and state.snapshot_at != end:
            state.write_snapshot(end, sync=sync)
        self.discard()

    def retire(self) -> None:
        """Take no more writes (the log is being deleted): a clean still running on this
        log then finds it closed and swaps nothing in; open descriptors keep serving the
        reads already under way until ``discard``."""
        with self.lock:
            self.closed = True

    def discard(self) -> None:
        """Release the files (the log is closing or being deleted)."""
        with self.lock:
            self.retire()
            for segment in self.segments:
                segment.close()

    def __repr__(self) -> str:
        return (f"PartitionLog({self.directory.name}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, segments={len(self.segments)})")


def _segment_at(segments: list[LogSegment], offset: int) -> int:
    """Index of the segment that holds ``offset`` (the first one if it is below them all)."""
    bases = [s.base_offset for s in segments]
    return max(bisect.bisect_right(bases, offset) - 1, 0)


def _require_keys(records: bytes | bytearray | memoryview, header: BatchHeader) -> None:
    """Compacted topics reject records without a key (INVALID_RECORD), as Kafka does,
    naming each such record."""
    decoded = decode_records(records, header)
    errors = tuple((index, "Compacted topic cannot accept message without key")
                   for index, record in enumerate(decoded) if record.key is None)
    if errors:
        raise InvalidRecordError(
            f"compacted topic rejects records without a key: {len(errors)} of {len(decoded)} "
            f"(batch index {', '.join(str(i) for i, _ in errors[:10])}"
            f"{', ...' if len(errors) > 10 else ''})", record_errors=errors)


def _marker_of(segment: LogSegment, header: BatchHeader) -> tuple[bool, int]:
    """(aborts?, coordinator epoch) of a stored control batch; (False, -1) for a data batch
    or an emptied control batch."""
    marker = segment.marker(header) if header.is_control else None
    if marker is None:
        return False, -1
    return marker.kind == ControlType.ABORT, marker.coordinator_epoch
