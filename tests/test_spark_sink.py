"""The sparklog Spark sink (``df.write`` / ``df.writeStream`` ``.format("sparklog")``) end to end.

Every test writes through Spark into a real broker (``BrokerProcess``, auto-creation off, so
each test creates its topics) and reads back with a confluent-kafka consumer; two tests also
read back with the sparklog source (batch and streaming) and write what it read. The retry
test runs its own SparkSession in a child process: the shared ``local[2]`` session never
retries a failed task.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.partitioner import murmur2

from sparklog.broker.process import BrokerProcess
from sparklog.client.cluster import TopicPartition as ClientTopicPartition
from sparklog.client.kafka import KafkaClient
from sparklog.client.settings import ClientConfig, RetryPolicy, parse_bootstrap
from sparklog.client.transactions import describe_producers
from sparklog.datasource.checkpoints import clear_interrupted_first_batch
from sparklog.datasource.write.producer import TaskProducer
from sparklog.datasource.write.write_options import sink_spec

pytestmark = pytest.mark.spark

TIMEOUT = 30.0
PARTITIONS = 3


class Rec(NamedTuple):
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("sink") / "data"
    with BrokerProcess(data, config={"auto.create.topics.enable": "false"}) as running:
        yield running


def create_topic(broker: BrokerProcess, partitions: int = PARTITIONS,
                 config: dict[str, str] | None = None) -> str:
    name = f"sink-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = NewTopic(name, partitions, config=config or {})
    admin.create_topics([topic])[name].result(TIMEOUT)
    return name


@pytest.fixture
def topic(broker: BrokerProcess) -> str:
    return create_topic(broker)


def consume_all(broker: BrokerProcess, topic: str, partitions: int = PARTITIONS) -> list[Rec]:
    """Every record of ``topic`` (up to the high watermarks seen at the start), in log order."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "sink-tests",
                         "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), TIMEOUT)[1]
                for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got: list[Rec] = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < sum(ends.values()):
            assert time.monotonic() < deadline, f"read {len(got)} of {sum(ends.values())}"
            for msg in consumer.consume(10_000, timeout=0.5):
                assert msg.error() is None, msg.error()
                got.append(Rec(topic, msg.partition(), msg.key(), msg.value(),
                               tuple(msg.headers() or ())))
        return got
    finally:
        consumer.close()


