"""The transaction coordinator without the network, on its narrow inputs (an in-memory
``__transaction_state``, a replication wait and a marker writer the test controls): how it
behaves when its partition moves or the ISR lags, as it does in a cluster.

What a user relies on: a coordinator that loses its partition while writing markers stops
(its caller is told NOT_COORDINATOR) and the next one, in a higher coordinator epoch,
finishes the transaction from the replicated PrepareCommit; a state change the ISR did not
take is not applied (COORDINATOR_NOT_AVAILABLE, the client retries) and the id's other
requests wait (CONCURRENT_TRANSACTIONS) while one is being replicated; a new producer of an
id with an open transaction is answered once the abort is decided, not once its markers
are written.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from coordinator_support import MemoryTopic

from sparklog.coordinator.txn_coordinator import TransactionCoordinator, TxnConfig
from sparklog.coordinator.txn_metadata import MAX_EPOCH, TransactionState
from sparklog.errors import ErrorCode

pytestmark = pytest.mark.timeout(60)

E = ErrorCode
S = TransactionState
TID = "payments"
ORDERS = [("orders", 0), ("orders", 1)]


class Inputs:
    """What a coordinator is given, under the test's control."""

    def __init__(self) -> None:
        self.replication = E.NONE
        self.replicating = asyncio.Event()
        self.replicating.set()
        self.markers: list[tuple[list[tuple[str, int]], bool, int]] = []
        self.markers_wanted = asyncio.Event()
        self.markers_may_finish = asyncio.Event()
        self._ids = itertools.count()

    async def replicated(self, partition: int) -> ErrorCode:
        await self.replicating.wait()
        return self.replication

    async def next_producer_id(self) -> int:
        return next(self._ids)

    async def write_markers(self, partitions: list[tuple[str, int]], producer_id: int,
                            producer_epoch: int, commit: bool, coordinator_epoch: int) -> None:
        self.markers.append((partitions, commit, coordinator_epoch))
        self.markers_wanted.set()
        await self.markers_may_finish.wait()


def coordinator(topic: MemoryTopic, inputs: Inputs) -> TransactionCoordinator:
    return TransactionCoordinator(
        TxnConfig(), topic, inputs.replicated, inputs.next_producer_id, lambda t: 2,
        lambda group: ("__consumer_offsets", 0), inputs.write_markers, lambda: 1000)


def loaded_coordinator() -> TransactionCoordinator:
    """A started coordinator of the one ``__transaction_state`` partition (on the loop)."""
    txn = coordinator(MemoryTopic(1, "__transaction_state"), Inputs())
    txn.start()
    txn.load(0, 0)
    return txn


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


async def open_transaction(txn: TransactionCoordinator) -> tuple[int, int]:
    started = await txn.init_producer_id(TID, 60000)
    assert started.error == E.NONE
    errors = await txn.add_partitions(TID, started.producer_id, started.producer_epoch, ORDERS)
    assert set(errors.values()) == {E.NONE}
    return started.producer_id, started.producer_epoch


def test_the_next_coordinator_finishes_a_commit_the_first_one_lost() -> None:
    async def test() -> None:
        topic, inputs = MemoryTopic(1, "__transaction_state"), Inputs()
        first = coordinator(topic, inputs)
        first.start()
        assert (await first.init_producer_id(TID, 60000)).error == E.NOT_COORDINATOR
        first.load(0, coordinator_epoch=5)  # this broker became the partition's leader
        pid, epoch = await open_transaction(first)
        ending = asyncio.ensure_future(first.end_txn(TID, pid, epoch, commit=True))
        await inputs.markers_wanted.wait()
        assert inputs.markers == [(ORDERS, True, 5)]
        first.unload(0)  # leadership moved while the markers were being written
        assert (await ending).error == E.NOT_COORDINATOR
        assert (await first.init_producer_id(TID, 60000)).error == E.NOT_COORDINATOR

        inputs.markers_may_finish.set()
        second = coordinator(topic, inputs)  # the new leader, on the replicated records
        second.start()
        second.load(0, coordinator_epoch=6)
        await second.settle()
        assert inputs.markers[-1] == (ORDERS, True, 6)
        assert second.transactions[TID].state is S.COMPLETE_COMMIT
        assert (await second.end_txn(TID, pid, epoch, commit=True)).error == E.NONE  # a retry
        first.stop()
        second.stop()

    run(test)


