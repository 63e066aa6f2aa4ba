"""``spark.read.format("sparklog").option("latestPerKey", "true")``: a compacted topic read as
the table it stands for, against a model of the records produced.

The topic has three partitions (keys placed by the producer's partitioner), updates,
tombstones (in cleaned segments and in segments not cleaned yet), a key tombstoned then
written again, and headers; the broker's cleaner compacts the first part (gaps in the
offsets), then ``min.compaction.lag.ms`` keeps it off the rest. The read must equal the
model (the latest record per key up to the end offsets, tombstoned keys absent) and the
plain read plus a window function. Without Spark: the task's reduction with a key budget
so small that it takes several rounds (on a topic with keyless records), and the option's
refusals.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from broker_fixtures import (
    Rec,
    admin,
    create_topic,
    module_broker,
    produce_confluent,
    topic,
    wait_until,
)
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from pyspark.sql import Window
from pyspark.sql import functions as F

from sparklog.broker.process import BrokerProcess
from sparklog.datasource.options import OptionError
from sparklog.datasource.read.batch_reader import SparklogBatchReader
from sparklog.datasource.read.latest_per_key import read_latest_per_key
from sparklog.datasource.read.read_options import parse_read_options
from sparklog.storage.checkpoint import read_checkpoint
from sparklog.storage.cleaner import CLEANER_CHECKPOINT

__all__ = ["broker", "topic"]

pytestmark = pytest.mark.spark

broker = module_broker({"log.cleaner.backoff.ms": "200"})

PARTITIONS = 3

TableRow = tuple[int, int, bytes, bytes, tuple[tuple[str, bytes | None], ...]]
"""(partition, offset, key, value, headers) of a row of the table."""


def model(records: Iterable[Rec], end: dict[int, int] | None = None) -> set[TableRow]:
    """The latest record per key (in its partition) before ``end``, tombstones dropped."""
    latest: dict[tuple[int, bytes], Rec] = {}
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        assert rec.partition is not None
        if rec.key is not None and (end is None or rec.offset < end[rec.partition]):
            latest[rec.partition, rec.key] = rec
    return {(r.partition, r.offset, r.key, r.value, r.headers)
            for r in latest.values() if r.key is not None and r.value is not None}


def table_rows(df: Any) -> set[TableRow]:
    rows = df.select("partition", "offset", "key", "value", "headers").collect()
    found = {(r.partition, r.offset, r.key, r.value,
              tuple((h.key, h.value) for h in r.headers)) for r in rows}
    assert len(found) == len(rows)
    return found


def read(spark: Any, broker: BrokerProcess, topic: str, **extra: str) -> Any:
    return (spark.read.format("sparklog")
            .options(**{"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic,
                        "includeHeaders": "true", **extra}).load())


def window_latest(plain: Any) -> Any:
    """What latestPerKey replaces: the whole topic read, then a window function in Spark."""
    latest_first = Window.partitionBy("topic", "partition", "key").orderBy(F.desc("offset"))
    return (plain.where(F.col("key").isNotNull())
            .withColumn("rank", F.row_number().over(latest_first))
            .where("rank = 1 AND value IS NOT NULL").drop("rank"))


def produce_in_batches(broker: BrokerProcess, topic: str, records: list[Rec]) -> list[Rec]:
    """Small produce calls, so that the topic's 1 KiB segments roll often."""
    acked: list[Rec] = []
    for start in range(0, len(records), 6):
        acked += produce_confluent(broker.bootstrap, topic, records[start:start + 6])
    return acked


def cleaned_to_active_segment(broker: BrokerProcess, topic: str, partition: int) -> bool:
    active = max(int(p.stem) for p in (broker.data_dir / f"{topic}-{partition}").glob("*.log"))
    return read_checkpoint(broker.data_dir / CLEANER_CHECKPOINT).get((topic, partition)) == active


def set_topic_config(broker: BrokerProcess, topic: str, name: str, value: str) -> None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    client = admin(broker.bootstrap)
    for future in client.incremental_alter_configs([resource]).values():
        future.result(30)


def header(i: int) -> tuple[tuple[str, bytes | None], ...]:
    return (("n", b"%d" % i),)


