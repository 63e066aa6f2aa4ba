"""The per-task producer of the sparklog sink: Arrow record batches in, checked deliveries out.

Invariants:
- One confluent-kafka ``Producer`` per write task at a time, built inside the task from a
  ``SinkSpec`` (never pickled) or leased from the worker's ``producer_cache`` (a drained
  producer of an earlier task with the same settings), always idempotent: librdkafka's own
  retries within a task neither duplicate nor reorder records. A task returns its producer
  to the cache only when it succeeded (a transactional one to a later task of the same
  transactional id: ``transactional_producer``). Each is a
  ``client.watch.WatchedProducer``: a refused login or a protocol mismatch fails the task at
  once with its one line.
- Nothing is lost silently. ``finish`` returns only once ``flush`` has drained librdkafka's
  queue, and librdkafka reports every record whose delivery failed (successes are not
  reported, ``delivery.report.only.error``, so the check costs nothing per record): after
  the drain, a record without a failure report was acknowledged. One failure or more makes
  ``finish`` raise ``SinkDeliveryError`` with the first error and the number of failures.
- A topic is looked up (one metadata request) before a producer's first record to it (once
  per producer: a pooled producer's later tasks do not ask again); a topic the broker
  neither has nor creates fails the task with ``SinkTopicError`` naming it, at once,
  instead of after ``topic.metadata.propagation.max.ms`` (30 s) of waiting.
- A full local queue (``BufferError``) is waited out by polling; no record is dropped and
  the order of records is kept.
- Per record, Python only steps through columns converted to lists once per batch and calls
  ``produce``; counting bytes and checking topics are vectorised per batch.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise, repeat
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError, KafkaException, Message

from sparklog.client.rdkafka_log import routed
from sparklog.datasource.write.commit_message import SinkCommitMessage
from sparklog.datasource.write.producer_cache import PRODUCERS, Lease
from sparklog.datasource.write.write_options import SinkSpec

METADATA_TIMEOUT_S = 30.0
"""How long a task waits for a topic's metadata before failing."""
_FULL_QUEUE_POLL_S = 0.01
_UNASSIGNED = -1
"""librdkafka's "no partition given": its partitioner picks one."""

Header = tuple[str, bytes | None]


class SinkTopicError(RuntimeError):
    """A topic cannot be written: missing on the broker, not writable, or a null topic."""


class SinkDeliveryError(RuntimeError):
    """Records were refused by librdkafka or the broker; the task must not succeed."""


class _Failures:
    """Collects failed delivery reports (a callable given to librdkafka as ``on_delivery``)."""

    def __init__(self) -> None:
        self.count = 0
        self.first = ""

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            return
        if not self.count:
            self.first = (f"{error.str()} ({error.name()}) for topic {message.topic()!r} "
                          f"partition {message.partition()}")
        self.count += 1


def _as_binary(column: pa.Array) -> pa.Array:
    """A zero-copy binary view of a string column (to_pylist then yields bytes: no decoding)."""
    if pa.types.is_string(column.type):
        return column.view(pa.binary())
    if pa.types.is_large_string(column.type):
        return column.view(pa.large_binary())
    return column


def _byte_count(column: pa.Array) -> int:
    return pc.sum(pc.binary_length(column)).as_py() or 0


def _headers(column: pa.ListArray | pa.LargeListArray) -> list[list[Header] | None]:
    """Each row's headers as the ``(key, value)`` list produce() takes (None when empty)."""
    offsets = column.offsets.to_pylist()
    keys, values = column.values.flatten()
    pairs = list(zip(keys.to_pylist(), values.to_pylist(), strict=True))
    return [pairs[start:end] or None for start, end in pairwise(offsets)]


