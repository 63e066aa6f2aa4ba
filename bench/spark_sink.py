"""Spark sink write throughput against the plain producer and against reading the data back.

Usage: ``python bench/spark_sink.py [--records N] [--quick]``

Starts its own broker (a child process on a scratch directory) and a ``local[2]`` Spark
session, then, on N records of 100 B (default 2,000,000; ``--quick`` 100,000) in a topic of
two partitions:
- ``df.write.format("sparklog")`` of a cached DataFrame (two tasks), records/s, after a
  warm-up write and read of N/10 records whose times (Python workers starting, imports,
  the JVM's JIT) are shown apart;
- the same write with ``deliveryGuarantee=exactly-once`` (a transaction per task, committed
  by the driver), and its ratio to the at-least-once write; the two alternate, twice each,
  and the medians count;
- the plain operation it is built on: one confluent-kafka idempotent producer in this
  process sending the same number of 100 B records (records/s, and the sink's ratio to it);
- reading the written records back: ``spark.read.format("sparklog")`` into the ``noop``
  sink, against its plain operation, one confluent-kafka consumer in this process;
- typed values: N rows of ``struct<id bigint, item string, price double, at timestamp>``
  (about 60 B encoded) written with ``valueFormat=avro``, ``json`` and ``protobuf`` (the
  broker's schema registry on), against the binary write of the same rows as JSON bytes
  made by Spark's ``to_json`` before the timing (ratio: typed / binary records/s);
- peak RSS (VmHWM) of the driver JVM, of this Python driver process and of the broker.
The last line is ``spark_sink_records_per_s=<n>``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from _common import (  # bench/ is on sys.path
    Row,
    peak_rss_mib,
    print_table,
    scratch_dir,
    start_spark,
    vm_hwm_mib,
)
from _common import create_topic as create_topic_of
from confluent_kafka import Consumer, Producer, TopicPartition

from sparklog.broker.process import BrokerProcess

RECORD_BYTES = 100
PARTITIONS = 2


def create_topic(bootstrap: str, name: str) -> str:
    return create_topic_of(bootstrap, name, PARTITIONS)


def timed_write(df: Any, bootstrap: str, topic: str, **options: str) -> float:
    """Seconds for ``df.write.format("sparklog")`` of ``df``, cached first: the timing is
    the sink's alone."""
    df = df.cache()
    df.count()
    start = time.perf_counter()
    (df.write.format("sparklog").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", topic).options(**options).mode("append").save())
    elapsed = time.perf_counter() - start
    df.unpersist()
    return elapsed


def sink_write(spark: Any, bootstrap: str, topic: str, records: int,
               guarantee: str = "at-least-once") -> float:
    """Seconds for ``df.write.format("sparklog")`` of ``records`` cached 100 B values."""
    from pyspark.sql import functions as F

    df = (spark.range(0, records, numPartitions=PARTITIONS)
          .select(F.lpad(F.col("id").cast("string"), RECORD_BYTES, "0").cast("binary")
                  .alias("value")))
    return timed_write(df, bootstrap, topic, deliveryGuarantee=guarantee)


def typed_writes(spark: Any, bootstrap: str, registry: str, records: int, run: str
                 ) -> dict[str, float]:
    """Seconds for the same struct rows written as ``to_json`` bytes (``binary``), and with
    ``valueFormat`` ``avro``, ``json`` and ``protobuf``, into topics named after ``run``."""
    from pyspark.sql import functions as F

    rows = spark.range(0, records, numPartitions=PARTITIONS).select(F.struct(
        F.col("id"), F.concat(F.lit("item-"), F.col("id").cast("string")).alias("item"),
        (F.col("id") / 100).alias("price"),
        F.timestamp_micros(F.col("id") + 1_700_000_000_000_000).alias("at")).alias("value"))
    seconds = {"binary": timed_write(
        rows.select(F.to_json("value").cast("binary").alias("value")), bootstrap,
        create_topic(bootstrap, f"bench-{run}-binary"))}
    for fmt in ("avro", "json", "protobuf"):
        seconds[fmt] = timed_write(rows, bootstrap, create_topic(bootstrap, f"bench-{run}-{fmt}"),
                                   valueFormat=fmt, **{"schemaRegistry.url": registry})
    return seconds


def plain_produce(bootstrap: str, topic: str, records: int) -> float:
    """Seconds for one idempotent confluent-kafka producer to send and confirm ``records``."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    values = [str(i).zfill(RECORD_BYTES).encode() for i in range(records)]
    send = producer.produce
    start = time.perf_counter()
    for value in values:
        while True:
            try:
                send(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(300):
        raise SystemExit("plain producer: records left undelivered")
    return time.perf_counter() - start


def source_read(spark: Any, bootstrap: str, topic: str) -> float:
    """Seconds for ``spark.read.format("sparklog")`` of ``topic`` into the ``noop`` sink."""
    start = time.perf_counter()
    (spark.read.format("sparklog").option("kafka.bootstrap.servers", bootstrap)
     .option("subscribe", topic).load().write.format("noop").mode("overwrite").save())
    return time.perf_counter() - start


def consumer_read(bootstrap: str, topic: str, records: int) -> float:
    """Seconds for a confluent-kafka consumer to read ``records`` from offset 0."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-spark-sink",
                         "enable.auto.commit": False, "fetch.max.bytes": 52_428_800,
                         "max.partition.fetch.bytes": 8_388_608,
                         "queued.max.messages.kbytes": 1_048_576})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen = 0
    start = time.perf_counter()
    while seen < records:
        for message in consumer.consume(10_000, 5.0):
            if message.error() is not None:
                raise SystemExit(f"consumer: {message.error()}")
            seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def rate_row(label: str, records: int, seconds: float, baseline: float | None) -> Row:
    ratio = f"{baseline / seconds:.2f}" if baseline else ""
    return Row(label, f"{records:,}", f"{seconds:.2f}", f"{records / seconds:,.0f}",
               f"{records * RECORD_BYTES / seconds / 1e6:.1f}", ratio)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--quick", action="store_true", help="100,000 records (a smoke run)")
    args = parser.parse_args()
    records = 100_000 if args.quick else args.records
    with scratch_dir(None, "sparklog-bench-sink-") as root:
        broker = BrokerProcess(
            root / "data", {"schema.registry.listeners": "http://127.0.0.1:0"}).start()
        try:
            spark = start_spark("bench-spark-sink")
            bootstrap = broker.bootstrap
            warm_up = max(records // 10, 1000)
            warm_topic = create_topic(bootstrap, "bench-warm-up")
            warm_s = sink_write(spark, bootstrap, warm_topic, warm_up)
            warm_read_s = source_read(spark, bootstrap, warm_topic)
            sink_write(spark, bootstrap, warm_topic, warm_up, "exactly-once")
            assert broker.schema_registry_url is not None
            typed_writes(spark, bootstrap, broker.schema_registry_url, warm_up, "warm-up")
            sink_topic = create_topic(bootstrap, "bench-sink")
            at_least_once, exactly_once = [], []
            for run in range(2):
                at_least_once.append(sink_write(
                    spark, bootstrap, sink_topic if run == 0 else create_topic(
                        bootstrap, "bench-sink-again"), records))
                exactly_once.append(sink_write(
                    spark, bootstrap, create_topic(bootstrap, f"bench-sink-eo-{run}"), records,
                    "exactly-once"))
            sink_s, eo_s = statistics.median(at_least_once), statistics.median(exactly_once)
            read_s = source_read(spark, bootstrap, sink_topic)
            typed = typed_writes(spark, bootstrap, broker.schema_registry_url, records, "typed")
            # Before the plain clients, whose pre-built values would count as the driver's.
            rss = (f"peak RSS: driver JVM {vm_hwm_mib(spark.sparkContext._gateway.proc.pid):.0f}"
                   f" MiB, driver Python {peak_rss_mib():.0f} MiB")
            spark.stop()
            plain_s = plain_produce(bootstrap, create_topic(bootstrap, "bench-plain"), records)
            plain_read_s = consumer_read(bootstrap, sink_topic, records)
            print_table(
                ["measure", "records", "s", "records/s", "MB/s", "ratio to plain client"],
                [rate_row("warm-up write (cold workers and JIT)", warm_up, warm_s, None),
                 rate_row("warm-up read", warm_up, warm_read_s, None),
                 rate_row('df.write.format("sparklog"), 2 tasks', records, sink_s, plain_s),
                 rate_row("  the same, deliveryGuarantee=exactly-once", records, eo_s, plain_s),
                 rate_row("plain confluent-kafka producer, 1 process", records, plain_s,
                          plain_s),
                 rate_row('read back: spark.read.format("sparklog") -> noop', records, read_s,
                          plain_read_s),
                 rate_row("read back: plain confluent-kafka consumer", records, plain_read_s,
                          plain_read_s)])
            print_table(
                ["typed values (struct of 4)", "records", "s", "records/s",
                 "ratio to binary"],
                [Row(label, f"{records:,}", f"{typed[fmt]:.2f}",
                     f"{records / typed[fmt]:,.0f}", f"{typed['binary'] / typed[fmt]:.2f}")
                 for fmt, label in (("binary", "to_json bytes, binary write"),
                                    ("avro", "valueFormat=avro"),
                                    ("json", "valueFormat=json"),
                                    ("protobuf", "valueFormat=protobuf"))])
            print(f"exactly-once / at-least-once write: {sink_s / eo_s:.2f} (runs: "
                  f"{', '.join(f'{t:.2f}' for t in at_least_once)} s vs "
                  f"{', '.join(f'{t:.2f}' for t in exactly_once)} s)")
            print(f"{rss}, broker {vm_hwm_mib(broker.pid):.0f} MiB")
        finally:
            broker.stop()
    print(f"spark_sink_records_per_s={records / sink_s:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