def test_a_compacted_topic_read_as_its_table(spark: Any, broker: BrokerProcess,
                                             topic: str) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS, config={
        "cleanup.policy": "compact", "segment.bytes": "1024",
        "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "0"})
    # Cleaned part: 24 keys updated ten times, every ninth record a tombstone; k0 and k1
    # end with a tombstone.
    first = [Rec(b"k%d" % (i % 24), None if i % 9 == 4 else b"a%d" % i, header(i))
             for i in range(240)]
    first += [Rec(b"k0", None, header(240)), Rec(b"k1", None, header(241))]
    written = produce_in_batches(broker, topic, first)
    wait_until(lambda: all(cleaned_to_active_segment(broker, topic, p)
                           for p in range(PARTITIONS)), 60, "the cleaner to catch up")
    # Not cleaned: more updates and tombstones (k0, k2 and k3 untouched, k1 written again
    # after its tombstone, k24..k29 new, k8, k15, k22 and k29 end with a tombstone).
    set_topic_config(broker, topic, "min.compaction.lag.ms", "3600000")
    second = [Rec(b"k%d" % (4 + i % 26), None if i % 7 == 3 else b"b%d" % i, header(1000 + i))
              for i in range(130)]
    second.append(Rec(b"k1", b"again", header(2000)))
    written += produce_in_batches(broker, topic, second)
    assert {r.partition for r in written} == set(range(PARTITIONS))

    plain = read(spark, broker, topic)
    plain_rows = plain.select("partition", "offset", "key").collect()
    assert len(plain_rows) < len(written)  # cleaned: some offsets are gone
    cleaned_to = read_checkpoint(broker.data_dir / CLEANER_CHECKPOINT)
    not_cleaned = [(r.partition, r.key) for r in plain_rows
                   if r.offset >= cleaned_to[topic, r.partition]]
    assert len(not_cleaned) > len(set(not_cleaned))  # superseded records still there

    expected = model(written)
    keys = {key for _, _, key, _, _ in expected}
    assert b"k0" not in keys and b"k1" in keys and b"k2" in keys and b"k28" in keys
    assert b"k29" not in keys  # a new key whose last record is a tombstone
    table = read(spark, broker, topic, latestPerKey="true")
    assert table.schema == plain.schema
    assert table_rows(table) == expected
    assert "Exchange" not in table._jdf.queryExecution().executedPlan().toString()  # no shuffle
    assert table_rows(window_latest(plain)) == expected

    # An earlier end, in the part not cleaned: the cleaned part only holds each key's
    # latest record as of where cleaning stopped, as in Kafka.
    log_end = {p: max(r.offset for r in written if r.partition == p) + 1
               for p in range(PARTITIONS)}
    end = {p: (cleaned_to[topic, p] + log_end[p]) // 2 for p in range(PARTITIONS)}
    assert all(cleaned_to[topic, p] < end[p] < log_end[p] for p in range(PARTITIONS))
    until = json.dumps({topic: {str(p): offset for p, offset in end.items()}})
    assert table_rows(read(spark, broker, topic, latestPerKey="true",
                           endingOffsets=until)) == model(written, end)


def test_a_task_over_more_keys_than_its_budget_reads_in_rounds(
    broker: BrokerProcess, topic: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """The reduction itself (no Spark), on a plain topic with keyless records too: the
    same rows with the default budget and with one that holds a few dozen keys."""
    create_topic(broker.bootstrap, topic, 1)
    records = [Rec(None if i % 13 == 0 else b"key-%d" % (i * 7919 % 500),
                   None if i % 11 == 0 else b"value-%d" % i, partition=0)
               for i in range(5000)]
    written = produce_confluent(broker.bootstrap, topic, records)
    options = {"kafka.bootstrap.servers": broker.bootstrap, "subscribe": topic,
               "latestPerKey": "true"}
    (task,) = SparklogBatchReader(options, None).partitions()
    expected = model(written)

    def rows(budget_bytes: int) -> set[TableRow]:
        got = pa.Table.from_batches(list(read_latest_per_key(task, budget_bytes))).to_pylist()
        assert len({r["key"] for r in got}) == len(got)
        return {(r["partition"], r["offset"], r["key"], r["value"], ()) for r in got}

    with caplog.at_level(logging.INFO, "sparklog.datasource.read.latest_per_key"):
        assert rows(1 << 20) == expected
        assert "rounds" not in caplog.text
        assert rows(2048) == expected
    assert " read in " in caplog.text and " rounds of keys" in caplog.text


@pytest.mark.parametrize(("extra", "streaming", "message"), [
    ({"latestPerKey": "true"}, True, "option latestPerKey is not valid in streaming queries"),
    ({"latestPerKey": "false"}, True, "option latestPerKey is not valid in streaming queries"),
    ({"latestPerKey": "true", "minPartitions": "4"}, False,
     "option minPartitions cannot be combined with latestPerKey"),
    ({"latestPerKey": "true", "maxRecordsPerPartition": "100"}, False,
     "option maxRecordsPerPartition cannot be combined with latestPerKey"),
    ({"latestPerKey": "yes"}, False, "option latestPerKey must be true or false"),
])
def test_refused_combinations(extra: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_read_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", **extra},
                           streaming=streaming)


def test_a_stream_with_latest_per_key_fails_at_start(spark: Any, broker: BrokerProcess,
                                                     tmp_path: Path) -> None:
    stream = (spark.readStream.format("sparklog")
              .option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", "t")
              .option("latestPerKey", "true").load())
    with pytest.raises(Exception, match="latestPerKey is not valid in streaming queries"):
        (stream.writeStream.format("noop").option("checkpointLocation", str(tmp_path))
         .trigger(availableNow=True).start().awaitTermination(60))
