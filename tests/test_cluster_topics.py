"""Topics in a cluster: where their logs live, deleting them, adding partitions.

One ZooKeeper and one 3-broker cluster for the module (each test its own topics), real
clients. What a user relies on: a broker keeps logs only for the partitions it is a replica
of, and creates or deletes them as the assignment in ZooKeeper changes; every broker still
answers Metadata, DescribeConfigs and ``topics describe`` for every topic, and data requests
for a partition it does not hold with NOT_LEADER_OR_FOLLOWER, so clients go to the leader.
Deleting a topic removes it from ZooKeeper and every replica before the answer, so a topic
of the same name starts empty, even on a broker that was down meanwhile; added partitions
get replicas (or the ones asked for), leaders, and take records.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from broker_fixtures import (
    TIMEOUT,
    Cluster,
    RawConnection,
    Rec,
    admin,
    consume_confluent,
    create_topic,
    fetch_request,
    metadata_v12,
    metadata_v12_request,
    numbered,
    one_batch,
    produce_confluent,
    running_cluster,
    wait_until,
    watermarks,
    zk_client,
    zookeeper,
)
from confluent_kafka import KafkaError as KafkaErrorCode
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import NewPartitions
from kafka.protocol.admin import (
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
)
from kafka.protocol.consumer import (
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from sparklog.cli import main
from sparklog.cluster.layout import (
    TopicAssignment,
    config_path,
    delete_topic_path,
    topic_path,
)
from sparklog.cluster.zookeeper_server import ZooKeeperServer
from sparklog.errors import ErrorCode

__all__ = ["zookeeper"]  # fixtures, imported for pytest


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Cluster]:
    with running_cluster(zookeeper, tmp_path_factory.mktemp("topics"), "topics") as running:
        yield running


def local_partitions(cluster: Cluster, broker: int, topic: str) -> set[int]:
    """The partitions of ``topic`` with a log directory on ``broker``."""
    return {int(p.name.rsplit("-", 1)[1])
            for p in cluster.brokers[broker].data_dir.glob(f"{topic}-*")
            if p.is_dir() and p.name.rsplit("-", 1)[1].isdigit()}


def holders(cluster: Cluster, topic: str) -> dict[int, set[int]]:
    """broker -> the partitions of ``topic`` Metadata says it is a replica of."""
    found: dict[int, set[int]] = {b: set() for b in range(len(cluster.brokers))}
    for p, partition in cluster.metadata(topic).topics[topic].partitions.items():
        for broker in partition.replicas:
            found[broker].add(p)
    return found


def list_offsets(conn: RawConnection, topic: str, partition: int) -> int:
    """ListOffsets (latest) of one partition: its error code."""
    offsets_topic = ListOffsetsRequest.ListOffsetsTopic
    answer = conn.call(ListOffsetsRequest(
        version=5, replica_id=-1, isolation_level=0, topics=[offsets_topic(
            name=topic, partitions=[offsets_topic.ListOffsetsPartition(
                partition_index=partition, current_leader_epoch=-1, timestamp=-1)])]),
        ListOffsetsResponse)
    return int(answer.topics[0].partitions[0].error_code)


def test_logs_live_only_on_replicas(cluster: Cluster, capsys: pytest.CaptureFixture[str]
                                    ) -> None:
    create_topic(cluster.bootstrap, "placed", partitions=3, replication_factor=2,
                 config={"retention.ms": "86400000"})
    for p in range(3):
        cluster.leader("placed", p)
    expected = holders(cluster, "placed")
    assert sum(len(partitions) for partitions in expected.values()) == 6
    wait_until(lambda: all(local_partitions(cluster, b, "placed") == expected[b]
                           for b in expected), message="logs exactly on the replicas")
    produce_confluent(cluster.bootstrap, "placed", numbered(6), acks="all")
    for b, broker in enumerate(cluster.brokers):
        with RawConnection(broker.bootstrap) as conn:
            # data requests for a partition without a replica here: go to the leader
            for absent in set(range(3)) - expected[b]:
                assert list_offsets(conn, "placed", absent) == ErrorCode.NOT_LEADER_OR_FOLLOWER
            # the topic's configs are the cluster's, on every broker
            answer = conn.call(DescribeConfigsRequest(
                version=1, resources=[(2, "placed", ["retention.ms"])], include_synonyms=False),
                DescribeConfigsResponse)
            (result,) = answer.results
            assert result.error_code == ErrorCode.NONE
            assert [(c.name, c.value) for c in result.configs] == [("retention.ms", "86400000")]
    # describe through a single broker: every partition with its offsets
    capsys.readouterr()
    assert main(["topics", "describe", "--topic", "placed",
                 "--bootstrap-server", cluster.brokers[0].bootstrap]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "PartitionCount: 3\tReplicationFactor: 2" in lines[0]
    assert sum(int(line.rsplit("..", 1)[1]) for line in lines[1:]) == 6


def test_a_data_request_at_a_broker_that_does_not_lead_names_the_leader(
        cluster: Cluster) -> None:
    """KIP-951: Produce v10+ and Fetch v16+ sent to a broker that does not lead the
    partition are answered NOT_LEADER_OR_FOLLOWER with the leader, its epoch and its
    endpoint, so a client moves without a Metadata round; v13 name the topic by id."""
    create_topic(cluster.bootstrap, "redirected", replication_factor=1)
    leader = cluster.leader("redirected")
    (described,) = metadata_v12(cluster.brokers[leader].bootstrap, "redirected").topics
    topic_id, epoch = described.topic_id, described.partitions[0].leader_epoch
    host, port = cluster.brokers[leader].bootstrap.split(":")
    produced = ProduceRequest.TopicProduceData
    other = next(b for b in range(len(cluster.brokers)) if b != leader)
    with RawConnection(cluster.brokers[other].bootstrap) as conn:
        for version in (10, 13):
            answer = conn.call(ProduceRequest(
                version=version, transactional_id=None, acks=-1, timeout_ms=10000,
                topic_data=[produced(name="redirected", topic_id=topic_id, partition_data=[
                    produced.PartitionProduceData(index=0, records=one_batch(b"x"))])]),
                ProduceResponse)
            (partition,) = answer.responses[0].partition_responses
            assert partition.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert (partition.current_leader.leader_id,
                    partition.current_leader.leader_epoch) == (leader, epoch)
            assert [(e.node_id, e.host, e.port) for e in answer.node_endpoints] == \
                [(leader, host, int(port))]
        answer = conn.call(fetch_request(topic_id, 0, 0, version=16), FetchResponse)
        (topic,) = answer.responses
        (partition,) = topic.partitions
        assert (topic.topic_id, partition.error_code) == \
            (topic_id, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        assert (partition.current_leader.leader_id,
                partition.current_leader.leader_epoch) == (leader, epoch)
        assert [(e.node_id, e.host, e.port) for e in answer.node_endpoints] == \
            [(leader, host, int(port))]
    with RawConnection(cluster.brokers[leader].bootstrap) as conn:  # the leader appends
        answer = conn.call(ProduceRequest(
            version=13, transactional_id=None, acks=-1, timeout_ms=10000,
            topic_data=[produced(topic_id=topic_id, partition_data=[
                produced.PartitionProduceData(index=0, records=one_batch(b"y"))])]),
            ProduceResponse)
        (partition,) = answer.responses[0].partition_responses
        assert (answer.responses[0].topic_id, partition.error_code) == (topic_id, 0)
        assert answer.node_endpoints == []
    assert watermarks(cluster.bootstrap, "redirected") == (0, 1)


def test_a_producer_follows_a_moved_leader_without_asking_for_metadata(cluster: Cluster
                                                                       ) -> None:
    """KIP-951 with a real client: librdkafka producing to a partition whose leader moves
    (the old leader stays up) follows the leader its NOT_LEADER_OR_FOLLOWER answer names,
    without a Metadata round (its statistics count every request it sent), and loses
    nothing.

    librdkafka applies the answer's leader on its main thread and, from the broker thread,
    also starts its fast leader query, which sends a Metadata request when it runs before
    the answer's leader was applied (rdkafka_request.c, ``rd_kafka_handle_Produce_error``):
    so the leader moves up to three times and one move must go without a Metadata round. A
    broker naming no leader makes every move ask for metadata."""
    create_topic(cluster.bootstrap, "followed", replication_factor=3)
    cluster.wait_for_isr("followed", {0, 1, 2})
    stats: list[dict[str, Any]] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                         "statistics.interval.ms": 100, "linger.ms": 0,
                         "stats_cb": lambda raw: stats.append(json.loads(raw))})

    def metadata_requests() -> int:
        """Metadata requests the producer had sent by the statistics after a flush."""
        seen = len(stats)
        wait_until(lambda: producer.poll(0.1) >= 0 and len(stats) > seen + 1,
                   message="fresh producer statistics")  # poll serves the callback
        return sum(b["req"].get("Metadata", 0) for b in stats[-1]["brokers"].values())

    def send(first: int) -> None:
        for n in range(first, first + 10):
            producer.produce("followed", str(n).encode(), partition=0)
        assert producer.flush(TIMEOUT) == 0

    def move_leader() -> None:
        new = (cluster.leader("followed") + 1) % 3
        with zk_client(cluster) as zk:
            data, stat = zk.get(topic_path("followed"))
            current = TopicAssignment.decode(data, stat.version)
            zk.set(topic_path("followed"), TopicAssignment(
                {0: (new, *(b for b in (0, 1, 2) if b != new))}, current.topic_id).encode(),
                stat.version)
        assert main(["elect-leaders", "--bootstrap-server", cluster.bootstrap,
                     "--election-type", "preferred", "--topic", "followed",
                     "--partition", "0"]) == 0
        wait_until(lambda: cluster.partition("followed").leader == new,
                   message="the new leader")
        cluster.wait_for_isr("followed", {0, 1, 2})

    send(0)
    asked = []
    for move in range(1, 4):
        before = metadata_requests()
        move_leader()
        send(10 * move)
        asked.append(metadata_requests() - before)
        if asked[-1] == 0:
            break
    assert 0 in asked, f"Metadata requests after each move: {asked}"
    assert [r.value for r in consume_confluent(cluster.bootstrap, "followed", 10 * len(asked) + 10)
            ] == [str(n).encode() for n in range(10 * len(asked) + 10)]


def test_logs_follow_assignment_changes(cluster: Cluster) -> None:
    create_topic(cluster.bootstrap, "moving", replication_factor=2)
    cluster.leader("moving")
    replicas = tuple(cluster.partition("moving").replicas)
    (outsider,) = {0, 1, 2} - set(replicas)
    produce_confluent(cluster.bootstrap, "moving", numbered(5), acks="all")
    assert local_partitions(cluster, outsider, "moving") == set()
    with zk_client(cluster) as zk:
        data, stat = zk.get(topic_path("moving"))
        current = TopicAssignment.decode(data, stat.version)
        zk.set(topic_path("moving"), TopicAssignment(
            {0: (*replicas, outsider)}, current.topic_id).encode(), stat.version)
        # added: the new replica creates its log, copies the leader's and joins the ISR
        cluster.wait_for_isr("moving", {0, 1, 2})
        leader = cluster.partition("moving").leader

        def segments(broker: int) -> list[bytes]:
            directory = cluster.brokers[broker].data_dir / "moving-0"
            return [p.read_bytes() for p in sorted(directory.glob("*.log"))]

        wait_until(lambda: segments(outsider) == segments(leader),
                   message="the new replica's segments equal the leader's")
        data, stat = zk.get(topic_path("moving"))
        zk.set(topic_path("moving"), TopicAssignment(
            {0: replicas}, current.topic_id).encode(), stat.version)
    # removed: its log is deleted, the topic is still described by it
    wait_until(lambda: local_partitions(cluster, outsider, "moving") == set(),
               message="the removed replica's log deleted")
    with RawConnection(cluster.brokers[outsider].bootstrap) as conn:
        assert list_offsets(conn, "moving", 0) == ErrorCode.NOT_LEADER_OR_FOLLOWER


def no_logs(cluster: Cluster, topic: str) -> bool:
    return all(local_partitions(cluster, b, topic) == set() for b in range(len(cluster.brokers)))


def test_delete_then_recreate_with_fresh_data(cluster: Cluster) -> None:
    create_topic(cluster.bootstrap, "doomed", partitions=2, replication_factor=3)
    cluster.wait_for_isr("doomed", {0, 1, 2})
    produce_confluent(cluster.bootstrap, "doomed", numbered(5), acks="all")
    client = admin(cluster.bootstrap)
    client.delete_topics(["doomed"], operation_timeout=TIMEOUT)["doomed"].result(TIMEOUT)
    # once answered, the topic is gone from the cluster: ZooKeeper, Metadata, every log
    assert "doomed" not in cluster.metadata().topics
    with zk_client(cluster) as zk:
        for path in (topic_path("doomed"), config_path("doomed"), delete_topic_path("doomed")):
            assert zk.exists(path) is None, path
    wait_until(lambda: no_logs(cluster, "doomed"), message="every replica's logs deleted")
    create_topic(cluster.bootstrap, "doomed", replication_factor=3)
    fresh = [Rec(None, b"fresh-1"), Rec(None, b"fresh-2")]
    produce_confluent(cluster.bootstrap, "doomed", fresh, acks="all")
    assert [r.value for r in consume_confluent(cluster.bootstrap, "doomed", 2)] == \
        [b"fresh-1", b"fresh-2"]
    assert watermarks(cluster.bootstrap, "doomed") == (0, 2)


def test_a_broker_away_during_deletes_drops_the_old_logs(cluster: Cluster) -> None:
    for name in ("gone", "reborn"):
        create_topic(cluster.bootstrap, name, replication_factor=3)
        cluster.wait_for_isr(name, {0, 1, 2})
        produce_confluent(cluster.bootstrap, name, numbered(3), acks="all")
    away = cluster.brokers[2]
    away.kill()
    wait_until(lambda: len(cluster.metadata().brokers) == 2, message="broker 2 gone")
    client = admin(cluster.bootstrap)
    for future in client.delete_topics(["gone", "reborn"],
                                       operation_timeout=TIMEOUT).values():
        future.result(TIMEOUT)
    create_topic(cluster.bootstrap, "reborn", replication_factor=2)  # on brokers 0 and 1
    assert local_partitions(cluster, 2, "gone") == local_partitions(cluster, 2, "reborn") == {0}
    away.start()
    # the deleted topic and the earlier topic of a reused name (another topic id) are dropped
    wait_until(lambda: local_partitions(cluster, 2, "gone") == set()
               and local_partitions(cluster, 2, "reborn") == set(),
               message="broker 2's stale logs deleted")
    cluster.wait_for_isr("reborn", {0, 1})
    assert watermarks(cluster.bootstrap, "reborn") == (0, 0)


def test_add_partitions_and_use_them(cluster: Cluster) -> None:
    create_topic(cluster.bootstrap, "growing", replication_factor=2)
    client = admin(cluster.bootstrap)
    client.create_partitions([NewPartitions("growing", 3)],
                             operation_timeout=TIMEOUT)["growing"].result(TIMEOUT)
    client.create_partitions([NewPartitions("growing", 4, replica_assignment=[[2, 0]])],
                             operation_timeout=TIMEOUT)["growing"].result(TIMEOUT)
    partitions = cluster.metadata("growing").topics["growing"].partitions
    assert sorted(partitions) == [0, 1, 2, 3]
    assert all(len(p.replicas) == 2 for p in partitions.values())
    assert partitions[3].replicas == [2, 0]
    # not fewer, nor a manual assignment naming a broker twice
    refused = client.create_partitions([NewPartitions("growing", 5, replica_assignment=[[1, 1]])],
                                       operation_timeout=TIMEOUT)["growing"]
    with pytest.raises(KafkaException) as raised:
        refused.result(TIMEOUT)
    assert raised.value.args[0].code() == KafkaErrorCode.INVALID_REPLICA_ASSIGNMENT
    for p in range(4):
        cluster.wait_for_isr("growing", set(partitions[p].replicas), p)
    holding = holders(cluster, "growing")
    wait_until(lambda: all(local_partitions(cluster, b, "growing") == holding[b]
                           for b in holding), message="logs of the new partitions on replicas")
    records = [Rec(None, f"p{p}".encode(), partition=p) for p in range(4)]
    produce_confluent(cluster.bootstrap, "growing", records, acks="all")
    assert sorted(r.value for r in consume_confluent(cluster.bootstrap, "growing", 4,
                                                     partitions=range(4))) == \
        [b"p0", b"p1", b"p2", b"p3"]


def test_delete_records_only_on_the_leader(cluster: Cluster) -> None:
    create_topic(cluster.bootstrap, "trimmed", replication_factor=3)
    leader = cluster.wait_for_isr("trimmed", {0, 1, 2}).leader
    produce_confluent(cluster.bootstrap, "trimmed", numbered(4), acks="all")
    follower = (leader + 1) % 3
    request = DeleteRecordsRequest(version=1, topics=[("trimmed", [(0, 2)])], timeout_ms=5000)
    with RawConnection(cluster.brokers[follower].bootstrap) as conn:
        answer = conn.call(request, DeleteRecordsResponse)
        assert answer.topics[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    with RawConnection(cluster.brokers[leader].bootstrap) as conn:
        answer = conn.call(request, DeleteRecordsResponse)
        assert answer.topics[0].partitions[0].error_code == ErrorCode.NONE
        assert answer.topics[0].partitions[0].low_watermark == 2
    assert watermarks(cluster.bootstrap, "trimmed") == (2, 4)


def test_a_restarting_broker_answers_only_once_it_knows_the_cluster(cluster: Cluster) -> None:
    """A client connecting the moment a restarted broker's port opens (librdkafka retries
    every few milliseconds) gets the cluster's view of a topic, not a refusal: the broker
    accepts connections only once it has joined the cluster."""
    create_topic(cluster.bootstrap, "known", replication_factor=3)
    cluster.wait_for_isr("known", {0, 1, 2})
    away = cluster.brokers[2]
    away.kill()
    restart = threading.Thread(target=away.start)
    restart.start()
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:  # the first moment its port takes a connection
            try:
                connection = RawConnection(away.bootstrap, timeout=TIMEOUT)
                break
            except OSError:
                assert time.monotonic() < deadline, "broker 2 never listened again"
                time.sleep(0.002)
        with connection:
            answer = connection.call(metadata_v12_request("known", auto_create=True),
                                     MetadataResponse)
    finally:
        restart.join()
    [topic] = answer.topics
    assert (topic.error_code, len(topic.partitions)) == (ErrorCode.NONE, 1)
    assert sorted(topic.partitions[0].replica_nodes) == [0, 1, 2]
