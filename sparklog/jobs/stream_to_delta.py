"""Stream a topic of JSON (or registry-framed Avro / JSON) records into a Delta table exactly
once; bad records to a dead-letter topic.

    python -m sparklog.jobs.stream_to_delta --bootstrap HOST:PORT --topic T --table PATH \\
        --checkpoint PATH (--schema DDL | --schema-registry URL [--subject S]
        [--value-format avro|json]) [--dlq-topic T] [--trigger availableNow|processingTime=10s]
        [--group-id G] [--conf-dir DIR] [--set key=value ...] [--master URL]

Reads ``T`` with ``spark.readStream.format("sparklog")`` (from ``stream.startingOffsets``),
parses each value with the DDL schema (``sparklog.dlq.parse``), or decodes it with the
latest schema of the subject (``T-value`` by default) in the schema registry
(``sparklog.jobs.registry_values``), and, per micro-batch (``foreachBatch``): sends the
records that fail to parse or decode to the dead-letter topic (``T.dlq`` by default), then
commits the good ones to the Delta table in one commit carrying the txn
``(sparklog-stream:<query id>, batch id)``. Logs one line per batch.

Schema evolution (registry): the subject's latest version is asked once per batch, before
the batch is decoded. A new version is logged as one line, the batch and those after it are
decoded into it (older records' added fields get their defaults) and its added fields become
nullable table columns in that batch's write. The query goes on: its own schema is the
source's (bytes), so nothing stops or restarts, and batch boundaries, txns and dead-letter
intents are those of any batch.

Invariants:
- The app id is the query id Spark keeps in the checkpoint: a restart from the same
  checkpoint replays the unfinished batch with the same id and offsets, which the table skips
  if it was committed; a new checkpoint is a new query that shares no versions with the old.
- Every record read ends up exactly once in the table or in the dead-letter topic (see
  ``sparklog.dlq.producer`` for the dead-letter guarantee), whatever point the job dies at.
- SIGTERM / Ctrl-C stop the query between two polls, or in the middle of a batch (which then
  fails as ``BatchInterrupted``, quietly, and is replayed on the next start), and exit 0,
  logging ``query stopped by signal <name>``; a second signal exits at once; a query that
  failed otherwise exits 1. ``--group-id`` is passed to the source as
  ``groupId``: each batch's end offsets are committed to that group (offsets live in the
  checkpoint; the group is for lag tooling such as ``sparklog groups describe``).
"""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import TYPE_CHECKING

from sparklog.client.admin import ensure_topics, partition_count
from sparklog.datasource.checkpoints import clear_interrupted_first_batch
from sparklog.delta.sink import DeltaSink
from sparklog.dlq.producer import DeadLetterProducer
from sparklog.jobs.registry_values import RegistryValues, table_schema_mode, value_spec
from sparklog.jobs.routing import ValueSpec, dlq_state_dir, route_batch
from sparklog.jobs.runner import quiet_interrupted_batch, run_job
from sparklog.jobs.settings import JobSettings, job_parser
from sparklog.jobs.spark import sparklog_reader
from sparklog.signals import Stop

if TYPE_CHECKING:
    import argparse

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("sparklog.jobs.stream_to_delta")

APP_PREFIX = "sparklog-stream:"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = job_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    parser.add_argument("--dlq-topic", help="dead-letter topic (default: TOPIC + dlq.topicSuffix)")
    parser.add_argument("--trigger", help="availableNow or processingTime=<interval> "
                                          "(default: stream.trigger)")
    parser.add_argument("--group-id", help="consumer group mirroring the stream's progress")
    return parser.parse_args(argv)


INTERVAL = re.compile(r"^\s*(\d+)\s*(ms|s|m|h)\s*$")
UNITS = {"ms": "milliseconds", "s": "seconds", "m": "minutes", "h": "hours"}


def trigger(text: str) -> dict[str, object]:
    """``availableNow``, or ``processingTime=<interval>`` (``10s``, ``500ms``, ``1 minute``)."""
    if text == "availableNow":
        return {"availableNow": True}
    name, sep, interval = text.partition("=")
    if name == "processingTime" and sep and interval:
        short = INTERVAL.match(interval)
        return {"processingTime": f"{short[1]} {UNITS[short[2]]}" if short else interval}
    raise SystemExit(f"--trigger must be availableNow or processingTime=<interval>, got {text!r}")


class BatchInterrupted(Exception):
    """A batch a stop cut short (it is replayed at the next start): a short message, because
    Spark matches the failure's text with regular expressions that overflow the JVM's stack
    on the long one py4j builds for a cancelled job."""


