"""Restarts: crash recovery of torn and corrupt tails, index rebuilds, clean shutdown, producers.

A crash is simulated by copying a live data directory (no clean-shutdown marker, index writes
still buffered), then damaging the copy: the last segment cut at every byte of its last batch,
or bytes of a batch flipped. Reopened through LogManager, the log must keep exactly the batches
before the damage and continue appending after them. Also: missing or garbled index files are
rebuilt, a clean shutdown keeps everything without a rebuild, and idempotent-producer state
(duplicates, sequence and epoch checks) survives restarts.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from storage_support import (
    NOW,
    T0,
    TOPIC,
    Clock,
    Stored,
    append_all,
    check_log,
    crash_copy,
    make_batch,
    restart,
)

from sparklog.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from sparklog.storage.log import PartitionLog
from sparklog.storage.log_manager import CLEAN_SHUTDOWN_FILE, LogManager
from sparklog.storage.segment import segment_name

CONFIGS = {"segment.bytes": 700, "index.interval.bytes": 100}


@dataclass
class Source:
    """A live data directory with one partition of several segments, and what it holds."""

    manager: LogManager
    stored: list[Stored]

    @property
    def log(self) -> PartitionLog:
        return self.manager.get_log(TOPIC, 0)


def _segment_file(data_dir: Path, base_offset: int, suffix: str = ".log") -> Path:
    return data_dir / f"{TOPIC}-0" / (segment_name(base_offset) + suffix)


@pytest.fixture
def source(tmp_path: Path) -> Iterator[Source]:
    manager = LogManager(tmp_path / "source", clock=Clock())
    manager.create_topic(TOPIC, 1, CONFIGS)
    log = manager.get_log(TOPIC, 0)
    stored = append_all(log, [make_batch(i % 3 + 1, value_size=20 + 2 * (i % 7),
                                         timestamp=T0 + i) for i in range(22)])
    assert len(log.segments) >= 3
    assert len(list(log.active.iter_headers())) >= 2
    yield Source(manager, stored)
    manager.close()


@contextmanager
def _reopened_after_crash(data_dir: Path) -> Iterator[PartitionLog]:
    manager = LogManager(data_dir, clock=Clock())
    try:
        assert not manager.clean_start
        yield manager.get_log(TOPIC, 0)
    finally:
        manager.close()


def _check_recovered_and_appendable(log: PartitionLog, kept: list[Stored]) -> None:
    """The log holds exactly ``kept`` and the next append lands right after it."""
    check_log(log, kept)
    extra = make_batch(2, timestamp=T0 + 100)
    info = log.append(extra, now_ms=NOW)
    assert info.base_offset == kept[-1].next_offset
    check_log(log, [*kept, Stored(info.base_offset, extra)])


def _crash_copy_with_recovery_point(source: Source, destination: Path, checkpointed: bool) -> Path:
    """A crash copy whose recovery point is the last roll (checkpointed) or absent (0)."""
    if checkpointed:
        source.log.await_rolled_flushes()  # rolls are fsynced in the background
        source.manager.run_maintenance()
        assert source.log.recovery_point == source.log.active.base_offset
    return crash_copy(source.manager, destination)


@pytest.mark.parametrize("checkpointed", [False, True], ids=["no-checkpoint", "checkpoint"])
def test_torn_tail_is_cut_at_every_byte_of_the_last_batch(
    source: Source, tmp_path: Path, checkpointed: bool
) -> None:
    last = source.stored[-1]
    active_base = source.log.active.base_offset
    start = source.log.active.size - len(last.data)
    for cut in range(start, start + len(last.data)):
        data_dir = _crash_copy_with_recovery_point(source, tmp_path / f"cut-{cut}", checkpointed)
        os.truncate(_segment_file(data_dir, active_base), cut)
        with _reopened_after_crash(data_dir) as log:
            _check_recovered_and_appendable(log, source.stored[:-1])


# Bytes of a batch covered by its checks: batchLength, magic, CRC and everything after it.
# (baseOffset and partitionLeaderEpoch lie outside the CRC, as in Kafka.)
FLIP_POSITIONS = (8, 10, 11, 16, 17, 20, 21, 22, 24, 30, 35, 42, 43, 50, 51, 53, 56, 57, 60, 61)


@pytest.mark.parametrize("checkpointed", [False, True], ids=["no-checkpoint", "checkpoint"])
def test_corrupt_last_batch_is_dropped(source: Source, tmp_path: Path, checkpointed: bool) -> None:
    last = source.stored[-1]
    active_base = source.log.active.base_offset
    start = source.log.active.size - len(last.data)
    for flip in (*FLIP_POSITIONS, len(last.data) // 2, len(last.data) - 1):
        data_dir = _crash_copy_with_recovery_point(source, tmp_path / f"flip-{flip}",
                                                   checkpointed)
        _flip_byte(_segment_file(data_dir, active_base), start + flip)
        with _reopened_after_crash(data_dir) as log:
            _check_recovered_and_appendable(log, source.stored[:-1])


def test_corrupt_batch_in_an_older_segment_drops_everything_after_it(
    source: Source, tmp_path: Path
) -> None:
    second = source.log.segments[1]
    bad = next(i for i, s in enumerate(source.stored) if s.base_offset == second.base_offset) + 1
    position = len(source.stored[bad - 1].data)
    data_dir = crash_copy(source.manager, tmp_path / "copy")
    _flip_byte(_segment_file(data_dir, second.base_offset), position + 30)
    with _reopened_after_crash(data_dir) as log:
        assert [s.base_offset for s in log.segments] == [0, second.base_offset]
        later = {segment_name(s.base_offset) for s in source.log.segments[2:]}
        assert not {p.name.split(".")[0] for p in log.directory.iterdir()} & later
        _check_recovered_and_appendable(log, source.stored[:bad])


def test_recovery_with_a_smaller_segment_index_bytes(source: Source, tmp_path: Path) -> None:
    source.manager.set_topic_config(TOPIC, {**CONFIGS, "segment.index.bytes": 16})
    data_dir = crash_copy(source.manager, tmp_path / "copy")
    with _reopened_after_crash(data_dir) as log:
        assert max(s.offset_index.entries for s in log.segments) == 2
        _check_recovered_and_appendable(log, source.stored)


def _flip_byte(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0xFF]))


def _damage(path: Path, damage: str) -> None:
    rng = random.Random(damage)
    size = path.stat().st_size
    if damage == "missing":
        path.unlink()
    elif damage == "zeroed":
        path.write_bytes(bytes(size))
    elif damage == "random":
        path.write_bytes(rng.randbytes(size))
    else:  # "torn": a few garbage bytes after the entries
        path.write_bytes(path.read_bytes() + rng.randbytes(5))


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
@pytest.mark.parametrize("damage", ["missing", "zeroed", "random", "torn"])
@pytest.mark.parametrize("shutdown", ["clean", "checkpointed-crash", "crash"])
def test_damaged_index_is_rebuilt(
    source: Source, tmp_path: Path, suffix: str, damage: str, shutdown: str
) -> None:
    first = source.log.segments[0]
    assert first.offset_index.entries >= 2 and first.time_index.entries >= 2
    data_dir = _crash_copy_with_recovery_point(source, tmp_path / "copy",
                                               shutdown == "checkpointed-crash")
    if shutdown == "clean":
        LogManager(data_dir, clock=Clock()).close()
    _damage(_segment_file(data_dir, 0, suffix), damage)
    manager = LogManager(data_dir, clock=Clock())
    assert manager.clean_start == (shutdown == "clean")
    log = manager.get_log(TOPIC, 0)
    rebuilt = log.segments[0]
    assert (rebuilt.offset_index.entries, rebuilt.time_index.entries) == (
        first.offset_index.entries, first.time_index.entries)
    check_log(log, source.stored)
    manager.close()


def test_clean_shutdown_keeps_offsets_configs_log_start_and_indexes(source: Source) -> None:
    log = source.log
    low = source.stored[5].base_offset + 1
    log.delete_records(low)
    source.manager.run_maintenance()
    inactive_indexes = [p for s in log.segments[:-1]
                        for p in (s.offset_index.path, s.time_index.path)]
    end, segment_bases = log.log_end_offset, [s.base_offset for s in log.segments]
    source.manager.close()
    data_dir = source.manager.data_dir
    assert (data_dir / CLEAN_SHUTDOWN_FILE).exists()
    assert not list(data_dir.glob("*/*.deleted"))
    contents = {p: p.read_bytes() for p in inactive_indexes}
    for path in inactive_indexes:  # an old mtime: a rebuild would be visible
        os.utime(path, ns=(10**18, 10**18))

    source.manager = manager = LogManager(data_dir, clock=Clock())
    assert manager.clean_start and not (data_dir / CLEAN_SHUTDOWN_FILE).exists()
    log = manager.get_log(TOPIC, 0)
    assert (log.log_start_offset, log.log_end_offset) == (low, end)
    assert [s.base_offset for s in log.segments] == segment_bases
    assert {k: log.config.get(k) for k in CONFIGS} == CONFIGS
    for path, content in contents.items():
        assert path.read_bytes() == content
        assert path.stat().st_mtime_ns == 10**18
    check_log(log, source.stored[5:])


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "crash"])
def test_idempotent_producer_state_survives_restarts(
    source: Source, tmp_path: Path, clean: bool
) -> None:
    def producer_batch(count: int, sequence: int, epoch: int = 0) -> bytes:
        return make_batch(count, value_size=200, producer_id=7, producer_epoch=epoch,
                          base_sequence=sequence)

    sent = [producer_batch(3, 0), producer_batch(2, 3), producer_batch(4, 5)]
    originals = append_all(source.log, sent[:2])
    source.log.roll(NOW)  # the state so far goes into a snapshot; the rest is replayed
    append_all(source.log, [make_batch(2)])
    originals += append_all(source.log, sent[2:])
    source.manager = restart(source.manager, clean=clean, crash_dir=tmp_path / "restart-1")
    log = source.log
    end = log.log_end_offset
    for batch, original in zip(sent, originals, strict=True):
        info = log.append(batch, now_ms=NOW)
        assert info.duplicate
        assert (info.base_offset, info.last_offset) == (original.base_offset,
                                                         original.next_offset - 1)
    assert log.log_end_offset == end
    with pytest.raises(OutOfOrderSequenceError):
        log.append(producer_batch(1, 10), now_ms=NOW)
    assert not log.append(producer_batch(1, 9), now_ms=NOW).duplicate
    assert not log.append(producer_batch(1, 0, epoch=1), now_ms=NOW).duplicate
    end = log.log_end_offset

    source.manager = restart(source.manager, clean=clean, crash_dir=tmp_path / "restart-2")
    log = source.log
    with pytest.raises(InvalidProducerEpochError):
        log.append(producer_batch(1, 10), now_ms=NOW)
    with pytest.raises(OutOfOrderSequenceError):
        log.append(producer_batch(1, 2, epoch=1), now_ms=NOW)
    assert log.append(producer_batch(1, 0, epoch=1), now_ms=NOW).duplicate
    assert log.log_end_offset == end


def test_local_partitions_survive_a_restart(tmp_path: Path) -> None:
    """In a cluster a broker holds logs of some partitions only: which ones is kept across
    restarts, and a leftover directory of a partition held elsewhere is removed."""
    data_dir = tmp_path / "local"
    manager = LogManager(data_dir, clock=Clock())
    manager.create_topic("placed", 3, local=[1])
    manager.open_partition("placed", 2)
    manager.get_log("placed", 2).append(make_batch(), now_ms=NOW)
    manager.delete_partition("placed", 1)
    assert sorted(p.name for p in data_dir.glob("placed-?")) == ["placed-2"]
    manager.close()  # removes the deleted log now, not after file.delete.delay.ms
    assert sorted(p.name for p in data_dir.glob("placed-*")) == ["placed-2"]
    (data_dir / "placed-0").mkdir()  # say, a crash while a replica moved away
    reopened = LogManager(data_dir, clock=Clock())
    try:
        assert reopened.topics["placed"].local == [2]
        assert reopened.topics["placed"].partitions == 3
        assert sorted(tp for tp in reopened.logs) == [("placed", 2)]
        assert reopened.get_log("placed", 2).log_end_offset == 1
        assert not (data_dir / "placed-0").exists()
    finally:
        reopened.close()


def test_topic_ids_are_kept_and_found_across_restarts(tmp_path: Path) -> None:
    """A topic's id never changes while it lives, finds it after a restart, and a topic
    re-created under the same name is a new id (the old one finds nothing)."""
    data_dir = tmp_path / "ids"
    manager = LogManager(data_dir, clock=Clock())
    first = manager.create_topic("orders", 1).topic_id
    manager.create_topic("payments", 1)
    manager.close()
    reopened = LogManager(data_dir, clock=Clock())
    try:
        found = reopened.topic_by_id(first)
        assert found is not None and found.name == "orders"
        reopened.delete_topic("orders")
        assert reopened.topic_by_id(first) is None
        again = reopened.create_topic("orders", 1).topic_id
        assert again != first
        assert reopened.topic_by_id(again) is reopened.topics["orders"]
    finally:
        reopened.close()


def test_a_second_close_leaves_other_data_directories_alone(tmp_path: Path) -> None:
    first = LogManager(tmp_path / "first", clock=Clock())
    first.create_topic(TOPIC, 1, CONFIGS)
    append_all(first.get_log(TOPIC, 0), [make_batch(2) for _ in range(5)])
    first.close()
    second = LogManager(tmp_path / "second", clock=Clock())  # takes the numbers first freed
    second.create_topic(TOPIC, 1, CONFIGS)
    first.close()  # closed descriptors stay closed: the second's lock and files are its own
    stored = append_all(second.get_log(TOPIC, 0), [make_batch(3)])
    check_log(second.get_log(TOPIC, 0), stored)
    second.close()
    assert (tmp_path / "second" / CLEAN_SHUTDOWN_FILE).exists()


def _snapshots(log: PartitionLog) -> dict[str, int]:
    """The producer snapshots in the log's directory, by name, with their modification
    times (a crash copy keeps them; a rewrite makes a new file)."""
    return {p.name: p.stat().st_mtime_ns for p in log.directory.glob("*.snapshot")}


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "crash"])
def test_a_snapshot_at_the_log_end_is_not_written_again(
        source: Source, tmp_path: Path, clean: bool) -> None:
    """A restart with nothing appended leaves the producer snapshot as it was (100,000
    partitions each rewriting theirs made a clean shutdown take half a minute), and the
    producer's state is still the one it holds."""
    batch = make_batch(2, producer_id=7, producer_epoch=0, base_sequence=0)
    source.log.append(batch, now_ms=NOW)
    source.manager = restart(source.manager, clean=True, crash_dir=tmp_path / "first")
    for path in source.log.directory.glob("*.snapshot"):
        os.utime(path, ns=(10**18, 10**18))  # long ago: a rewrite would be newer
    written = _snapshots(source.log)
    assert written, "a clean shutdown snapshots a log with producer state"
    source.manager = restart(source.manager, clean=clean, crash_dir=tmp_path / "second")
    source.manager = restart(source.manager, clean=True, crash_dir=tmp_path / "third")
    assert _snapshots(source.log) == written
    assert source.log.append(batch, now_ms=NOW).duplicate


def test_a_log_truncated_and_written_again_to_the_same_end_snapshots_its_new_state(
        source: Source, tmp_path: Path) -> None:
    """The snapshot at a log end holds the state of the batches written then: after a
    truncation and other batches up to the same end, a clean shutdown writes the new one."""
    log = source.log
    truncate_at = log.log_end_offset
    first = make_batch(2, producer_id=7, producer_epoch=0, base_sequence=0)
    log.append(first, now_ms=NOW)
    source.manager = restart(source.manager, clean=True, crash_dir=tmp_path / "first")
    log = source.log
    log.truncate_to(truncate_at)
    second = make_batch(2, producer_id=8, producer_epoch=0, base_sequence=0)
    log.append(second, now_ms=NOW)
    source.manager = restart(source.manager, clean=True, crash_dir=tmp_path / "second")
    log = source.log
    assert log.append(second, now_ms=NOW).duplicate
    assert not log.append(first, now_ms=NOW).duplicate
