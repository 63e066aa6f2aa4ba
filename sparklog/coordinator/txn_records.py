"""The records of ``__transaction_state``: one key per transactional id, its latest state as
the value (a tombstone once the id expired), in Kafka's format.

Formats (Kafka's ``TransactionLogKey`` v0 and ``TransactionLogValue`` v0, non-flexible): the
key is int16 version + transactional id; the value is int16 version + producer id int64,
producer epoch int16, transaction timeout int32 (ms), transaction status int8, partitions
(nullable array of topic + partition ids), last update timestamp int64, start timestamp
int64.

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
), newest=0)
_VALUE = DataSchema("TransactionLogValue", (
    Field("producer_id", "int64"),
    Field("producer_epoch", "int16"),
    Field("transaction_timeout_ms", "int32"),
    Field("transaction_status", "int8"),
    Field("transaction_partitions", nullable_from=0, struct=_PARTITIONS),
    Field("transaction_last_update_timestamp_ms", "int64"),
    Field("transaction_start_timestamp_ms", "int64"),
), newest=0)


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


def txn_key(transactional_id: str) -> bytes:
    return encode(_KEY, 0, {"transactional_id": transactional_id})


def decode_txn_key(data: bytes) -> str:
    _, key = decode(_KEY, data)
    return key.transactional_id


def txn_value(record: TxnRecord) -> bytes:
    return encode(_VALUE, 0, {
        "producer_id": record.producer_id, "producer_epoch": record.producer_epoch,
        "transaction_timeout_ms": record.timeout_ms, "transaction_status": record.status,
        "transaction_partitions": _by_topic(record.partitions),
        "transaction_last_update_timestamp_ms": record.last_update_ms,
        "transaction_start_timestamp_ms": record.start_ms,
    })


def decode_txn_value(data: bytes) -> TxnRecord:
    _, value = decode(_VALUE, data)
    partitions = frozenset((p.topic, i) for p in value.transaction_partitions or ()
                           for i in p.partition_ids)
    return TxnRecord(value.producer_id, value.producer_epoch, value.transaction_timeout_ms,
                     value.transaction_status, partitions,
                     value.transaction_last_update_timestamp_ms,
                     value.transaction_start_timestamp_ms)


def _by_topic(partitions: Iterable[TopicPartition]) -> list[dict[str, object]]:
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        topics.setdefault(topic, []).append(partition)
    return [{"topic": t, "partition_ids": ids} for t, ids in topics.items()]
