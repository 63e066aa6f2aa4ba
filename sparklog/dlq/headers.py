"""Dead letters: a record that failed, where it came from, why, and how many times.

Invariants:
- A dead letter keeps the failed record's key, value and own headers, and adds the
  ``dlq.*`` headers (UTF-8 text): ``dlq.original.{topic,partition,offset,timestamp}`` (the
  record's first coordinates; the timestamp in epoch milliseconds), ``dlq.error.{class,
  message}``, ``dlq.attempt`` (failed attempts so far, 1 for the first failure), and
  ``dlq.writer.id`` / ``dlq.batch.id`` (which writer produced it, in which batch).
- Re-sending a dead letter (``from_record`` on a record that carries ``dlq.*`` headers)
  keeps its ``dlq.original.*`` coordinates and counts one more attempt, so the original
  coordinates identify a record however often it went round.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

PREFIX = "dlq."
ORIGINAL_TOPIC = "dlq.original.topic"
ORIGINAL_PARTITION = "dlq.original.partition"
ORIGINAL_OFFSET = "dlq.original.offset"
ORIGINAL_TIMESTAMP = "dlq.original.timestamp"
ERROR_CLASS = "dlq.error.class"
ERROR_MESSAGE = "dlq.error.message"
ATTEMPT = "dlq.attempt"
WRITER_ID = "dlq.writer.id"
BATCH_ID = "dlq.batch.id"

MAX_MESSAGE = 1000

Headers = Sequence[tuple[str, bytes | None]]


@dataclass(frozen=True)
class Origin:
    """Where a record was first read: what identifies a dead letter."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None


@dataclass(frozen=True)
class DeadLetter:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]  # the record's own, without dlq.*
    origin: Origin
    error_class: str
    error_message: str
    attempt: int

    @classmethod
    def from_record(cls, *, key: bytes | None, value: bytes | None, headers: Headers | None,
                    topic: str, partition: int, offset: int, timestamp_ms: int | None,
                    error_class: str, error_message: str) -> DeadLetter:
        """A failed record: a first failure, or one more attempt of a dead letter."""
        own = tuple((k, v) for k, v in headers or () if not k.startswith(PREFIX))
        earlier = dead_letter_origin(headers)
        if earlier is not None:
            origin, attempt = earlier[0], earlier[1] + 1
        else:
            origin, attempt = Origin(topic, partition, offset, timestamp_ms), 1
        return cls(key, value, own, origin, error_class, error_message[:MAX_MESSAGE], attempt)

    def kafka_headers(self, writer_id: str, batch_id: str) -> list[tuple[str, bytes]]:
        stamp = "" if self.origin.timestamp_ms is None else str(self.origin.timestamp_ms)
        added = {
            ORIGINAL_TOPIC: self.origin.topic,
            ORIGINAL_PARTITION: str(self.origin.partition),
            ORIGINAL_OFFSET: str(self.origin.offset),
            ORIGINAL_TIMESTAMP: stamp,
            ERROR_CLASS: self.error_class,
            ERROR_MESSAGE: self.error_message,
            ATTEMPT: str(self.attempt),
            WRITER_ID: writer_id,
            BATCH_ID: batch_id,
        }
        own = [(k, v if v is not None else b"") for k, v in self.headers]
        return own + [(k, v.encode()) for k, v in added.items()]


def header_map(headers: Headers | None) -> dict[str, str]:
    """The ``dlq.*`` headers of a record as text (the last value wins)."""
    return {k: (v or b"").decode() for k, v in headers or () if k.startswith(PREFIX)}


def dead_letter_origin(headers: Headers | None) -> tuple[Origin, int] | None:
    """A dead letter's origin and attempt count from its headers; None for other records."""
    dlq = header_map(headers)
    if ORIGINAL_TOPIC not in dlq:
        return None
    stamp = dlq.get(ORIGINAL_TIMESTAMP)
    origin = Origin(dlq[ORIGINAL_TOPIC], int(dlq[ORIGINAL_PARTITION]), int(dlq[ORIGINAL_OFFSET]),
                    int(stamp) if stamp else None)
    return origin, int(dlq.get(ATTEMPT, "1"))