def test_a_change_the_isr_did_not_take_is_not_applied() -> None:
    async def test() -> None:
        inputs = Inputs()
        txn = coordinator(MemoryTopic(1, "__transaction_state"), inputs)
        txn.start()
        txn.load(0, coordinator_epoch=0)
        started = await txn.init_producer_id(TID, 60000)
        inputs.replication = E.REQUEST_TIMED_OUT
        errors = await txn.add_partitions(TID, started.producer_id, started.producer_epoch,
                                          ORDERS)
        assert set(errors.values()) == {E.COORDINATOR_NOT_AVAILABLE}
        assert txn.transactions[TID].state is S.EMPTY  # as before the request
        inputs.replication = E.NOT_LEADER_OR_FOLLOWER
        assert (await txn.end_txn(TID, started.producer_id, started.producer_epoch,
                                  commit=True)).error == E.INVALID_TXN_STATE
        errors = await txn.add_partitions(TID, started.producer_id, started.producer_epoch,
                                          ORDERS)
        assert set(errors.values()) == {E.NOT_COORDINATOR}
        inputs.replication = E.NONE
        await open_transaction(txn)
        assert txn.transactions[TID].state is S.ONGOING
        txn.stop()

    run(test)


def test_requests_of_an_id_wait_while_its_change_is_replicated() -> None:
    async def test() -> None:
        inputs = Inputs()
        inputs.markers_may_finish.set()
        txn = coordinator(MemoryTopic(1, "__transaction_state"), inputs)
        txn.start()
        txn.load(0, coordinator_epoch=0)
        pid, epoch = await open_transaction(txn)
        inputs.replicating.clear()  # the ISR is slow
        ending = asyncio.ensure_future(txn.end_txn(TID, pid, epoch, commit=True))
        await asyncio.sleep(0.01)
        assert not ending.done()
        assert inputs.markers == []  # nothing written before PrepareCommit is replicated
        assert (await txn.end_txn(TID, pid, epoch, commit=True)).error == E.CONCURRENT_TRANSACTIONS
        assert (await txn.init_producer_id(TID, 60000)).error == E.CONCURRENT_TRANSACTIONS
        inputs.replicating.set()
        assert (await ending).error == E.NONE
        assert txn.transactions[TID].state is S.COMPLETE_COMMIT
        assert inputs.markers == [(ORDERS, True, 0)]
        txn.stop()

    run(test)


def test_a_new_producer_is_answered_before_the_fenced_transactions_markers() -> None:
    async def test() -> None:
        inputs = Inputs()
        txn = coordinator(MemoryTopic(1, "__transaction_state"), inputs)
        txn.start()
        txn.load(0, coordinator_epoch=0)
        pid, epoch = await open_transaction(txn)
        # a dead leader would hold the markers: the new producer is not kept waiting
        assert (await txn.init_producer_id(TID, 60000)).error == E.CONCURRENT_TRANSACTIONS
        await inputs.markers_wanted.wait()
        assert inputs.markers == [(ORDERS, False, 0)]
        assert txn.transactions[TID].state is S.PREPARE_ABORT
        assert (await txn.init_producer_id(TID, 60000)).error == E.CONCURRENT_TRANSACTIONS
        assert (await txn.end_txn(TID, pid, epoch, commit=True)).error == E.PRODUCER_FENCED
        inputs.markers_may_finish.set()
        await txn.settle()
        again = await txn.init_producer_id(TID, 60000)
        assert (again.error, again.producer_id, again.producer_epoch) == (E.NONE, pid, epoch + 2)
        txn.stop()

    run(test)


