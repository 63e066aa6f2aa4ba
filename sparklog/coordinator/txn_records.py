"""The records of ``__transaction_state``: one key per transactional id, its latest state as
the value (a tombstone once the id expired), in Kafka's format.

Formats (Kafka's ``TransactionLogKey`` v0 and ``TransactionLogValue`` v0-v1): the key is
int16 version + transactional id; the value is int16 version + producer id int64, producer
epoch int16, transaction timeout int32 (ms), transaction status int8, partitions (nullable
array of topic + partition ids), last update timestamp int64, start timestamp int64. v1
(flexible, KIP-890) adds the tagged fields PreviousProducerId (0), NextProducerId (1) and
ClientTransactionVersion (2); as Kafka's, a transaction of a transaction.version 2 client
is written as v1, any other as v0 (which a broker without them still reads).

Invariants:
- A transactional id's records all live in partition ``abs(hashCode(id)) % partitions``,
  as a group's do in ``__consumer_offsets`` (the same function).
- Decoding raises ``ValueError`` and nothing else for bytes that are not such a record.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sparklog.protocol.data_records import DataSchema, Field, decode, encode

TRANSACTION_TOPIC = "__transaction_state"

TopicPartition = tuple[str, int]

_KEY = DataSchema("TransactionLogKey", (Field("transactional_id", "string"),), newest=0)
_PARTITIONS = DataSchema("PartitionsSchema", (
    Field("topic", "string"), Field("partition_ids", "[]int32"),
), newest=1, flexible_from=1)
_VALUE = DataSchema("TransactionLogValue", (
    Field("producer_id", "int64"),
    Field("previous_producer_id", "int64", first=1, tag=0, default=-1),
    Field("next_producer_id", "int64", first=1, tag=1, default=-1),
    Field("producer_epoch", "int16"),
    Field("transaction_timeout_ms", "int32"),
    Field("transaction_status", "int8"),
    Field("transaction_partitions", nullable_from=0, struct=_PARTITIONS),
    Field("transaction_last_update_timestamp_ms", "int64"),
    Field("transaction_start_timestamp_ms", "int64"),
    Field("client_transaction_version", "int16", first=1, tag=2, default=0),
), newest=1, flexible_from=1)
TV_2 = 2
"""The client transaction version whose ends bump the epoch (KIP-890 part 2)."""


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """A transactional id's state as stored (``status`` is a ``TransactionState`` value)."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: frozenset[TopicPartition]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_version: int = 0


def txn_key(transactional_id: str) -> bytes:
    return encode(_KEY, 0, {"transactional_id": transactional_id})


def decode_txn_key(data: bytes) -> str:
    _, key = decode(_KEY, data)
    return key.transactional_id


def txn_value(record: TxnRecord) -> bytes:
    return encode(_VALUE, 1 if record.client_version >= TV_2 else 0, {
        "producer_id": record.producer_id, "producer_epoch": record.producer_epoch,
        "transaction_timeout_ms": record.timeout_ms, "transaction_status": record.status,
        "transaction_partitions": _by_topic(record.partitions),
        "transaction_last_update_timestamp_ms": record.last_update_ms,
        "transaction_start_timestamp_ms": record.start_ms,
        "previous_producer_id": record.previous_producer_id,
        "next_producer_id": record.next_producer_id,
        "client_transaction_version": record.client_version,
    })


def decode_txn_value(data: bytes) -> TxnRecord:
    version, value = decode(_VALUE, data)
    partitions = frozenset((p.topic, i) for p in value.transaction_partitions or ()
                           for i in p.partition_ids)
    return TxnRecord(value.producer_id, value.producer_epoch, value.transaction_timeout_ms,
                     value.transaction_status, partitions,
                     value.transaction_last_update_timestamp_ms,
                     value.transaction_start_timestamp_ms,
                     *((value.previous_producer_id, value.next_producer_id,
                        value.client_transaction_version) if version >= 1 else ()))


def _by_topic(partitions: Iterable[TopicPartition]) -> list[dict[str, object]]:
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        topics.setdefault(topic, []).append(partition)
    return [{"topic": t, "partition_ids": ids} for t, ids in topics.items()]
