"""A coordinator's state kept as records of an internal compacted topic (``__consumer_offsets``,
later ``__transaction_state``), seen through the narrow ``InternalTopic`` interface.

The broker provides an ``InternalTopic`` over its logs (and, with replication, only for the
partitions it leads); a coordinator never touches storage, configs or the broker itself, so
it runs and is tested without a data directory.

Invariants:
- ``append_records`` writes the records of one change as ONE batch to one partition: they
  are stored together or not at all; it returns only once the topic took the batch, so a
  caller that changes its memory after it never acknowledges what is not in the log.
- ``replay`` yields a partition's (key, value) records in offset order, skipping control
  batches and records without a key; a None value is a tombstone. It holds one read buffer
  (``buffer_bytes``, Kafka's ``offsets.load.buffer.size``) at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from sparklog.record.batch import parse_header
from sparklog.record.records import build_batch, decode_records

Record = tuple[bytes, bytes | None]
"""A key and its value; a None value is a tombstone."""


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


def append_records(topic: InternalTopic, partition: int, records: Sequence[Record],
                   now_ms: int) -> None:
    topic.append(partition, build_batch([(key, value, (), now_ms) for key, value in records]),
                 now_ms)


def replay(topic: InternalTopic, partition: int, buffer_bytes: int) -> Iterator[Record]:
    for batch in topic.batches(partition, buffer_bytes):
        header = parse_header(batch)
        if header.is_control:
            continue
        for record in decode_records(batch, header):
            if record.key is not None:
                yield record.key, record.value
