"""Retention, DeleteRecords, delayed file deletion, topic administration and append checks.

Time is driven through LogManager's ``clock``. Segments hold exactly two equal batches, so the
expected survivors of each retention rule can be stated as offsets. Topic metadata changes are
checked across clean and crash restarts; invalid names, configs and record batches must be
refused with a precise error and leave the store unchanged.
"""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import crc32c
import pytest
from broker_fixtures import Rec, create_topic, produce_confluent, wait_until, watermarks
from storage_support import (
    NOW,
    TOPIC,
    Clock,
    Stored,
    append_all,
    check_log,
    make_batch,
    restart,
    segment_files,
    without_assigned_fields,
)

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.errors import (
    CorruptRecordError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidTopicError,
    KafkaError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    TopicExistsError,
)
from sparklog.record.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    LOG_APPEND_TIME,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    RECORDS_COUNT_OFFSET,
    parse_header,
    validate_batch,
)
from sparklog.record.records import decode_records
from sparklog.storage.log import PartitionLog
from sparklog.storage.log_manager import LogManager

BATCH = make_batch(2, value_size=40)  # two records: offsets advance by 2 per batch
TWO_BATCH_SEGMENTS = {"segment.bytes": 2 * len(BATCH), "file.delete.delay.ms": 0}


@pytest.fixture
def clock() -> Clock:
    return Clock(NOW)


@pytest.fixture
def manager(tmp_path: Path, clock: Clock) -> Iterator[LogManager]:
    opened = LogManager(tmp_path / "data", clock=clock)
    yield opened
    opened.close()


def _fill(manager: LogManager, configs: dict[str, object], timestamps: list[int]
          ) -> tuple[PartitionLog, list[Stored]]:
    """A topic of two-batch segments holding one BATCH-sized batch per timestamp."""
    manager.create_topic(TOPIC, 1, {**TWO_BATCH_SEGMENTS, **configs})
    log = manager.get_log(TOPIC, 0)
    stored = append_all(log, [make_batch(2, value_size=40, timestamp=t) for t in timestamps])
    assert [s.base_offset for s in log.segments] == list(range(0, 2 * len(timestamps), 4))
    return log, stored


def _bases(log: PartitionLog) -> list[int]:
    return [s.base_offset for s in log.segments]


def test_retention_ms_deletes_whole_expired_segments(manager: LogManager, clock: Clock) -> None:
    # Batch i is stamped NOW + 10 s * i; segment k's newest record is NOW + 10 s * (2k + 1).
    log, stored = _fill(manager, {"retention.ms": 60_000},
                        [NOW + 10_000 * i for i in range(9)])
    clock.ms = NOW + 30_000 + 60_000  # segment 1 (newest +30 s) is exactly retention.ms old
    manager.run_maintenance()
    assert _bases(log) == [4, 8, 12, 16]
    clock.advance(1)
    manager.run_maintenance()
    assert _bases(log) == [8, 12, 16]
    assert log.log_start_offset == 8
    check_log(log, stored[4:])
    assert segment_files(log.directory)[".log"] == {f"{b:020d}" for b in (8, 12, 16)}


def test_retention_ms_rolls_and_deletes_the_active_segment_when_all_expired(
    manager: LogManager, clock: Clock
) -> None:
    log, _ = _fill(manager, {"retention.ms": 60_000}, [NOW + 10_000 * i for i in range(5)])
    clock.ms = NOW + 40_000 + 60_001
    manager.run_maintenance()
    assert _bases(log) == [10]
    assert (log.log_start_offset, log.log_end_offset, log.size) == (10, 10, 0)
    assert log.read(10, 1 << 20) is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(9, 1 << 20)
    stored = append_all(log, [BATCH], now_ms=clock.ms)
    assert stored[0].base_offset == 10
    check_log(log, stored)


def test_retention_bytes_keeps_at_least_the_limit(manager: LogManager) -> None:
    limit = 5 * len(BATCH)
    log, stored = _fill(manager, {"retention.bytes": limit}, [NOW] * 9)
    manager.run_maintenance()
    # 9 batches; dropping segments 0 and 1 leaves 5 batches, dropping segment 2 would leave 3.
    assert _bases(log) == [8, 12, 16]
    assert log.size == limit and log.log_start_offset == 8
    check_log(log, stored[4:])
    manager.run_maintenance()
    assert _bases(log) == [8, 12, 16]


