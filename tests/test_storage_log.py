"""Partition logs: append/read round trips, timestamp lookups, rolling and the file layout.

The property test appends random batches to logs with tiny segments and index intervals, then
checks the live log, the log reopened after a clean close and the log rebuilt by a full
recovery: every offset reads back byte for byte from a batch boundary, slices respect
``max_bytes``, indexes and rolls follow their rules, and ``offset_for_timestamp`` and
``max_timestamp_record`` (ListOffsets -3) agree with a model. Example tests cover each
reason a segment rolls and Kafka's file names.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from storage_support import (
    NOW,
    T0,
    Stored,
    append_all,
    check_log,
    expected_offset_for_timestamp,
    make_batch,
    offsets_and_timestamps,
    segment_files,
)

from sparklog.errors import InvalidRecordError
from sparklog.record.records import build_batch
from sparklog.storage.config import LogConfig
from sparklog.storage.log import PartitionLog
from sparklog.storage.segment import LogSegment, segment_name

RecordSpec = tuple[bytes | None, bytes, int]

records_strategy = st.lists(
    st.tuples(st.none() | st.binary(max_size=8), st.binary(max_size=300),
              st.integers(0, 1_000_000)),
    min_size=1, max_size=6,
)


def _build(records: Sequence[RecordSpec]) -> bytes:
    return build_batch([(key, value, (), T0 + ts) for key, value, ts in records])


def _expected_index_positions(segment: LogSegment, interval: int) -> list[int]:
    """Positions of the batches that get an index entry: after > ``interval`` bytes."""
    positions, pending = [], 0
    for header in segment.iter_headers():
        pending += header.size
        if pending > interval:
            positions.append(header.position)
            pending = 0
    return positions


def _check_everything(
    log: PartitionLog, stored: list[Stored], max_bytes: int, targets: list[int]
) -> None:
    check_log(log, stored)
    config = log.config
    for batch in stored:
        found = log.read(batch.base_offset, max_bytes)
        assert found is not None
        segment = next(s for s in reversed(log.segments) if s.base_offset <= batch.base_offset)
        assert found.length == max(min(max_bytes, segment.size - found.position),
                                   batch.header.size)
    for previous, segment in zip(log.segments, log.segments[1:], strict=False):
        first = segment.read_header(0)
        assert first is not None
        assert previous.size + first.size > config.segment_bytes, "rolled too early"
    for segment in log.segments:
        batches = list(segment.iter_headers())
        assert segment.size <= config.segment_bytes or len(batches) == 1, "rolled too late"
        positions = [segment.offset_index.entry(n)[1] for n in range(segment.offset_index.entries)]
        assert positions == _expected_index_positions(segment, config.index_interval_bytes)
    stems = {segment_name(s.base_offset) for s in log.segments}
    files = segment_files(log.directory)
    # an active segment's index files are made with their first entry
    sealed = stems - {segment_name(log.active.base_offset)}
    assert files[".log"] == stems
    assert files.get(".index", set()) - stems == files.get(".timeindex", set()) - stems == set()
    assert files.get(".index", set()) & sealed == files.get(".timeindex", set()) & sealed \
        == sealed
    if log.active.offset_index.entries:
        assert segment_name(log.active.base_offset) in files[".index"]
    records = offsets_and_timestamps(stored)
    for target in {t + d for _, t in records for d in (0, 1)} | set(targets):
        assert log.offset_for_timestamp(target) == expected_offset_for_timestamp(records, target)
    largest = max(t for _, t in records)  # KIP-734: the first record holding it
    found = log.max_timestamp_record()
    assert found is not None and found[:2] == next((o, t) for o, t in records if t == largest)


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(records_strategy, min_size=1, max_size=25),
    segment_bytes=st.integers(100, 2500),
    index_interval=st.integers(0, 800),
    max_bytes=st.integers(1, 3000),
    targets=st.lists(st.integers(T0 - 5, T0 + 1_000_005), max_size=4),
)
def test_round_trip(
    batches: list[list[RecordSpec]], segment_bytes: int, index_interval: int, max_bytes: int,
    targets: list[int],
) -> None:
    config = LogConfig.of({"segment.bytes": segment_bytes, "index.interval.bytes": index_interval})
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "topic-0"
        log = PartitionLog(directory, config, now_ms=NOW)
        stored = append_all(log, map(_build, batches))
        _check_everything(log, stored, max_bytes, targets)
        log.close(NOW)
        for clean in (True, False):
            log = PartitionLog(directory, config, now_ms=NOW, clean_shutdown=clean)
            _check_everything(log, stored, max_bytes, targets)
            log.close(NOW)


def test_rolls_by_segment_bytes_into_kafka_named_files(tmp_path: Path) -> None:
    batch = make_batch(2)
    config = LogConfig.of({"segment.bytes": 3 * len(batch)})
    log = PartitionLog(tmp_path / "topic-0", config, now_ms=NOW)
    stored = append_all(log, [batch] * 10)
    assert [s.base_offset for s in log.segments] == [0, 6, 12, 18]
    assert [s.size for s in log.segments] == [3 * len(batch)] * 3 + [len(batch)]
    names = {p.name for p in (tmp_path / "topic-0").iterdir()}
    for base in ("00000000000000000000", "00000000000000000006", "00000000000000000012"):
        assert {f"{base}.log", f"{base}.index", f"{base}.timeindex"} <= names
    # the active segment has no index entry yet: its index files come with the first one
    assert "00000000000000000018.log" in names
    check_log(log, stored)
    log.close(NOW)


def test_rolls_when_an_index_is_full(tmp_path: Path) -> None:
    # 24 bytes hold 3 offset entries but only 2 time entries; every batch earns an entry.
    config = LogConfig.of({"segment.index.bytes": 24, "index.interval.bytes": 0})
    log = PartitionLog(tmp_path / "topic-0", config, now_ms=NOW)
    stored = append_all(log, [make_batch(timestamp=T0 + i) for i in range(7)])
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6]
    check_log(log, stored)
    log.close(NOW)
    for base in (0, 2, 4):
        stem = tmp_path / "topic-0" / segment_name(base)
        assert stem.with_suffix(".index").stat().st_size == 2 * 8
        assert stem.with_suffix(".timeindex").stat().st_size == 2 * 12


def test_produce_request_of_many_batches_is_rejected_whole(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "topic-0", LogConfig.of(), now_ms=NOW)
    with pytest.raises(InvalidRecordError, match="more than one record batch"):
        log.append(make_batch() + make_batch(), now_ms=NOW)
    assert (log.log_end_offset, log.active.size) == (0, 0)
    append_all(log, [make_batch(2)])  # the log is untouched and goes on
    assert log.log_end_offset == 2
    log.close(NOW)


def test_many_batches_at_once_fit_a_nearly_full_index(tmp_path: Path) -> None:
    config = LogConfig.of({"segment.index.bytes": 12, "index.interval.bytes": 0})
    log = PartitionLog(tmp_path / "topic-0", config, now_ms=NOW)
    batches = [build_batch([(b"k", b"v", (), T0 + i)], base_offset=i) for i in range(4)]
    log.append_as_follower(b"".join(batches), now_ms=NOW)
    assert log.log_end_offset == 4
    check_log(log, [Stored(i, b) for i, b in enumerate(batches)])
    log.close(NOW)


def test_rolls_by_segment_ms_measured_from_the_first_batch(tmp_path: Path) -> None:
    config = LogConfig.of({"segment.ms": 1000, "index.interval.bytes": 0})
    directory = tmp_path / "topic-0"
    log = PartitionLog(directory, config, now_ms=NOW)
    append_all(log, [make_batch(timestamp=T0), make_batch(timestamp=T0 + 900)])
    log.close(NOW)
    # Reopened, the segment's age still counts from its first batch, not its last indexed one.
    log = PartitionLog(directory, config, now_ms=NOW, clean_shutdown=True)
    append_all(log, [make_batch(timestamp=T0 + 1000)])
    assert len(log.segments) == 1
    append_all(log, [make_batch(timestamp=T0 + 1001)])
    assert [s.base_offset for s in log.segments] == [0, 3]
    log.close(NOW)


def test_read_stops_at_max_offset(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path / "topic-0", LogConfig.of(), now_ms=NOW)
    batches = [make_batch(3), make_batch(2), make_batch(4)]
    append_all(log, batches)
    found = log.read(1, 1 << 20, max_offset=5)
    assert found is not None
    assert (found.position, found.length) == (0, len(batches[0]) + len(batches[1]))
    assert log.read(5, 1 << 20, max_offset=5) is None
    log.close(NOW)


def test_blocks_reserved_ahead_keep_file_sizes_exact_and_are_released_at_roll(
    tmp_path: Path,
) -> None:
    log = PartitionLog(tmp_path / "topic-0", LogConfig.of({"segment.bytes": 1 << 20}),
                       now_ms=NOW)
    append_all(log, [make_batch(value_size=1000) for _ in range(1500)])
    log.await_rolled_flushes()
    sealed, active = log.segments[0], log.segments[-1]
    assert len(log.segments) > 1
    for segment in (sealed, active):
        assert segment.log_path.stat().st_size == segment.size  # readers see only batches
    if not active._reservation.enabled:
        pytest.skip("this filesystem refuses fallocate: appends are plain writes")
    allocated = active.log_path.stat().st_blocks * 512
    assert allocated >= active._reservation.reserved_to > active.size
    # Sealed: the blocks past the end went back (ext4, xfs and tmpfs round to 4 KiB pages).
    assert sealed.log_path.stat().st_blocks * 512 < sealed.size + 4096
    log.close(NOW)
    assert active.log_path.stat().st_blocks * 512 < active.size + 4096
