"""Sample JSON events with some malformed ones, and reading a topic back: for the demo, the
job tests and the jobs benchmark.

Invariants:
- Event ``i`` is deterministic: ``{"id": i, "user", "kind", "amount", "ts"}`` matching
  ``SCHEMA``; every ``bad_every``-th record (``i % bad_every == bad_every - 1``) is malformed
  instead, cycling through ``MALFORMED`` kinds, each of which ``SCHEMA`` rejects.
- ``produce_events`` returns only once the broker acknowledged every record (idempotent
  producer), or raises.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from sparklog.client.rdkafka_log import routed

SCHEMA = "id BIGINT NOT NULL, user STRING, kind STRING, amount DOUBLE, ts TIMESTAMP"
KINDS = ("click", "view", "cart", "buy")
EPOCH_S = 1_700_000_000


def event(i: int) -> bytes:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(EPOCH_S + i))
    return json.dumps({"id": i, "user": f"user-{i % 97}", "kind": KINDS[i % len(KINDS)],
                       "amount": round((i % 1000) * 0.25, 2), "ts": stamp}).encode()


MALFORMED: tuple[Callable[[int], bytes], ...] = (
    lambda i: event(i)[:-7],  # truncated JSON
    lambda i: f'["not", "an", "object", {i}]'.encode(),
    lambda i: json.dumps({"user": f"user-{i}", "amount": 1.0}).encode(),  # no id
    lambda i: json.dumps({"id": i, "amount": "a lot"}).encode(),  # amount is not a number
)


def is_bad(i: int, bad_every: int) -> bool:
    return bad_every > 0 and i % bad_every == bad_every - 1


def record(i: int, bad_every: int) -> bytes:
    return MALFORMED[(i // bad_every) % len(MALFORMED)](i) if is_bad(i, bad_every) else event(i)


@dataclass(frozen=True)
class Produced:
    good: int
    bad: int


def produce_events(bootstrap: str, topic: str, count: int, *, bad_every: int = 50,
                   start: int = 0) -> Produced:
    """Produce records ``start .. start+count-1``; keys are the user, values ``record(i)``."""
    producer = Producer(routed({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                "linger.ms": 20, "batch.size": 512 * 1024,
                                "compression.type": "lz4"}))
    errors: list[str] = []

    def delivered(error: object, message: object) -> None:
        if error is not None:
            errors.append(str(error))

    bad = 0
    for i in range(start, start + count):
        bad += is_bad(i, bad_every)
        while True:
            try:
                producer.produce(topic, key=f"user-{i % 97}".encode(),
                                 value=record(i, bad_every), on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120) or errors:
        raise RuntimeError(f"producing to {topic} failed: {errors[:3]}")
    return Produced(count - bad, bad)


def read_topic(bootstrap: str, topic: str, timeout: float = 60) -> list[tuple]:
    """Every record of ``topic`` now: ``(partition, offset, key, value, headers)`` tuples."""
    consumer = Consumer(routed({"bootstrap.servers": bootstrap,
                                "group.id": "sparklog-read-topic", "enable.auto.commit": False}))
    try:
        metadata = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return []
        ends = {}
        for p in metadata.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if high > low:
                ends[p] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        records: list[tuple] = []
        deadline = time.monotonic() + timeout
        while ends and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if message.error() is not None:
                    raise RuntimeError(f"reading {topic} failed: {message.error()}")
                records.append((message.partition(), message.offset(), message.key(),
                                message.value(), message.headers() or []))
                if message.offset() >= ends.get(message.partition(), 0) - 1:
                    ends.pop(message.partition(), None)
        if ends:
            raise RuntimeError(f"reading {topic} timed out with {sorted(ends)} unfinished")
        return records
    finally:
        consumer.close()