def test_delete_records_hides_offsets_and_maintenance_drops_segments_below(
    tmp_path: Path, clock: Clock
) -> None:
    manager = LogManager(tmp_path / "data", clock=clock)
    log, stored = _fill(manager, {}, [NOW] * 9)
    assert log.delete_records(9) == 9
    with pytest.raises(OffsetOutOfRangeError):
        log.read(8, 1 << 20)
    found = log.read(9, 1 << 20)
    assert found is not None and found.first_offset == 8  # the batch holding offset 9
    assert log.delete_records(3) == 9  # the low watermark never moves back
    assert log.offset_for_timestamp(0) == (9, NOW)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(19)
    assert _bases(log) == [0, 4, 8, 12, 16]
    manager.run_maintenance()
    assert _bases(log) == [8, 12, 16]
    assert log.log_start_offset == 9
    check_log(log, stored[4:])
    for clean in (True, False):
        manager = restart(manager, clean=clean, crash_dir=tmp_path / f"crash-{clean}")
        log = manager.get_log(TOPIC, 0)
        assert log.log_start_offset == 9
        check_log(log, stored[4:])
    manager.close()


def test_deleted_segments_are_renamed_then_unlinked_after_the_delay(
    tmp_path: Path, clock: Clock
) -> None:
    manager = LogManager(tmp_path / "data", clock=clock)
    log, _ = _fill(manager, {"file.delete.delay.ms": 5000}, [NOW] * 5)
    in_flight = log.read(0, 1 << 20)  # a fetch about to send from segment 0
    assert in_flight is not None
    sent = in_flight.read()
    log.delete_records(8)
    manager.run_maintenance()
    assert _bases(log) == [8]
    files = segment_files(log.directory)
    deleted = {"00000000000000000000", "00000000000000000004"}
    assert files[".log.deleted"] == files[".index.deleted"] == files[".timeindex.deleted"] \
        == deleted
    assert files[".log"] == {"00000000000000000008"}
    assert in_flight.read() == sent
    crashed = restart(manager, clean=False, crash_dir=tmp_path / "crash")
    assert ".log.deleted" not in segment_files(crashed.get_log(TOPIC, 0).directory)
    crashed.close()

    manager = LogManager(tmp_path / "fresh", clock=clock)
    log, _ = _fill(manager, {"file.delete.delay.ms": 5000}, [NOW] * 5)
    log.delete_records(8)
    manager.run_maintenance()
    clock.advance(4999)
    manager.run_maintenance()
    assert segment_files(log.directory)[".log.deleted"] == deleted
    clock.advance(1)
    manager.run_maintenance()
    assert not {".log.deleted", ".index.deleted", ".timeindex.deleted"} & set(
        segment_files(log.directory))
    manager.close()


def test_a_deleted_topic_goes_after_the_delay_and_reads_under_way_finish(
    manager: LogManager, clock: Clock
) -> None:
    log, _ = _fill(manager, {"file.delete.delay.ms": 5000}, [NOW] * 5)
    log.delete_records(8)
    manager.run_maintenance()  # segments 0 and 4 wait out the delay
    in_flight = log.read(8, 1 << 20)  # a fetch about to send from the remaining segment
    assert in_flight is not None
    sent = in_flight.read()
    manager.delete_topic(TOPIC)
    assert not (manager.data_dir / f"{TOPIC}-0").exists()  # the name is free at once
    manager.create_topic(TOPIC, 1)
    assert manager.get_log(TOPIC, 0).log_end_offset == 0
    doomed = list(manager.data_dir.glob(f"{TOPIC}-0.*-delete"))
    assert len(doomed) == 1
    clock.advance(4999)
    manager.run_maintenance()
    assert in_flight.read() == sent  # its descriptor still serves the send
    clock.advance(1)
    manager.run_maintenance()
    assert not doomed[0].exists()


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "crash"])
def test_topic_changes_persist_across_restarts(tmp_path: Path, clean: bool) -> None:
    manager = LogManager(tmp_path / "data", clock=Clock())
    ids = {name: manager.create_topic(name, n, {"retention.ms": 1000}).topic_id
           for name, n in (("alpha", 2), ("beta", 1), ("gamma", 1))}
    stored = append_all(manager.get_log("beta", 0), [BATCH, BATCH])
    manager.delete_topic("gamma")
    manager.create_partitions("alpha", 4)
    manager.set_topic_config("beta", {"cleanup.policy": "compact,delete", "segment.bytes": 4096})

    manager = restart(manager, clean=clean, crash_dir=tmp_path / "crash-1")
    data_dir = manager.data_dir
    assert {n: t.topic_id for n, t in manager.topics.items()} == {
        "alpha": ids["alpha"], "beta": ids["beta"]}
    assert sorted(manager.logs) == [("alpha", p) for p in range(4)] + [("beta", 0)]
    assert not (data_dir / "gamma-0").exists()
    beta = manager.get_topic("beta")
    assert beta.overrides_raw == {"cleanup.policy": "compact,delete", "segment.bytes": "4096"}
    assert beta.config.compact and beta.config.delete and beta.config.segment_bytes == 4096
    assert beta.config.retention_ms == 604800000  # replaced, not merged (AlterConfigs)
    assert manager.get_topic("alpha").config.retention_ms == 1000
    check_log(manager.get_log("beta", 0), stored)

    manager.delete_topic("alpha")
    recreated = manager.create_topic("alpha", 1)
    assert recreated.topic_id != ids["alpha"]
    assert manager.get_log("alpha", 0).log_end_offset == 0
    manager = restart(manager, clean=clean, crash_dir=tmp_path / "crash-2")
    assert manager.get_topic("alpha").partitions == 1
    assert manager.get_topic("alpha").config.retention_ms == 604800000
    assert not any((manager.data_dir / f"alpha-{p}").exists() for p in (1, 2, 3))
    manager.close()


