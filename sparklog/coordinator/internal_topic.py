"""A coordinator's state kept as records of an internal compacted topic (``__consumer_offsets``,
later ``__transaction_state``), seen through the narrow ``InternalTopic`` interface.

The broker provides an ``InternalTopic`` over its logs (and, with replication, only for the
partitions it leads); a coordinator never touches storage, configs or the broker itself, so
it runs and is tested without a data directory.

Invariants:
- ``append_records`` writes the records of one change as ONE batch to one partition: they
  are stored together or not at all; it returns only once the topic took the batch, so a
  caller that changes its memory after it never acknowledges what is not in the log. A
  refusal raises ``KafkaError`` with the code a coordinator answers (``coordinator_error``,
  Kafka's mapping: a missing partition, too few in-sync replicas or a replication timeout
  is COORDINATOR_NOT_AVAILABLE, a lost leadership or a storage error NOT_COORDINATOR,
  others as the caller's ``errors`` say, else UNKNOWN_SERVER_ERROR).
- ``replay`` yields a partition's records in offset order, skipping records without a key
  (a None value is a tombstone), each with its producer id when its batch is
  transactional, and the transaction markers of control batches, so a coordinator that
  writes transactional records (``__consumer_offsets`` for TxnOffsetCommit) applies them
  only once committed. It holds one read buffer (``buffer_bytes``, Kafka's
  ``offsets.load.buffer.size``) at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple, Protocol

from sparklog.errors import ErrorCode, KafkaError
from sparklog.record.batch import parse_header
from sparklog.record.control import ControlType, decode_marker
from sparklog.record.records import build_batch, decode_records

log = logging.getLogger(__name__)

Record = tuple[bytes, bytes | None]
"""A key and its value; a None value is a tombstone."""

NO_PRODUCER = -1


class Replayed(NamedTuple):
    """A record (``marker`` None) or a transaction marker (``key`` and ``value`` None) of a
    replayed partition; ``producer_id`` is the transaction's producer, else -1."""

    key: bytes | None
    value: bytes | None
    producer_id: int = NO_PRODUCER
    marker: ControlType | None = None


class InternalTopic(Protocol):
    """What a coordinator needs of its topic."""

    @property
    def name(self) -> str: ...

    @property
    def partitions(self) -> int: ...

    def append(self, partition: int, batch: bytes, now_ms: int) -> None:
        """Append one batch (raises ``KafkaError`` if the partition refuses it)."""

    def batches(self, partition: int, buffer_bytes: int) -> Iterator[bytes]:
        """Every whole batch of the partition, in offset order, read ``buffer_bytes`` at a
        time."""


_APPEND_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
}


def coordinator_error(code: ErrorCode,
                      errors: Mapping[ErrorCode, ErrorCode] | None = None) -> ErrorCode:
    """What a coordinator answers when writing its topic failed with ``code``."""
    return {**_APPEND_ERRORS, **(errors or {})}.get(code, ErrorCode.UNKNOWN_SERVER_ERROR)


def append_records(topic: InternalTopic, partition: int, records: Sequence[Record],
                   now_ms: int, *, producer: tuple[int, int] | None = None,
                   errors: Mapping[ErrorCode, ErrorCode] | None = None) -> None:
    """Append ``records`` as one batch; ``producer`` (id, epoch) makes it part of that
    producer's transaction. See the module invariants for what a refusal raises."""
    pid, epoch = producer or (NO_PRODUCER, -1)
    batch = build_batch([(key, value, (), now_ms) for key, value in records],
                        producer_id=pid, producer_epoch=epoch, transactional=producer is not None)
    try:
        topic.append(partition, batch, now_ms)
    except (KafkaError, OSError) as exc:
        if isinstance(exc, KafkaError):
            code = coordinator_error(exc.code, errors)
        else:
            code = ErrorCode.NOT_COORDINATOR
        log.error("cannot append to %s-%d: %s", topic.name, partition, exc)
        raise KafkaError(str(exc), code) from exc


def replay(topic: InternalTopic, partition: int, buffer_bytes: int) -> Iterator[Replayed]:
    for batch in topic.batches(partition, buffer_bytes):
        header = parse_header(batch)
        records = decode_records(batch, header)
        if header.is_control:
            marker = decode_marker(records[0].key, records[0].value) if records else None
            if marker is not None and marker.kind in iter(ControlType):
                yield Replayed(None, None, header.producer_id, ControlType(marker.kind))
            continue
        pid = header.producer_id if header.is_transactional else NO_PRODUCER
        for record in records:
            if record.key is not None:
                yield Replayed(record.key, record.value, pid)