class TaskProducer:
    """Sends a write task's Arrow batches; ``finish`` returns the task's commit message."""

    def __init__(self, spec: SinkSpec, transactional_id: str | None = None) -> None:
        """``transactional_id``: a transactional producer of that id."""
        self._spec = spec
        self._failures = _Failures()
        config = {**spec.producer_config, "delivery.report.only.error": True}
        if transactional_id is not None:
            config["transactional.id"] = transactional_id
        self._config = routed(config)
        self._lease = self._lease_producer()
        self._records = 0
        self._bytes = 0
        if spec.topic is not None:
            self._check_topic(spec.topic)

    def _lease_producer(self) -> Lease:
        lease = PRODUCERS.lease(self._config, self._failures,
                                timeout_s=self._spec.producer_cache_timeout_s)
        self._producer = lease.producer
        self._checked_topics = lease.checked_topics
        return lease

    def _check_topic(self, topic: str) -> None:
        """Fail now if ``topic`` cannot be written; once per producer and topic (a pooled
        producer's later tasks ask nothing: a Metadata round per task was a tenth of a
        micro-batch's write)."""
        if topic in self._checked_topics:
            return
        try:
            metadata = self._producer.list_topics(topic, timeout=METADATA_TIMEOUT_S)
        except KafkaException as error:
            raise SinkTopicError(f"cannot look up topic {topic!r} on {self._spec.bootstrap}: "
                                 f"{error.args[0].str()}") from None
        found = metadata.topics.get(topic)
        error = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART) if found is None else found.error
        if error is not None and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise SinkTopicError(
                f"topic {topic!r} does not exist on {self._spec.bootstrap} and the broker "
                "does not create topics on demand (auto.create.topics.enable=false): create "
                f"it first, e.g. sparklog topics create --bootstrap {self._spec.bootstrap} "
                f"--topic {topic}")
        if error is not None and error.code() != KafkaError.LEADER_NOT_AVAILABLE:
            raise SinkTopicError(f"cannot write to topic {topic!r}: {error.str()}")
        self._checked_topics.add(topic)

    def _topics(self, batch: pa.RecordBatch) -> Iterable[str]:
        if not self._spec.topic_column:
            return repeat(self._spec.topic)
        column = batch.column("topic")
        if column.null_count:
            raise SinkTopicError("a row has a null 'topic' and no topic option is set: fill the "
                                 "column or set the option")
        for topic in pc.unique(column).to_pylist():
            self._check_topic(topic)
        return column.to_pylist()

    def send(self, batch: pa.RecordBatch) -> None:
        """Hand every row of ``batch`` to librdkafka (delivery is checked in ``finish``)."""
        spec = self._spec
        topics = self._topics(batch)
        values = _as_binary(batch.column("value"))
        self._bytes += _byte_count(values)
        keys: Iterable[bytes | None] = repeat(None)
        if spec.key:
            key_column = _as_binary(batch.column("key"))
            self._bytes += _byte_count(key_column)
            keys = key_column.to_pylist()
        partitions: Iterable[int] = repeat(_UNASSIGNED)
        if spec.partition:
            partitions = batch.column("partition").fill_null(_UNASSIGNED).to_pylist()
        produce = self._producer.produce
        # Two loops: a headers= keyword costs as much as the rest of produce()'s argument
        # parsing, so rows without headers pass four positional arguments only.
        # zip(strict=False): absent columns are endless repeat()s of their default.
        try:
            if spec.headers:
                rows = zip(topics, values.to_pylist(), keys, partitions,
                           _headers(batch.column("headers")), strict=False)
                for topic, value, key, partition, header in rows:
                    try:
                        produce(topic, value, key, partition, headers=header)
                    except BufferError:
                        self._produce_when_room(topic, value, key, partition, headers=header)
            else:
                for topic, value, key, partition in zip(topics, values.to_pylist(), keys,
                                                        partitions, strict=False):
                    try:
                        produce(topic, value, key, partition)
                    except BufferError:
                        self._produce_when_room(topic, value, key, partition)
        except KafkaException as error:
            where = f"partition {partition}" if partition != _UNASSIGNED else "a partition"
            raise SinkDeliveryError(f"cannot produce to topic {topic!r} {where}: "
                                    f"{error.args[0].str()}") from None
        self._records += batch.num_rows
        self._producer.poll(0)

    def _produce_when_room(self, *args: Any, **kwargs: Any) -> None:
        """Serve librdkafka until its queue has room for one more record, then add it."""
        while True:
            self._producer.poll(_FULL_QUEUE_POLL_S)
            try:
                self._producer.produce(*args, **kwargs)
                return
            except BufferError:
                continue

    def finish(self) -> SinkCommitMessage:
        """Wait for every record's outcome; raise if any failed, else count what was sent."""
        message = self._drain()
        self._lease.release()
        return message

    def _drain(self) -> SinkCommitMessage:
        """Wait for every record's outcome; raise (the producer discarded) if any failed."""
        while self._producer.flush(1.0):
            pass
        failures = self._failures
        if failures.count:
            self._lease.discard()
            raise SinkDeliveryError(
                f"{failures.count} of {self._records} records failed delivery to "
                f"{self._spec.bootstrap}; the first: {failures.first}")
        return SinkCommitMessage(records=self._records, bytes=self._bytes)

    def abandon(self) -> None:
        """The task failed: undo what can be undone (nothing, once records are sent), and
        keep the producer out of the cache."""
        self._lease.discard()