def test_topic_admin_errors(manager: LogManager) -> None:
    manager.create_topic(TOPIC, 2)
    with pytest.raises(TopicExistsError, match=TOPIC):
        manager.create_topic(TOPIC, 1)
    with pytest.raises(InvalidPartitionsError, match="at least 1"):
        manager.create_topic("other", 0)
    with pytest.raises(InvalidPartitionsError, match="must be larger"):
        manager.create_partitions(TOPIC, 2)
    assert manager.get_topic(TOPIC).partitions == 2 and "other" not in manager.topics


@pytest.mark.parametrize("name", ["", ".", "..", "has space", "a/b", "x" * 250, "ünïcode"])
def test_invalid_topic_names_are_refused(manager: LogManager, name: str) -> None:
    with pytest.raises(InvalidTopicError, match=f"invalid topic name {re.escape(repr(name))}"):
        manager.create_topic(name, 1)
    assert not manager.topics and not list(manager.data_dir.glob("*-0"))


@pytest.mark.parametrize(
    ("configs", "named"),
    [
        ({"retention.ms": "soon"}, "retention.ms"),
        ({"cleanup.policy": "shred"}, "cleanup.policy"),
        ({"message.timestamp.type": "WallClock"}, "message.timestamp.type"),
        ({"segment.bytes": 10}, "segment.bytes"),
        ({"min.cleanable.dirty.ratio": 1.5}, "min.cleanable.dirty.ratio"),
        ({"no.such.config": "1"}, "no.such.config"),
    ],
)
def test_invalid_configs_are_refused_naming_the_problem(
    manager: LogManager, configs: dict[str, object], named: str
) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape(named)):
        manager.create_topic("other", 1, configs)
    assert "other" not in manager.topics and not (manager.data_dir / "other-0").exists()
    manager.create_topic(TOPIC, 1, {"retention.ms": 5})
    with pytest.raises(InvalidConfigError, match=re.escape(named)):
        manager.set_topic_config(TOPIC, configs)
    assert manager.get_topic(TOPIC).overrides_raw == {"retention.ms": "5"}
    assert manager.get_log(TOPIC, 0).config.retention_ms == 5


def _resealed(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, CRC_OFFSET, crc32c.crc32c(bytes(batch[ATTRIBUTES_OFFSET:])))
    return bytes(batch)


def _with(batch: bytes, position: int, value: bytes) -> bytearray:
    out = bytearray(batch)
    out[position : position + len(value)] = value
    return out


GOOD = make_batch(3)
BAD_APPENDS: dict[str, tuple[bytes, type[KafkaError]]] = {
    "bad crc": (bytes(_with(GOOD, 80, bytes([GOOD[80] ^ 1]))), CorruptRecordError),
    "bad magic": (_resealed(_with(GOOD, MAGIC_OFFSET, b"\x01")), CorruptRecordError),
    "truncated": (GOOD[:-1], CorruptRecordError),
    "trailing garbage": (GOOD + bytes(20), CorruptRecordError),
    "count mismatch": (_resealed(_with(GOOD, RECORDS_COUNT_OFFSET, struct.pack(">i", 2))),
                       InvalidRecordError),
    "second batch corrupt": (GOOD + GOOD[:-3] + b"xyz", CorruptRecordError),
    "empty": (b"", InvalidRecordError),
}


