"""Cluster administration on a real cluster (one ZooKeeper per module, three broker
processes per test, each test its own chroot), through real clients and the tools.

What an operator relies on: with ``auto.leader.rebalance.enable=false`` a preferred leader
that died and came back stays a follower until ``sparklog elect-leaders`` (ElectLeaders),
or Kafka's ``/admin/preferred_replica_election`` znode, hands it leadership again, in a new
leader epoch, with every record kept and producers carrying on; an offline partition gets
a leader through an UNCLEAN election only (or once unclean election is enabled), and the
API says why an election did not happen (ELECTION_NOT_NEEDED,
PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION);
a broker that is not the controller answers NOT_CONTROLLER so clients go to the controller;
``sparklog log-dirs`` shows each broker's replicas (only those it holds) and their sizes;
a topic config altered through any broker is described and enforced by every broker, also
by one that was down while it changed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_fixtures import (
    TIMEOUT,
    BackgroundProducer,
    Cluster,
    RawConnection,
    Rec,
    admin,
    consume_confluent,
    create_topic,
    kp_request,
    kp_response,
    numbered,
    produce_confluent,
    raw_produce,
    running_cluster,
    wait_until,
    zk_client,
    zookeeper,
)
from confluent_kafka import ElectionType, KafkaError
from confluent_kafka import TopicPartition as CkTopicPartition
from kafka import KafkaAdminClient
from kafka import errors as KpErrors

from sparklog.broker.process import BrokerProcess
from sparklog.cli import main
from sparklog.cluster.layout import (
    CONTROLLER,
    PREFERRED_REPLICA_ELECTION,
    PartitionState,
    config_path,
    state_path,
)
from sparklog.cluster.zookeeper_server import ZooKeeperServer
from sparklog.errors import ErrorCode
from sparklog.protocol.versions import ApiKey
from sparklog.record.records import build_batch

__all__ = ["zookeeper"]  # fixtures, imported for pytest

NO_REBALANCE = {"auto.leader.rebalance.enable": "false"}


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path,
            request: pytest.FixtureRequest) -> Iterator[Cluster]:
    with running_cluster(zookeeper, tmp_path, request.node.name, NO_REBALANCE) as running:
        yield running


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def leader_epoch(cluster: Cluster, topic: str, partition: int = 0) -> int:
    with zk_client(cluster) as zk:
        data, stat = zk.get(state_path(topic, partition))
    return PartitionState.decode(data, stat.version).leader_epoch


def elect(cluster: Cluster, election: ElectionType, *partitions: tuple[str, int]
          ) -> dict[tuple[str, int], int]:
    """confluent-kafka's elect_leaders: each partition's error code (0 for elected)."""
    client = admin(cluster.bootstrap)
    results = client.elect_leaders(election, [CkTopicPartition(t, p) for t, p in partitions]
                                   ).result()
    return {(tp.topic, tp.partition): 0 if error is None else error.code()
            for tp, error in results.items()}


def run_configs(cluster: Cluster, *argv: str) -> int:
    """``sparklog configs --entity-type topics ARGV`` against the cluster: the exit code."""
    return main(["configs", "--bootstrap-server", cluster.bootstrap, "--entity-type",
                 "topics", *argv])


def test_elect_leaders_brings_the_preferred_leader_back(
        cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    create_topic(cluster.bootstrap, "orders", replication_factor=3)
    background = BackgroundProducer(cluster.bootstrap, "payments", replication_factor=3).start()
    preferred = cluster.wait_for_isr("payments", {0, 1, 2}).replicas[0]
    assert cluster.wait_for_isr("orders", {0, 1, 2}).replicas[0] == preferred
    cluster.brokers[preferred].kill()
    wait_until(lambda: cluster.partition("payments").leader not in (-1, preferred),
               message="another leader")
    background.wait_for_progress(100)
    cluster.brokers[preferred].start()
    for topic in ("payments", "orders"):
        cluster.wait_for_isr(topic, {0, 1, 2})
        assert cluster.partition(topic).leader != preferred  # no automatic rebalance
    before = leader_epoch(cluster, "payments")

    code, out, err = run(capsys, "elect-leaders", "--bootstrap-server", cluster.bootstrap,
                         "--election-type", "preferred", "--topic", "payments",
                         "--partition", "0")
    assert code == 0, err
    assert out == "Successfully completed leader election (PREFERRED) for partitions " \
                  "payments-0\n"
    assert leader_epoch(cluster, "payments") > before
    # every broker's metadata follows (the controller answered once its own did)
    wait_until(lambda: cluster.partition("payments").leader == preferred,
               message="the preferred leader in metadata")
    background.wait_for_progress(100)  # producers carry on with the new leader

    # Kafka's ZooKeeper way, as an operator's zkCli writes it: the controller elects, deletes
    with zk_client(cluster) as zk:
        zk.create(PREFERRED_REPLICA_ELECTION, json.dumps(
            {"version": 1, "partitions": [{"topic": "orders", "partition": 0}]}).encode())
        wait_until(lambda: zk.exists(PREFERRED_REPLICA_ELECTION) is None,
                   message="the election request deleted once done")
    wait_until(lambda: cluster.partition("orders").leader == preferred,
               message="orders-0 led by its preferred replica")

    every = ("elect-leaders", "--bootstrap-server", cluster.bootstrap, "--election-type",
             "PREFERRED", "--all-topic-partitions")
    code, out, _ = run(capsys, *every)  # __consumer_offsets-0 may lead elsewhere too
    elected = [line for line in out.splitlines() if line.startswith("Successfully")]
    assert code == 0 and "payments" not in "".join(elected)
    code, out, _ = run(capsys, *every)  # nothing needs an election: every one says so
    assert code == 0 and out.startswith("Valid replica already elected for partitions ")
    assert "orders-0" in out and "payments-0" in out and "Successfully" not in out
    path = Path(cluster.brokers[0].data_dir).parent / "election.json"
    path.write_text(json.dumps({"partitions": [{"topic": "payments", "partition": 0}]}))
    code, out, _ = run(capsys, "elect-leaders", "--bootstrap-server", cluster.bootstrap,
                       "--election-type", "PREFERRED", "--path-to-json-file", str(path))
    assert code == 0
    assert out == "Valid replica already elected for partitions payments-0\n"
    assert background.stop_and_verify() > 200  # not one acknowledged record lost or doubled


def test_unclean_election_of_an_offline_partition(cluster: Cluster) -> None:
    create_topic(cluster.bootstrap, "fragile", replication_factor=3)
    create_topic(cluster.bootstrap, "lenient-later", replication_factor=3)
    produce_confluent(cluster.bootstrap, "fragile", numbered(3), acks="all")
    last = cluster.wait_for_isr("fragile", {0, 1, 2}).leader
    others = [i for i in range(3) if i != last]
    for i in others:
        cluster.brokers[i].kill()
    cluster.wait_for_isr("fragile", {last})
    cluster.wait_for_isr("lenient-later", {last})
    cluster.brokers[last].kill()  # nobody in sync is left
    cluster.brokers[others[0]].start()
    wait_until(lambda: set(cluster.metadata().brokers) == {others[0]},
               message="only the restarted broker alive")
    for topic in ("fragile", "lenient-later"):  # unclean.leader.election.enable=false
        wait_until(lambda topic=topic: cluster.partition(topic).leader == -1,
                   message=f"{topic}-0 offline")
    assert elect(cluster, ElectionType.PREFERRED, ("fragile", 0), ("nowhere", 0)) == {
        ("fragile", 0): KafkaError.PREFERRED_LEADER_NOT_AVAILABLE,
        ("nowhere", 0): KafkaError.UNKNOWN_TOPIC_OR_PART}
    assert elect(cluster, ElectionType.UNCLEAN, ("fragile", 0)) == {("fragile", 0): 0}
    assert cluster.partition("fragile").leader == others[0]
    assert elect(cluster, ElectionType.UNCLEAN, ("fragile", 0)) == {
        ("fragile", 0): KafkaError.ELECTION_NOT_NEEDED}  # its leader lives
    assert [r.value for r in consume_confluent(cluster.bootstrap, "fragile", 3)] == \
        [r.value for r in numbered(3)]  # acks=all reached every replica: nothing lost here
    # turning unclean.leader.election.enable on elects at once, as Kafka's controller does
    assert run_configs(cluster, "--entity-name", "lenient-later", "--alter", "--add-config",
                       "unclean.leader.election.enable=true") == 0
    wait_until(lambda: cluster.partition("lenient-later").leader == others[0],
               message="the unclean election the new config allows")
    for i in (last, others[1]):
        cluster.brokers[i].start()
    cluster.wait_for_isr("fragile", {0, 1, 2})
    cluster.wait_for_isr("lenient-later", {0, 1, 2})


def test_only_the_controller_answers(cluster: Cluster,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    create_topic(cluster.bootstrap, "audit", replication_factor=3)
    cluster.wait_for_isr("audit", {0, 1, 2})
    with zk_client(cluster) as zk:
        controller = json.loads(zk.get(CONTROLLER)[0])["brokerid"]
    request_class, response_class = kp_request(ApiKey.ELECT_LEADERS), \
        kp_response(ApiKey.ELECT_LEADERS)
    request = request_class(version=1, election_type=0, timeout_ms=10_000, topic_partitions=[
        request_class.TopicPartitions(topic="audit", partitions=[0])])
    for broker_id, broker in enumerate(cluster.brokers):
        with RawConnection(broker.bootstrap) as conn:
            answer = conn.call(request, response_class)
        (result,) = answer.replica_election_results
        (partition,) = result.partition_result
        expected = ErrorCode.ELECTION_NOT_NEEDED if broker_id == controller else \
            ErrorCode.NOT_CONTROLLER
        assert partition.error_code == expected
        assert answer.error_code == (0 if broker_id == controller else ErrorCode.NOT_CONTROLLER)
    # kafka-python sent to a broker that is not the controller finds the controller
    elsewhere = next(b for i, b in enumerate(cluster.brokers) if i != controller)
    client = KafkaAdminClient(bootstrap_servers=elsewhere.bootstrap)
    try:
        answer = client.elect_leaders(0, {"audit": [0]})
    finally:
        client.close()
    assert [(r.topic, [(p.partition_id, p.error_code) for p in r.partition_result])
            for r in answer.replica_election_results] == \
        [("audit", [(0, ErrorCode.ELECTION_NOT_NEEDED)])]
    with pytest.raises(SystemExit) as usage:
        run(capsys, "elect-leaders", "--bootstrap-server", cluster.bootstrap,
            "--election-type", "sideways", "--all-topic-partitions")
    assert usage.value.code == 2 and "'sideways' is not PREFERRED or UNCLEAN" in \
        capsys.readouterr().err
    code, _, err = run(capsys, "elect-leaders", "--bootstrap-server", cluster.bootstrap,
                       "--election-type", "preferred", "--topic", "audit")
    assert code == 2 and "--partition" in err


def test_log_dirs_list_the_replicas_each_broker_holds(
        cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    create_topic(cluster.bootstrap, "spread", partitions=3, replication_factor=2)
    produce_confluent(cluster.bootstrap, "spread",
                      [Rec(None, b"v" * 300, partition=p) for p in range(3)] * 2, acks="all")
    replicas = {p: set(m.replicas)
                for p, m in cluster.metadata("spread").topics["spread"].partitions.items()}

    def described(*flags: str) -> dict[int, dict[str, int]]:
        """broker -> {partition name: size} of ``sparklog log-dirs --describe``."""
        code, out, err = run(capsys, "log-dirs", "--describe", "--bootstrap-server",
                             cluster.bootstrap, "--topic-list", "spread", *flags)
        assert code == 0, err
        document = json.loads(out.splitlines()[2])
        return {b["broker"]: {p["partition"]: p["size"] for d in b["logDirs"]
                              for p in d["partitions"]} for b in document["brokers"]}

    def replicated() -> bool:
        sizes = described()
        return all(len({sizes[b][f"spread-{p}"] for b in holders}) == 1
                   for p, holders in replicas.items())

    wait_until(replicated, message="every replica of the same size")
    sizes = described()
    assert sorted(sizes) == [0, 1, 2]
    for broker_id, held in sizes.items():  # only the partitions it is a replica of
        assert set(held) == {f"spread-{p}" for p, holders in replicas.items()
                             if broker_id in holders}
        assert all(size > 600 for size in held.values())
    assert sorted(described("--broker-list", "0,1")) == [0, 1]


def described_configs(broker: BrokerProcess, topic: str, *keys: str) -> dict[str, str]:
    """DescribeConfigs of ``topic`` asked of ``broker`` itself (not any broker)."""
    request_class = kp_request(ApiKey.DESCRIBE_CONFIGS)
    request = request_class(version=1, resources=[request_class.DescribeConfigsResource(
        resource_type=2, resource_name=topic, configuration_keys=list(keys))])
    with RawConnection(broker.bootstrap) as conn:
        answer = conn.call(request, kp_response(ApiKey.DESCRIBE_CONFIGS))
    (result,) = answer.results
    assert result.error_code == 0
    return {c.name: c.value for c in result.configs}


def test_topic_configs_change_on_every_broker(cluster: Cluster,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    create_topic(cluster.bootstrap, "ledger", replication_factor=3,
                 config={"retention.ms": "86400000"})
    leader = cluster.wait_for_isr("ledger", {0, 1, 2}).leader
    keys = ("min.insync.replicas", "retention.ms", "cleanup.policy")

    def everywhere(expected: dict[str, str], brokers: list[int]) -> None:
        wait_until(lambda: all(described_configs(cluster.brokers[b], "ledger", *keys)
                               == expected for b in brokers),
                   message=f"every broker describing {expected}")

    everywhere({"min.insync.replicas": "2", "retention.ms": "86400000",
                "cleanup.policy": "delete"}, [0, 1, 2])
    follower = (leader + 1) % 3
    code, _, err = run(capsys, "configs", "--bootstrap-server",
                       cluster.brokers[follower].bootstrap, "--entity-type", "topics",
                       "--entity-name", "ledger", "--alter", "--add-config",
                       "min.insync.replicas=3,cleanup.policy=[compact,delete]")
    assert code == 0, err
    changed = {"min.insync.replicas": "3", "retention.ms": "86400000",
               "cleanup.policy": "compact,delete"}
    everywhere(changed, [0, 1, 2])
    with zk_client(cluster) as zk:
        assert json.loads(zk.get(config_path("ledger"))[0])["config"] == {
            "retention.ms": "86400000", "min.insync.replicas": "3",
            "cleanup.policy": "compact,delete"}
        notices = [json.loads(zk.get(f"/config/changes/{c}")[0])
                   for c in zk.get_children("/config/changes")]
        assert {"version": 2, "entity_path": "topics/ledger"} in notices

    # the leader enforces the new min.insync.replicas: two in-sync replicas are too few
    cluster.brokers[follower].kill()
    cluster.wait_for_isr("ledger", {0, 1, 2} - {follower})
    batch = build_batch([(b"k", b"v", (), int(time.time() * 1000))])
    # (after the append if the leader sees the shrink a moment after the metadata did)
    with RawConnection(cluster.brokers[leader].bootstrap) as conn:
        assert raw_produce(conn, "ledger", 0, batch).error_code in (
            ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    # a broker away during a change gets it when it comes back
    assert run(capsys, "configs", "--bootstrap-server", cluster.bootstrap, "--entity-type",
               "topics", "--entity-name", "ledger", "--alter", "--delete-config",
               "min.insync.replicas")[0] == 0
    cluster.brokers[follower].start()
    everywhere({**changed, "min.insync.replicas": "2"}, [0, 1, 2])


def test_describe_cluster_lists_the_live_brokers(cluster: Cluster) -> None:
    """DescribeCluster at any broker (confluent-kafka's describe_cluster, kafka-python's v2)
    names every live broker at its endpoint and the controller ZooKeeper holds; a broker
    that stopped is left out once its registration is gone (DescribeCluster lists live
    brokers only, where Metadata keeps a departed one for a few seconds)."""
    with zk_client(cluster) as zk:
        controller = json.loads(zk.get(CONTROLLER)[0])["brokerid"]
    ports = {i: int(b.bootstrap.rsplit(":", 1)[1]) for i, b in enumerate(cluster.brokers)}
    for broker in cluster.brokers:
        client = admin(broker.bootstrap)  # referenced: its futures fail once it is freed
        described = client.describe_cluster().result(TIMEOUT)
        assert {n.id: n.port for n in described.nodes} == ports
        assert described.controller.id == controller
    leaving = next(i for i in ports if i != controller)
    cluster.brokers[leaving].stop()
    remaining = next(b for i, b in enumerate(cluster.brokers) if i != leaving)

    def brokers_listed() -> list[int] | None:
        """The brokers DescribeCluster lists; None while kafka-python still picks the
        stopped broker (Metadata lists it a few seconds longer) and cannot connect."""
        try:
            client = KafkaAdminClient(bootstrap_servers=remaining.bootstrap)
        except KpErrors.KafkaError:
            return None
        try:
            return sorted(b["broker_id"] for b in client.describe_cluster()["brokers"])
        except KpErrors.KafkaError:
            return None
        finally:
            client.close()

    wait_until(lambda: brokers_listed() == sorted(set(ports) - {leaving}),
               message=f"broker {leaving} gone from DescribeCluster")
