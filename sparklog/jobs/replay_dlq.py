"""Re-process a dead-letter topic: records that parse now go to the Delta table, the others
back to the dead-letter topic (one more attempt) or, after ``--max-attempts``, to a parking
topic.

    python -m sparklog.jobs.replay_dlq --bootstrap HOST:PORT --dlq-topic D --table PATH \\
        (--schema DDL | --schema-registry URL [--subject S] [--value-format avro|json]) \\
        [--group-id G] [--max-attempts N] [--parking-topic P]

One run handles what the dead-letter topic holds when it starts (dead letters it sends back
are for the next run), partition by partition, in chunks of ``replay.batchSize`` offsets from
the consumer group's committed offset (``D.replay`` by default). A chunk is parsed with the
same code as ``stream_to_delta`` (with the registry, the subject defaults to that of the
topic D names, D without ``dlq.topicSuffix``); its good rows are committed to Delta with the txn
``(sparklog-replay:<group>:<D>:<partition>, <end offset of the chunk>)``, then the chunk's end
is committed to the group (``sparklog.offsets.OffsetCommitter``, synchronously).

Invariants:
- Chunks are offset ranges fixed by where the partition resumes (the larger of the group's
  committed offset and the table's txn version), so a run that died mid-chunk redoes exactly
  that chunk: the table skips it if it committed, and its dead letters are not sent twice.
- A dead letter keeps its ``dlq.original.*`` headers and gets ``dlq.attempt`` + 1 and the new
  error; it is parked when that count reaches ``--max-attempts``.
- ``sparklog.offsets.ConsumerLoop`` is not used: it commits each record's offset once the
  record is processed, while here a record is done only when its chunk's Delta commit is.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    KafkaError,
    Message,
    TopicPartition,
)
from deltalake import Transaction

from sparklog.client.admin import ensure_topics, partition_count
from sparklog.client.rdkafka_log import routed
from sparklog.client.watch import WatchedConsumer
from sparklog.datasource.schema import source_schema
from sparklog.delta.sink import DeltaSink
from sparklog.dlq.headers import DeadLetter
from sparklog.dlq.producer import DeadLetterProducer
from sparklog.jobs.registry_values import table_schema_mode, value_spec
from sparklog.jobs.routing import BatchOutcome, dlq_state_dir, route_batch
from sparklog.jobs.runner import run_job
from sparklog.jobs.settings import JobSettings, job_parser
from sparklog.offsets import OffsetCommitter
from sparklog.signals import Stop

if TYPE_CHECKING:
    import argparse

    from pyspark.sql import SparkSession

log = logging.getLogger("sparklog.jobs.replay_dlq")

APP_PREFIX = "sparklog-replay:"
READ_TIMEOUT_S = 60.0
# confluent-kafka's timestamp types -> the source schema's timestampType (Kafka's numbering)
TIMESTAMP_TYPES = {TIMESTAMP_CREATE_TIME: 0, TIMESTAMP_LOG_APPEND_TIME: 1}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = job_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--dlq-topic", required=True)
    parser.add_argument("--group-id", help="consumer group (default: DLQ + replay.groupSuffix)")
    parser.add_argument("--max-attempts", type=int,
                        help="park a record once it failed this many times (default: "
                             "replay.maxAttempts)")
    parser.add_argument("--parking-topic",
                        help="where hopeless records go (default: DLQ + dlq.parkingSuffix)")
    return parser.parse_args(argv)


class Replay:
    def __init__(self, spark: SparkSession, args: argparse.Namespace,
                 settings: JobSettings) -> None:
        self.spark = spark
        self.topic: str = args.dlq_topic
        self.group: str = args.group_id or self.topic + settings["replay.groupSuffix"]
        self.parking: str = args.parking_topic or self.topic + settings["dlq.parkingSuffix"]
        self.max_attempts: int = args.max_attempts or settings.integer("replay.maxAttempts")
        if self.max_attempts < 1:
            raise SystemExit(f"--max-attempts must be at least 1, got {self.max_attempts}")
        self.chunk = settings.integer("replay.batchSize")
        # the dead letters of topic T (in T + dlq.topicSuffix) have T's subject
        self.spec = value_spec(args, settings,
                               self.topic.removesuffix(settings["dlq.topicSuffix"]))
        self.writer_id = f"{APP_PREFIX}{self.group}:{self.topic}"
        self.sink = DeltaSink(args.table, writer_id=self.writer_id,
                              partition_by=settings.partition_by(),
                              schema_mode=table_schema_mode(self.spec, settings))
        self.dlq = DeadLetterProducer(args.bootstrap, writer_id=self.writer_id,
                                      state_dir=dlq_state_dir(self.sink),
                                      destinations=[self.topic, self.parking],
                                      client_config=settings.client_security())
        self.consumer = WatchedConsumer(routed({
            "bootstrap.servers": args.bootstrap, "group.id": self.group,
            "enable.auto.commit": False, "enable.partition.eof": True,
            "auto.offset.reset": "earliest", **settings.client_security()}))
        self.committer = OffsetCommitter(self.consumer)

    def destination(self, letter: DeadLetter) -> str:
        return self.parking if letter.attempt >= self.max_attempts else self.topic

    def run(self, stop: Callable[[], bool]) -> None:
        metadata = self.consumer.list_topics(self.topic, timeout=30).topics[self.topic]
        ends = {p: self.consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=30)
                for p in sorted(metadata.partitions)}  # before anything is sent back
        for partition, (low, end) in ends.items():
            position = max(low, self._committed(partition),
                           self.sink.recorded_version(self._app_id(partition)) or 0)
            while position < end and not stop():
                chunk_end = min(position + self.chunk, end)
                self._replay(partition, position, chunk_end)
                position = chunk_end

    def close(self) -> None:
        try:
            self.dlq.close()
            self.committer.close()
        finally:
            self.consumer.close()

    def _app_id(self, partition: int) -> str:
        return f"{self.writer_id}:{partition}"

    def _committed(self, partition: int) -> int:
        (found,) = self.consumer.committed([TopicPartition(self.topic, partition)], timeout=30)
        return max(found.offset, 0)  # a negative offset means nothing committed yet

    def _replay(self, partition: int, start: int, end: int) -> None:
        started = time.monotonic()
        messages = self._read(partition, start, end)
        rows = [(m.key(), m.value(), m.topic(), m.partition(), m.offset(),
                 datetime.fromtimestamp(m.timestamp()[1] / 1000, UTC),
                 TIMESTAMP_TYPES.get(m.timestamp()[0], -1), m.headers() or [])
                for m in messages]
        df = self.spark.createDataFrame(rows, source_schema(include_headers=True))
        outcome: BatchOutcome = route_batch(
            df, self.spec, self.sink, [Transaction(self._app_id(partition), end)], self.dlq,
            f"{partition}-{start}", self.destination)
        self.committer.commit_sync({(self.topic, partition): end})
        log.info("partition %d offsets %d..%d: %s (%.2fs)", partition, start, end - 1,
                 outcome.describe(), time.monotonic() - started)

    def _read(self, partition: int, start: int, end: int) -> list[Message]:
        """The records at offsets ``start .. end-1`` (fewer where the log has gaps)."""
        self.consumer.assign([TopicPartition(self.topic, partition, start)])
        found: list[Message] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while time.monotonic() < deadline:
            for message in self.consumer.consume(1000, 0.5):
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    return found
                if error is not None:
                    raise RuntimeError(f"reading {self.topic}-{partition} failed: {error}")
                if message.offset() < end:
                    found.append(message)
                if message.offset() >= end - 1:
                    return found
        raise RuntimeError(f"reading {self.topic}-{partition} {start}..{end - 1} timed out")


def run(spark: SparkSession, args: argparse.Namespace, settings: JobSettings,
        stop: Stop) -> int:
    started = time.monotonic()
    replay = Replay(spark, args, settings)
    security = settings.client_security()
    ensure_topics(args.bootstrap,
                  {replay.parking: partition_count(args.bootstrap, replay.topic, security)},
                  security)
    try:
        replay.run(lambda: stop.requested)
    finally:
        replay.close()
    log.info("replay of %s for group %s %s (%.2fs)", replay.topic, replay.group,
             f"stopped by signal {stop.signal.name}" if stop.signal else "done",
             time.monotonic() - started)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_job("replay_dlq", parse_args(argv), run)


if __name__ == "__main__":
    sys.exit(main())
