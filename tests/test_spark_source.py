"""The Spark source, ``spark.read`` / ``spark.readStream`` ``.format("sparklog")``, end to end.

A real local SparkSession (the session ``spark`` fixture) reads from a real broker child
process (one per module, ``broker``); test data is produced with confluent-kafka. Nothing is
mocked. Covered: registration (automatic and explicit), batch reads of exact offset and
timestamp ranges, task splitting, headers, streams with each trigger (processing time,
AvailableNow with maxOffsetsPerTrigger in several batches), restart from a checkpoint
including the replay of an uncommitted batch from a cold process, topic discovery with
subscribePattern and new partitions, compacted topics (gaps and tombstones), data loss
after DeleteRecords with failOnDataLoss true and false, fetches smaller than a batch, and
option errors. Without Spark: the driver-side admission control (minOffsetsPerTrigger,
maxTriggerDelay, maxOffsetsPerTrigger shares) and data loss checks on the stream reader, the
decoder on hand-built batches (control batches, gaps, a cut-short batch; the broker refuses
control batches from clients as Kafka does), task planning and option parsing (a
subscribePattern never reads internal topics).
"""

from __future__ import annotations

import contextlib
import json
import pickle
import re
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from broker_fixtures import Rec, admin, create_topic, module_broker, produce_confluent, unique_topic
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import NewPartitions
from pyspark.errors import StreamingQueryException
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from sparklog.broker.process import BrokerProcess
from sparklog.client.cluster import Cluster
from sparklog.datasource import register
from sparklog.datasource.options import OptionError
from sparklog.datasource.read import stream_reader
from sparklog.datasource.read.arrow_records import (
    AiokafkaRecordBuilder,
    ColumnarRecordBuilder,
    RecordBuilder,
    next_position,
)
from sparklog.datasource.read.data_loss import DataLossError
from sparklog.datasource.read.offsets import TopicPartition, from_json, to_json
from sparklog.datasource.read.planning import plan, rate_limit
from sparklog.datasource.read.read_options import parse_read_options
from sparklog.datasource.read.stream_reader import SparklogStreamReader
from sparklog.datasource.schema import source_schema
from sparklog.record.records import build_batch
from sparklog.storage.checkpoint import read_checkpoint
from sparklog.storage.cleaner import CLEANER_CHECKPOINT

pytestmark = pytest.mark.spark

broker = module_broker({"log.cleaner.backoff.ms": "200"})

Row = tuple[int, int, bytes | None, bytes | None]
"""(partition, offset, key, value) of one record read."""

DAY_MS = 86_400_000
REPO_ROOT = Path(__file__).resolve().parents[1]
EVERY_200_MS = {"processingTime": "200 milliseconds"}


# -- helpers ----------------------------------------------------------------------------------


