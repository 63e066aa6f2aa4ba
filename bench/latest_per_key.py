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
broker.

Then the memory bound of one task, without Spark: a topic of one partition holding the same
number of records, every key distinct (the most keys a partition can have), reduced by
``read_latest_per_key`` in a child process with the default budget (64 MiB) and with 16 MiB,
against a plain read of the partition (``read_partition``): seconds, rounds, peak RSS of
the process. The last line is ``latest_per_key_ratio=<ratio>``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import (  # bench/ is on sys.path
    MiB,
    Row,
    peak_rss_mib,
    print_table,
    scratch_dir,
    spark_cpu_seconds,
    vm_hwm_mib,
)
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.broker.process import BrokerProcess

RECORD_BYTES = 100
PARTITIONS = 2
TOPIC = "table"
PASSES = 3  # timed runs per child
ROUNDS = 2  # children per query, alternating
QUERIES = ("latestPerKey", "window", "plain read")
DISTINCT_TOPIC = "distinct"
TASK_BUDGETS_MIB = (0, 64, 16)  # 0: the plain read


# -- the data ----------------------------------------------------------------------------------


def topic_producer(bootstrap: str, topic: str, partitions: int,
                   config: dict[str, str]) -> Producer:
    """Create ``topic``; a producer batching large for it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, config=config)])[topic].result(30)
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                     "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000})


def send(producer: Producer, topic: str, key: bytes, value: bytes | None) -> None:
    while True:
        try:
            producer.produce(topic, key=key, value=value)
            return
        except BufferError:
            producer.poll(0.05)


def flush(producer: Producer) -> None:
    if producer.flush(300):
        raise SystemExit("records still unsent after 300 s")


def produce(bootstrap: str, records: int, keys: int) -> int:
    """Produce the table's topic; return how many rows its table has (keys whose last
    record is not a tombstone)."""
    producer = topic_producer(bootstrap, TOPIC, PARTITIONS, {
        "cleanup.policy": "compact", "min.compaction.lag.ms": "86400000"})
    rng = random.Random(14)
    value = b"x" * RECORD_BYTES
    alive: dict[bytes, bool] = {}
    for _ in range(records):
        key = b"user-%09d" % rng.randrange(keys)
        tombstone = rng.random() < 0.05
        alive[key] = not tombstone
        send(producer, TOPIC, key, None if tombstone else value)
    flush(producer)
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


def run_child(bootstrap: str, *args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--bootstrap", bootstrap, *args],
                         check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# -- one task's memory, without Spark (the child) -----------------------------------------------


class RoundsSeen(logging.Handler):
    """Catches the reduction's "read in N rounds" log record."""

    rounds = 1

    def emit(self, record: logging.LogRecord) -> None:
        if "rounds" in record.msg:
            self.rounds = int(record.args[4])  # type: ignore[index]


def task_child(bootstrap: str, budget_mib: int) -> None:
    """One partition of distinct keys reduced (budget > 0) or read plainly (0)."""
    from sparklog.datasource.read.batch_reader import SparklogBatchReader
    from sparklog.datasource.read.fetcher import read_partition
    from sparklog.datasource.read.latest_per_key import log, read_latest_per_key

    seen = RoundsSeen()
    log.addHandler(seen)
    log.setLevel(logging.INFO)
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": DISTINCT_TOPIC,
               "latestPerKey": "true"}
    (task,) = SparklogBatchReader(options, None).partitions()
    started = time.perf_counter()
    chunks = (read_latest_per_key(task, budget_mib * MiB) if budget_mib
              else read_partition(task))
    rows = sum(chunk.num_rows for chunk in chunks)
    print(json.dumps({"seconds": time.perf_counter() - started, "rows": rows,
                      "rounds": seen.rounds if budget_mib else 0, "rss": peak_rss_mib()}))


def produce_distinct(bootstrap: str, records: int) -> None:
    producer = topic_producer(bootstrap, DISTINCT_TOPIC, 1, {})
    value = b"x" * RECORD_BYTES
    for i in range(records):
        send(producer, DISTINCT_TOPIC, b"user-%09d" % i, value)
    flush(producer)


# -- the run -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="200,000 records, 20,000 keys")
    parser.add_argument("--child", choices=QUERIES, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--expect", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--task-budget-mib", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.bootstrap, args.child, args.expect)
        return
    if args.task_budget_mib is not None:
        task_child(args.bootstrap, args.task_budget_mib)
        return
    records, keys = (200_000, 20_000) if args.quick else (args.records, args.keys)
    results: dict[str, list[dict[str, Any]]] = {query: [] for query in QUERIES}
    with scratch_dir(None, "sparklog-bench-table-") as scratch:
        broker = BrokerProcess(Path(scratch) / "data").start()
        try:
            table_rows = produce(broker.bootstrap, records, keys)
            for _ in range(ROUNDS):
                for query in QUERIES:
                    results[query].append(run_child(broker.bootstrap, "--child", query,
                                                    "--expect", str(table_rows)))
            produce_distinct(broker.bootstrap, records)
            tasks = {budget: run_child(broker.bootstrap, "--task-budget-mib", str(budget))
                     for budget in TASK_BUDGETS_MIB}
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
    print(f"one task, {records:,} distinct keys (user-NNNNNNNNN) in one partition, no Spark:")
    print_table(("task", "s", "records/s", "rounds", "rows out", "peak RSS MiB"), [
        Row(f"read_latest_per_key, budget {budget} MiB" if budget else "read_partition (plain)",
            f"{run['seconds']:.2f}", f"{records / run['seconds']:,.0f}",
            str(run["rounds"]) if budget else "", f"{run['rows']:,}", f"{run['rss']:.0f}")
        for budget, run in tasks.items()])
    print(f"broker peak RSS {broker_rss:.0f} MiB")
    print(f"latest_per_key_ratio={ratio:.3f}")


if __name__ == "__main__":
    main()