def java_partition(key: bytes, partitions: int) -> int:
    """Java's default partitioner for a keyed record: ``toPositive(murmur2(key)) % n``
    (computed with kafka-python's murmur2, independently of librdkafka)."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def sink(df: Any, broker: BrokerProcess, topic: str | None = None, **options: str) -> None:
    writer = df.write.format("sparklog").option("kafka.bootstrap.servers", broker.bootstrap)
    if topic is not None:
        writer = writer.option("topic", topic)
    writer.options(**options).mode("append").save()


def test_batch_write_keys_values_headers_partitions(spark: Any, broker: BrokerProcess,
                                                     topic: str) -> None:
    def headers(i: int) -> list[tuple[str, bytes | None]] | None:
        return None if i % 3 == 0 else [] if i % 3 == 1 else [("seq", b"%d" % i), ("nil", None)]

    def partition(i: int) -> int | None:
        return None if i % 10 == 0 else i % PARTITIONS  # null: the partitioner chooses

    rows = [(f"k{i}", f"v{i}".encode(), headers(i), partition(i)) for i in range(300)]
    df = spark.createDataFrame(
        rows, "key string, value binary, headers array<struct<key string, value binary>>, "
              "partition int")
    sink(df.repartition(2), broker, topic)
    got = {r.key: r for r in consume_all(broker, topic)}
    assert len(got) == 300
    for i in range(300):
        record = got[f"k{i}".encode()]
        assert record.value == f"v{i}".encode()
        assert record.headers == tuple(headers(i) or ())
        # a null partition lets the partitioner choose: Java's, by the key's murmur2
        expected = partition(i)
        if expected is None:
            expected = java_partition(record.key, PARTITIONS)
        assert record.partition == expected


def test_the_commit_logs_totals(spark: Any, broker: BrokerProcess, topic: str) -> None:
    spark.conf.set("spark.sql.pyspark.worker.logging.enabled", "true")
    try:
        sink(spark.createDataFrame([("abc",)] * 10, "value string").coalesce(1), broker, topic)
        logs = [r.msg for r in spark.tvf.python_worker_logs()
                .where("logger = 'sparklog.sink'").collect() if topic in r.msg]
    finally:
        spark.conf.unset("spark.sql.pyspark.worker.logging.enabled")
    assert logs == ["sparklog sink: write committed: 10 records (30 key+value bytes) from 1 "
                    f"of 1 tasks to topic {topic!r}"]


def test_null_keys_and_values_and_the_default_partitioner(spark: Any, broker: BrokerProcess,
                                                          topic: str) -> None:
    rows = [(None if i % 5 == 0 else f"key-{i % 7}", None if i % 11 == 0 else f"value-{i}")
            for i in range(200)]
    # librdkafka's sticky partitioning sends a task's unkeyed records to one random partition
    # for 10 ms: with two tasks, all of them landed on one partition a third of the time
    sink(spark.createDataFrame(rows, "key string, value string"), broker, topic,
         **{"kafka.sticky.partitioning.linger.ms": "0"})
    got = consume_all(broker, topic)
    assert sorted((r.key or b"", r.value or b"") for r in got) == sorted(
        ((k or "").encode(), (v or "").encode()) for k, v in rows)
    # Keyed records go where Java clients (and Spark's Kafka sink) put them: murmur2
    keyed = [r for r in got if r.key is not None]
    assert keyed and all(r.partition == java_partition(r.key, PARTITIONS) for r in keyed)
    # unkeyed ones go anywhere, and not all to one partition
    assert len({r.partition for r in got if r.key is None}) > 1


def test_topic_column_and_the_topic_option_that_wins(spark: Any, broker: BrokerProcess) -> None:
    first, second, override = (create_topic(broker) for _ in range(3))
    df = spark.createDataFrame([(first if i % 3 else second, f"{i}") for i in range(90)],
                               "topic string, value string")
    sink(df, broker)
    assert sorted(int(r.value) for r in consume_all(broker, first)) == [
        i for i in range(90) if i % 3]
    assert sorted(int(r.value) for r in consume_all(broker, second)) == list(range(0, 90, 3))
    sink(df, broker, override)
    assert len(consume_all(broker, override)) == 90
    assert len(consume_all(broker, first)) == 60


def test_streaming_write_with_a_checkpoint(spark: Any, broker: BrokerProcess, topic: str,
                                           tmp_path: Path) -> None:
    source = tmp_path / "in"
    source.mkdir()

    def run() -> None:
        query = (spark.readStream.format("text").load(str(source)).writeStream
                 .format("sparklog").option("kafka.bootstrap.servers", broker.bootstrap)
                 .option("topic", topic).option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None

    (source / "1.txt").write_text("".join(f"a{i}\n" for i in range(500)))
    run()
    assert sorted(r.value for r in consume_all(broker, topic)) == sorted(
        f"a{i}".encode() for i in range(500))
    (source / "2.txt").write_text("".join(f"b{i}\n" for i in range(300)))
    run()  # restarts from the checkpoint: only the new file is written
    values = Counter(r.value for r in consume_all(broker, topic))
    assert len(values) == 800 and set(values.values()) == {1}


def test_micro_batches_reuse_their_workers_producers(spark: Any, broker: BrokerProcess,
                                                    tmp_path: Path) -> None:
    """Producers outlive their tasks: a query's micro-batches write through the producers
    its Python workers kept (the broker sees at most one producer per worker of the
    ``local[2]`` session, not one per task), and every record arrives."""
    topic = create_topic(broker, 1)
    query = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
             .selectExpr("CAST(value AS STRING) AS value").writeStream.format("sparklog")
             .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic)
             .option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="0 seconds").start())
    try:
        deadline = time.monotonic() + 120
        while len([p for p in query.recentProgress if p["numInputRows"]]) < 6:
            assert time.monotonic() < deadline and query.exception() is None
            time.sleep(0.2)
    finally:
        query.stop()
    batches = len([p for p in query.recentProgress if p["numInputRows"]])
    written = sum(p["numInputRows"] for p in query.recentProgress)  # the finished batches'
    # (a batch stopped half way may have written some of its records too: at-least-once)
    assert {int(r.value) for r in consume_all(broker, topic, 1)} >= set(range(written))
    config = ClientConfig(parse_bootstrap(broker.bootstrap, "bootstrap"))
    with KafkaClient(config, RetryPolicy(timeout_s=10.0, backoff_s=0.1)) as client:
        producers = describe_producers(client, ClientTopicPartition(topic, 0))
    assert 1 <= len(producers) <= 2 < batches


def test_a_query_killed_during_its_first_offsets_write_starts_again(
        spark: Any, broker: BrokerProcess, topic: str, tmp_path: Path) -> None:
    """A driver SIGKILLed while Spark wrote batch 0's offsets leaves only
    ``offsets/.0.<uuid>.tmp`` (as one of the kill tests' runs did). Spark refuses to start
    from it; after ``clear_interrupted_first_batch`` the query runs and writes everything."""
    source, checkpoint = tmp_path / "in", tmp_path / "ck"
    source.mkdir()
    (source / "1.txt").write_text("".join(f"a{i}\n" for i in range(50)))
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "commits").mkdir()
    (checkpoint / "metadata").write_text('{"id":"0d6b3b4e-6f7e-4bdf-9d3c-6f0e0e0e0e0e"}')
    leftover = checkpoint / "offsets" / ".0.7bd9d556-1b31-4711-9aba-61ce4bf260aa.tmp"
    leftover.touch()

    def start() -> Any:
        return (spark.readStream.format("text").load(str(source)).writeStream
                .format("sparklog").option("kafka.bootstrap.servers", broker.bootstrap)
                .option("topic", topic).option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True).start())

    with pytest.raises(Exception, match="STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY"):
        start().awaitTermination(120)
    assert clear_interrupted_first_batch(str(checkpoint)) == [leftover]
    query = start()
    query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(r.value for r in consume_all(broker, topic)) == sorted(
        f"a{i}".encode() for i in range(50))


@pytest.mark.parametrize("names", [["0"], ["0", ".1.7bd9d556.tmp"], ["notes.txt"], []])
def test_only_a_first_batch_leftover_is_cleared(tmp_path: Path, names: list[str]) -> None:
    """Offsets of a batch (or anything else) in the directory: nothing is deleted."""
    offsets = tmp_path / "offsets"
    offsets.mkdir()
    for name in names:
        (offsets / name).touch()
    assert clear_interrupted_first_batch(f"file://{tmp_path}") == []
    assert sorted(p.name for p in offsets.iterdir()) == sorted(names)


def test_round_trip_through_the_source(spark: Any, broker: BrokerProcess) -> None:
    """Sink -> source -> sink: what the source reads is what the sink wrote, and a read
    DataFrame (with its offset, timestamp and topic columns) can be written back as is."""
    first, second = create_topic(broker), create_topic(broker)
    rows = [(f"k{i}".encode(), f"v{i}".encode(), [("n", str(i).encode())], i % PARTITIONS)
            for i in range(400)]
    sink(spark.createDataFrame(rows, "key binary, value binary, "
                               "headers array<struct<key string, value binary>>, "
                               "partition int"), broker, first)
    read = (spark.read.format("sparklog").option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", first).option("includeHeaders", "true").load())
    got = {(r.key, r.value, tuple((h.key, h.value) for h in r.headers), r.partition)
           for r in read.collect()}
    assert got == {(k, v, tuple(h), p) for k, v, h, p in rows}
    sink(read, broker, second)
    assert sorted(r[1:] for r in consume_all(broker, second)) == sorted(
        r[1:] for r in consume_all(broker, first))


def test_streaming_copy_from_the_source(spark: Any, broker: BrokerProcess,
                                        tmp_path: Path) -> None:
    first, second = create_topic(broker), create_topic(broker)
    sink(spark.createDataFrame([(f"v{i}",) for i in range(1000)], "value string"), broker,
         first)
    query = (spark.readStream.format("sparklog")
             .option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", first)
             .option("startingOffsets", "earliest").load()
             .writeStream.format("sparklog")
             .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", second)
             .option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    assert Counter(r.value for r in consume_all(broker, second)) == Counter(
        f"v{i}".encode() for i in range(1000))


def test_missing_topic_fails_the_task_naming_it(spark: Any, broker: BrokerProcess) -> None:
    """The sink's own lookup names the topic (librdkafka alone would wait 30 s, then report
    a timeout without naming it)."""
    df = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(Exception, match=r"topic 'no-such-topic' does not exist on .* create "
                                        r"it first"):
        sink(df, broker, "no-such-topic")


def test_failed_delivery_fails_the_task(spark: Any, broker: BrokerProcess) -> None:
    small = create_topic(broker, 1, {"max.message.bytes": "2000"})
    df = spark.createDataFrame([("x" * 10_000,)], "value string")
    with pytest.raises(Exception, match=r"1 of 1 records failed delivery.*" + small):
        sink(df.coalesce(1), broker, small)


@pytest.mark.parametrize(("ddl", "options", "message"), [
    ("key string", {}, r"no 'value' column"),
    ("value int", {}, r"column 'value' has type int; .* accepts string or binary"),
    ("key int, value string", {}, r"column 'key' has type int"),
    ("value string, partition bigint", {}, r"column 'partition' has type bigint; .* int"),
    ("value string, headers array<string>", {}, r"column 'headers' has type array<string>"),
    ("value string, topic binary", {}, r"column 'topic' has type binary"),
    ("value string", {"topic": None}, r"no topic to write to"),
    ("value string", {"kafka.enable.idempotence": "false"}, r"enable.idempotence=false"),
    ("value string", {"kafka.acks": "1"}, r"`acks` must be set to `all`"),
    ("value string", {"kafka.no.such.setting": "1"}, r"No such configuration property"),
    ("value string", {"startingOffsets": "earliest"}, r"unknown sparklog sink option"),
])
def test_bad_writes_fail_before_sending(spark: Any, broker: BrokerProcess, topic: str,
                                        ddl: str, options: dict[str, str | None],
                                        message: str) -> None:
    df = spark.createDataFrame([], ddl)
    use_topic = None if "topic" in options else topic
    with pytest.raises(Exception, match=message):
        sink(df, broker, use_topic, **{k: v for k, v in options.items() if v is not None})
    assert consume_all(broker, topic) == []


def test_a_full_local_queue_is_waited_out(broker: BrokerProcess, topic: str) -> None:
    from pyspark.sql.types import BinaryType, StructField, StructType

    schema = StructType([StructField("value", BinaryType())])
    spec = sink_spec({"kafka.bootstrap.servers": broker.bootstrap, "topic": topic,
                      "kafka.queue.buffering.max.messages": "50"}, schema)
    producer = TaskProducer(spec)
    for start in range(0, 2000, 500):
        producer.send(pa.record_batch([pa.array([str(i).encode()
                                                 for i in range(start, start + 500)])],
                                      names=["value"]))
    assert producer.finish().records == 2000
    assert sorted(int(r.value) for r in consume_all(broker, topic)) == list(range(2000))


def test_null_topic_without_the_option_fails(spark: Any, broker: BrokerProcess,
                                              topic: str) -> None:
    df = spark.createDataFrame([(topic, "a"), (None, "b")], "topic string, value string")
    with pytest.raises(Exception, match=r"a row has a null 'topic' and no topic option"):
        sink(df.coalesce(1), broker)
    assert consume_all(broker, topic) == []


def test_partition_out_of_range_fails(spark: Any, broker: BrokerProcess, topic: str) -> None:
    df = spark.createDataFrame([("a", 1), ("b", PARTITIONS)], "value string, partition int")
    with pytest.raises(Exception, match=rf"cannot produce to topic '{topic}' partition "
                                        rf"{PARTITIONS}: .*Unknown partition"):
        sink(df.coalesce(1), broker, topic)


def test_task_retry_leaves_no_gap(broker: BrokerProcess, topic: str, tmp_path: Path) -> None:
    """A task fails after part of its records reached the broker; its retry sends them all
    again: every record is present, the failed attempt's share is duplicated."""
    total = 20_000
    child = subprocess.run(
        [sys.executable, __file__, broker.bootstrap, topic, str(tmp_path / "failed-once"),
         str(total)], capture_output=True, text=True, timeout=240)
    assert child.returncode == 0, child.stderr[-5000:]
    assert (tmp_path / "failed-once").exists(), "the injected failure did not happen"
    counts = Counter(int(r.value) for r in consume_all(broker, topic))
    assert sorted(counts) == list(range(total)), "a record is missing"
    duplicates = sum(counts.values()) - total
    print(f"task retry: {total} records, {sum(counts.values())} in the topic, "
          f"{duplicates} duplicates from the failed attempt")
    assert duplicates > 0, "the failed attempt should have delivered part of its records"


