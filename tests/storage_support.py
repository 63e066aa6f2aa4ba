"""Shared helpers of the storage tests: batch builders, a settable clock and whole-log checks.

``check_log`` is the oracle every storage test leans on: given the batches a test appended
(their assigned base offsets and the bytes the producer sent), it reads every offset back
through ``PartitionLog.read`` and compares bytes, and checks every index entry against the
batches it points at.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from sparklog.errors import OffsetOutOfRangeError
from sparklog.record.batch import LEADER_EPOCH_OFFSET, BatchHeader, parse_header, validate_batch
from sparklog.record.records import build_batch, decode_records
from sparklog.storage.log import AppendInfo, PartitionLog
from sparklog.storage.log_manager import LogManager
from sparklog.storage.segment import LogSegment

T0 = 1_700_000_000_000
"""Timestamp (ms) of the first generated record."""
NOW = T0 + 10_000_000
"""Broker time (ms) of appends: after every generated timestamp, inside the allowed range."""
TOPIC = "events"


class Clock:
    """A settable wall clock for ``LogManager(clock=...)``, in seconds like ``time.time``.

    Half a millisecond is added so ``int(clock() * 1000)`` gives back exactly ``ms``.
    """

    def __init__(self, ms: int = NOW) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return (self.ms + 0.5) / 1000

    def advance(self, ms: int) -> None:
        self.ms += ms


def make_batch(
    count: int = 1,
    *,
    value_size: int = 16,
    timestamp: int = T0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """An uncompressed batch of ``count`` keyed records, all stamped ``timestamp``."""
    records = [(b"key-%d" % i, bytes([i % 251]) * value_size, (), timestamp)
               for i in range(count)]
    return build_batch(records, producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=base_sequence)


def without_assigned_fields(batch: bytes) -> bytes:
    """The batch with baseOffset and partitionLeaderEpoch (the broker-written fields) zeroed."""
    return (bytes(8) + batch[8:LEADER_EPOCH_OFFSET] + bytes(4)
            + batch[LEADER_EPOCH_OFFSET + 4:])


@dataclass(frozen=True)
class Stored:
    """A batch as the producer sent it, and the base offset the log assigned to it."""

    base_offset: int
    data: bytes

    @property
    def header(self) -> BatchHeader:
        return parse_header(self.data)

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.header.last_offset_delta + 1


def append_all(log: PartitionLog, batches: Iterable[bytes], now_ms: int = NOW) -> list[Stored]:
    """Append each batch in its own request; return what ``check_log`` expects."""
    stored = []
    for data in batches:
        info: AppendInfo = log.append(data, now_ms=now_ms)
        assert not info.duplicate
        assert info.last_offset - info.base_offset == parse_header(data).last_offset_delta
        stored.append(Stored(info.base_offset, data))
    return stored


def offsets_and_timestamps(stored: Sequence[Stored]) -> list[tuple[int, int]]:
    """(offset, timestamp) of every record, in offset order."""
    out = []
    for batch in stored:
        header = parse_header(batch.data)
        out += [(batch.base_offset + r.offset, r.timestamp)
                for r in decode_records(batch.data, header)]
    return out


def expected_offset_for_timestamp(
    records: Sequence[tuple[int, int]], target: int
) -> tuple[int, int] | None:
    """The model: the first record, in offset order, whose timestamp is >= target."""
    return next(((o, t) for o, t in records if t >= target), None)


def check_log(log: PartitionLog, stored: Sequence[Stored]) -> None:
    """The log holds exactly ``stored`` (all offsets from ``stored[0]`` on), readable by offset.

    Every offset reads back its batch byte for byte (but for baseOffset and leader epoch), as
    the first batch of a slice starting on a batch boundary; a large read returns whole batches
    in order; the log end reads as None; offsets outside the log raise; indexes are right.
    """
    end = stored[-1].next_offset if stored else log.log_start_offset
    assert log.log_end_offset == end
    for i, batch in enumerate(stored):
        for offset in range(max(batch.base_offset, log.log_start_offset), batch.next_offset):
            found = log.read(offset, 1)
            assert found is not None, f"offset {offset} unreadable"
            data = found.read()
            assert found.first_offset == batch.base_offset
            assert len(data) == len(batch.data)
            assert parse_header(data).base_offset == batch.base_offset
            assert without_assigned_fields(data) == without_assigned_fields(batch.data)
        whole = log.read(max(batch.base_offset, log.log_start_offset), 1 << 30)
        assert whole is not None
        _check_whole_batches(whole.read(), stored[i:])
    assert log.read(end, 1 << 20) is None
    for outside in (log.log_start_offset - 1, end + 1):
        with pytest.raises(OffsetOutOfRangeError):
            log.read(outside, 1 << 20)
    for segment in log.segments:
        check_indexes(segment)


def _check_whole_batches(data: bytes, following: Sequence[Stored]) -> None:
    """``data`` is a run of whole, valid batches equal to the first of ``following``."""
    position = 0
    for batch in following:
        if position == len(data):
            break
        header = validate_batch(data, position)
        assert header.base_offset == batch.base_offset
        chunk = data[position : position + header.size]
        assert without_assigned_fields(chunk) == without_assigned_fields(batch.data)
        position += header.size
    assert position == len(data)


def check_indexes(segment: LogSegment) -> None:
    """Each index entry points at the batch it names, with keys strictly increasing.

    Offset index: (offset, position) names a batch's last offset and its file position.
    Time index: (timestamp, offset) names the largest timestamp so far in the segment and the
    last offset of the first batch that reached it.
    """
    headers = {h.position: h for h in segment.iter_headers()}
    previous = (-1, -1)
    for n in range(segment.offset_index.entries):
        relative, position = segment.offset_index.entry(n)
        assert relative > previous[0] and position > previous[1]
        assert headers[position].last_offset == segment.base_offset + relative
        previous = (relative, position)
    first_reaching: dict[int, BatchHeader] = {}
    running_max = -1
    for header in headers.values():
        if header.max_timestamp > running_max:
            running_max = header.max_timestamp
            first_reaching[running_max] = header
    last_timestamp = -1
    for n in range(segment.time_index.entries):
        timestamp, relative = segment.time_index.entry(n)
        assert timestamp > last_timestamp
        assert first_reaching[timestamp].last_offset == segment.base_offset + relative
        last_timestamp = timestamp


def segment_files(directory: Path) -> dict[str, set[str]]:
    """Suffix -> the stems of the files with it, for the segment files of a partition."""
    out: dict[str, set[str]] = {}
    for path in directory.iterdir():
        stem, _, suffix = path.name.partition(".")
        out.setdefault("." + suffix, set()).add(stem)
    return out


def crash_copy(manager: LogManager, destination: Path) -> Path:
    """Copy a live data directory as a crash would leave it: no clean-shutdown marker, and
    whatever the open index files have not yet written out missing. Background fsyncs of
    rolled segments are let finish first, so the copy is of a directory at rest."""
    for partition_log in manager.logs.values():
        partition_log.await_rolled_flushes()
    shutil.copytree(manager.data_dir, destination)
    return destination


def restart(manager: LogManager, *, clean: bool, crash_dir: Path) -> LogManager:
    """Close and reopen ``manager``, or reopen a crash copy of it (made in ``crash_dir``)."""
    if clean:
        manager.close()
        data_dir = manager.data_dir
    else:
        data_dir = crash_copy(manager, crash_dir)
        manager.close()
    reopened = LogManager(data_dir, clock=manager.clock)
    assert reopened.clean_start == clean
    return reopened
