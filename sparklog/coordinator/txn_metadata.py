"""One transactional id's state in the transaction coordinator (Kafka's ``TransactionMetadata``).

States and the transitions allowed into each (Kafka's ``TransactionState``, with its byte
values as stored in ``__transaction_state``):
- Empty (0) <- Empty, CompleteCommit, CompleteAbort: no transaction open (after
  InitProducerId or a completed one).
- Ongoing (1) <- Empty, Ongoing, CompleteCommit, CompleteAbort: partitions were added.
- PrepareCommit (2) <- Ongoing: EndTxn(commit) is durable; markers are being written.
- PrepareAbort (3) <- Ongoing: EndTxn(abort), a fencing InitProducerId or a timeout.
- CompleteCommit (4) <- PrepareCommit; CompleteAbort (5) <- PrepareAbort: markers written.
- Dead (6): the id expired (its record is a tombstone); PrepareEpochFence (7) is Kafka's
  transient fencing state, read but never written here (fencing bumps the epoch and goes
  to PrepareAbort in one record).

Invariants:
- This module is pure state: no I/O. ``transition`` refuses an illegal move with
  ``IllegalTransition`` (a bug, never a client error).
- ``partitions`` is the set written with the state: the partitions markers go to.
- ``client_version`` is the transaction version the id's client speaks (2: KIP-890 part
  2, learnt from its EndTxn v5+ or a leader's implicit add; its ends bump the epoch);
  ``previous_producer_id`` is the producer id the last transaction ended under when its
  epochs ran out and ``next_producer_id`` the one a prepared transaction moves to then
  (TransactionLogValue v1's tagged fields, written for a version 2 client).
- ``last_producer_id`` / ``last_producer_epoch`` (KIP-360) are what the last InitProducerId
  moved away from, so its retry is answered the same again; as in Kafka they are kept in
  memory only (not in the record): a retry that spans a coordinator move is fenced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from sparklog.coordinator.txn_records import TopicPartition, TxnRecord

MAX_EPOCH = (1 << 15) - 1  # int16
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1


def epoch_exhausted(epoch: int) -> bool:
    """No epoch can follow ``epoch`` (Kafka keeps the last one for fencing)."""
    return epoch >= MAX_EPOCH - 1


class TransactionState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display(self) -> str:
        """Kafka's name, as kafka-transactions.sh and DescribeTransactions show it."""
        return "".join(word.capitalize() for word in self.name.split("_"))


S = TransactionState
_VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
COMPLETING = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})
FINISHED = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


class IllegalTransition(RuntimeError):
    """A state change Kafka's state machine does not allow."""


@dataclass(eq=False)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    last_update_ms: int
    start_ms: int = -1
    partitions: set[TopicPartition] = field(default_factory=set)
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    client_version: int = 0
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID

    def transition(self, state: TransactionState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalTransition(f"transactional id {self.transactional_id}: "
                                    f"{self.state.display} -> {state.display}")
        if state is S.ONGOING and self.state is not S.ONGOING:
            self.start_ms = now_ms
        self.state = state
        self.last_update_ms = now_ms

    def record(self) -> TxnRecord:
        return TxnRecord(self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                         frozenset(self.partitions), self.last_update_ms, self.start_ms,
                         self.previous_producer_id, self.next_producer_id,
                         self.client_version)

    @classmethod
    def from_record(cls, transactional_id: str, record: TxnRecord) -> TransactionMetadata:
        return cls(transactional_id, record.producer_id, record.producer_epoch,
                   record.timeout_ms, TransactionState(record.status), record.last_update_ms,
                   record.start_ms, set(record.partitions),
                   client_version=record.client_version,
                   previous_producer_id=record.previous_producer_id,
                   next_producer_id=record.next_producer_id)
