"""Producing a batch's dead letters so that a replayed batch does not send them twice.

The problem: a job sends batch N's dead letters, then commits batch N to Delta. If it dies
in between, batch N is replayed and its dead letters are sent again. The idempotent producer
only removes duplicates within one producer session, not across a crash.

The remedy, an intent record per batch: before the first dead letter of batch N goes out,
``<state_dir>/<N>.json`` records the end offsets of every destination topic. A replay of
batch N finds that file, reads the destination topics from those offsets to their current
end, and collects the dead letters this writer already sent for batch N (headers
``dlq.writer.id`` and ``dlq.batch.id``); only the others are sent. After batch N's commit the
caller calls ``forget``: no intent of this writer is needed any more.

Guarantee: every dead letter of a batch is in its destination topic once, provided batches of
one writer run one at a time, the replayed batch holds the same records (Spark replays a
micro-batch with the same offsets) and the destination topic still holds what was sent
(retention longer than the outage). The producer is idempotent (acks=all), and ``send``
returns only once the broker acknowledged every record, or raises ``DeadLetterError``.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from sparklog.client.rdkafka_log import routed
from sparklog.dlq.headers import (
    BATCH_ID,
    WRITER_ID,
    DeadLetter,
    Origin,
    dead_letter_origin,
    header_map,
)

log = logging.getLogger(__name__)

SCAN_TIMEOUT_S = 120.0
FLUSH_TIMEOUT_S = 120.0

SentKey = tuple[str, Origin, int]  # destination topic, origin, attempt


class DeadLetterError(RuntimeError):
    """Dead letters could not be delivered (or checked); the batch must not commit."""


@dataclass(frozen=True)
class SendResult:
    sent: int
    already_sent: int  # skipped: sent by an earlier attempt of the same batch


class DeadLetterProducer:
    def __init__(self, bootstrap: str, *, writer_id: str, state_dir: str | os.PathLike[str],
                 destinations: Sequence[str],
                 client_config: Mapping[str, str] | None = None) -> None:
        self.writer_id = writer_id
        self.state_dir = Path(state_dir)
        self.destinations = list(destinations)
        self._client = routed({"bootstrap.servers": bootstrap, **(client_config or {})})
        self._producer: Producer | None = None
        self._errors: list[str] = []

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer({**self._client, "enable.idempotence": True,
                                       "acks": "all", "linger.ms": 10})
        return self._producer

    def send(self, batch_id: str, letters: Iterable[tuple[str, DeadLetter]]) -> SendResult:
        """Send ``(destination topic, dead letter)`` pairs of one batch; see the module."""
        intent = self.state_dir / f"{batch_id}.json"
        done: set[SentKey] = set()
        if intent.exists():
            done = self._already_sent(json.loads(intent.read_text())["start"], batch_id)
            log.info("batch %s was attempted before: %d dead letters already sent", batch_id,
                     len(done))
        sent = skipped = 0
        for topic, letter in letters:
            if topic not in self.destinations:
                raise ValueError(f"destination {topic!r} is not one of {self.destinations}")
            if (topic, letter.origin, letter.attempt) in done:
                skipped += 1
                continue
            if not intent.exists():
                self._write_intent(intent)
            self._produce(topic, letter, batch_id)
            sent += 1
        if sent:
            self._flush()
        return SendResult(sent, skipped)

    def forget(self) -> None:
        """Drop this writer's intents: call once a batch (and all before it) committed."""
        for path in self.state_dir.glob("*.json"):
            path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._producer is not None:
            self._flush()
            self._producer = None

    # -- producing -------------------------------------------------------------------------

    def _produce(self, topic: str, letter: DeadLetter, batch_id: str) -> None:
        headers = letter.kafka_headers(self.writer_id, batch_id)
        while True:
            try:
                self.producer.produce(topic, value=letter.value, key=letter.key,
                                      headers=headers, on_delivery=self._delivered)
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                self.producer.poll(0.1)

    def _delivered(self, error: KafkaError | None, message: object) -> None:
        if error is not None:
            self._errors.append(str(error))

    def _flush(self) -> None:
        left = self.producer.flush(FLUSH_TIMEOUT_S)
        errors, self._errors = self._errors, []
        if left or errors:
            raise DeadLetterError(f"{left} dead letters undelivered after {FLUSH_TIMEOUT_S:.0f}s"
                                  f" and {len(errors)} failed: {errors[:3]}")

    # -- intents ---------------------------------------------------------------------------

    def _write_intent(self, path: Path) -> None:
        with self._consumer() as consumer:
            start = {topic: {str(p): high for p, (_, high) in _watermarks(consumer, topic).items()}
                     for topic in self.destinations}
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump({"writer": self.writer_id, "start": start}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def _already_sent(self, start: Mapping[str, Mapping[str, int]], batch_id: str) -> set[SentKey]:
        found: set[SentKey] = set()
        with self._consumer() as consumer:
            ends: dict[tuple[str, int], int] = {}
            assignment = []
            for topic in self.destinations:
                for partition, (_, high) in _watermarks(consumer, topic).items():
                    begin = start.get(topic, {}).get(str(partition), OFFSET_BEGINNING)
                    if high > 0 and (begin == OFFSET_BEGINNING or begin < high):
                        ends[(topic, partition)] = high
                        assignment.append(TopicPartition(topic, partition, begin))
            if not assignment:
                return found
            consumer.assign(assignment)
            deadline = time.monotonic() + SCAN_TIMEOUT_S
            while ends:
                if time.monotonic() > deadline:
                    raise DeadLetterError(f"could not read back {sorted(ends)} within "
                                          f"{SCAN_TIMEOUT_S:.0f}s to check for sent dead letters")
                for message in consumer.consume(1000, 0.5):
                    tp = (message.topic(), message.partition())
                    if message.error() is not None:
                        if message.error().code() == KafkaError._PARTITION_EOF:
                            ends.pop(tp, None)
                            continue
                        raise DeadLetterError(f"reading {tp} back failed: {message.error()}")
                    if tp in ends and message.offset() >= ends[tp] - 1:
                        del ends[tp]
                    headers = header_map(message.headers())
                    origin = dead_letter_origin(message.headers())
                    if (origin is not None and headers.get(WRITER_ID) == self.writer_id
                            and headers.get(BATCH_ID) == batch_id):
                        found.add((tp[0], *origin))
        return found

    def _consumer(self) -> closing[Consumer]:
        return closing(Consumer({**self._client, "group.id": f"sparklog-dlq-{uuid.uuid4()}",
                                 "enable.auto.commit": False, "enable.partition.eof": True,
                                 "auto.offset.reset": "earliest"}))


def _watermarks(consumer: Consumer, topic: str) -> dict[int, tuple[int, int]]:
    """``{partition: (low, high)}`` of a topic; empty when the topic does not exist yet."""
    metadata = consumer.list_topics(topic, timeout=30).topics.get(topic)
    if metadata is None or metadata.error is not None:
        return {}
    return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            for p in metadata.partitions}
