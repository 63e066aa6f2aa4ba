"""Plumbing shared by the jobs in ``jobs/``: settings, SparkSession, signals, one batch's routing.

Invariants:
- Defaults live in ``conf/`` (``SPARKLOG_CONF_DIR`` or ``--conf-dir`` points elsewhere):
  ``jobs.properties`` (job settings; ``--set key=value`` wins) and ``spark-local.conf``
  (Spark settings, ``spark-defaults.conf`` format; a setting already given to Spark, for
  example by ``spark-submit`` or ``--master``, wins). ``source.<option>`` settings are passed
  to every ``sparklog`` read as ``.option(<option>, value)``.
- ``route_batch`` is the one place a batch is split and written, for every job: good rows go
  to Delta exactly once, bad rows become dead letters sent before the Delta commit, and a
  batch already committed runs nothing.
- The first SIGTERM or SIGINT sets a flag that the jobs poll; a second one exits at once.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, ModuleType
from typing import TYPE_CHECKING

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark import StorageLevel

from sparklog.delta.sink import BatchResult, DeltaSink
from sparklog.dlq.headers import DeadLetter
from sparklog.dlq.parse import ParseSpec, bad_rows, classify, good_rows, parse
from sparklog.dlq.producer import DeadLetterProducer, SendResult
from sparklog.faults import fault_point
from sparklog.properties import read_properties

if TYPE_CHECKING:
    from deltalake import Transaction
    from pyspark.sql import DataFrame, DataFrameReader, Row, SparkSession
    from pyspark.sql.streaming import DataStreamReader

log = logging.getLogger("sparklog.jobs")

CONF_ENV = "SPARKLOG_CONF_DIR"
REPO = Path(__file__).resolve().parent.parent
REPO_CONF = REPO / "conf"
SOURCE_PREFIX = "source."


# -- settings ------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobSettings:
    values: Mapping[str, str]
    spark: Mapping[str, str]

    @classmethod
    def load(cls, conf_dir: str | None = None, overrides: Sequence[str] = ()) -> JobSettings:
        directory = Path(conf_dir or os.environ.get(CONF_ENV) or REPO_CONF)
        if not (directory / "jobs.properties").is_file():
            raise SystemExit(f"no jobs.properties in {directory}: pass --conf-dir or set "
                             f"{CONF_ENV} to the repository's conf/ directory")
        values = read_properties(directory / "jobs.properties")
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep:
                raise SystemExit(f"--set expects key=value, got {item!r}")
            values[key.strip()] = value.strip()
        spark_conf = directory / "spark-local.conf"
        return cls(values, read_properties(spark_conf) if spark_conf.is_file() else {})

    def __getitem__(self, key: str) -> str:
        if key not in self.values:
            raise SystemExit(f"setting {key} is missing from jobs.properties")
        return self.values[key]

    def integer(self, key: str) -> int:
        try:
            return int(self[key])
        except ValueError:
            raise SystemExit(f"setting {key} must be an integer, got {self[key]!r}") from None

    def source_options(self) -> dict[str, str]:
        return {k[len(SOURCE_PREFIX):]: v for k, v in self.values.items()
                if k.startswith(SOURCE_PREFIX) and v != ""}

    def schema_mode(self) -> str | None:
        mode = self["delta.schemaMode"]
        if mode not in ("strict", "merge"):
            raise SystemExit(f"delta.schemaMode must be strict or merge, got {mode!r}")
        return None if mode == "strict" else mode

    def partition_by(self) -> list[str]:
        return [c.strip() for c in self["delta.partitionBy"].split(",") if c.strip()]


def load_job(name: str) -> ModuleType:
    """``jobs/<name>.py`` of this repository as a module (for tests and benchmarks)."""
    path = REPO / "jobs" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"sparklog_job_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"no job {name} at {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- command line --------------------------------------------------------------------------


def job_parser(description: str) -> argparse.ArgumentParser:
    """The arguments every job takes: where to read, which table and schema, settings."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers HOST:PORT")
    parser.add_argument("--table", required=True, help="Delta table path (created if missing)")
    parser.add_argument("--schema", required=True,
                        help="DDL schema of the JSON values, e.g. 'id BIGINT NOT NULL, user "
                             "STRING'; NOT NULL top-level fields are required")
    parser.add_argument("--conf-dir", help=f"directory with jobs.properties and "
                                           f"spark-local.conf (default: ${CONF_ENV} or conf/)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a jobs.properties setting (repeatable)")
    parser.add_argument("--master", help="Spark master (default: spark-local.conf)")
    return parser


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)


# -- Spark ---------------------------------------------------------------------------------


