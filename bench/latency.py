"""Micro-batch latency of the sparklog source and sink against Spark's own floor.

Usage: ``python bench/latency.py [--seconds S] [--rounds N] [--rate R] [--quick]``

Starts its own broker (a child process on a scratch directory) and a ``local[2]`` Spark
session, warms the JVM up with an unmeasured ``rate`` query (the first query of a session
runs its micro-batches twice as slowly while the JIT compiles: measured first, the floor
would be inflated), then runs these streaming queries one after the other, N rounds of them
(default 2; ``--quick`` 1), each for S seconds a round (default 15; ``--quick`` 8), with
trigger ``processingTime="0 seconds"``, while a producer in this process writes R records/s
(default 200) to a topic of two partitions; interleaving the rounds spreads the machine's
drift over every query:
- Spark's ``rate`` source into ``noop``: Spark's own floor per micro-batch;
- a Python Data Source that reads R records/s made up in the task into a Python sink that
  drops them (both doing nothing else): the floor of Spark's Python Data Source API, which
  every Python source and sink pays per micro-batch (workers fed and read over sockets,
  Arrow both ways, a commit round on the driver); and ``rate`` into that sink: the API's
  floor for a Python sink alone;
- the sparklog source into ``noop``;
- ``rate`` into the sparklog sink (at-least-once, then exactly-once);
- the sparklog source into the sparklog sink (at-least-once, then exactly-once): a record
  produced to the first topic, copied by the query to a second and consumed there, end to
  end (p50 and p99, from the produce time each value carries to its arrival).
For each query: the median ``triggerExecution`` of its micro-batches over all rounds (the
first ``WARM_UP_BATCHES`` of each run left out: Python workers starting, imports) and its
ratio to the floor. Then exactly-once's own floor, measured without Spark: the median of the
driver's commit round of a micro-batch of one transaction per partition
(``TransactionCommitter.commit_batch``: the intent written, an EndTxn per transaction, the
prefix's open transactions listed, the intent marked committed) and of what a task with a
pooled producer adds to an at-least-once task (DescribeTransactions before resuming, the
repeated EndTxn on librdkafka's side, DescribeTransactions at the end). The exactly-once
queries pay little more than that floor once each Python worker holds a transactional
producer per partition (the first micro-batches make them: a new librdkafka producer
waits 50 to 500 ms on librdkafka's timers). Peak RSS of the
driver JVM, this process and the broker. Before the last line, the source into the sink
and ``rate`` into the sink against the Python Data Source API's floors (the do-nothing pair,
and ``rate`` into the do-nothing sink); the last line is
``latency_sink_ratio=<source into sink, at-least-once, against the floor>``.

Figures (a quiet machine, three runs of two 15 s rounds): Spark's floor 148, 127 and 128
ms; a Python source and sink doing nothing 1.58, 1.78 and 1.69 of it, ``rate`` into a
Python sink doing nothing 1.53, 1.51 and 1.56; sparklog into ``noop`` 1.19, 1.24 and 1.34;
``rate`` into the sparklog sink 1.21, 1.35 and 1.38; sparklog into the sparklog sink 1.34,
1.42 and 1.49 (0.85, 0.80 and 0.88 of the do-nothing pair), p50 topic to topic 292, 275
and 286 ms; exactly-once 1.40 / 1.46 / 1.40 and 1.42 / 1.57 / 1.55.

sparklog beats a Python source and sink that do nothing because PySpark's daemon runs a
full ``gc.collect()`` in a reused Python worker after every task, which walks every object
the worker holds (PySpark's and pyarrow's modules: some 46,000 in a do-nothing worker, 23
ms of CPU per task; 64,000 and 25 ms in a sparklog worker), four tasks a micro-batch, on the
two cores the driver writes its checkpoint with. sparklog's tasks freeze what their worker
holds (``sparklog.datasource.worker_heap``), so that collection walks only what came since:
a worker's CPU per micro-batch went from 36 to 2-6 ms and Spark's commit-log write, which
ran beside those collections, from 78 to 42-48 ms (before: sparklog into the sink 1.56 to
1.70 of the floor, 1.10 to 1.18 of the do-nothing pair). Inside the tasks sparklog's own
work is 1 to 2 ms of CPU (a read task's fetch and Arrow building, a write task's produce
and flush once its producer is pooled); the rest is Spark's: two checkpoint files per
micro-batch (``walCommit``, ``commitOffsets``: 40-50 ms each here), a Python worker on the
driver building the writer for each micro-batch and another committing it, and the
workers' socket and Arrow round trips. The JVM is warmed up first: the first query of a
session runs its micro-batches about twice as slowly (``rate`` into ``noop``: 163 ms, then
89 ms, with no broker running).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from _common import (  # bench/ on path
    Row,
    create_topic,
    peak_rss_mib,
    print_table,
    scratch_dir,
    start_spark,
    vm_hwm_mib,
)
from confluent_kafka import Consumer, Producer
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)

from sparklog.broker.process import BrokerProcess
from sparklog.client.kafka import KafkaClient
from sparklog.client.settings import ClientConfig, RetryPolicy, parse_bootstrap
from sparklog.client.transactions import describe_transaction
from sparklog.datasource.write.commit_intents import SinkTransaction
from sparklog.datasource.write.commit_message import SinkCommitMessage
from sparklog.datasource.write.two_phase_commit import TransactionCommitter

PARTITIONS = 2
WARM_UP_BATCHES = 3
COMMIT_ROUNDS = 30
TIMEOUT_S = 30.0
WARM_UP_S = 10.0


class Feed:
    """A producer writing ``rate`` records/s to ``topic``, each value its produce time (ns)."""

    def __init__(self, bootstrap: str, topic: str, rate: int) -> None:
        self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        self._topic, self._rate = topic, rate
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        interval = 1 / self._rate
        due = time.perf_counter()
        while not self._stop.is_set():
            self._producer.produce(self._topic, str(time.time_ns()).encode())
            self._producer.poll(0)
            due += interval
            time.sleep(max(0.0, due - time.perf_counter()))
        self._producer.flush(30)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


class Arrivals:
    """A consumer of ``topic`` from its end, noting each record's delay since produce (ms)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-latency",
                                   "auto.offset.reset": "latest", "fetch.wait.max.ms": 10,
                                   "enable.auto.commit": False})
        self._consumer.subscribe([topic])
        self.delays_ms: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self._consumer.consume(1000, 0.1):
                if message.error() is None:
                    self.delays_ms.append((time.time_ns() - int(message.value())) / 1e6)
        self._consumer.close()

    def close(self) -> list[float]:
        self._stop.set()
        self._thread.join()
        return self.delays_ms