def _retry_child(bootstrap: str, topic: str, marker: Path, total: int) -> None:
    """Write ``total`` records with one task failing mid-write once (``local[2,2]``: a task
    may fail twice); ``marker`` makes only the first attempt fail."""
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import udf

    spark = (SparkSession.builder.master("local[2,2]").appName("sink-retry")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
             .getOrCreate())
    fail_at = total * 3 // 4  # in the second of two tasks, after half of its rows

    @udf("string")
    def fail_once(number: int) -> str:
        if number == fail_at and not marker.exists():
            marker.touch()
            _wait_for_a_delivery(bootstrap, topic, total // 2)  # it left records behind
            raise RuntimeError("injected failure")
        return str(number).zfill(100)  # 100 B: batches fill the JVM's 64 KiB pipe buffer

    df = spark.range(0, total, numPartitions=2).select(fail_once("id").alias("value"))
    (df.write.format("sparklog").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", topic).mode("append").save())
    spark.stop()


def _wait_for_a_delivery(bootstrap: str, topic: str, other_task: int) -> None:
    """Until the topic holds records of the task that is about to fail (its writer sends
    batches while the UDF computes the next ones): more than the ``other_task`` records the
    other task writes in all. Runs inside the UDF, in Spark's Python worker: it imports
    what it uses itself, as the UDF is shipped by value from this script."""
    import time

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "sink-retry-probe"})
    deadline = time.monotonic() + 60
    try:
        while sum(consumer.get_watermark_offsets(TopicPartition(topic, p), TIMEOUT)[1]
                  for p in range(PARTITIONS)) <= other_task:
            if time.monotonic() > deadline:
                raise TimeoutError("the failing attempt delivered nothing")
            time.sleep(0.05)
    finally:
        consumer.close()


if __name__ == "__main__":
    _retry_child(sys.argv[1], sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]))
