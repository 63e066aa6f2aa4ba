"""Log compaction against a model, and each of its rules on its own.

The model test (hypothesis) appends keyed records and tombstones with every codec, cleans at
random points, moves an injected clock and reopens the log (cleanly or from a crash copy);
after every clean and reopen, and at the end, the whole log read back through
``PartitionLog.read`` must equal the model (``compaction_support.Model``), batch fields and
record timestamps must be the producer's, tombstones must carry the model's delete horizon,
and indexes must be right.

The other tests pin one rule each: producer state kept through empty batches, codecs and
batch fields, control batches, keyless records, min/max compaction lag, dirty ratio and the
choice of log, the cleaner checkpoint file, the memory bound, merging small segments, and
concurrency with appends, reads, retention and topic deletion.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from compaction_support import (
    RETENTION_MS,
    TOPIC,
    TP,
    Model,
    cleaner_for,
    compacted_manager,
    read_all,
    records_of,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storage_support import NOW, Clock, check_indexes, restart

from sparklog.broker.config import BrokerConfig
from sparklog.errors import InvalidRecordError, OutOfOrderSequenceError
from sparklog.record.batch import BatchHeader, parse_header
from sparklog.record.records import build_batch
from sparklog.storage.checkpoint import read_checkpoint
from sparklog.storage.cleaner import (
    CLEANER_CHECKPOINT,
    CleanerConfig,
    LogCleaner,
    group_segments_by_size,
    log_to_clean,
)
from sparklog.storage.log import PartitionLog
from sparklog.storage.log_manager import LogManager
from sparklog.storage.offset_map import (
    ENTRY_BYTES,
    PYTHON_ENTRY_BYTES,
    KeyOffsets,
    OffsetMap,
    new_offset_map,
)

KEYS = [b"key-%d" % i for i in range(6)]
PID = 7

write_op = st.tuples(
    st.just("write"),
    st.lists(st.tuples(st.integers(0, len(KEYS) - 1),
                       st.one_of(st.none(), st.binary(max_size=24))), min_size=1, max_size=3),
    st.sampled_from([0, 1, 2, 3, 4]),
    st.booleans(),
)
ROUND = st.tuples(
    st.lists(write_op, min_size=1, max_size=6),
    # clock advance, then a clean; exactly delete.retention.ms brings a clean to the very
    # millisecond a tombstone's horizon passes
    st.one_of(st.integers(0, 1500), st.just(RETENTION_MS)),
    st.sampled_from([True, True, True, False]),
    st.sampled_from([None, None, None, True, False]),  # reopen: cleanly, or from a crash copy
)
OPS = st.lists(ROUND, min_size=1, max_size=8).map(
    lambda rounds: [op for writes, advance, clean, reopen in rounds for op in (
        *writes, ("advance", advance), *((("clean",),) if clean else ()),
        *((("reopen", reopen),) if reopen is not None else ()))])


def _check(log: PartitionLog, model: Model, originals: dict[int, BatchHeader],
           timestamps: dict[int, int]) -> None:
    assert records_of(log) == model.expected()
    horizons = model.horizons()
    for header, records in read_all(log):
        original = originals[header.base_offset]
        assert (header.last_offset_delta, header.producer_id, header.producer_epoch,
                header.base_sequence, header.timestamp_type, header.leader_epoch) == (
            original.last_offset_delta, original.producer_id, original.producer_epoch,
            original.base_sequence, original.timestamp_type, 0)
        assert header.compression == (original.compression if records else 0)
        for record in records:
            assert record.timestamp == timestamps[record.offset]
            if record.offset in horizons:
                assert header.delete_horizon_ms == horizons[record.offset]
    for segment in log.segments:
        check_indexes(segment)
    leftovers = [p.name for p in log.directory.iterdir()
                 if p.suffix in (".cleaned", ".swap", ".deleted")]
    assert not leftovers


# The compiled map (when built) and the pure Python one it falls back to: the same cleaner.
OFFSET_MAPS = [pytest.param(new_offset_map, id="default"),
               pytest.param(OffsetMap, id="pure-python")]
MODEL_EXAMPLES = 200
"""Examples of the model test, for each offset map. It is where the cleaner is riskiest
(cleans interleaved with crash copies and reopens, a 3-entry offset map that splits a clean
into many rounds, every codec, idempotent batches, tombstones past their horizon): a cleaner
that gave a rewritten tombstone batch a new horizon passed 2 runs of 6 at 40 examples, none
at 200. About 30-35 s for both maps together on a 2-core machine."""


@pytest.mark.parametrize("offset_map", OFFSET_MAPS)
@settings(max_examples=MODEL_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, segment_bytes=st.sampled_from([200, 400, 1000]), dedupe_entries=st.sampled_from(
    [3, 1 << 13]))
def test_compaction_matches_the_model(offset_map: Callable[[int], KeyOffsets], ops: list[tuple],
                                      segment_bytes: int, dedupe_entries: int) -> None:
    entry_bytes = PYTHON_ENTRY_BYTES if offset_map is OffsetMap else ENTRY_BYTES
    dedupe_bytes = dedupe_entries * entry_bytes
    with tempfile.TemporaryDirectory() as tmp:
        clock = Clock()
        manager = compacted_manager(Path(tmp) / "data", clock, **{"segment.bytes": segment_bytes})
        cleaner = cleaner_for(manager, dedupe_bytes, offset_map=offset_map)
        model, originals, timestamps = Model(), {}, {}
        sequence = 0
        for n, op in enumerate(ops):
            log = manager.get_log(*TP)
            if op[0] == "write":
                _, items, codec, idempotent = op
                batch = build_batch(
                    [(KEYS[k], v, (), clock.ms) for k, v in items], codec=codec,
                    producer_id=PID if idempotent else -1, producer_epoch=0 if idempotent else -1,
                    base_sequence=sequence if idempotent else -1)
                info = log.append(batch, now_ms=clock.ms)
                sequence += len(items) if idempotent else 0
                model.append(info.base_offset, [(KEYS[k], v) for k, v in items])
                originals[info.base_offset] = parse_header(batch)
                timestamps.update((info.base_offset + i, clock.ms) for i in range(len(items)))
            elif op[0] == "clean":
                result = cleaner.clean_log(TP)
                assert result is not None
                model.clean(result.end_offset, clock.ms)
            elif op[0] == "advance":
                clock.advance(op[1])
            elif op[0] == "reopen":
                manager = restart(manager, clean=op[1], crash_dir=Path(tmp) / f"crash-{n}")
                cleaner = cleaner_for(manager, dedupe_bytes, offset_map=offset_map)
            if op[0] != "write":
                _check(manager.get_log(*TP), model, originals, timestamps)
        _check(manager.get_log(*TP), model, originals, timestamps)
        manager.close()


# -- one rule at a time -----------------------------------------------------------------------


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def manager(tmp_path: Path, clock: Clock) -> LogManager:
    return compacted_manager(tmp_path / "data", clock)


def _write(log: PartitionLog, items: list[tuple[bytes, bytes | None]], clock: Clock,
           **batch: int) -> int:
    """Append one batch; return its base offset."""
    records = [(k, v, (), clock.ms) for k, v in items]
    return log.append(build_batch(records, **batch), now_ms=clock.ms).base_offset


def _latest(pairs: list[tuple[bytes, bytes | None]]) -> dict[bytes, bytes | None]:
    return dict(pairs)


def test_idempotent_producer_state_survives_compaction(manager: LogManager,
                                                       clock: Clock) -> None:
    """The producer's batches lose all their records; its last one stays as an empty batch,
    so after a restart with no snapshot the state is rebuilt from the log: the retried batch
    is a duplicate, the next sequence is accepted and a gap is refused."""
    log = manager.get_log(*TP)
    pid_batch = [(b"a", b"1"), (b"b", b"1")]
    _write(log, [(b"a", b"0")], clock, producer_id=PID, producer_epoch=0, base_sequence=0)
    last = _write(log, pid_batch, clock, producer_id=PID, producer_epoch=0, base_sequence=1)
    for n in range(30):
        _write(log, [(b"a", b"x%d" % n), (b"b", b"y%d" % n)], clock)
    cleaner_for(manager).clean_log(TP)
    batches = {h.base_offset: (h, records) for h, records in read_all(log)}
    assert 0 not in batches  # not the producer's last batch: gone
    empty, records = batches[last]
    assert (empty.record_count, empty.last_offset_delta, empty.producer_id,
            empty.base_sequence) == (0, 1, PID, 1) and records == []
    manager.close()
    for snapshot in log.directory.glob("*.snapshot"):
        snapshot.unlink()
    log = LogManager(manager.data_dir, clock=clock).get_log(*TP)
    retry = build_batch([(k, v, (), clock.ms) for k, v in pid_batch], producer_id=PID,
                        producer_epoch=0, base_sequence=1)
    info = log.append(retry, now_ms=clock.ms)
    assert info.duplicate and (info.base_offset, info.last_offset) == (last, last + 1)
    gap = build_batch([(b"c", b"1", (), clock.ms)], producer_id=PID, producer_epoch=0,
                      base_sequence=5)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(gap, now_ms=clock.ms)
    following = build_batch([(b"c", b"1", (), clock.ms)], producer_id=PID, producer_epoch=0,
                            base_sequence=3)
    assert not log.append(following, now_ms=clock.ms).duplicate


def test_rewritten_batches_keep_codec_fields_and_get_a_horizon(manager: LogManager,
                                                               clock: Clock) -> None:
    log = manager.get_log(*TP)
    bases = {}
    for codec in range(5):
        bases[codec] = _write(log, [(b"gone-%d" % codec, b"old"), (b"stays-%d" % codec, b"v"),
                                    (b"dead-%d" % codec, None)], clock, codec=codec,
                              producer_id=100 + codec, producer_epoch=3, base_sequence=0,
                              partition_leader_epoch=5)
    for codec in range(5):
        _write(log, [(b"gone-%d" % codec, b"new")], clock)
    for _ in range(10):
        _write(log, [(b"filler", b"x" * 50)], clock)
    cleaner_for(manager).clean_log(TP)
    batches = {h.base_offset: (h, r) for h, r in read_all(log)}
    for codec, base in bases.items():
        header, records = batches[base]
        assert header.compression == codec
        assert (header.producer_id, header.producer_epoch, header.base_sequence,
                header.last_offset_delta, header.leader_epoch) == (100 + codec, 3, 0, 2, 0)
        assert [(r.offset, r.key, r.value) for r in records] == [
            (base + 1, b"stays-%d" % codec, b"v"), (base + 2, b"dead-%d" % codec, None)]
        assert header.delete_horizon_ms == clock.ms + RETENTION_MS
        assert all(r.timestamp == NOW for r in records)
    clock.advance(RETENTION_MS)
    cleaner_for(manager).clean_log(TP)
    keys = {r[1] for r in records_of(log)}
    assert not any(k.startswith(b"dead") for k in keys)
    assert {b"stays-%d" % c for c in range(5)} <= keys


def test_log_append_time_batches_keep_their_timestamps(tmp_path: Path, clock: Clock) -> None:
    manager = compacted_manager(tmp_path / "data", clock,
                                **{"message.timestamp.type": "LogAppendTime"})
    log = manager.get_log(*TP)
    first = _write(log, [(b"a", b"1"), (b"b", b"1")], clock)
    clock.advance(5)
    for n in range(12):
        _write(log, [(b"a", b"%d" % n)], clock)
    cleaner_for(manager).clean_log(TP)
    header, records = read_all(log)[0]
    assert header.base_offset == first and header.timestamp_type == 1
    assert [(r.key, r.timestamp) for r in records] == [(b"b", NOW)]
    assert header.max_timestamp == NOW


def test_control_batches_are_kept(manager: LogManager, clock: Clock) -> None:
    log = manager.get_log(*TP)
    _write(log, [(b"a", b"1")], clock, producer_id=9, producer_epoch=0, base_sequence=0)
    marker = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", (), clock.ms)],
                         base_offset=log.log_end_offset, producer_id=9, producer_epoch=0,
                         is_control=True, transactional=True)
    log.append_as_follower(marker, now_ms=clock.ms)
    for n in range(12):
        _write(log, [(b"a", b"%d" % n)], clock)
    cleaner_for(manager).clean_log(TP)
    controls = [h for h, _ in read_all(log) if h.is_control]
    assert len(controls) == 1 and controls[0].base_offset == 1


def test_keyless_records_are_rejected(manager: LogManager, clock: Clock) -> None:
    log = manager.get_log(*TP)
    with pytest.raises(InvalidRecordError, match="without a key: 1 of 2 \\(batch index 1\\)"):
        _write(log, [(b"a", b"1"), (None, b"2")], clock)  # type: ignore[list-item]
    assert log.log_end_offset == 0


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path: Path, clock: Clock) -> None:
    manager = compacted_manager(tmp_path / "data", clock, **{"min.compaction.lag.ms": 10_000})
    log = manager.get_log(*TP)
    for n in range(8):
        _write(log, [(b"a", b"old-%d" % n)], clock)
    clock.advance(20_000)
    young = log.roll(clock.ms).base_offset
    for n in range(8):
        _write(log, [(b"a", b"young-%d" % n)], clock)
    result = cleaner_for(manager).clean_log(TP)
    assert result is not None and result.end_offset == young
    assert [v for _, _, v in records_of(log)] == [b"old-7"] + [b"young-%d" % n for n in range(8)]


def test_max_compaction_lag_makes_a_log_eligible(tmp_path: Path, clock: Clock) -> None:
    manager = compacted_manager(tmp_path / "data", clock, **{
        "min.cleanable.dirty.ratio": 0.99, "max.compaction.lag.ms": 60_000})
    log = manager.get_log(*TP)
    for n in range(10):
        _write(log, [(b"a", b"%d" % n)], clock)
    cleaner = cleaner_for(manager)
    cleaner.clean_log(TP)
    for n in range(3):
        _write(log, [(b"b", b"%d" % n)], clock)
    for n in range(6):  # fresh dirty segments, but far below the ratio
        _write(log, [(b"c", b"%d" % n)], clock)
    to_clean = log_to_clean(TP, log, cleaner.checkpoint(TP), clock.ms)
    assert to_clean.dirty_bytes > 0 and to_clean.dirty_ratio < 0.99
    assert not to_clean.cleanable and cleaner.filthiest() is None
    clock.advance(60_001)
    assert log_to_clean(TP, log, cleaner.checkpoint(TP), clock.ms).needs_compaction_now
    result = cleaner.clean_filthiest()
    assert result is not None and result.tp == TP


def test_the_dirtiest_compacted_log_is_cleaned_first(tmp_path: Path, clock: Clock) -> None:
    manager = LogManager(tmp_path / "data", clock=clock)
    common = {"segment.bytes": 300, "file.delete.delay.ms": 0, "min.cleanable.dirty.ratio": 0.3}
    manager.create_topic("light", 1, {"cleanup.policy": "compact", **common})
    manager.create_topic("heavy", 1, {"cleanup.policy": "compact,delete", **common})
    manager.create_topic("plain", 1, {"cleanup.policy": "delete", **common})
    for name, rounds in (("light", 12), ("heavy", 20), ("plain", 40)):
        for n in range(rounds):
            _write(manager.get_log(name, 0), [(b"k", b"%d" % n)], clock)
    cleaner = cleaner_for(manager)
    cleaner.clean_log(("light", 0))
    for n in range(5):  # light's dirty ratio is now about 0.8, heavy's 1
        _write(manager.get_log("light", 0), [(b"j", b"%d" % n)], clock)
    order = []
    while (result := cleaner.clean_filthiest()) is not None:
        order.append((result.tp[0], round(result.ratio_before, 2), round(result.ratio_after, 2)))
    assert [name for name, *_ in order] == ["heavy", "light"]
    assert order[0][1] == 1.0 and 0.3 < order[1][1] < 1
    assert all(after < 0.3 for *_, after in order)
    assert read_checkpoint(manager.data_dir / CLEANER_CHECKPOINT) == {
        ("heavy", 0): manager.get_log("heavy", 0).segments[-1].base_offset,
        ("light", 0): manager.get_log("light", 0).segments[-1].base_offset,
    }
    text = (manager.data_dir / CLEANER_CHECKPOINT).read_text().splitlines()
    assert text[:2] == ["0", "2"] and text[2].startswith("heavy 0 ")


def test_checkpoint_outside_the_log_restarts_at_the_log_start(manager: LogManager,
                                                              clock: Clock) -> None:
    log = manager.get_log(*TP)
    for n in range(10):
        _write(log, [(b"a", b"%d" % n)], clock)
    assert log_to_clean(TP, log, 10**9, clock.ms).first_dirty == 0
    log.delete_records(3)
    assert log_to_clean(TP, log, 1, clock.ms).first_dirty == 3
    assert log_to_clean(TP, log, 5, clock.ms).first_dirty == 5


def test_memory_bound_cleans_in_rounds(manager: LogManager, clock: Clock) -> None:
    """A map of two entries takes a batch at a time; each round moves the checkpoint on
    and the rounds together reach the full compaction."""
    log = manager.get_log(*TP)
    pairs = [(b"k%d" % (n % 5), b"%d" % n) for n in range(40)]
    for pair in pairs:
        _write(log, [pair], clock)
    cleaner = cleaner_for(manager, dedupe_bytes=3 * ENTRY_BYTES)
    ends = []
    while (end := cleaner.clean_log(TP).end_offset) < log.segments[-1].base_offset:
        assert not ends or end > ends[-1]
        ends.append(end)
    assert len(ends) > 3
    active = log.segments[-1].base_offset
    cleaned = [(k, v) for o, k, v in records_of(log) if o < active]
    assert len({k for k, _ in cleaned}) == len(cleaned)
    assert _latest(cleaned) == _latest([p for o, p in enumerate(pairs) if o < active])


def test_small_segments_are_merged_within_the_limits(manager: LogManager, clock: Clock) -> None:
    log = manager.get_log(*TP)
    for n in range(60):
        _write(log, [(b"k%d" % (n % 3), b"v" * 20)], clock)
    cleaner = cleaner_for(manager)
    cleaner.clean_log(TP)
    sizes_before = [s.size for s in log.segments[:-1]]
    _write(log, [(b"z", b"1")], clock)
    cleaner.clean_log(TP)
    inactive = log.segments[:-1]
    assert len(inactive) < len(sizes_before)
    assert all(s.size <= 400 for s in inactive)
    assert [len(g) for g in group_segments_by_size(inactive, 1 << 20, 10 << 20)] == [
        len(inactive)]
    assert [len(g) for g in group_segments_by_size(inactive, 1, 10 << 20)] == [1] * len(inactive)


def test_cleaner_thread_runs_beside_appends_and_reads(manager: LogManager, clock: Clock) -> None:
    """Appends and whole-log reads go on in this thread while the cleaner thread compacts."""
    log = manager.get_log(*TP)
    cleaner = LogCleaner(manager, CleanerConfig(backoff_ms=1, threads=2))
    cleaner.start()
    written: list[tuple[bytes, bytes | None]] = []
    try:
        for n in range(800):
            pair = (b"k%d" % (n % 23), None if n % 11 == 0 else b"%d" % n)
            _write(log, [pair], clock)
            written.append(pair)
            if n % 100 == 0:
                records_of(log)  # offsets increase and CRCs hold mid-clean
    finally:
        cleaner.stop()
    assert cleaner.checkpoint(TP) is not None
    last_round = cleaner_for(manager)
    last_round.clean_log(TP)
    got = records_of(log)
    assert len(got) < len(written)
    assert _latest([(k, v) for _, k, v in got]) == _latest(written)
    assert last_round.checkpoint(TP) == log.segments[-1].base_offset


def test_topic_deleted_during_a_clean(manager: LogManager, clock: Clock) -> None:
    log = manager.get_log(*TP)
    for n in range(20):
        _write(log, [(b"a", b"%d" % n)], clock)
    cleaner = cleaner_for(manager)
    cleaner.clean_log(TP)
    assert cleaner.checkpoint(TP) is not None
    for n in range(20):
        _write(log, [(b"a", b"%d" % n)], clock)

    def delete_topic(step: str) -> None:
        if step == "map_built":
            manager.delete_topic(TOPIC)

    cleaner.crash_point = delete_topic
    assert cleaner.clean_log(TP) is None
    assert cleaner.checkpoint(TP) is None and not log.directory.exists()
    assert read_checkpoint(manager.data_dir / CLEANER_CHECKPOINT) == {}


def test_retention_during_a_clean_aborts_the_swap(tmp_path: Path, clock: Clock) -> None:
    manager = compacted_manager(tmp_path / "data", clock, **{"cleanup.policy": "compact,delete"})
    log = manager.get_log(*TP)
    for n in range(20):
        _write(log, [(b"k%d" % (n % 4), b"%d" % n)], clock)
    before = records_of(log)

    def retention(step: str) -> None:
        if step == "cleaned_written":
            log.delete_records(log.segments[1].base_offset)
            manager.apply_retention()

    cleaner = cleaner_for(manager, crash_point=retention)
    assert cleaner.clean_log(TP) is None
    assert records_of(log) == [r for r in before if r[0] >= log.log_start_offset]
    assert not [p for p in log.directory.iterdir() if p.suffix in (".cleaned", ".swap")]
    assert cleaner.checkpoint(TP) is None


def test_stop_aborts_a_running_clean(manager: LogManager, clock: Clock) -> None:
    log = manager.get_log(*TP)
    for n in range(20):
        _write(log, [(b"a", b"%d" % n)], clock)
    before = records_of(log)
    cleaner = cleaner_for(manager)
    cleaner.crash_point = lambda step: cleaner.stop() if step == "map_built" else None
    assert cleaner.clean_log(TP) is None
    assert records_of(log) == before and cleaner.checkpoint(TP) is None


def test_broker_config_names_and_defaults() -> None:
    config = CleanerConfig.from_props(BrokerConfig().props)
    assert config == CleanerConfig(enable=True, backoff_ms=15000,
                                   dedupe_buffer_size=134217728, threads=1)
    custom = BrokerConfig({"log.cleaner.enable": "false", "log.cleaner.threads": "2",
                           "log.cleaner.backoff.ms": "200"})
    assert CleanerConfig.from_props(custom.props) == CleanerConfig(
        enable=False, backoff_ms=200, threads=2)
    assert not custom.unknown_keys()


def test_clean_runs_off_the_lock(manager: LogManager, clock: Clock) -> None:
    """While a clean writes its segment, another thread appends without waiting."""
    log = manager.get_log(*TP)
    for n in range(20):
        _write(log, [(b"a", b"%d" % n)], clock)
    appended = threading.Event()

    def append_meanwhile(step: str) -> None:
        if step == "cleaned_written" and not appended.is_set():
            thread = threading.Thread(target=lambda: _write(log, [(b"b", b"1")], clock))
            thread.start()
            thread.join(5)
            if not thread.is_alive():
                appended.set()

    cleaner_for(manager, crash_point=append_meanwhile).clean_log(TP)
    assert appended.is_set() and records_of(log)[-1][1:] == (b"b", b"1")