def build_spark(app_name: str, settings: JobSettings, master: str | None = None) -> SparkSession:
    """A SparkSession with spark-local.conf applied under what Spark was already given."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    from sparklog.datasource import register

    given = SparkConf()  # spark-submit's settings arrive as spark.* system properties
    builder = SparkSession.builder.appName(app_name)
    for key, value in settings.spark.items():
        if not given.contains(key):
            builder = builder.config(key, value)
    if master:
        builder = builder.master(master)
    spark = builder.getOrCreate()
    register(spark)  # the format, and the listener that mirrors --group-id commits
    return spark


def sparklog_reader(reader: DataFrameReader | DataStreamReader, settings: JobSettings,
                    bootstrap: str, topic: str) -> DataFrameReader | DataStreamReader:
    reader = (reader.format("sparklog").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("includeHeaders", "true"))
    for key, value in settings.source_options().items():
        reader = reader.option(key, value)
    return reader


# -- topics --------------------------------------------------------------------------------


def partition_count(bootstrap: str, topic: str) -> int:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None or not found.partitions:
        raise SystemExit(f"topic {topic} not found on {bootstrap}")
    return len(found.partitions)


def ensure_topics(bootstrap: str, topics: Mapping[str, int]) -> None:
    """Create the topics that do not exist yet (``{name: partitions}``)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions) for name, partitions in
                                   topics.items()], operation_timeout=30)
    for name, future in futures.items():
        try:
            future.result(60)
        except KafkaException as error:
            if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise SystemExit(f"could not create topic {name}: {error}") from None


# -- signals -------------------------------------------------------------------------------


class StopFlag:
    """Set by the first SIGTERM/SIGINT; the second one ends the process at once."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def install(self) -> StopFlag:
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.event.is_set():
            log.warning("second signal %d: exiting now", signum)
            os._exit(128 + signum)
        log.info("signal %d: stopping cleanly (send it again to exit at once)", signum)
        self.event.set()

    @property
    def stopped(self) -> bool:
        return self.event.is_set()


# -- one batch -----------------------------------------------------------------------------


def dead_letters(rows: Iterable[Row], spec: ParseSpec) -> Iterator[DeadLetter]:
    """Bad rows (``bad_rows``) as dead letters, each with its error."""
    for row in rows:
        value = bytes(row.value) if row.value is not None else None
        error_class, message = classify(value, spec)
        yield DeadLetter.from_record(
            key=bytes(row.key) if row.key is not None else None, value=value,
            headers=[(h.key, bytes(h.value) if h.value is not None else None)
                     for h in row.headers or ()],
            topic=row.topic, partition=row.partition, offset=row.offset,
            timestamp_ms=row.timestamp_ms, error_class=error_class, error_message=message)


@dataclass(frozen=True)
class BatchOutcome:
    delta: BatchResult
    dead_letters: SendResult | None  # None when skipped

    def describe(self) -> str:
        if not self.delta.committed:
            return f"skipped: the table already records txn version {self.delta.recorded_version}"
        dlq = self.dead_letters or SendResult(0, 0)
        bad = dlq.sent + dlq.already_sent
        again = f", {dlq.already_sent} sent by an earlier attempt" if dlq.already_sent else ""
        return (f"{self.delta.rows + bad} rows in, {self.delta.rows} good, {bad} bad{again}; "
                f"committed as Delta version {self.delta.table_version}")


def route_batch(df: DataFrame, spec: ParseSpec, sink: DeltaSink,
                transactions: Sequence[Transaction], dlq: DeadLetterProducer, batch_key: str,
                destination: Callable[[DeadLetter], str]) -> BatchOutcome:
    """Write a batch's good rows to Delta once and its bad rows to ``destination(letter)``."""
    # parsed once for both the Delta files and the dead letters; on disk, which measured as
    # fast as memory here and leaves the executors' heap alone
    parsed = parse(df, spec).persist(StorageLevel.DISK_ONLY)
    sent: list[SendResult] = []

    def send_dead_letters() -> None:
        rows = bad_rows(parsed, spec).toLocalIterator(prefetchPartitions=True)
        letters = dead_letters(rows, spec)
        sent.append(dlq.send(batch_key, ((destination(letter), letter) for letter in letters)))
        fault_point("dead_letters_sent", batch_key)

    try:
        result = sink.write(good_rows(parsed, spec), transactions,
                            before_commit=send_dead_letters, fault_tag=batch_key)
    finally:
        parsed.unpersist()
    dlq.forget()  # committed now, or earlier (skipped): no intent is needed any more
    return BatchOutcome(result, sent[0] if sent else None)


def dlq_state_dir(sink: DeltaSink) -> Path:
    """Where a writer keeps its dead-letter intents: next to its staging area."""
    return sink.work_dir / "dlq" / sink.writer_key


JobRun = Callable[["SparkSession", "argparse.Namespace", JobSettings, StopFlag], int]


def run_job(app_name: str, args: argparse.Namespace, run: JobRun,
            check: Callable[[JobSettings], object] | None = None) -> int:
    """The long-running jobs' main: logging, settings (``check`` refuses bad ones before
    Spark starts), a stop flag for SIGTERM / Ctrl-C, and a SparkSession stopped at the end."""
    setup_logging()
    settings = JobSettings.load(args.conf_dir, args.set)
    if check is not None:
        check(settings)
    stop = StopFlag().install()
    spark = build_spark(app_name, settings, args.master)
    try:
        return run(spark, args, settings, stop)
    finally:
        spark.stop()