class BatchWriter:
    """The ``foreachBatch`` function: one ``route_batch`` per micro-batch."""

    def __init__(self, spark: SparkSession, args: argparse.Namespace, settings: JobSettings,
                 spec: ValueSpec, dlq_topic: str, stop: Stop) -> None:
        self.spark = spark
        self.stop = stop
        self.args = args
        self.settings = settings
        self.spec = spec
        self.dlq_topic = dlq_topic
        self._sink: DeltaSink | None = None
        self._dlq: DeadLetterProducer | None = None

    def _open(self) -> tuple[DeltaSink, DeadLetterProducer]:
        if self._sink is None or self._dlq is None:
            query_id = self.spark.sparkContext.getLocalProperty("sql.streaming.queryId")
            app_id = APP_PREFIX + query_id
            self._sink = DeltaSink(self.args.table, writer_id=app_id,
                                   partition_by=self.settings.partition_by(),
                                   schema_mode=table_schema_mode(self.spec, self.settings))
            self._dlq = DeadLetterProducer(self.args.bootstrap, writer_id=app_id,
                                           state_dir=dlq_state_dir(self._sink),
                                           destinations=[self.dlq_topic],
                                           client_config=self.settings.client_security())
            log.info("app id %s: %s -> %s, dead letters -> %s", app_id, self.args.topic,
                     self.args.table, self.dlq_topic)
        return self._sink, self._dlq

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        from deltalake import Transaction

        started = time.monotonic()
        sink, dlq = self._open()
        if isinstance(self.spec, RegistryValues):
            self.spec = self.spec.refreshed()
        try:
            outcome = route_batch(df, self.spec, sink, [Transaction(sink.writer_id, batch_id)],
                                  dlq, str(batch_id), lambda letter: self.dlq_topic)
        except Exception:
            if self.stop.requested:
                raise BatchInterrupted(f"batch {batch_id} was cut short by a stop") from None
            raise
        log.info("batch %d: %s (%.2fs)", batch_id, outcome.describe(),
                 time.monotonic() - started)

    def close(self) -> None:
        if self._dlq is not None:
            self._dlq.close()


def start(spark: SparkSession, args: argparse.Namespace, settings: JobSettings,
          writer: BatchWriter) -> StreamingQuery:
    reader = sparklog_reader(spark.readStream, settings, args.bootstrap, args.topic)
    reader = reader.option("startingOffsets", settings["stream.startingOffsets"])
    if settings["stream.maxOffsetsPerTrigger"]:
        reader = reader.option("maxOffsetsPerTrigger", settings["stream.maxOffsetsPerTrigger"])
    if args.group_id:
        reader = reader.option("groupId", args.group_id)
    clear_interrupted_first_batch(args.checkpoint)
    return (reader.load().writeStream.queryName("stream_to_delta").foreachBatch(writer)
            .option("checkpointLocation", args.checkpoint)
            .trigger(**trigger(args.trigger or settings["stream.trigger"]))
            .start())


def run(spark: SparkSession, args: argparse.Namespace, settings: JobSettings,
        stop: Stop) -> int:
    """Run the query until it ends (availableNow), fails, or a signal stops it."""
    from pyspark.errors import StreamingQueryException

    dlq_topic = args.dlq_topic or args.topic + settings["dlq.topicSuffix"]
    security = settings.client_security()
    ensure_topics(args.bootstrap,
                  {dlq_topic: partition_count(args.bootstrap, args.topic, security)}, security)
    writer = BatchWriter(spark, args, settings, value_spec(args, settings, args.topic),
                         dlq_topic, stop)
    query = start(spark, args, settings, writer)
    try:
        while query.isActive and not stop.requested:
            query.awaitTermination(1)
    except StreamingQueryException:
        pass  # reported below
    finally:
        if query.isActive:
            if stop.requested:
                quiet_interrupted_batch(spark)
            query.stop()
            if stop.signal is not None:
                log.info("query stopped by signal %s", stop.signal.name)
        writer.close()
    failure = query.exception()
    if failure is not None and not (stop.requested and BatchInterrupted.__name__ in str(failure)):
        log.error("query failed: %s", failure)
        return 1
    return 0  # a batch the stop cut short is no failure: it is replayed at the next start


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # a bad trigger is refused before Spark starts
    return run_job("stream_to_delta", args, run,
                   check=lambda settings: trigger(args.trigger or settings["stream.trigger"]))


if __name__ == "__main__":
    sys.exit(main())