class _NothingPartition(InputPartition):
    def __init__(self, rows: int) -> None:
        self.rows = rows


class _NothingReader(DataSourceStreamReader):
    """Offsets are milliseconds; a batch holds ``rate`` records per second of them."""

    def __init__(self, rate: int) -> None:
        self._rate = rate

    def initialOffset(self) -> dict:
        return {"ms": int(time.time() * 1000)}

    def latestOffset(self) -> dict:
        return {"ms": int(time.time() * 1000)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        rows = self._rate * (end["ms"] - start["ms"]) // 1000 // PARTITIONS
        return [_NothingPartition(rows) for _ in range(PARTITIONS)]

    def read(self, partition: InputPartition) -> Any:
        assert isinstance(partition, _NothingPartition)
        return ((str(n),) for n in range(partition.rows))

    def commit(self, end: dict) -> None:
        pass


class _Dropped(WriterCommitMessage):
    pass


class _NothingWriter(DataSourceStreamWriter):
    def write(self, iterator: Any) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return _Dropped()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


class NothingSource(DataSource):
    """``bench_nothing``: the Python Data Source API with no work in it (module docstring);
    the rate is the ``rowsPerSecond`` option."""

    @classmethod
    def name(cls) -> str:
        return "bench_nothing"

    def schema(self) -> str:
        return "value string"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _NothingReader(int(self.options["rowsPerSecond"]))

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        return _NothingWriter()


PHASES = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
"""Spark's own split of a micro-batch (``durationMs``), shown per query."""


def run_query(start: Callable[[str], Any], seconds: float) -> list[dict[str, float]]:
    """Run the query ``start(checkpoint)`` returns for ``seconds``; each batch's durations
    (``durationMs``: ``triggerExecution`` and its phases)."""
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as checkpoint:
        query = start(checkpoint)
        try:
            time.sleep(seconds)
        finally:
            query.stop()
        progress = query.recentProgress
    batches = [{k: float(v) for k, v in p["durationMs"].items()} for p in progress
               if p.get("durationMs", {}).get("triggerExecution") is not None]
    return batches[WARM_UP_BATCHES:]


def median_of(batches: list[dict[str, float]], phase: str) -> float:
    values = [b.get(phase, 0.0) for b in batches]
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def exactly_once_floor(bootstrap: str, topic: str) -> tuple[float, float]:
    """Median ms of the driver's commit round of a micro-batch of ``PARTITIONS``
    transactions, and of a pooled-producer task's transactional requests (see the module)."""
    config = ClientConfig(parse_bootstrap(bootstrap))
    ids = [f"bench-floor-{p}-0" for p in range(PARTITIONS)]
    producers = [Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
                 for tid in ids]
    for producer in producers:
        producer.init_transactions(TIMEOUT_S)
    rounds, tasks = [], []
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as checkpoint, \
            KafkaClient(config, RetryPolicy(TIMEOUT_S, 0.1)) as client:
        committer = TransactionCommitter(config, "bench-floor", checkpoint)
        for batch_id in range(COMMIT_ROUNDS):
            messages = []
            for partition, (tid, producer) in enumerate(zip(ids, producers, strict=True)):
                started = time.perf_counter()
                if batch_id:
                    describe_transaction(client, tid)
                    producer.commit_transaction(TIMEOUT_S)
                producer.begin_transaction()
                producer.produce(topic, b"x", partition=partition)
                producer.flush(TIMEOUT_S)
                state = describe_transaction(client, tid)
                tasks.append(1000 * (time.perf_counter() - started))
                messages.append(SinkCommitMessage(1, 1, SinkTransaction(
                    tid, state.producer_id, state.producer_epoch, 1)))
            started = time.perf_counter()
            committer.commit_batch(messages, batch_id)
            rounds.append(1000 * (time.perf_counter() - started))
    return statistics.median(rounds), statistics.median(tasks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--quick", action="store_true",
                        help="one round of 8 s per query (a smoke run)")
    args = parser.parse_args()
    seconds, rounds = (8.0, 1) if args.quick else (args.seconds, args.rounds)
    with scratch_dir(None, "sparklog-bench-latency-") as root:
        broker = BrokerProcess(root / "data").start()
        try:
            bootstrap = broker.bootstrap
            source_topic = create_topic(bootstrap, "bench-latency-in", PARTITIONS)
            spark = start_spark("bench-latency",
                                **{"spark.sql.shuffle.partitions": str(PARTITIONS)})
            spark.dataSource.register(NothingSource)
            feed = Feed(bootstrap, source_topic, args.rate)

            def rate() -> Any:
                return (spark.readStream.format("rate").option("rowsPerSecond", args.rate)
                        .load().selectExpr("CAST(value AS STRING) AS value"))

            def sparklog() -> Any:
                return (spark.readStream.format("sparklog")
                        .option("kafka.bootstrap.servers", bootstrap)
                        .option("subscribe", source_topic).option("startingOffsets", "latest")
                        .load().select("value"))

            def nothing() -> Any:
                return (spark.readStream.format("bench_nothing")
                        .option("rowsPerSecond", args.rate).load())

            def into_nothing(df: Callable[[], Any]) -> Callable[[str], Any]:
                return lambda checkpoint: (df().writeStream.format("bench_nothing")
                                           .option("checkpointLocation", checkpoint)
                                           .trigger(processingTime="0 seconds").start())

            def into_noop(df: Callable[[], Any]) -> Callable[[str], Any]:
                return lambda checkpoint: (df().writeStream.format("noop")
                                           .option("checkpointLocation", checkpoint)
                                           .trigger(processingTime="0 seconds").start())

            def into_sink(df: Callable[[], Any], topic: str, guarantee: str
                          ) -> Callable[[str], Any]:
                return lambda checkpoint: (df().writeStream.format("sparklog")
                                           .option("kafka.bootstrap.servers", bootstrap)
                                           .option("topic", topic)
                                           .option("deliveryGuarantee", guarantee)
                                           .option("checkpointLocation", checkpoint)
                                           .trigger(processingTime="0 seconds").start())

            def copied_to(topic: str, guarantee: str) -> Callable[[str], Any]:
                return into_sink(sparklog, create_topic(bootstrap, topic, PARTITIONS), guarantee)

            queries: list[tuple[str, Callable[[str], Any], str | None]] = [
                ("rate -> noop (Spark's floor)", into_noop(rate), None),
                ("Python source -> Python sink, doing nothing", into_nothing(nothing), None),
                ("rate -> Python sink, doing nothing", into_nothing(rate), None),
                ("sparklog -> noop", into_noop(sparklog), None),
                ("rate -> sparklog sink", into_sink(
                    rate, create_topic(bootstrap, "bench-latency-rate", PARTITIONS),
                    "at-least-once"), None),
                ("sparklog -> sparklog sink",
                 copied_to("bench-latency-out", "at-least-once"), "bench-latency-out"),
                ("rate -> sparklog sink, exactly-once", into_sink(
                    rate, create_topic(bootstrap, "bench-latency-rate-eo", PARTITIONS),
                    "exactly-once"), None),
                ("sparklog -> sparklog sink, exactly-once",
                 copied_to("bench-latency-out-eo", "exactly-once"), "bench-latency-out-eo")]
            run_query(into_noop(rate), WARM_UP_S)
            results: list[tuple[str, list[dict[str, float]], list[float] | None]] = [
                (label, [], [] if copied else None) for label, _, copied in queries]
            for _ in range(rounds):
                for (_, start, copied), (_, batches, delays) in zip(queries, results,
                                                                   strict=True):
                    arrivals = Arrivals(bootstrap, copied) if copied else None
                    batches.extend(run_query(start, seconds))
                    if arrivals is not None and delays is not None:
                        delays.extend(arrivals.close())
            feed.close()
            commit_round, task_round = exactly_once_floor(
                bootstrap, create_topic(bootstrap, "bench-latency-floor", PARTITIONS))
            jvm_rss = vm_hwm_mib(spark.sparkContext._gateway.proc.pid)
            broker_rss = vm_hwm_mib(broker.pid)
            spark.stop()
        finally:
            broker.stop()
    medians = {label: median_of(batches, "triggerExecution") for label, batches, _ in results}
    floor = medians["rate -> noop (Spark's floor)"]
    rows, phases = [], []
    for label, batches, delays in results:
        median = medians[label]
        end_to_end = (f"{percentile(delays, 0.5):.0f} / {percentile(delays, 0.99):.0f}"
                      if delays else "")
        rows.append(Row(label, str(len(batches)), f"{median:.0f}", f"{median / floor:.2f}",
                        end_to_end))
        phases.append(Row(label, *(f"{median_of(batches, p):.0f}" for p in PHASES)))
    print_table(["query", "batches", "median batch ms", "ratio to floor",
                 "end to end p50 / p99 ms"], rows)
    print()
    print_table(["median ms of", *PHASES], phases)
    print(f"exactly-once floor: the driver's commit round of a micro-batch of {PARTITIONS} "
          f"transactions {commit_round:.1f} ms; a task's transactional requests (a pooled "
          f"producer; its records' produce and flush included) {task_round:.1f} ms")
    print(f"peak RSS: driver JVM {jvm_rss:.0f} MiB, driver Python {peak_rss_mib():.0f} MiB, "
          f"broker {broker_rss:.0f} MiB")
    copy = medians["sparklog -> sparklog sink"]
    sink = medians["rate -> sparklog sink"]
    print(f"against the Python Data Source API's floor: sparklog into the sparklog sink "
          f"(at-least-once) {copy / medians['Python source -> Python sink, doing nothing']:.2f}"
          f", rate into the sparklog sink "
          f"{sink / medians['rate -> Python sink, doing nothing']:.2f}")
    print(f"latency_sink_ratio={copy / floor:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