def options(broker: BrokerProcess, **extra: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": broker.bootstrap, **extra}


def read(spark: Any, broker: BrokerProcess, **extra: str) -> Any:
    return spark.read.format("sparklog").options(**options(broker, **extra)).load()


def rows_of(df: Any) -> list[Row]:
    return sorted((r.partition, r.offset, r.key, r.value)
                  for r in df.select("partition", "offset", "key", "value").collect())


def produce(broker: BrokerProcess, topic: str, records: Sequence[Rec]) -> list[Rec]:
    """Produce in order (one partition at a time keeps offsets predictable)."""
    return produce_confluent(broker.bootstrap, topic, records)


def keyed(partition: int, count: int, prefix: str = "v", timestamp: int | None = None,
          step_ms: int = 0) -> list[Rec]:
    return [Rec(f"k{i}".encode(), f"{prefix}{partition}-{i}".encode(), partition=partition,
                timestamp=None if timestamp is None else timestamp + i * step_ms)
            for i in range(count)]


def as_rows(records: Sequence[Rec]) -> list[Row]:
    return sorted((r.partition or 0, r.offset, r.key, r.value) for r in records)


def start_stream(spark: Any, broker: BrokerProcess, name: str, checkpoint: Path,
                 trigger: dict[str, Any], **extra: str) -> Any:
    return (spark.readStream.format("sparklog").options(**options(broker, **extra)).load()
            .writeStream.format("memory").queryName(name)
            .option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())


def memory_rows(spark: Any, name: str) -> list[Row]:
    return rows_of(spark.table(name))


def progress_offsets(value: str | dict[str, Any]) -> dict[TopicPartition, int]:
    """Offsets as a query's progress reports them (a JSON string)."""
    return from_json(json.loads(value) if isinstance(value, str) else value)


def error_text(excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    return str(excinfo.value)


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    return unique_topic(request.node.name)


# -- registration -----------------------------------------------------------------------------


_LOOKUP = """
import io
from pyspark.serializers import UTF8Deserializer, read_int
from pyspark.sql.worker.lookup_data_sources import _main
out = io.BytesIO()
_main(io.BytesIO(), out)
out.seek(0)
for _ in range(read_int(out)):
    print(UTF8Deserializer().loads(out))
    out.read(read_int(out))
"""


def test_auto_registration_and_register(spark: Any, broker: BrokerProcess, topic: str) -> None:
    # pyspark's own lookup of pyspark_* modules, run as its worker runs it: from the
    # driver's working directory (the repository root here).
    lookup = subprocess.run([sys.executable, "-c", _LOOKUP], cwd=REPO_ROOT, check=True,
                            capture_output=True, text=True)
    assert "sparklog" in lookup.stdout.split()
    create_topic(broker.bootstrap, topic)
    sent = produce(broker, topic, keyed(0, 3))
    assert rows_of(read(spark, broker, subscribe=topic)) == as_rows(sent)  # auto-registered
    register(spark)
    assert rows_of(read(spark, broker, subscribe=topic)) == as_rows(sent)


# -- batch reads ------------------------------------------------------------------------------


def test_batch_exact_offset_ranges(spark: Any, broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=3)
    sent = [rec for p in range(3) for rec in produce(broker, topic, keyed(p, 20))]
    everything = read(spark, broker, subscribe=topic)
    assert everything.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>")
    assert rows_of(everything) == as_rows(sent)

    ranged = read(spark, broker, subscribe=topic,
                  startingOffsets=json.dumps({topic: {"0": 5, "1": -2, "2": 18}}),
                  endingOffsets=json.dumps({topic: {"0": 10, "1": 3, "2": -1}}))
    expected = [r for r in as_rows(sent)
                if (r[0] == 0 and 5 <= r[1] < 10) or (r[0] == 1 and r[1] < 3)
                or (r[0] == 2 and r[1] >= 18)]
    assert rows_of(ranged) == expected
    first = ranged.where("partition = 0").orderBy("offset").first()
    assert first.topic == topic and first.timestampType == 0
    assert abs(first.timestamp.timestamp() - time.time()) < 600

    assigned = read(spark, broker, assign=json.dumps({topic: [1]}))
    assert rows_of(assigned) == [r for r in as_rows(sent) if r[0] == 1]


def test_batch_timestamp_ranges(spark: Any, broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    base = int(time.time() * 1000) - DAY_MS  # record i of each partition at base + i s
    sent = [rec for p in range(2)
            for rec in produce(broker, topic, keyed(p, 10, timestamp=base, step_ms=1000))]
    by_time = read(spark, broker, subscribe=topic, startingTimestamp=str(base + 3000),
                   endingTimestamp=str(base + 7000))
    assert rows_of(by_time) == [r for r in as_rows(sent) if 3 <= r[1] < 7]

    per_partition = read(
        spark, broker, subscribe=topic,
        startingOffsetsByTimestamp=json.dumps({topic: {"0": base + 8500, "1": base}}),
        endingOffsetsByTimestamp=json.dumps({topic: {"0": base + DAY_MS, "1": base + 1000}}))
    assert rows_of(per_partition) == [r for r in as_rows(sent)
                                      if (r[0] == 0 and r[1] >= 9) or (r[0] == 1 and r[1] < 1)]

    after_all = str(base + 20_000)
    with pytest.raises(Exception) as excinfo:
        read(spark, broker, subscribe=topic, startingTimestamp=after_all).collect()
    assert "startingOffsetsByTimestampStrategy=latest" in error_text(excinfo)
    assert read(spark, broker, subscribe=topic, startingTimestamp=after_all,
                startingOffsetsByTimestampStrategy="latest").count() == 0


def test_batch_splits_tasks_and_log_append_time(spark: Any, broker: BrokerProcess,
                                                topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=2,
                 config={"message.timestamp.type": "LogAppendTime"})
    sent = [rec for p in range(2) for rec in produce(broker, topic, keyed(p, 50))]
    by_size = read(spark, broker, subscribe=topic, maxRecordsPerPartition="15")
    assert by_size.rdd.getNumPartitions() == 8  # ceil(50 / 15) per partition
    assert rows_of(by_size) == as_rows(sent)
    by_count = read(spark, broker, subscribe=topic, minPartitions="5")
    assert by_count.rdd.getNumPartitions() >= 5
    assert rows_of(by_count) == as_rows(sent)
    assert {r.timestampType for r in by_count.select("timestampType").collect()} == {1}


def test_include_headers(spark: Any, broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    produce(broker, topic, [Rec(b"a", b"1", (("h1", b"x"), ("h2", None)), partition=0),
                            Rec(b"b", None, (), partition=0)])
    df = read(spark, broker, subscribe=topic, includeHeaders="true")
    assert df.schema["headers"].dataType.simpleString() == (
        "array<struct<key:string,value:binary>>")
    got = [(r.key, r.value, [(h.key, h.value) for h in r.headers])
           for r in df.orderBy("offset").collect()]
    assert got == [(b"a", b"1", [("h1", b"x"), ("h2", None)]), (b"b", None, [])]
    assert "headers" not in read(spark, broker, subscribe=topic).columns


def test_fetch_smaller_than_a_batch(spark: Any, broker: BrokerProcess, topic: str) -> None:
    """Batches larger than fetch.max.bytes are fetched whole; cut-short batches are skipped."""
    create_topic(broker.bootstrap, topic)
    sent = produce_confluent(broker.bootstrap, topic,
                             [Rec(None, bytes([i % 256]) * 3000, partition=0) for i in range(40)],
                             linger_ms=50)
    df = read(spark, broker, subscribe=topic, **{"kafka.fetch.max.bytes": "1000"})
    assert rows_of(df) == as_rows(sent)


# -- compaction and data loss -------------------------------------------------------------------


def test_compacted_topic_reads_gaps_and_tombstones(spark: Any, broker: BrokerProcess,
                                                   topic: str) -> None:
    create_topic(broker.bootstrap, topic, config={
        "cleanup.policy": "compact", "segment.bytes": "1024",
        "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "0"})
    # k0's last record (55) is a tombstone, k2's at 7 is superseded by later values.
    records = [Rec(f"k{i % 5}".encode(), None if i in (7, 55) else f"v{i}".encode(),
                   partition=0) for i in range(60)]
    for start in range(0, len(records), 4):  # small batches, so segments roll often
        produce(broker, topic, records[start:start + 4])
    directory = broker.data_dir / f"{topic}-0"

    def cleaned() -> bool:
        active = max(int(p.stem) for p in directory.glob("*.log"))
        return read_checkpoint(broker.data_dir / CLEANER_CHECKPOINT).get((topic, 0)) == active

    deadline = time.monotonic() + 30
    while not cleaned():
        assert time.monotonic() < deadline, "the broker's cleaner did not compact the topic"
        time.sleep(0.2)
    got = rows_of(read(spark, broker, subscribe=topic))
    offsets = [offset for _, offset, _, _ in got]
    assert len(got) < len(records) and offsets == sorted(set(offsets))  # gaps, no data loss
    latest = {rec.key: rec.value for rec in records}
    assert latest[b"k0"] is None
    assert {key: value for _, _, key, value in got} == latest  # each key's last value wins
    assert (0, 55, b"k0", None) in got  # the tombstone, with a null value
    from_zero = read(spark, broker, subscribe=topic, startingOffsets=json.dumps({topic: {"0": 0}}))
    assert rows_of(from_zero) == got


def test_read_committed_skips_aborted_and_open_transactions_with_exact_offsets(
        spark: Any, broker: BrokerProcess, topic: str, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic,
                         "log_level": 0})
    producer.init_transactions(30)
    sent: dict[bytes, tuple[int, int]] = {}

    def transaction(prefix: str, end: Callable[[float], None] | None) -> None:
        producer.begin_transaction()
        for i in range(6):
            producer.produce(topic, f"{prefix}{i}".encode(), partition=i % 2,
                             on_delivery=lambda e, m: sent.__setitem__(
                                 m.value(), (m.partition(), m.offset())))
        producer.flush(30)
        if end is not None:
            end(30)

    transaction("committed", producer.commit_transaction)
    transaction("aborted", producer.abort_transaction)
    transaction("again", producer.commit_transaction)
    transaction("open", None)  # still open: the stable offset stays before it
    committed = sorted((p, o, v) for v, (p, o) in sent.items()
                       if v.startswith((b"committed", b"again")))
    everything = sorted((p, o, v) for v, (p, o) in sent.items())

    def values(df: Any) -> list[tuple[int, int, bytes]]:
        return sorted((r.partition, r.offset, bytes(r.value))
                      for r in df.select("partition", "offset", "value").collect())

    isolation = {"kafka.isolation.level": "read_committed"}
    assert values(read(spark, broker, subscribe=topic, **isolation)) == committed
    assert values(read(spark, broker, subscribe=topic)) == everything  # read_uncommitted
    streamed, _ = collect_available_now(spark, broker, tmp_path / "ck", subscribe=topic,
                                        startingOffsets="earliest", maxOffsetsPerTrigger="5",
                                        **isolation)
    assert sorted((p, o, v) for rows in streamed.values() for p, o, _, v in rows) == committed
    producer.abort_transaction(30)


def test_deleted_records_are_data_loss(spark: Any, broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    sent = produce(broker, topic, keyed(0, 10))
    client = admin(broker.bootstrap)
    for future in client.delete_records([CkTopicPartition(topic, 0, 4)]).values():
        future.result(30)
    from_zero = json.dumps({topic: {"0": 0}})
    with pytest.raises(Exception) as excinfo:
        read(spark, broker, subscribe=topic, startingOffsets=from_zero).collect()
    message = error_text(excinfo)
    assert "DataLossError" in message and f"{topic}-0: offsets [0, 4) were deleted" in message
    assert "failOnDataLoss" in message
    skipped = read(spark, broker, subscribe=topic, startingOffsets=from_zero,
                   failOnDataLoss="false")
    assert rows_of(skipped) == as_rows(sent)[4:]
    assert rows_of(read(spark, broker, subscribe=topic)) == as_rows(sent)[4:]  # earliest


# -- streams ----------------------------------------------------------------------------------


def test_stream_processing_time_latest_default_and_new_partitions(
        spark: Any, broker: BrokerProcess, topic: str, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    produce(broker, topic, keyed(0, 5, prefix="before"))  # before the start: not read
    name = f"latest_{topic.replace('-', '_')}"
    query = start_stream(spark, broker, name, tmp_path / "ck", EVERY_200_MS, subscribe=topic)
    try:
        wait_for_batch(query)
        sent = [rec for p in range(2) for rec in produce(broker, topic, keyed(p, 7))]
        query.processAllAvailable()
        assert memory_rows(spark, name) == as_rows(sent)
        client = admin(broker.bootstrap)  # keep a reference: the futures need the client
        client.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
        added = produce(broker, topic, keyed(2, 4, prefix="new"))
        wait_until_rows(spark, query, name, len(sent) + len(added))
        assert memory_rows(spark, name) == sorted(as_rows(sent) + as_rows(added))
        source = query.lastProgress["sources"][0]
        assert progress_offsets(source["latestOffset"]) == {TopicPartition(topic, 0): 12,
                                                     TopicPartition(topic, 1): 7,
                                                     TopicPartition(topic, 2): 4}
    finally:
        query.stop()


def test_subscribe_pattern_discovers_new_topics(spark: Any, broker: BrokerProcess,
                                                tmp_path: Path) -> None:
    prefix = unique_topic("pattern").replace("-", "")
    first, second = f"{prefix}-a", f"{prefix}-b"
    create_topic(broker.bootstrap, first)
    early = produce(broker, first, keyed(0, 3))
    query = start_stream(spark, broker, f"{prefix}_q", tmp_path / "ck", EVERY_200_MS,
                         subscribePattern=f"{prefix}-.*", startingOffsets="earliest")
    try:
        wait_until_rows(spark, query, f"{prefix}_q", 3)
        create_topic(broker.bootstrap, second)
        create_topic(broker.bootstrap, f"other-{prefix}")
        produce(broker, f"other-{prefix}", keyed(0, 2))
        late = produce(broker, second, keyed(0, 4))  # maybe before the query sees the topic
        wait_until_rows(spark, query, f"{prefix}_q", 7)
        topics = sorted(r.topic for r in spark.table(f"{prefix}_q").select("topic").collect())
        assert topics == [first] * len(early) + [second] * len(late)
    finally:
        query.stop()


def test_available_now_batches_and_restart(spark: Any, broker: BrokerProcess, topic: str,
                                           tmp_path: Path) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    sent = [rec for p in range(2) for rec in produce(broker, topic, keyed(p, 25 + 10 * p))]
    checkpoint = tmp_path / "ck"
    stream_options = {"subscribe": topic, "startingOffsets": "earliest",
                      "maxOffsetsPerTrigger": "20"}
    first, query = collect_available_now(spark, broker, checkpoint, **stream_options)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [20, 20, 20]  # 60 offsets, 20 per batch
    assert sorted(r for rows in first.values() for r in rows) == as_rows(sent)
    # The first batch's shares follow the lag: 25 and 35 offsets behind -> 8 and 12.
    assert progress_offsets(query.recentProgress[0]["sources"][0]["endOffset"]) == {
        TopicPartition(topic, 0): 8, TopicPartition(topic, 1): 12}

    # Forget that the last batch committed: the restart replays it from its offsets alone
    # (partitions(start, end) in a fresh process), then reads what arrived since.
    last = max(first)
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    more = [rec for p in range(2) for rec in produce(broker, topic, keyed(p, 6, prefix="more"))]
    second, _ = collect_available_now(spark, broker, checkpoint, **stream_options)
    assert sorted(second) == [last, last + 1]
    assert second[last] == first[last]  # the replay reads exactly the same records
    assert second[last + 1] == as_rows(more)  # then continues with no gap and no duplicate


@pytest.mark.parametrize("fail", [True, False])
def test_records_deleted_under_a_running_stream_are_data_loss(
        spark: Any, broker: BrokerProcess, topic: str, tmp_path: Path, fail: bool) -> None:
    """While the first micro-batch is processed, DeleteRecords removes offsets the next
    batches were to read: with failOnDataLoss the query fails naming them; without, it goes
    on from the new log start and ends with every offset that was still there."""
    create_topic(broker.bootstrap, topic)
    sent = produce(broker, topic, keyed(0, 50))
    client = admin(broker.bootstrap)
    batches: dict[int, list[Row]] = {}

    def collect(df: Any, batch_id: int) -> None:
        batches[batch_id] = rows_of(df)
        if batch_id == 0:
            for future in client.delete_records([CkTopicPartition(topic, 0, 30)]).values():
                future.result(30)

    query = (spark.readStream.format("sparklog")
             .options(**options(broker, subscribe=topic, startingOffsets="earliest",
                                maxOffsetsPerTrigger="10", failOnDataLoss=str(fail).lower()))
             .load().writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    with contextlib.suppress(StreamingQueryException):  # checked below
        query.awaitTermination(120)
    read = sorted(r for rows in batches.values() for r in rows)
    if fail:
        assert query.exception() is not None
        message = str(query.exception())
        assert "DataLossError" in message and f"{topic}-0: offsets [10, " in message
        assert read == as_rows(sent)[:10]
    else:
        assert query.exception() is None, query.exception()
        assert read == as_rows(sent)[:10] + as_rows(sent)[30:]


def collect_available_now(spark: Any, broker: BrokerProcess, checkpoint: Path,
                          **extra: str) -> tuple[dict[int, list[Row]], Any]:
    """Run an AvailableNow query into foreachBatch; the rows of each batch id, and the query."""
    batches: dict[int, list[Row]] = {}

    def collect(df: Any, batch_id: int) -> None:
        batches[batch_id] = rows_of(df)

    query = (spark.readStream.format("sparklog").options(**options(broker, **extra)).load()
             .writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120), "the AvailableNow query did not finish"
    assert query.exception() is None, query.exception()
    return batches, query


def wait_for_batch(query: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while query.lastProgress is None:
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, "no micro-batch ran"
        time.sleep(0.1)


def wait_until_rows(spark: Any, query: Any, name: str, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while spark.table(name).count() < count:
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"fewer than {count} rows after {timeout} s"
        time.sleep(0.3)


# -- admission control on the driver (no Spark) --------------------------------------------------


class Clock:
    """The reader's wall clock (``time.time``), moved by the test instead of by sleeping."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def time(self) -> float:
        return self.now


def test_admission_control(broker: BrokerProcess, topic: str,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(stream_reader, "time", clock)
    create_topic(broker.bootstrap, topic, partitions=2)
    produce(broker, topic, keyed(0, 30) + keyed(1, 10))
    reader = SparklogStreamReader(options(broker, subscribe=topic, startingOffsets="earliest",
                                          minOffsetsPerTrigger="100", maxTriggerDelay="300ms",
                                          maxOffsetsPerTrigger="20"), schema=None)
    try:
        start = reader.initialOffset()
        assert start == {topic: {"0": 0, "1": 0}}
        assert reader.getDefaultReadLimit() == ReadMinRows(100)
        limit = reader.getDefaultReadLimit()
        first = reader.latestOffset(start, limit)  # the first batch never waits
        assert first == {topic: {"0": 15, "1": 5}}  # 20 shared 30:10
        clock.now += 0.25
        assert reader.latestOffset(first, limit) is first  # 20 < 100 new offsets: wait
        clock.now += 0.1
        assert reader.latestOffset(first, limit) == {topic: {"0": 30, "1": 10}}  # delay over
        assert reader.latestOffset(start, ReadMaxRows(8)) == {topic: {"0": 6, "1": 2}}
        assert reader.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 30, "1": 10}}
        assert reader.reportLatestOffset() == {topic: {"0": 30, "1": 10}}
        reader.prepareForTriggerAvailableNow()
        produce(broker, topic, keyed(0, 5, prefix="after"))
        assert reader.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 30, "1": 10}}
        assert reader.latestOffset(start, limit) == {topic: {"0": 15, "1": 5}}  # no waiting
        copy = pickle.loads(pickle.dumps(reader))  # as Spark ships it to executors
        assert copy.options == reader.options and copy._offsets is None
    finally:
        reader.stop()


def test_stream_data_loss_on_the_driver(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    gone = create_topic(broker.bootstrap, f"{topic}-gone")
    produce(broker, topic, keyed(0, 10))
    start = {topic: {"0": 100}, gone: {"0": 0}}  # ahead of the log; a topic about to go
    client = admin(broker.bootstrap)  # keep a reference: the futures need the client
    client.delete_topics([gone])[gone].result(30)
    for fail in ("true", "false"):
        reader = SparklogStreamReader(options(broker, subscribePattern=f"{topic}.*",
                                              failOnDataLoss=fail), schema=None)
        try:
            if fail == "true":
                with pytest.raises(DataLossError, match=f"partitions {gone}-0 no longer exist"):
                    reader.latestOffset(start, ReadAllAvailable())
                with pytest.raises(DataLossError, match=f"{topic}-0: the latest offset 10 is "
                                                        "below the offset 100 already read"):
                    reader.latestOffset({topic: {"0": 100}}, ReadAllAvailable())
            else:  # logged; the query goes on from the latest offsets of what exists
                assert reader.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 10}}
        finally:
            reader.stop()


BUILDERS = [ColumnarRecordBuilder, AiokafkaRecordBuilder]
"""The compiled decoder and its fallback: the same behaviour."""


@pytest.mark.parametrize("builder_class", BUILDERS)
def test_decoder_on_raw_batches(builder_class: type[RecordBuilder]) -> None:
    """Control batches are skipped, compaction gaps kept, the range and a cut-short last
    batch respected, and the schema is exactly the one pyspark requires."""
    now = int(time.time() * 1000)
    data = build_batch([(b"a", b"0", (), now), (b"b", b"1", (), now)], base_offset=0)
    marker = build_batch([(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0), (), now)],
                         base_offset=2, producer_id=7, producer_epoch=0, transactional=True,
                         is_control=True)
    compacted = build_batch([(b"c", b"3", (), now), (b"d", None, (), now + 1)], base_offset=3,
                            offset_deltas=[0, 2], last_offset_delta=3)  # offsets 3 and 5
    tail = build_batch([(b"e", b"7", (), now)], base_offset=7)
    records = data + marker + compacted + tail[:-5]  # the last batch is cut short
    assert next_position(records, 0) == 7
    builder = builder_class("t", 4, include_headers=False)
    assert list(builder.add(records, 1, 6)) == []
    got = builder.build()
    assert got.schema.equals(to_arrow_schema(source_schema(False), timezone="UTC"))
    assert got.to_pydict()["offset"] == [1, 3, 5]
    assert got.to_pydict()["value"] == [b"1", b"3", None]
    assert set(got.to_pydict()["partition"]) == {4}


@pytest.mark.parametrize("builder_class", BUILDERS)
def test_decoder_offsets_across_consecutive_and_compacted_batches(
        builder_class: type[RecordBuilder]) -> None:
    """Consecutive batches form one run of offsets, a compacted batch keeps its gaps, and
    every chunk built holds exactly its own records' offsets."""
    now = int(time.time() * 1000)

    def whole(base: int, count: int) -> bytes:
        return build_batch([(b"k", b"v%d" % (base + i), (), now) for i in range(count)],
                           base_offset=base)

    compacted = build_batch([(b"k", b"v5", (), now), (b"k", b"v7", (), now)], base_offset=5,
                            offset_deltas=[0, 2], last_offset_delta=2)
    builder = builder_class("t", 0, include_headers=False)
    assert list(builder.add(whole(0, 3) + whole(3, 2) + compacted, 0, 100)) == []
    first = builder.build()
    assert list(builder.add(whole(8, 2) + whole(10, 2), 0, 11)) == []
    second = builder.build()
    assert first.column("offset").to_pylist() == [0, 1, 2, 3, 4, 5, 7]
    assert first.column("value").to_pylist() == [b"v%d" % o for o in [0, 1, 2, 3, 4, 5, 7]]
    assert second.column("offset").to_pylist() == [8, 9, 10]
    assert builder.build().num_rows == 0


def test_planning_and_offsets_json() -> None:
    tp0, tp1 = TopicPartition("b", 0), TopicPartition("a", 10)
    assert list(to_json({tp0: 1, tp1: 2, TopicPartition("a", 2): 3})) == ["a", "b"]
    assert json.dumps(to_json({tp1: 2, TopicPartition("a", 2): 3})) == '{"a": {"2": 3, "10": 2}}'
    assert from_json(json.loads(json.dumps(to_json({tp0: 1, tp1: 2})))) == {tp0: 1, tp1: 2}
    assert rate_limit({tp0: 0, tp1: 0}, {tp0: 10, tp1: 20}, 7) == {tp0: 2, tp1: 5}
    assert rate_limit({tp0: 5, tp1: 0}, {tp0: 10, tp1: 20}, 100) == {tp0: 10, tp1: 20}
    settings = parse_read_options({"bootstrap.servers": "h:1", "subscribe": "a"},
                                  streaming=False).task_settings
    tasks = plan({tp0: 0, tp1: 10}, {tp0: 100, tp1: 10}, {}, settings,
                 max_records_per_partition=30)
    assert [(t.topic, t.start, t.until) for t in tasks] == [
        ("b", 0, 25), ("b", 25, 50), ("b", 50, 75), ("b", 75, 100)]
    tasks = plan({tp0: 0, tp1: 0}, {tp0: 90, tp1: 10}, {}, settings, min_partitions=10)
    assert [(t.topic, t.until - t.start) for t in tasks] == [("a", 10)] + [("b", 10)] * 9


# -- options ----------------------------------------------------------------------------------

_BAD_OPTIONS = [
    ({"subscribe": "t", "startingOffset": "earliest"}, "unknown source option 'startingoffset'"),
    ({"subscribe": "t", "assign": '{"t":[0]}'}, "exactly one of the options subscribe"),
    ({}, "exactly one of the options subscribe, subscribePattern, assign must be"),
    ({"subscribe": "t", "startingOffsets": '{"t":{"0":"x"}}'}, "option startingOffsets"),
    ({"subscribe": "t", "startingOffsets": "{not json"}, "option startingOffsets: expected"),
    ({"subscribe": "t", "failOnDataLoss": "maybe"}, "failOnDataLoss must be true or false"),
    ({"subscribe": "t", "maxTriggerDelay": "soon"}, "maxTriggerDelay must be a duration"),
    ({"subscribe": "t", "kafka.auto.offset.reset": "earliest"}, "set the source option "
     "startingOffsets instead"),
    ({"subscribe": "t", "startingOffsetsByTimestampStrategy": "closest"}, "error or latest"),
    ({"assign": "[0]"}, "option assign: expected JSON like"),
]


@pytest.mark.parametrize(("bad", "message"), _BAD_OPTIONS)
def test_bad_options_are_refused_by_name(bad: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match="(?i)" + re.escape(message)):
        parse_read_options({"kafka.bootstrap.servers": "h:1", **bad}, streaming=True)



def test_a_pattern_never_reads_internal_topics() -> None:
    cluster = Cluster({0: ("h", 1)}, {"events": {0: 0}, "__consumer_offsets": {0: 0, 1: 0}},
                      frozenset({"__consumer_offsets"}))
    pattern = parse_read_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": ".*"},
                                 streaming=True).subscription
    assert pattern.partitions(cluster) == [TopicPartition("events", 0)]
    named = parse_read_options({"kafka.bootstrap.servers": "h:1",
                                "subscribe": "__consumer_offsets"}, streaming=True).subscription
    assert named.partitions(cluster) == [TopicPartition("__consumer_offsets", p) for p in (0, 1)]

def test_bad_options_fail_queries_at_start(spark: Any, broker: BrokerProcess,
                                           tmp_path: Path) -> None:
    with pytest.raises(Exception, match="unknown source option 'subscibe'"):
        read(spark, broker, subscibe="t").collect()
    with pytest.raises(Exception, match="latest \\(-1\\) is not a valid start for batch"):
        read(spark, broker, subscribe="t", startingOffsets="latest").collect()
    with pytest.raises(Exception, match="endingOffsets is not valid in streaming queries"):
        start_stream(spark, broker, "bad_stream", tmp_path / "ck", {"availableNow": True},
                     subscribe="t", endingOffsets="latest").awaitTermination(60)
    with pytest.raises(Exception, match="exactly one of the options"):
        start_stream(spark, broker, "bad_stream2", tmp_path / "ck2", {"availableNow": True},
                     subscribe="t", subscribePattern="t.*").awaitTermination(60)
