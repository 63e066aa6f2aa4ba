"""A sparklog stream with ``groupId`` mirrors its progress into that consumer group: with the
option alone (the reader commits), the group's committed offsets reach the log end offsets
at the end of an AvailableNow run and never move backwards; with the driver's listener
(``register``) too, the last batch is committed when the query stops, and
``sparklog groups describe`` shows lag 0 once the stream has caught up; a subscribePattern
commits nothing for internal topics.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.broker.process import BrokerProcess
from sparklog.cli import main as cli
from sparklog.client.cluster import TopicPartition as SourcePartition
from sparklog.datasource import register
from sparklog.datasource.group_commits import group_targets, install

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

PARTITIONS = 3


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    config = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}
    with BrokerProcess(tmp_path_factory.mktemp("group-commits") / "data", config) as running:
        yield running


def _topic_with_records(broker: BrokerProcess, records: int) -> str:
    name = f"stream-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(records):
        producer.produce(name, value=f"v{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    return name


def _committed(broker: BrokerProcess, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 30)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def _wait_committed(broker: BrokerProcess, group: str, topic: str,
                    expected: dict[int, int]) -> dict[int, int]:
    """Commits land asynchronously (the listener's after awaitTermination returns)."""
    deadline = time.monotonic() + 30
    while True:
        found = _committed(broker, group, topic)
        if found == expected or time.monotonic() > deadline:
            return found
        time.sleep(0.3)


def _stream(spark: object, broker: BrokerProcess, topic: str, group: str) -> object:
    return (spark.readStream.format("sparklog")  # type: ignore[attr-defined]
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .option("groupId", group))


@pytest.fixture
def without_listener(spark: object) -> Iterator[None]:
    """The session without the driver's listener (another test may have registered it)."""
    listener = install(spark)  # type: ignore[arg-type]
    spark.streams.removeListener(listener)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        spark.streams.addListener(listener)  # type: ignore[attr-defined]


def _log_end(broker: BrokerProcess, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "log-end"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), 30)[1]
                for p in range(PARTITIONS)}
    finally:
        consumer.close()


def test_the_group_id_option_alone_commits_to_the_log_end(
    spark: object, broker: BrokerProcess, tmp_path: Path, without_listener: None,
) -> None:
    """No register(): the reader commits each batch's end while the next one is planned,
    and the last one of the AvailableNow run before the query ends; the group never moves
    backwards on the way."""
    topic, group = _topic_with_records(broker, 600), f"stream-{uuid.uuid4().hex[:6]}"
    checked: list[int] = []

    def check(batch: Any, batch_id: int) -> None:
        """Fails the query unless the previous batch's end is committed."""
        starts = {row[0]: row[1] for row in batch.groupBy("partition").min("offset").collect()}
        if batch_id > 0 and len(starts) == PARTITIONS:  # the previous batch ended there
            committed = _wait_committed(broker, group, topic, starts)
            assert committed == starts, f"batch {batch_id} starts at {starts}: {committed}"
            checked.append(batch_id)

    seen: list[dict[int, int]] = []
    query = (_stream(spark, broker, topic, group).option("maxOffsetsPerTrigger", 60).load()
             .writeStream.foreachBatch(check).trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    while query.isActive:
        seen.append(_committed(broker, group, topic))
        time.sleep(0.2)
    query.awaitTermination(120)
    assert query.exception() is None
    seen.append(_committed(broker, group, topic))
    assert seen[-1] == _log_end(broker, topic) == dict.fromkeys(range(PARTITIONS), 200)
    assert len(checked) >= 5
    for earlier, later in pairwise(seen):
        assert all(later[p] >= earlier[p] for p in range(PARTITIONS)), seen


def test_available_now_commits_every_batch_and_the_last_one_synchronously(
    spark: object, broker: BrokerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    register(spark)  # type: ignore[arg-type]
    topic, group = _topic_with_records(broker, 300), f"stream-{uuid.uuid4().hex[:6]}"
    query = (_stream(spark, broker, topic, group).option("maxOffsetsPerTrigger", 100).load()
             .writeStream.format("noop").trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    query.awaitTermination(120)
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(batches) >= 3
    last_end = json.loads(batches[-1]["sources"][0]["endOffset"])[topic]
    expected = {int(p): o for p, o in last_end.items()}
    assert sum(expected.values()) == 300
    assert _wait_committed(broker, group, topic, expected) == expected

    assert cli(["groups", "describe", "--bootstrap", broker.bootstrap, "--group", group]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()
            if line.startswith(group) and topic in line]
    assert len(rows) == PARTITIONS
    assert all(row[5] == "0" for row in rows)  # GROUP TOPIC PARTITION CURRENT END LAG ...


def test_stopping_a_running_query_commits_its_last_batch(
    spark: object, broker: BrokerProcess, tmp_path: Path,
) -> None:
    """The next trigger is an hour away, so the reader never hears of the end of the first
    batch (it committed the starting offsets); the listener commits it when the query
    stops."""
    register(spark)  # type: ignore[arg-type]
    topic, group = _topic_with_records(broker, 90), f"stream-{uuid.uuid4().hex[:6]}"
    query = (_stream(spark, broker, topic, group).load()
             .writeStream.format("noop").trigger(processingTime="1 hour")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and sum(
        p["numInputRows"] for p in query.recentProgress) < 90:
        time.sleep(0.5)
    assert _wait_committed(broker, group, topic, {0: 0, 1: 0, 2: 0}) == {0: 0, 1: 0, 2: 0}
    query.stop()
    assert _wait_committed(broker, group, topic, {0: 30, 1: 30, 2: 30}) == {0: 30, 1: 30, 2: 30}


def test_a_pattern_commits_nothing_for_internal_topics(broker: BrokerProcess) -> None:
    """As the reader does, a group target's subscribePattern never matches an internal topic:
    ``__consumer_offsets`` in a batch's end (another source of the query may read it by
    name) is not committed to the pattern's group."""
    topic, group = _topic_with_records(broker, 3), f"stream-{uuid.uuid4().hex[:6]}"
    assert _committed(broker, group, topic) == dict.fromkeys(range(PARTITIONS), -1001)
    (target,) = group_targets([{"kafka.bootstrap.servers": broker.bootstrap,
                                "subscribePattern": ".*", "groupId": group}])
    internal = SourcePartition("__consumer_offsets", 0)
    end = {SourcePartition(topic, p): 1 for p in range(PARTITIONS)} | {internal: 7}
    commits = target.commits(end)
    assert commits == {(topic, p): 1 for p in range(PARTITIONS)}
    assert target.commit(end, sync=False)
    target.close()
    assert _committed(broker, group, topic) == dict.fromkeys(range(PARTITIONS), 1)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        (found,) = consumer.committed([TopicPartition(*internal)], 30)
        assert found.offset == -1001
    finally:
        consumer.close()
