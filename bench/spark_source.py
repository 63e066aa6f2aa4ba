"""Spark source read throughput against the ceiling of the Python Data Source path.

Usage: ``python bench/spark_source.py [--records N] [--typed-records M] [--partitions P]
[--quick]``

Starts its own broker (a child process on a scratch directory) and a ``local[2]`` Spark
session, produces N records of 100 B (default 5,000,000; ``--quick`` 200,000) into a topic
of P partitions (default 2) with confluent-kafka (linger.ms 20, batch.size 1 MB), then
measures, in one run, two streaming queries with ``trigger(availableNow=True)`` into the
``noop`` sink, each with P tasks:
- ``readStream.format("sparklog")`` from earliest: Kafka Fetch + record decoding + Arrow;
- the ceiling: a Python data source with the same schema and row count whose tasks yield
  pre-built Arrow batches (what Spark itself costs on the Python Data Source path).
Warm-up first: the source on a few records (Python workers start, modules import), then
each query once on all N (the JVM's JIT compiles each query's path: a first full run of
either costs the JVM about 0.5 CPU-s more than the next); the measured runs read the same
topic again from earliest. Each query is then measured three times, alternating, and the
median run of each counts (single runs of either varied by up to 20%).
Prints records/s of both, their ratio (ceiling seconds / source seconds), the CPU seconds
each query cost the driver JVM, its Python workers and the broker (the machine has few
cores: the ratio is about CPU, see there where it goes), and peak RSS (VmHWM) of the driver
JVM, of the largest of its Python workers, of this Python driver process and of the broker.

Typed columns (``valueFormat``), with the broker's schema registry on: M records (default
1,000,000; ``--quick`` 100,000) of one event shape (a long, two strings, a double, a
timestamp, an enum, an array of strings; about 60 B of Avro, 150 B of JSON) written with
confluent-kafka's ``AvroSerializer`` into one topic and ``JSONSerializer`` into another (a
few hundred distinct values, serialized once and produced over and over). Each topic is
read (median of three, after a warm-up run of each) as bytes (the plain source), typed
(``valueFormat`` avro or json, the value decoded into a struct in the read task), and the
JSON topic also as bytes decoded by Spark's own ``from_json`` (the 5-byte header cut off
with ``substring``): the target is a typed JSON read faster than ``from_json``.
The last lines are ``spark_source_ratio=<ratio>`` and
``spark_source_json_vs_from_json=<from_json seconds / typed JSON seconds>``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import pyarrow as pa
from _common import (  # bench/ is on sys.path
    Row,
    peak_rss_mib,
    print_table,
    scratch_dir,
    spark_cpu_seconds,
    vm_hwm_mib,
)
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from sparklog.broker.process import BrokerProcess
from sparklog.datasource.schema import arrow_source_schema, source_schema

RECORD_BYTES = 100
CHUNK_ROWS = 1 << 16
WARM_UP = 10_000
PASSES = 3  # measured runs of each query; the median counts


# -- the ceiling: pre-built Arrow batches through the same Python Data Source path ---------------


class SyntheticDataSource(DataSource):
    """``format("synthetic_kafka")``: option ``rows`` rows over ``tasks`` tasks, one batch."""

    @classmethod
    def name(cls) -> str:
        return "synthetic_kafka"

    def schema(self) -> Any:
        return source_schema(False)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return SyntheticStreamReader(int(self.options["rows"]), int(self.options["tasks"]))


class SyntheticStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, rows: int, tasks: int) -> None:
        self.rows = rows
        self.tasks = tasks

    def initialOffset(self) -> dict:
        return {"rows": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        """Everything is available from the start."""

    def latestOffset(self, start: dict, limit: Any) -> dict:
        return {"rows": self.rows}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        total = end["rows"] - start["rows"]
        bounds = [start["rows"] + total * i // self.tasks for i in range(self.tasks + 1)]
        return [InputPartition(pair) for pair in pairwise(bounds)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        low, high = partition.value
        chunk = _chunk()
        while low < high:
            n = min(CHUNK_ROWS, high - low)
            yield chunk.slice(0, n)
            low += n


def _chunk() -> pa.RecordBatch:
    """One pre-built batch of CHUNK_ROWS records shaped like the Kafka source's output."""
    n = CHUNK_ROWS
    return pa.RecordBatch.from_arrays([
        pa.nulls(n, pa.binary()),
        pa.array([b"x" * RECORD_BYTES] * n, pa.binary()),
        pa.array(["bench"] * n, pa.string()),
        pa.array([0] * n, pa.int32()),
        pa.array(range(n), pa.int64()),
        pa.array([1_700_000_000_000_000] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array([0] * n, pa.int32()),
    ], schema=arrow_source_schema(False))


# -- the run --------------------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    """Records/s of producing ``records`` 100 B values round-robin over the partitions."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000})
    value = b"x" * RECORD_BYTES
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("records still unsent after 120 s")
    return records / (time.perf_counter() - started)


@dataclass(frozen=True)
class Run:
    """One measured query: wall seconds and CPU seconds spent by each kind of process."""

    seconds: float
    cpu: dict[str, float]


def median_run(runs: list[Run]) -> Run:
    return sorted(runs, key=lambda run: run.seconds)[len(runs) // 2]


def run_query(spark: Any, fmt: str, options: dict[str, str], expected: int,
              checkpoint: Path, broker_pid: int | None,
              transform: Callable[[Any], Any] = lambda df: df) -> Run:
    """An availableNow query from ``fmt`` (its DataFrame through ``transform``) into the
    noop sink, timed."""
    jvm_pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
    before = spark_cpu_seconds(jvm_pid, broker_pid)
    started = time.perf_counter()
    query = (transform(spark.readStream.format(fmt).options(**options).load())
             .writeStream.format("noop").option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    seconds = time.perf_counter() - started
    after = spark_cpu_seconds(jvm_pid, broker_pid)
    if query.exception() is not None:
        raise RuntimeError(f"{fmt} query failed: {query.exception()}")
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    if rows != expected:
        raise RuntimeError(f"{fmt} query read {rows} rows, expected {expected}")
    # A process that ended before the query did is not counted: /proc forgets it.
    return Run(seconds, {kind: sum(t - before[kind].get(pid, 0.0) for pid, t in pids.items())
                         for kind, pids in after.items()})


# -- typed columns ------------------------------------------------------------------------------

EVENT_AVRO = {"type": "record", "name": "Event", "fields": [
    {"name": "id", "type": "long"}, {"name": "user", "type": "string"},
    {"name": "page", "type": "string"}, {"name": "amount", "type": "double"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["VIEW", "BUY"]}},
    {"name": "tags", "type": {"type": "array", "items": "string"}}]}
EVENT_JSON = {"type": "object", "properties": {
    "id": {"type": "integer"}, "user": {"type": "string"}, "page": {"type": "string"},
    "amount": {"type": "number"}, "at": {"type": "string", "format": "date-time"},
    "kind": {"type": "string", "enum": ["VIEW", "BUY"]},
    "tags": {"type": "array", "items": {"type": "string"}}}}
DISTINCT = 500


def typed_values(registry_url: str, topic: str, fmt: str) -> list[bytes]:
    """``DISTINCT`` serialized events in Confluent's wire format (subject ``<topic>-value``)."""
    import datetime
    import json

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    registry = SchemaRegistryClient({"url": registry_url})
    ctx = SerializationContext(topic, MessageField.VALUE)
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    events = [{"id": i, "user": f"user-{i % 97}", "page": f"/p/{i % 13}", "amount": i / 7,
               "at": start + datetime.timedelta(seconds=i), "kind": ("VIEW", "BUY")[i % 2],
               "tags": [f"t{i % 5}", "x"]} for i in range(DISTINCT)]
    if fmt == "avro":
        serializer = AvroSerializer(registry, json.dumps(EVENT_AVRO))
        return [serializer(event, ctx) for event in events]
    serializer = JSONSerializer(json.dumps(EVENT_JSON), registry)
    return [serializer({**event, "at": event["at"].isoformat()}, ctx) for event in events]


def produce_values(bootstrap: str, topic: str, partitions: int, records: int,
                   values: list[bytes]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000})
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=values[i % len(values)], partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError("records still unsent after 120 s")


def from_json(df: Any) -> Any:
    """The value decoded by Spark's ``from_json`` (Confluent's 5-byte header cut off)."""
    from pyspark.sql import functions as F

    ddl = ("id BIGINT, user STRING, page STRING, amount DOUBLE, at TIMESTAMP, kind STRING, "
           "tags ARRAY<STRING>")
    return df.select(F.from_json(F.expr("cast(substring(value, 6) as string)"), ddl)
                     .alias("value"), "topic", "partition", "offset")


def typed_rows(spark: Any, broker: BrokerProcess, scratch: Path, partitions: int,
               records: int) -> tuple[list[Row], float]:
    """The typed columns' table rows, and from_json's seconds over typed JSON's."""
    assert broker.schema_registry_url is not None
    queries: dict[str, tuple[str, dict[str, str], Callable[[Any], Any]]] = {}
    for fmt in ("avro", "json"):
        topic = f"typed-{fmt}"
        produce_values(broker.bootstrap, topic, partitions, records,
                       typed_values(broker.schema_registry_url, topic, fmt))
        plain = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic,
                 "startingOffsets": "earliest"}
        typed = {**plain, "valueFormat": fmt, "schemaRegistry.url": broker.schema_registry_url}
        queries[f"{fmt}: bytes (plain source)"] = ("sparklog", plain, lambda df: df)
        queries[f"{fmt}: typed (valueFormat={fmt})"] = ("sparklog", typed, lambda df: df)
    queries["json: bytes + Spark's from_json"] = ("sparklog", queries[
        "json: bytes (plain source)"][1], from_json)
    runs: dict[str, list[Run]] = {name: [] for name in queries}
    for n in range(PASSES + 1):  # the first pass warms up each query's path
        for name, (fmt, options, transform) in queries.items():
            run = run_query(spark, fmt, options, records, scratch / f"ck-{name}-{n}".replace(
                " ", "_"), broker.pid, transform)
            if n:
                runs[name].append(run)
    median = {name: median_run(measured) for name, measured in runs.items()}
    rows = []
    for name, run in median.items():
        base = median[name.split(":")[0] + ": bytes (plain source)"]
        rows.append(Row(name, f"{run.seconds:.2f}", f"{records / run.seconds:,.0f}",
                        f"{base.seconds / run.seconds:.2f}"))
    versus = (median["json: bytes + Spark's from_json"].seconds
              / median["json: typed (valueFormat=json)"].seconds)
    return rows, versus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--typed-records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--quick", action="store_true",
                        help="200,000 records, 100,000 typed")
    args = parser.parse_args()
    records = 200_000 if args.quick else args.records
    typed_records = 100_000 if args.quick else args.typed_records
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    from sparklog.datasource import register

    with scratch_dir(None, "sparklog-bench-source-") as scratch:
        broker = BrokerProcess(scratch / "data", {
            "schema.registry.listeners": "http://127.0.0.1:0"}).start()
        try:
            produce(broker.bootstrap, "warm", args.partitions, WARM_UP)
            produce_rate = produce(broker.bootstrap, "bench", args.partitions, records)
            spark = (SparkSession.builder.master("local[2]").appName("bench-spark-source")
                     .config("spark.ui.enabled", "false")
                     .config("spark.driver.memory", "2g").getOrCreate())
            spark.sparkContext.setLogLevel("WARN")
            register(spark)
            spark.dataSource.register(SyntheticDataSource)

            def source(topic: str) -> dict[str, str]:
                return {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic,
                        "startingOffsets": "earliest"}

            def synthetic(rows: int) -> dict[str, str]:
                return {"rows": str(rows), "tasks": str(args.partitions)}

            pid = broker.pid
            run_query(spark, "sparklog", source("warm"), WARM_UP, scratch / "ck-warm-source",
                      pid)
            # Both queries once on the full row count first: the JVM compiles each query's
            # own path (not one shared path) and the first full run of either costs about
            # 0.5 CPU-s more JVM time than the next.
            run_query(spark, "sparklog", source("bench"), records, scratch / "ck-warm-full",
                      pid)
            run_query(spark, "synthetic_kafka", synthetic(records), records,
                      scratch / "ck-warm-synth", pid)
            ours_runs, ceiling_runs = [], []
            for n in range(PASSES):  # alternating, so both meet the same machine state
                ours_runs.append(run_query(spark, "sparklog", source("bench"), records,
                                           scratch / f"ck-source-{n}", pid))
                ceiling_runs.append(run_query(spark, "synthetic_kafka", synthetic(records),
                                              records, scratch / f"ck-synth-{n}", pid))
            ours, ceiling = median_run(ours_runs), median_run(ceiling_runs)
            typed, json_versus = typed_rows(spark, broker, scratch, args.partitions,
                                            typed_records)
            jvm_pid = spark.sparkContext._jvm.ProcessHandle.current().pid()
            jvm_rss = vm_hwm_mib(int(jvm_pid))
            workers = spark_cpu_seconds(int(jvm_pid), None)["python workers"]
            workers_rss = max((rss for pid in workers if (rss := vm_hwm_mib(pid)) == rss),
                              default=float("nan"))
            broker_rss = vm_hwm_mib(broker.pid)
            spark.stop()
        finally:
            broker.stop()

    ratio = ceiling.seconds / ours.seconds
    print(f"{records:,} records of {RECORD_BYTES} B, {args.partitions} partitions = "
          f"{args.partitions} Spark tasks, local[2]; produced at {produce_rate:,.0f} records/s")
    kinds = list(ours.cpu)
    print_table(("query (availableNow -> noop)", "s", "records/s", "ratio",
                 *(f"CPU s {kind}" for kind in kinds)), [
        Row("sparklog source (Kafka Fetch)", f"{ours.seconds:.2f}",
            f"{records / ours.seconds:,.0f}", f"{ratio:.2f}",
            *(f"{ours.cpu[kind]:.2f}" for kind in kinds)),
        Row("synthetic Arrow source (ceiling)", f"{ceiling.seconds:.2f}",
            f"{records / ceiling.seconds:,.0f}", "1.00",
            *(f"{ceiling.cpu[kind]:.2f}" for kind in kinds)),
    ])
    print("every run (s): sparklog " + " ".join(f"{r.seconds:.2f}" for r in ours_runs)
          + "; ceiling " + " ".join(f"{r.seconds:.2f}" for r in ceiling_runs))
    print_table(("peak RSS (VmHWM)", "MiB"), [
        Row("driver JVM", f"{jvm_rss:.0f}"),
        Row("Python worker (largest)", f"{workers_rss:.0f}"),
        Row("driver Python", f"{peak_rss_mib():.0f}"),
        Row("broker", f"{broker_rss:.0f}"),
    ])
    print(f"typed columns: {typed_records:,} records, {args.partitions} partitions")
    print_table(("query (availableNow -> noop)", "s", "records/s", "of bytes"), typed)
    print(f"spark_source_ratio={ratio:.3f}")
    print(f"spark_source_json_vs_from_json={json_versus:.3f}")


if __name__ == "__main__":
    main()