def test_a_producer_whose_epochs_ran_out_gets_a_new_producer_id_and_its_retry_the_same(
        ) -> None:
    """KIP-360 at the end of the epochs: the next epoch of a producer at 32765 is the last
    handed out (32766); resuming from it rotates to a new producer id at epoch 0, and the
    retry of that request (the old id, its last epoch) gets the same new id again."""
    async def test() -> None:
        txn = loaded_coordinator()
        started = await txn.init_producer_id(TID, 60000)
        txn.transactions[TID].producer_epoch = MAX_EPOCH - 2
        pid = started.producer_id
        last = await txn.init_producer_id(TID, 60000, (pid, MAX_EPOCH - 2))
        assert (last.error, last.producer_id, last.producer_epoch) == (E.NONE, pid,
                                                                       MAX_EPOCH - 1)
        rotated = await txn.init_producer_id(TID, 60000, (pid, MAX_EPOCH - 1))
        assert rotated.error == E.NONE and rotated.producer_epoch == 0
        assert rotated.producer_id != pid
        assert await txn.init_producer_id(TID, 60000, (pid, MAX_EPOCH - 1)) == rotated
        assert (await txn.init_producer_id(TID, 60000, (pid, 5))).error == E.PRODUCER_FENCED
        txn.stop()

    run(test)


def test_a_leaders_verification_adds_nothing_and_answers_per_partition() -> None:
    async def test() -> None:
        txn = loaded_coordinator()
        started = await txn.init_producer_id(TID, 60000)
        pid, epoch = started.producer_id, started.producer_epoch
        assert await txn.add_partitions(TID, pid, epoch, ORDERS[:1]) == {ORDERS[0]: E.NONE}
        assert txn.verify_partitions(TID, pid, epoch, ORDERS) == {
            ORDERS[0]: E.NONE, ORDERS[1]: E.TRANSACTION_ABORTABLE}
        assert txn.transactions[TID].partitions == {ORDERS[0]}
        assert txn.verify_partitions(TID, pid, epoch, [("orders", 9)]) == {
            ("orders", 9): E.UNKNOWN_TOPIC_OR_PARTITION}
        assert txn.verify_partitions(TID, pid + 1, epoch, ORDERS[:1]) == {
            ORDERS[0]: E.INVALID_PRODUCER_ID_MAPPING}
        txn.stop()

    run(test)


def test_a_version_2_end_whose_epochs_ran_out_moves_to_a_new_producer_id_durably() -> None:
    """KIP-890 part 2: a transaction.version 2 end bumps the epoch; at the last epoch the
    markers carry 32767 and the producer goes on under a new producer id at epoch 0. The
    EndTxn's retry (the old id, its epoch) is answered the same, also by the next
    coordinator, which reads the v2 fields from ``__transaction_state``."""
    async def test() -> None:
        topic, inputs = MemoryTopic(1, "__transaction_state"), Inputs()
        inputs.markers_may_finish.set()
        epochs: list[int] = []
        first = coordinator(topic, inputs)
        write = first._write_markers

        async def writing(partitions: list[tuple[str, int]], pid: int, epoch: int,
                          commit: bool, coordinator_epoch: int) -> None:
            epochs.append(epoch)
            await write(partitions, pid, epoch, commit, coordinator_epoch)
        first._write_markers = writing
        first.start()
        first.load(0, 0)
        pid = (await first.init_producer_id(TID, 60000)).producer_id
        first.transactions[TID].producer_epoch = last = MAX_EPOCH - 1
        assert await first.add_partitions(TID, pid, last, ORDERS, 2) == dict.fromkeys(
            ORDERS, E.NONE)
        ended = await first.end_txn(TID, pid, last, commit=True, client_version=2)
        assert ended.error == E.NONE and ended.producer_id != pid
        assert ended.producer_epoch == 0 and epochs == [MAX_EPOCH]
        assert await first.end_txn(TID, pid, last, commit=True, client_version=2) == ended
        first.stop()

        second = coordinator(topic, inputs)
        second.start()
        second.load(0, 1)
        meta = second.transactions[TID]
        assert (meta.client_version, meta.previous_producer_id, meta.producer_id) == (
            2, pid, ended.producer_id)
        assert await second.end_txn(TID, pid, last, commit=True, client_version=2) == ended
        assert (await second.end_txn(TID, pid, last - 1, commit=True, client_version=2)
                ).error == E.INVALID_PRODUCER_ID_MAPPING
        second.stop()

    run(test)
