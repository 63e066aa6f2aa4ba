"""A partition's leader bookkeeping (``broker/replication/partition.Partition``) against a model.

What a user relies on: a consumer never reads past what every in-sync replica has (the high
watermark is the smallest log end offset over the ISR and never moves back), acks=all is
answered only once the high watermark passed the batch (NOT_ENOUGH_REPLICAS before an append
to a too small ISR, NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank meanwhile, and
NOT_LEADER_OR_FOLLOWER when leadership went), and a leader alone in its ISR (a single node)
answers at once, its high watermark its log end.
"""

from __future__ import annotations

import asyncio
import tempfile
from inspect import isawaitable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from storage_support import NOW, make_batch

from sparklog.broker.replication.partition import Partition
from sparklog.cluster.layout import PartitionState
from sparklog.errors import ErrorCode, KafkaError
from sparklog.storage.config import LogConfig
from sparklog.storage.log import PartitionLog

ME, F1, F2 = 0, 1, 2


def _leader(directory: Path, isr: tuple[int, ...], replicas: tuple[int, ...] = (ME, F1, F2),
            min_isr: int = 1) -> tuple[Partition, list[tuple[str, int]]]:
    woken: list[tuple[str, int]] = []
    partition = Partition("t", 0, ME, woken.append, replicas=replicas,
                          state=PartitionState(ME, 3, isr, 1, 0))
    partition.attach(PartitionLog(directory, LogConfig.of({"min.insync.replicas": min_isr}),
                                  now_ms=NOW))
    partition.make_leader(NOW)
    return partition, woken


def _run(coroutine: object) -> object:
    return asyncio.run(coroutine)  # type: ignore[arg-type]


async def _waiting_append(partition: Partition) -> asyncio.Future[object]:
    """An acks=all append whose answer waits for the followers (started, not answered)."""
    acknowledged = partition.append_records_to_leader(make_batch(), -1, NOW, 5000)
    assert isawaitable(acknowledged)
    waiting = asyncio.ensure_future(acknowledged)
    await asyncio.sleep(0)
    return waiting


def test_a_leader_alone_in_its_isr_answers_acks_all_at_once(tmp_path: Path) -> None:
    partition, woken = _leader(tmp_path / "t-0", (ME,), replicas=(ME,), min_isr=2)
    info = partition.append_records_to_leader(make_batch(3), -1, NOW, 1000)
    assert not isawaitable(info)
    assert partition.high_watermark == partition.log.log_end_offset == 3
    assert woken  # a waiting fetch wakes
    assert partition.min_insync_replicas == 1  # capped at the replication factor


def test_acks_all_waits_for_the_followers_and_answers_once_they_have_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition, _ = _leader(tmp_path / "t-0", (ME, F1, F2), min_isr=2)
        acknowledged = partition.append_records_to_leader(make_batch(2), -1, NOW, 5000)
        assert isawaitable(acknowledged)
        waiting = asyncio.ensure_future(acknowledged)
        await asyncio.sleep(0)
        assert partition.update_follower_fetch_state(F1, 2, NOW, True) is None
        await asyncio.sleep(0)
        assert not waiting.done() and partition.high_watermark == 0  # F2 lacks it
        partition.update_follower_fetch_state(F2, 2, NOW, True)
        assert (await waiting).last_offset == 1 and partition.high_watermark == 2

    _run(scenario())


def test_acks_all_refused_before_the_append_and_after_an_isr_shrink(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition, _ = _leader(tmp_path / "t-0", (ME,), min_isr=2)
        with pytest.raises(KafkaError) as refused:
            partition.append_records_to_leader(make_batch(), -1, NOW, 1000)
        assert refused.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert partition.log.log_end_offset == 0  # nothing appended

        partition.state = PartitionState(ME, 3, (ME, F1), 1, 0)
        waiting = await _waiting_append(partition)
        partition.state = PartitionState(ME, 3, (ME,), 1, 1)  # F1 dropped out of the ISR
        partition.maybe_increment_leader_hw()
        with pytest.raises(KafkaError) as after:
            await waiting
        assert after.value.code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND

    _run(scenario())


def test_losing_leadership_answers_waiting_produces(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition, _ = _leader(tmp_path / "t-0", (ME, F1))
        waiting = await _waiting_append(partition)
        partition.state = PartitionState(F1, 4, (ME, F1), 1, 1)
        partition.make_follower()
        with pytest.raises(KafkaError) as lost:
            await waiting
        assert lost.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER

    _run(scenario())


def test_a_lagging_follower_is_a_laggard_and_a_caught_up_one_joins_again(tmp_path: Path) -> None:
    partition, _ = _leader(tmp_path / "t-0", (ME, F1))
    partition.append_records_to_leader(make_batch(4), 1, NOW, 1000)
    assert partition.laggards(NOW + 100, 1000) == set()
    assert partition.laggards(NOW + 1001, 1000) == {F1}
    partition.update_follower_fetch_state(F1, 4, NOW + 1001, True)
    assert partition.laggards(NOW + 1500, 1000) == set()
    assert partition.update_follower_fetch_state(F2, 4, NOW, True) == (ME, F1, F2)
    assert partition.update_follower_fetch_state(F2, 4, NOW, False) is None  # leaving


Step = tuple[str, int, int]
STEPS = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 3), st.just(0)),
    st.tuples(st.just("fetch"), st.sampled_from([F1, F2]), st.integers(0, 12)),
    st.tuples(st.just("isr"), st.just(0), st.integers(0, 3)),
), max_size=30)


@given(STEPS)
def test_the_high_watermark_is_the_smallest_isr_log_end_and_never_moves_back(
        steps: list[Step]) -> None:
    choices = [(), (F1,), (F2,), (F1, F2)]
    with tempfile.TemporaryDirectory() as directory:
        partition, _ = _leader(Path(directory) / "t-0", (ME, F1, F2))
        fetched = {F1: 0, F2: 0}  # the model: each follower's log end
        isr: tuple[int, ...] = (ME, F1, F2)
        high = 0
        for kind, a, b in steps:
            end = partition.log.log_end_offset
            if kind == "append":
                partition.append_records_to_leader(make_batch(a), 1, NOW, 1000)
            elif kind == "fetch":
                fetched[a] = min(b, end)  # a follower fetches at most to the leader's end
                partition.update_follower_fetch_state(a, fetched[a], NOW, True)
            else:
                isr = (ME, *choices[b])
                partition.state = PartitionState(ME, 3, isr, 1, 0)
                partition.maybe_increment_leader_hw()
            model = min([partition.log.log_end_offset, *(fetched[f] for f in isr if f != ME)])
            high = max(high, model)
            assert partition.high_watermark == high
