"""Transactions administered over the Kafka protocol: describe, list, end on a producer's
behalf, abort by transactional id, abort markers, a partition's active producers.

These are what Kafka's admin client and ``kafka-transactions.sh`` do, and what a two-phase
commit needs that confluent-kafka does not offer: a transaction begun by one producer (a
Spark task) committed or aborted by another process (the driver) with EndTxn, given the
producer id and epoch the first producer had (as Flink's Kafka sink resumes transactions).

Invariants:
- Every function talks to the broker that must answer (the transactional id's coordinator,
  each broker for ListTransactions, a partition's leader for WriteTxnMarkers and, unless a
  broker is named, DescribeProducers) through
  ``KafkaClient``, so coordinator moves and loading coordinators are retried until the
  client's deadline.
- A Kafka error that is not retriable raises ``TransactionError`` carrying the code, its
  message naming the transactional id (or partition) and the error.
- ``end_transaction`` is safe to repeat: ending a transaction the same way twice, with the
  same producer id and epoch, succeeds (Kafka answers a retried EndTxn with no error).
- ``abort_by_id`` returns only when the id's open transaction, if any, is aborted (its
  coordinator answers CONCURRENT_TRANSACTIONS, retried, until then) and its producer fenced.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from sparklog.client.cluster import TopicPartition
from sparklog.client.errors import KafkaClientError
from sparklog.client.kafka import KafkaClient
from sparklog.errors import ErrorCode, error_name
from sparklog.protocol.versions import ApiKey, CoordinatorType

ONGOING = "Ongoing"
"""Kafka's name of the state of an open transaction."""
FENCING_TIMEOUT_MS = 60_000
"""The transaction timeout the fencing InitProducerId of ``abort_by_id`` asks for."""


class TransactionError(KafkaClientError):
    """A transaction request failed for good with a Kafka error."""

    def __init__(self, what: str, code: int) -> None:
        super().__init__(f"{what}: {error_name(code)}")
        self.code = code


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """DescribeTransactions' view of a transactional id at its coordinator."""

    transactional_id: str
    coordinator: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int
    """When the open transaction began (epoch ms), -1 when none is open."""
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One ListTransactions entry: an id, the broker coordinating it, its producer, state."""

    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class ProducerListing:
    """One DescribeProducers entry: a producer active in a partition (Kafka's
    ``ProducerState``; -1 where Kafka's tool shows an absent value)."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_sequence: int
    last_timestamp: int
    current_txn_start_offset: int


def _check(code: int, what: str) -> None:
    if code != ErrorCode.NONE:
        raise TransactionError(what, code)


def describe_transaction(client: KafkaClient, transactional_id: str) -> TransactionDescription:
    """The id's state, producer and partitions (TRANSACTIONAL_ID_NOT_FOUND if unknown)."""
    answer = client.coordinator_request(
        transactional_id, CoordinatorType.TRANSACTION, ApiKey.DESCRIBE_TRANSACTIONS,
        {"transactional_ids": [transactional_id]}, lambda a: a.transaction_states[0].error_code)
    (state,) = answer.transaction_states
    _check(state.error_code, f"transactional id {transactional_id!r}")
    node, _ = client.coordinator(transactional_id, CoordinatorType.TRANSACTION)
    return TransactionDescription(
        transactional_id, node, state.transaction_state, state.producer_id,
        state.producer_epoch, int(state.transaction_timeout.total_seconds() * 1000),
        state.transaction_start_time,  # int ms, as the client codec reads instants
        tuple(TopicPartition(t.topic, p) for t in state.topics for p in t.partitions))


def list_transactions(client: KafkaClient, states: Iterable[str] = (),
                      producer_ids: Iterable[int] = ()) -> list[TransactionListing]:
    """Every transactional id the brokers coordinate (each broker answers for its own),
    optionally only those in ``states`` or of ``producer_ids``."""
    body = {"state_filters": list(states), "producer_id_filters": list(producer_ids)}
    found = []
    for node, address in sorted(client.metadata([]).brokers.items()):
        answer = client.broker_request(address, ApiKey.LIST_TRANSACTIONS, body)
        _check(answer.error_code, f"ListTransactions on broker {node}")
        found += [TransactionListing(t.transactional_id, node, t.producer_id,
                                     t.transaction_state) for t in answer.transaction_states]
    return found


def end_transaction(client: KafkaClient, transactional_id: str, producer_id: int,
                    producer_epoch: int, *, commit: bool) -> None:
    """Commit (or abort) the open transaction of ``producer_id`` at ``producer_epoch``, as
    that producer's EndTxn would; PRODUCER_FENCED / INVALID_PRODUCER_EPOCH mean another
    producer of the id (or the coordinator's timeout) has ended it meanwhile."""
    answer = client.coordinator_request(
        transactional_id, CoordinatorType.TRANSACTION, ApiKey.END_TXN,
        {"transactional_id": transactional_id, "producer_id": producer_id,
         "producer_epoch": producer_epoch, "committed": commit}, lambda a: a.error_code)
    _check(answer.error_code, f"{'commit' if commit else 'abort'} of transactional id "
                              f"{transactional_id!r} (producer {producer_id} epoch "
                              f"{producer_epoch})")


def abort_by_id(client: KafkaClient, transactional_id: str) -> tuple[int, int]:
    """Abort the id's open transaction and fence its producer, as a new producer of the id
    does (InitProducerId); returns the (producer id, epoch) now current."""
    answer = client.coordinator_request(
        transactional_id, CoordinatorType.TRANSACTION, ApiKey.INIT_PRODUCER_ID,
        {"transactional_id": transactional_id,
         "transaction_timeout": timedelta(milliseconds=FENCING_TIMEOUT_MS)},
        lambda a: a.error_code)
    _check(answer.error_code, f"transactional id {transactional_id!r}")
    return answer.producer_id, answer.producer_epoch


def write_abort_marker(client: KafkaClient, tp: TopicPartition, producer_id: int,
                       producer_epoch: int, coordinator_epoch: int) -> None:
    """Write an ABORT marker for ``producer_id`` into ``tp`` (WriteTxnMarkers to its
    leader): ends a hanging transaction no coordinator knows of."""
    answer = client.leader_request(tp, ApiKey.WRITE_TXN_MARKERS, {
        "markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch,
                     "transaction_result": False, "coordinator_epoch": coordinator_epoch,
                     "topics": [{"name": tp.topic, "partition_indexes": [tp.partition]}]}]})
    (result,) = answer.markers
    _check(result.topics[0].partitions[0].error_code, f"{tp.topic}-{tp.partition}")


def describe_producers(client: KafkaClient, tp: TopicPartition,
                       broker_id: int | None = None) -> list[ProducerListing]:
    """The producers active in ``tp`` as its leader (or broker ``broker_id``'s replica)
    knows them."""
    body = {"topics": [{"name": tp.topic, "partition_indexes": [tp.partition]}]}
    if broker_id is None:
        answer = client.leader_request(tp, ApiKey.DESCRIBE_PRODUCERS, body)
    else:
        brokers = client.metadata([]).brokers
        if broker_id not in brokers:
            raise TransactionError(f"broker {broker_id}", ErrorCode.BROKER_NOT_AVAILABLE)
        answer = client.broker_request(brokers[broker_id], ApiKey.DESCRIBE_PRODUCERS, body)
    (partition,) = answer.topics[0].partitions
    _check(partition.error_code, f"{tp.topic}-{tp.partition}")
    return [ProducerListing(p.producer_id, p.producer_epoch, p.coordinator_epoch,
                            p.last_sequence, p.last_timestamp, p.current_txn_start_offset)
            for p in partition.active_producers]
