"""The Spark source and sink on a 3-broker cluster, through the SIGKILL of a partition leader.

One ZooKeeper and one cluster of three broker processes for the module (replication factor
3, min.insync.replicas 2), the session's local SparkSession, nothing mocked. What a user
relies on: a stream reading a replicated topic while the partition's leader is killed reads
every acknowledged record exactly once and in order, and carries on after the election
(the source's client retries NOT_LEADER_OR_FOLLOWER after a metadata refresh); a streaming
write into a replicated topic whose leader is killed mid-stream finishes without a failed
batch and without losing or duplicating a row, at-least-once (the sink's producers are
idempotent and retry NOT_LEADER_OR_FOLLOWER) and exactly-once (transactions on the
cluster: the coordinator writes each commit's markers to whichever broker leads).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_fixtures import (
    BackgroundProducer,
    Cluster,
    create_topic,
    numbered,
    produce_confluent,
    wait_until,
    zookeeper,
)
from committed_reader import read_committed

from sparklog.cluster.zookeeper_server import ZooKeeperServer

__all__ = ["zookeeper"]  # fixtures, imported for pytest

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Cluster]:
    running = Cluster(zookeeper, tmp_path_factory.mktemp("cluster"), "spark").start()
    try:
        yield running
    finally:
        running.stop()


def kill_leader(cluster: Cluster, topic: str) -> int:
    """SIGKILL the partition's leader, wait for the election, restart it; its id."""
    leader = cluster.leader(topic)
    cluster.wait_for_isr(topic, {0, 1, 2})
    cluster.brokers[leader].kill()
    wait_until(lambda: cluster.leader(topic) != leader, message="a new leader")
    return leader


def test_stream_reads_through_a_leader_kill(spark: Any, cluster: Cluster,
                                            tmp_path: Path) -> None:
    producer = BackgroundProducer(cluster.bootstrap, "clicks", consume=False,
                                  replication_factor=3).start()
    query = (spark.readStream.format("sparklog")
             .option("kafka.bootstrap.servers", cluster.bootstrap)
             .option("subscribe", "clicks").option("startingOffsets", "earliest").load()
             .selectExpr("CAST(value AS STRING) AS value", "offset")
             .writeStream.format("memory").queryName("clicks_read")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="200 milliseconds").start())

    def read() -> int:
        return spark.table("clicks_read").count()

    wait_until(lambda: read() > 0, timeout=120, message="the stream's first rows")
    victim = kill_leader(cluster, "clicks")
    producer.wait_for_progress(200)
    before = read()
    wait_until(lambda: read() > before, message="rows read after the election")
    cluster.brokers[victim].start()
    sent = producer.stop_and_verify()
    query.processAllAvailable()
    assert query.exception() is None
    rows = spark.table("clicks_read").orderBy("offset").collect()
    query.stop()
    assert [int(r.value) for r in rows] == list(range(sent))
    assert [r.offset for r in rows] == list(range(sent))


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_stream_writes_through_leader_kills(spark: Any, cluster: Cluster, tmp_path: Path,
                                            guarantee: str) -> None:
    total = 20_000
    raw, copied = f"raw-{guarantee}", f"copied-{guarantee}"
    create_topic(cluster.bootstrap, raw, partitions=2, replication_factor=3)
    produce_confluent(cluster.bootstrap, raw, numbered(total), acks="all")
    create_topic(cluster.bootstrap, copied, partitions=1, replication_factor=3)
    query = (spark.readStream.format("sparklog")
             .option("kafka.bootstrap.servers", cluster.bootstrap)
             .option("subscribe", raw).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "500").load()
             .selectExpr("value")
             .writeStream.format("sparklog")
             .option("kafka.bootstrap.servers", cluster.bootstrap)
             .option("topic", copied).option("deliveryGuarantee", guarantee)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    def batches() -> int:
        return len(query.recentProgress)

    for _ in range(2):  # kill the leader of the sink's partition twice, mid-stream
        done = batches()
        wait_until(lambda done=done: batches() > done + 2, message="batches written")
        cluster.brokers[kill_leader(cluster, copied)].start()
    query.processAllAvailable()
    assert query.exception() is None
    query.stop()
    # Everything to the end of the topic, after checking no transaction was left open: a
    # fixed count could not see a duplicate or an open transaction.
    written = [int(value) for value in read_committed(cluster.bootstrap, copied, 1)]
    if guarantee == "exactly-once":
        assert sorted(written) == list(range(total))
    else:  # duplicates are allowed, losses are not
        assert set(written) == set(range(total))
