"""A follower's truncation of a divergent tail (KIP-101): ``PartitionLog.truncate_to`` and
the leader-epoch cache.

What a follower relies on: after truncating to an offset every later record is gone from
reads, indexes, segments and producer state (a batch cut away is no longer a "duplicate"
of itself), what stays is byte for byte what was there, appends continue at the new end,
and all of it holds across a reopen; the epoch cache answers OffsetForLeaderEpoch the way
KIP-101 says and survives a restart in Kafka's file format.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from storage_support import NOW, append_all, check_log, make_batch

from sparklog.storage.config import LogConfig
from sparklog.storage.leader_epochs import LeaderEpochCache
from sparklog.storage.log import PartitionLog


def _open(directory: Path, segment_bytes: int = 1024) -> PartitionLog:
    return PartitionLog(directory, LogConfig.of({"segment.bytes": segment_bytes}), now_ms=NOW)


@settings(max_examples=30, deadline=None)
@given(counts=st.lists(st.integers(1, 5), min_size=1, max_size=25), data=st.data())
def test_truncate_keeps_exactly_the_prefix(tmp_path_factory: pytest.TempPathFactory,
                                           counts: list[int], data: st.DataObject) -> None:
    directory = tmp_path_factory.mktemp("log")
    log = _open(directory)
    stored = append_all(log, [make_batch(c) for c in counts])
    cut = data.draw(st.integers(0, len(stored)))
    offset = stored[cut].base_offset if cut < len(stored) else log.log_end_offset
    log.truncate_to(offset)
    assert log.log_end_offset == offset
    check_log(log, stored[:cut])
    more = append_all(log, [make_batch(2)])
    assert more[0].base_offset == offset
    log.close(NOW)
    reopened = _open(directory)
    check_log(reopened, stored[:cut] + more)
    reopened.close(NOW)


def test_a_truncated_idempotent_batch_is_appended_again(tmp_path: Path) -> None:
    log = _open(tmp_path, segment_bytes=1 << 20)
    first = make_batch(2, producer_id=7, producer_epoch=0, base_sequence=0)
    second = make_batch(2, producer_id=7, producer_epoch=0, base_sequence=2)
    log.append(first, now_ms=NOW)
    log.append(second, now_ms=NOW)
    assert log.append(second, now_ms=NOW).duplicate
    log.truncate_to(2)
    info = log.append(second, now_ms=NOW)  # the new leader's copy of the cut batch
    assert (info.duplicate, info.base_offset) == (False, 2)
    log.close(NOW)


def test_leader_epoch_cache(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    assert cache.end_offset(0, 10) == (-1, -1)
    cache.assign(0, 0)
    cache.assign(0, 5)  # the same epoch again: no new entry
    cache.assign(2, 40)
    cache.assign(5, 70)
    assert cache.end_offset(0, 100) == (0, 40)
    assert cache.end_offset(1, 100) == (0, 40)  # an epoch this log never had: the one before
    assert cache.end_offset(2, 100) == (2, 70)
    assert cache.end_offset(9, 100) == (5, 100)  # the latest epoch ends at the log end
    cache.truncate_from_end(50)
    assert cache.entries == [(0, 0), (2, 40)]
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n2 40\n"
    assert LeaderEpochCache(tmp_path).entries == [(0, 0), (2, 40)]
