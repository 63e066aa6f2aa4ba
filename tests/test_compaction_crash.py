"""Crashes during a clean: at every step of the swap protocol, then recovery by reopening.

A clean is first run to the end with a recording crash point, which lists the steps and the
log's contents after each group swap. Then, for every step, a fresh copy of the data directory
is cleaned with a crash point that raises ``SimulatedCrash`` (a BaseException, so no cleanup
handler runs) at that step; the directory is copied as a crash leaves it and reopened through
LogManager. The reopened log must be consistent (CRC-valid batches, strictly increasing
offsets, contiguous segments, right indexes, no ``.cleaned``/``.swap``/``.deleted`` files
left) and complete: its records equal the state before or after the group whose swap the
crash interrupted (each group swap is atomic; a clean of several groups can stop between
two). Cleaning the recovered log again gives exactly the uninterrupted result.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from compaction_support import TP, cleaner_for, compacted_manager, records_of
from storage_support import Clock, check_indexes

from sparklog.record.records import build_batch
from sparklog.storage.log import PartitionLog
from sparklog.storage.log_manager import LogManager

Records = list[tuple[int, bytes | None, bytes | None]]


class SimulatedCrash(BaseException):
    """Raised by the crash point; not an Exception, so the cleaner's cleanup does not run."""


def _write_round(log: PartitionLog, clock: Clock, start: int, count: int) -> None:
    for n in range(start, start + count):
        key = b"key-%d" % (n % 7)
        value = None if n % 5 == 0 else b"value-%d" % n
        log.append(build_batch([(key, value, (), clock.ms), (b"other-%d" % (n % 3), b"x", (),
                                                            clock.ms)], codec=n % 5),
                   now_ms=clock.ms)


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, Clock]:
    """A closed data directory whose next clean rewrites several groups of merged segments,
    with tombstones both fresh and past their horizon."""
    clock = Clock()
    manager = compacted_manager(tmp_path / "source", clock)
    log = manager.get_log(*TP)
    _write_round(log, clock, 0, 16)
    cleaner_for(manager).clean_log(TP)
    clock.advance(2000)  # the tombstones kept by that clean are now past their horizon
    _write_round(log, clock, 16, 10)
    manager.close()
    return tmp_path / "source", clock


def _reopen_after_crash(data_dir: Path, destination: Path, clock: Clock) -> LogManager:
    """Copy the directory as the crash left it (the crashed objects stay unused) and open it."""
    shutil.copytree(data_dir, destination)
    manager = LogManager(destination, clock=clock)
    assert not manager.clean_start
    return manager


def _check_consistent(log: PartitionLog) -> Records:
    records = records_of(log)
    for segment, following in zip(log.segments, log.segments[1:], strict=False):
        assert segment.next_offset == following.base_offset
    for segment in log.segments:
        check_indexes(segment)
    leftovers = [p.name for p in log.directory.iterdir()
                 if p.suffix in (".cleaned", ".swap", ".deleted")]
    assert not leftovers
    return records


def _dry_run(source: Path, tmp_path: Path, clock: Clock) -> tuple[list[str], list[Records]]:
    """The clean's steps, and the records before it and after each group swap."""
    data_dir = tmp_path / "dry"
    shutil.copytree(source, data_dir)
    manager = LogManager(data_dir, clock=clock)
    log = manager.get_log(*TP)
    steps: list[str] = []
    states = [records_of(log)]

    def record(step: str) -> None:
        steps.append(step)
        if step == "swap_done":
            states.append(records_of(log))

    cleaner_for(manager, crash_point=record).clean_log(TP)
    manager.close()
    return steps, states


def _crash_at(source: Path, work: Path, clock: Clock, index: int) -> Path:
    """Clean a copy of ``source`` with a crash at step ``index``; return the crashed dir."""
    data_dir = work / "crashed"
    shutil.copytree(source, data_dir)
    manager = LogManager(data_dir, clock=clock)
    calls = iter(range(10**6))

    def crash(step: str) -> None:
        if next(calls) == index:
            raise SimulatedCrash(step)

    with pytest.raises(SimulatedCrash):
        cleaner_for(manager, crash_point=crash).clean_log(TP)
    return data_dir


def test_crash_at_every_step_of_a_clean(source: tuple[Path, Clock], tmp_path: Path) -> None:
    source_dir, clock = source
    steps, states = _dry_run(source_dir, tmp_path, clock)
    groups = steps.count("swap_done")
    assert groups >= 2 and steps.count("old_deleted") > groups  # several groups, merges
    assert states[0] != states[-1]
    for index, step in enumerate(steps):
        work = tmp_path / f"step-{index}"
        crashed = _crash_at(source_dir, work, clock, index)
        manager = _reopen_after_crash(crashed, work / "recovered", clock)
        log = manager.get_log(*TP)
        swapped = steps[:index].count("swap_done")  # groups whose swap completed before
        allowed = states[swapped : swapped + 2]
        assert _check_consistent(log) in allowed, f"crash at step {index} ({step})"
        cleaner_for(manager).clean_log(TP)
        assert _check_consistent(log) == states[-1], f"re-clean after step {index} ({step})"
        manager.close()


def test_recovery_of_swaps_cut_between_file_renames(source: tuple[Path, Clock],
                                                    tmp_path: Path) -> None:
    """States no step boundary shows: the indexes renamed ``.swap`` but the log still
    ``.cleaned`` (not committed: the old segments stay), and the indexes already renamed to
    their final names while the log is still ``.swap`` (committed: the swap completes)."""
    source_dir, clock = source
    steps, states = _dry_run(source_dir, tmp_path, clock)

    crashed = _crash_at(source_dir, tmp_path / "uncommitted", clock,
                        steps.index("cleaned_written"))
    partition = next(p for p in crashed.iterdir() if p.is_dir())
    for path in partition.glob("*index.cleaned"):
        path.rename(path.with_suffix(".swap"))
    manager = _reopen_after_crash(crashed, tmp_path / "uncommitted" / "recovered", clock)
    assert _check_consistent(manager.get_log(*TP)) == states[0]
    manager.close()

    last_old = steps.index("swap_done") - 1  # the last old segment renamed .deleted
    crashed = _crash_at(source_dir, tmp_path / "committed", clock, last_old)
    partition = next(p for p in crashed.iterdir() if p.is_dir())
    for path in partition.glob("*index.swap"):
        path.rename(path.with_suffix(""))
    assert list(partition.glob("*.log.swap"))
    manager = _reopen_after_crash(crashed, tmp_path / "committed" / "recovered", clock)
    assert _check_consistent(manager.get_log(*TP)) == states[1]
    manager.close()
