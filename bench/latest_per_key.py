"""A compacted topic read as a table: ``latestPerKey`` against a plain read + a window function.

Usage: ``python bench/latest_per_key.py [--records N] [--keys K] [--quick]``

Starts its own broker (a child process on a scratch directory) and produces N records
(default 2,000,000; ``--quick`` 200,000) of 100 B values over K keys (default 100,000;
``--quick`` 20,000; keys drawn at random, 5% of the records tombstones) into a compacted
topic of two partitions (keys placed by the producer's partitioner) whose
``min.compaction.lag.ms`` keeps the cleaner off it during the run: the worst case, every
update still in the log. Then three batch queries into the ``noop`` sink, each in a
``local[2]`` Spark session of its own (a child process, so each query's peak RSS is its
own), with Spark's default settings (``spark.sql.shuffle.partitions`` 200, adaptive query
execution on) and the driver memory the other benches use (2g):
- ``latestPerKey``: ``spark.read.format("sparklog").option("latestPerKey", "true")``, the
  reduction done in the two read tasks (two passes over each partition, no shuffle);
- ``window``: what it replaces, ``spark.read.format("sparklog")`` then
  ``row_number() over (partition by key order by offset desc) = 1`` and a non-null value;
- ``plain read``: the read alone, the floor under both.
Each child runs its query once to warm up (Python workers, imports, the JVM's JIT), checks
the row count against the model kept while producing, then times three runs; the children
run twice, alternating (latestPerKey, window, plain, latestPerKey, ...), and the median of
each query's six runs counts. Prints seconds, input records/s, the ratio (window seconds /
latestPerKey seconds), CPU seconds of the driver JVM and of the Python workers, and peak
RSS (VmHWM) of the driver JVM and of the largest Python worker, per query; and of the
broker. The last line is ``latest_per_key_ratio=<ratio>``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import Row, print_table, scratch_dir, spark_cpu_seconds, vm_hwm_mib  # bench/ on path
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.broker.process import BrokerProcess

RECORD_BYTES = 100
PARTITIONS = 2
TOPIC = "table"
PASSES = 3  # timed runs per child
ROUNDS = 2  # children per query, alternating
QUERIES = ("latestPerKey", "window", "plain read")


# -- the data ----------------------------------------------------------------------------------


def produce(bootstrap: str, records: int, keys: int) -> int:
    """Produce the topic; return how many rows its table has (keys whose last record is
    not a tombstone)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, config={
        "cleanup.policy": "compact", "min.compaction.lag.ms": "86400000"})])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000})
    rng = random.Random(14)
    value = b"x" * RECORD_BYTES
    alive: dict[bytes, bool] = {}
    for _ in range(records):
        key = b"user-%09d" % rng.randrange(keys)
        tombstone = rng.random() < 0.05
        alive[key] = not tombstone
        while True:
            try:
                producer.produce(TOPIC, key=key, value=None if tombstone else value)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300):
        raise SystemExit("records still unsent after 300 s")
    return sum(alive.values())


# -- one query in a Spark session of its own (the child) ----------------------------------------


def query_frame(spark: Any, bootstrap: str, query: str) -> Any:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    reader = (spark.read.format("sparklog").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", TOPIC))
    if query == "latestPerKey":
        return reader.option("latestPerKey", "true").load()
    plain = reader.load()
    if query == "plain read":
        return plain
    latest_first = Window.partitionBy("key").orderBy(F.desc("offset"))
    return (plain.where(F.col("key").isNotNull())
            .withColumn("rank", F.row_number().over(latest_first))
            .where("rank = 1 AND value IS NOT NULL").drop("rank"))


def child(bootstrap: str, query: str, expected_rows: int) -> None:
    """Warm up, check the rows, time PASSES runs; print one JSON line."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName(f"bench-{query}")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "2g")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    frame = query_frame(spark, bootstrap, query)
    frame.write.format("noop").mode("overwrite").save()
    rows = frame.count()
    if query != "plain read" and rows != expected_rows:
        raise SystemExit(f"{query}: {rows} rows, the model says {expected_rows}")
    jvm_pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
    before = spark_cpu_seconds(jvm_pid, None)
    seconds = []
    for _ in range(PASSES):
        started = time.perf_counter()
        frame.write.format("noop").mode("overwrite").save()
        seconds.append(time.perf_counter() - started)
    after = spark_cpu_seconds(jvm_pid, None)
    cpu = {kind: sum(t - before[kind].get(pid, 0.0) for pid, t in pids.items()) / PASSES
           for kind, pids in after.items() if kind != "broker"}
    workers = [rss for pid in after["python workers"] if (rss := vm_hwm_mib(pid)) == rss]
    print(json.dumps({"seconds": seconds, "rows": rows, "cpu": cpu,
                      "jvm_rss": vm_hwm_mib(jvm_pid), "worker_rss": max(workers, default=0)}))
    spark.stop()


def run_child(bootstrap: str, query: str, expected_rows: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", query, "--bootstrap", bootstrap,
         "--expect", str(expected_rows)],
        check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# -- the run -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="200,000 records, 20,000 keys")
    parser.add_argument("--child", choices=QUERIES, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--expect", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.bootstrap, args.child, args.expect)
        return
    records, keys = (200_000, 20_000) if args.quick else (args.records, args.keys)
    results: dict[str, list[dict[str, Any]]] = {query: [] for query in QUERIES}
    with scratch_dir(None, "sparklog-bench-table-") as scratch:
        broker = BrokerProcess(Path(scratch) / "data").start()
        try:
            table_rows = produce(broker.bootstrap, records, keys)
            for _ in range(ROUNDS):
                for query in QUERIES:
                    results[query].append(run_child(broker.bootstrap, query, table_rows))
            broker_rss = vm_hwm_mib(broker.pid)
        finally:
            broker.stop()

    def median(query: str) -> float:
        return statistics.median(s for run in results[query] for s in run["seconds"])

    def mean_cpu(query: str, kind: str) -> float:
        return statistics.mean(run["cpu"][kind] for run in results[query])

    def peak(query: str, what: str) -> float:
        return max(run[what] for run in results[query])

    ratio = median("window") / median("latestPerKey")
    print(f"{records:,} records of {RECORD_BYTES} B over {keys:,} keys (5% tombstones), "
          f"{PARTITIONS} partitions, nothing cleaned; the table has {table_rows:,} rows; "
          "local[2], Spark's default settings")
    print_table(("batch query -> noop", "s", "input records/s", "ratio", "CPU s JVM",
                 "CPU s Python workers", "peak RSS JVM MiB", "peak RSS worker MiB"), [
        Row(query, f"{median(query):.2f}", f"{records / median(query):,.0f}",
            f"{median('window') / median(query):.2f}" if query != "plain read" else "",
            f"{mean_cpu(query, 'jvm'):.2f}", f"{mean_cpu(query, 'python workers'):.2f}",
            f"{peak(query, 'jvm_rss'):.0f}", f"{peak(query, 'worker_rss'):.0f}")
        for query in QUERIES])
    print("every run (s): " + "; ".join(
        f"{query} " + " ".join(f"{s:.2f}" for run in results[query] for s in run["seconds"])
        for query in QUERIES))
    print(f"broker peak RSS {broker_rss:.0f} MiB")
    print(f"latest_per_key_ratio={ratio:.3f}")


if __name__ == "__main__":
    main()