@pytest.mark.parametrize("case", BAD_APPENDS)
def test_corrupt_appends_are_refused_and_change_nothing(manager: LogManager, case: str) -> None:
    data, error = BAD_APPENDS[case]
    manager.create_topic(TOPIC, 1)
    log = manager.get_log(TOPIC, 0)
    stored = append_all(log, [GOOD])
    on_disk = log.active.log_path.read_bytes()
    with pytest.raises(error):
        log.append(data, now_ms=NOW)
    assert log.active.log_path.read_bytes() == on_disk
    check_log(log, stored)


def test_max_message_bytes_is_enforced(manager: LogManager) -> None:
    fits, too_big = make_batch(1, value_size=50), make_batch(1, value_size=51)
    assert len(too_big) == len(fits) + 1
    manager.create_topic(TOPIC, 1, {"max.message.bytes": len(fits)})
    log = manager.get_log(TOPIC, 0)
    with pytest.raises(MessageTooLargeError, match=re.escape("max.message.bytes")):
        log.append(too_big, now_ms=NOW)
    assert log.log_end_offset == 0
    check_log(log, append_all(log, [fits]))


def test_log_append_time_rewrites_max_timestamp_with_a_valid_crc(
    tmp_path: Path, clock: Clock
) -> None:
    manager = LogManager(tmp_path / "data", clock=clock)
    manager.create_topic(TOPIC, 1, {"message.timestamp.type": "LogAppendTime"})
    log = manager.get_log(TOPIC, 0)
    sent = make_batch(3, timestamp=NOW - 5000)
    clock.advance(7)
    info = log.append(sent, now_ms=manager.now_ms())
    assert info.log_append_time == clock.ms
    manager = restart(manager, clean=False, crash_dir=tmp_path / "crash")  # recovery checks CRCs
    log = manager.get_log(TOPIC, 0)
    found = log.read(0, 1 << 20)
    assert found is not None
    stored = found.read()
    header = validate_batch(stored)
    assert (header.timestamp_type, header.max_timestamp) == (LOG_APPEND_TIME, clock.ms)
    assert header.base_timestamp == parse_header(sent).base_timestamp
    assert [r.timestamp for r in decode_records(stored, header)] == [clock.ms] * 3
    changed = {i for i, (a, b) in enumerate(zip(without_assigned_fields(stored),
                                                without_assigned_fields(sent), strict=True))
               if a != b}
    rewritten = {*range(CRC_OFFSET, CRC_OFFSET + 4), ATTRIBUTES_OFFSET + 1,
                 *range(MAX_TIMESTAMP_OFFSET, MAX_TIMESTAMP_OFFSET + 8)}
    assert ATTRIBUTES_OFFSET + 1 in changed and changed <= rewritten
    assert log.offset_for_timestamp(NOW - 5000) == (0, clock.ms)
    assert log.offset_for_timestamp(clock.ms + 1) is None
    manager.close()


# -- the scheduler of a running broker --------------------------------------------------------


def test_a_running_broker_applies_retention_on_its_schedule(tmp_path: Path) -> None:
    """``log.retention.check.interval.ms`` drives retention in a serving broker: records a
    client produced with old timestamps leave the log (whole segments, never the active one)
    without any call but the broker's own schedule."""
    config = {"log.retention.check.interval.ms": "100", "file.delete.delay.ms": "0"}
    with EmbeddedBroker(tmp_path / "data", config) as broker:
        name = create_topic(broker.bootstrap, "aged", config={
            "retention.ms": "60000", "segment.bytes": "2048", "file.delete.delay.ms": "0"})
        hour_ago = int(time.time() * 1000) - 3_600_000
        old = [Rec(None, b"x" * 200, timestamp=hour_ago) for _ in range(40)]
        produce_confluent(broker.bootstrap, name, old, **{"linger.ms": 0})
        produce_confluent(broker.bootstrap, name, [Rec(None, b"fresh")], **{"linger.ms": 0})
        wait_until(lambda: watermarks(broker.bootstrap, name)[0] > 0,
                   message="retention to advance the log start offset")
        start, end = watermarks(broker.bootstrap, name)
        assert end == 41 and 0 < start <= 40  # the fresh record's segment stays
        segments = sorted((tmp_path / "data" / f"{name}-0").glob("*.log"))
        assert int(segments[0].stem) == start
