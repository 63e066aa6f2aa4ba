"""Backfill a Delta table from a range of a topic, once: running the same range again adds
nothing.

    python -m sparklog.jobs.backfill --bootstrap HOST:PORT --topic T --table PATH \\
        (--schema DDL | --schema-registry URL [--subject S] [--value-format avro|json]) \\
        (--from-offsets JSON --to-offsets JSON | --from-time T --to-time T) [--dlq-topic T]

Offsets are Spark's Kafka JSON (``{"T": {"0": 0, "1": 0}}``, -2 earliest, -1 latest; the end is
exclusive); times are ISO 8601 (UTC when no zone is given) or epoch milliseconds. The range is
read with ``spark.read.format("sparklog")`` (``startingOffsets``/``endingOffsets`` or
``startingTimestamp``/``endingTimestamp``), parsed (or decoded with the registry's
schema) like ``stream_to_delta`` does, the bad
records go to the dead-letter topic (``T.dlq`` by default) and the good ones are committed in
ONE Delta commit with the txn ``(sparklog-backfill:<digest of topic and range>, 0)``.

Invariants:
- The app id is derived from the topic and the range as given (JSON normalised): the same
  range again finds its txn in the table and reads nothing. A range given with -1 (latest)
  is resolved when the job runs, so only its first run counts.
- A backfill that died before its commit left nothing visible; running it again completes it
  (dead letters already sent are not sent twice).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from deltalake import Transaction

from sparklog.client.admin import ensure_topics, partition_count
from sparklog.delta.sink import DeltaSink
from sparklog.dlq.producer import DeadLetterProducer
from sparklog.jobs.registry_values import table_schema_mode, value_spec
from sparklog.jobs.routing import dlq_state_dir, route_batch
from sparklog.jobs.runner import spark_job
from sparklog.jobs.settings import JobSettings, job_parser
from sparklog.jobs.spark import sparklog_reader

if TYPE_CHECKING:
    import argparse

    from pyspark.sql import SparkSession

log = logging.getLogger("sparklog.jobs.backfill")

APP_PREFIX = "sparklog-backfill:"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = job_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--topic", required=True)
    parser.add_argument("--from-offsets", help="starting offsets JSON (inclusive)")
    parser.add_argument("--to-offsets", help="ending offsets JSON (exclusive)")
    parser.add_argument("--from-time", help="starting time: ISO 8601 or epoch ms (inclusive)")
    parser.add_argument("--to-time", help="ending time: ISO 8601 or epoch ms (exclusive)")
    parser.add_argument("--dlq-topic", help="dead-letter topic (default: TOPIC + dlq.topicSuffix)")
    args = parser.parse_args(argv)
    by_offsets = args.from_offsets is not None and args.to_offsets is not None
    by_time = args.from_time is not None and args.to_time is not None
    given = [a for a in ("from_offsets", "to_offsets", "from_time", "to_time")
             if getattr(args, a) is not None]
    if not (by_offsets or by_time) or len(given) != 2:
        parser.error("give either --from-offsets and --to-offsets, or --from-time and --to-time")
    return args


def epoch_ms(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise SystemExit(f"not an ISO 8601 time or epoch milliseconds: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def offsets_json(text: str, what: str) -> str:
    try:
        return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    except ValueError as error:
        raise SystemExit(f"{what} is not JSON: {error}") from None


def range_options(args: argparse.Namespace) -> dict[str, str]:
    """The source options that select the range, normalised (they also name the backfill)."""
    if args.from_offsets is not None:
        return {"startingOffsets": offsets_json(args.from_offsets, "--from-offsets"),
                "endingOffsets": offsets_json(args.to_offsets, "--to-offsets")}
    return {"startingTimestamp": str(epoch_ms(args.from_time)),
            "endingTimestamp": str(epoch_ms(args.to_time))}


def app_id(topic: str, options: dict[str, str]) -> str:
    text = json.dumps({"topic": topic, **options}, sort_keys=True)
    return APP_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:24]


def run(spark: SparkSession, args: argparse.Namespace, settings: JobSettings) -> int:
    started = time.monotonic()
    options = range_options(args)
    writer_id = app_id(args.topic, options)
    dlq_topic = args.dlq_topic or args.topic + settings["dlq.topicSuffix"]
    spec = value_spec(args, settings, args.topic)
    sink = DeltaSink(args.table, writer_id=writer_id, partition_by=settings.partition_by(),
                     schema_mode=table_schema_mode(spec, settings))
    if sink.recorded_version(writer_id) is not None:
        log.info("backfill %s of %s %s is already in %s: nothing to do", writer_id,
                 args.topic, options, args.table)
        return 0
    security = settings.client_security()
    ensure_topics(args.bootstrap,
                  {dlq_topic: partition_count(args.bootstrap, args.topic, security)}, security)
    reader = sparklog_reader(spark.read, settings, args.bootstrap, args.topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    dlq = DeadLetterProducer(args.bootstrap, writer_id=writer_id, state_dir=dlq_state_dir(sink),
                             destinations=[dlq_topic], client_config=settings.client_security())
    try:
        outcome = route_batch(reader.load(), spec, sink,
                              [Transaction(writer_id, 0)], dlq, "0", lambda letter: dlq_topic)
    finally:
        dlq.close()
    log.info("backfill %s of %s %s: %s (%.2fs)", writer_id, args.topic, options,
             outcome.describe(), time.monotonic() - started)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with spark_job("backfill", args) as (spark, settings):
        return run(spark, args, settings)


if __name__ == "__main__":
    sys.exit(main())
