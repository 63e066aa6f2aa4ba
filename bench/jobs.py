"""End-to-end throughput of ``sparklog.jobs.stream_to_delta``: a topic of JSON events into Delta.

Usage: ``python bench/jobs.py [--records N] [--quick] [--dir PATH]``

Starts its own broker (a child process on a scratch directory) and produces N JSON events
(default 2,000,000; ``--quick`` 100,000; 2% malformed, ``sparklog.sample_events``) into a
topic of 2 partitions, then times, in one ``local[2]`` Spark session built from the
package's ``spark-local.conf``:

1. the job: ``stream_to_delta.run`` with ``--trigger availableNow`` from earliest
   (``stream.maxOffsetsPerTrigger`` from ``jobs.properties``): sparklog source, JSON
   parsing, dead letters to ``<topic>.dlq``, exactly-once Delta commits;
2. ceiling "no source": the same records, read once and cached in Spark's memory, through
   the same per-batch code (``route_batch``: parse, dead letters, Delta) in batches of the
   same size: what the job costs without reading the topic;
3. ceiling "no parsing": the good rows as typed columns generated in memory
   (``spark.range``), written with ``write_batch_exactly_once`` in batches of the same size:
   the Delta sink alone.

A warm-up run of the job on 10,000 other events comes first (Python workers start, the
JIT compiles). Prints records/s for each, the job's share of each ceiling, and peak RSS
(VmHWM) of the driver JVM and this Python process, measured right after the job (before the
ceilings). The last line is ``jobs_ratio=<job records/s / no-source records/s>``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from _common import Row, peak_rss_mib, print_table, scratch_dir, vm_hwm_mib  # bench/ on path
from deltalake import DeltaTable, Transaction

from sparklog.broker.process import BrokerProcess
from sparklog.client.admin import ensure_topics
from sparklog.delta import DeltaSink, write_batch_exactly_once
from sparklog.dlq import DeadLetterProducer, ParseSpec
from sparklog.jobs import stream_to_delta
from sparklog.jobs.routing import dlq_state_dir, route_batch
from sparklog.jobs.runner import setup_logging
from sparklog.jobs.settings import JobSettings
from sparklog.jobs.spark import build_spark
from sparklog.sample_events import SCHEMA, produce_events
from sparklog.signals import Stop

TOPIC = "bench-events"
PARTITIONS = 2
WARM_UP = 10_000


def table_rows(path: Path) -> int:
    return DeltaTable(str(path)).to_pyarrow_table(columns=["id"]).num_rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", help="scratch parent directory (default: the temp dir)")
    args = parser.parse_args()
    setup_logging()
    records = args.records or (100_000 if args.quick else 2_000_000)

    with scratch_dir(args.dir, "sparklog-bench-jobs-") as root, \
            BrokerProcess(root / "broker") as broker:
        ensure_topics(broker.bootstrap, {TOPIC: PARTITIONS})
        started = time.perf_counter()
        produced = produce_events(broker.bootstrap, TOPIC, records)
        produce_s = time.perf_counter() - started
        print(f"produced {records} events ({produced.bad} malformed) in {produce_s:.1f}s")

        settings = JobSettings.load()
        batch = int(settings["stream.maxOffsetsPerTrigger"])
        spark = build_spark("bench-jobs", settings)
        jvm_pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())

        def run_job(topic: str, name: str) -> float:
            job_args = stream_to_delta.parse_args([
                "--bootstrap", broker.bootstrap, "--topic", topic, "--table", str(root / name),
                "--checkpoint", str(root / f"{name}-checkpoint"), "--schema", SCHEMA,
                "--trigger", "availableNow"])
            started = time.perf_counter()
            if stream_to_delta.run(spark, job_args, settings, Stop()) != 0:
                raise SystemExit("the job failed")
            return time.perf_counter() - started

        ensure_topics(broker.bootstrap, {"warm-up": PARTITIONS})
        produce_events(broker.bootstrap, "warm-up", WARM_UP)
        warm_up_s = run_job("warm-up", "warm-up")  # Python workers start, the JIT compiles
        job_s = run_job(TOPIC, "job")
        if table_rows(root / "job") != produced.good:
            raise SystemExit(f"the job wrote {table_rows(root / 'job')} rows, not "
                             f"{produced.good}")
        jvm_mib, python_mib = vm_hwm_mib(jvm_pid), peak_rss_mib()

        # 2. no source: the same records from Spark's memory through route_batch
        cached = (spark.read.format("sparklog").option("kafka.bootstrap.servers",
                                                       broker.bootstrap)
                  .option("subscribe", TOPIC).option("includeHeaders", "true").load().cache())
        last_offset = cached.selectExpr("max(offset)").first()[0]
        spec = ParseSpec.from_ddl(SCHEMA)
        sink = DeltaSink(root / "no-source", writer_id="bench-no-source")
        ensure_topics(broker.bootstrap, {f"{TOPIC}.dlq2": PARTITIONS})
        dlq = DeadLetterProducer(broker.bootstrap, writer_id=sink.writer_id,
                                 state_dir=dlq_state_dir(sink), destinations=[f"{TOPIC}.dlq2"])
        step = batch // PARTITIONS  # the job shares a batch between partitions by their lag
        started = time.perf_counter()
        for n, low in enumerate(range(0, last_offset + 1, step)):
            chunk = cached.where(f"offset >= {low} AND offset < {low + step}")
            route_batch(chunk, spec, sink, [Transaction(sink.writer_id, n)], dlq, str(n),
                        lambda letter: f"{TOPIC}.dlq2")
        no_source_s = time.perf_counter() - started
        dlq.close()
        cached.unpersist()
        if table_rows(root / "no-source") != produced.good:
            raise SystemExit("the no-source run lost or duplicated rows")

        # 3. no parsing: typed rows generated in memory, the Delta sink alone
        good = spark.range(produced.good).selectExpr(
            "id", "concat('user-', id % 97) AS user",
            "element_at(array('click', 'view', 'cart', 'buy'), CAST(id % 4 + 1 AS INT)) AS kind",
            "(id % 1000) * 0.25 AS amount",
            "timestamp_seconds(1700000000 + id) AS ts").cache()
        good.count()
        started = time.perf_counter()
        for n, low in enumerate(range(0, produced.good, batch)):
            write_batch_exactly_once(good.where(f"id >= {low} AND id < {low + batch}"), n,
                                     root / "no-parsing", "bench-no-parsing")
        no_parsing_s = time.perf_counter() - started
        good.unpersist()
        spark.stop()

    rate = records / job_s
    print_table(["path", "records", "seconds", "records/s", "job share"], [
        Row("stream_to_delta (availableNow)", f"{records}", f"{job_s:.1f}", f"{rate:,.0f}",
            "1.00"),
        Row("no source (cached, route_batch)", f"{records}", f"{no_source_s:.1f}",
            f"{records / no_source_s:,.0f}", f"{no_source_s / job_s:.2f}"),
        Row("no parsing (Delta sink only)", f"{produced.good}", f"{no_parsing_s:.1f}",
            f"{produced.good / no_parsing_s:,.0f}",
            f"{(no_parsing_s * records / produced.good) / job_s:.2f}"),
    ])
    print(f"warm-up run ({WARM_UP} records) {warm_up_s:.1f}s; batches of {batch} records; "
          f"producing took {produce_s:.1f}s "
          f"({records / produce_s:,.0f} records/s)")
    print(f"peak RSS after the job: driver JVM {jvm_mib:.0f} MiB, Python driver "
          f"{python_mib:.0f} MiB")
    print(f"jobs_ratio={no_source_s / job_s:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
