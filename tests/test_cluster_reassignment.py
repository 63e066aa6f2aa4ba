"""Partition reassignment on a real cluster: one ZooKeeper and three broker processes for the
module, real clients, ``sparklog reassign`` run in-process as a user types it.

What an operator relies on (issue 19): moving a partition from brokers {0,1} to {1,2} under
a running acks=all producer loses, duplicates and reorders nothing; the new replica ends
byte-identical to the leader and the removed one's log is deleted; ``--verify``, ``--list``
(ListPartitionReassignments) show the move in progress, then done; a cancelled reassignment
goes back to the original replicas; a reassignment survives the loss of the controller.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_fixtures import (
    TIMEOUT,
    BackgroundProducer,
    Cluster,
    admin,
    create_topic,
    paused,
    running_cluster,
    wait_until,
    zk_client,
    zookeeper,
)
from confluent_kafka.admin import NewTopic

from sparklog.broker.process import BrokerProcess
from sparklog.cli import main
from sparklog.cluster.layout import CONTROLLER
from sparklog.cluster.zookeeper_server import ZooKeeperServer

__all__ = ["zookeeper"]  # fixtures, imported for pytest


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Cluster]:
    # sessions outlive a short SIGSTOP of the broker that is to receive a replica
    with running_cluster(zookeeper, tmp_path_factory.mktemp("reassign"), "reassign",
                         {"zookeeper.session.timeout.ms": "9000"}) as running:
        yield running


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def plan_file(tmp_path: Path, topic: str, replicas: list[int]) -> str:
    path = tmp_path / f"{topic}.json"
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": replicas}]}))
    return str(path)


def segments(broker: BrokerProcess, topic: str) -> list[bytes]:
    return [p.read_bytes() for p in sorted((broker.data_dir / f"{topic}-0").glob("*.log"))]


def test_reassignment_under_load_keeps_every_record(
        cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    background = BackgroundProducer(cluster.bootstrap, "shifting", replication_factor=2).start()
    assert sorted(cluster.wait_for_isr("shifting", {0, 1}).replicas) == [0, 1]
    # the tools talk to brokers 0 and 1 while broker 2 is stopped
    bootstrap = ",".join(b.bootstrap for b in cluster.brokers[:2])
    plan = plan_file(tmp_path, "shifting", [1, 2])

    def reassign(*flags: str) -> str:
        code, out, err = run(capsys, "reassign", "--bootstrap-server", bootstrap, *flags)
        assert code == 0, err
        return out

    with paused(cluster.brokers[2]):
        out = reassign("--reassignment-json-file", plan, "--execute")
        assert '"replicas":[0,1]' in out.split("Save this")[0]  # the rollback plan
        assert "Successfully started partition reassignments for shifting-0" in out
        assert "Reassignment of partition shifting-0 is still in progress." in reassign(
            "--reassignment-json-file", plan, "--verify")
        assert "shifting-0: replicas: 1,2,0. adding: 2. removing: 0." in reassign("--list")
        background.wait_for_progress(100)  # the producer carries on meanwhile
    wait_until(lambda: "is completed" in reassign("--reassignment-json-file", plan, "--verify"),
               message="the reassignment completed")
    assert reassign("--list") == "No partition reassignments found.\n"
    partition = cluster.wait_for_isr("shifting", {1, 2})
    assert partition.replicas == [1, 2] and partition.leader == 1  # led from the target
    background.wait_for_progress(200)
    wait_until(lambda: not (cluster.brokers[0].data_dir / "shifting-0").exists(),
               message="broker 0's log deleted")
    assert background.stop_and_verify() > 300  # every acknowledged record, once, in order
    wait_until(lambda: segments(cluster.brokers[2], "shifting")
               == segments(cluster.brokers[1], "shifting"),
               message="the new replica's segments equal the leader's")


def test_cancel_returns_to_the_original_replicas(
        cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    create_topic(cluster.bootstrap, "undone", replication_factor=2)
    original = set(cluster.wait_for_isr("undone", {0, 1}).replicas)
    bootstrap = ",".join(b.bootstrap for b in cluster.brokers[:2])
    plan = plan_file(tmp_path, "undone", [1, 2])
    with paused(cluster.brokers[2]):
        assert run(capsys, "reassign", "--bootstrap-server", bootstrap,
                   "--reassignment-json-file", plan, "--execute")[0] == 0
        code, out, _ = run(capsys, "reassign", "--bootstrap-server", bootstrap,
                           "--reassignment-json-file", plan, "--cancel")
        assert code == 0 and "Successfully cancelled partition reassignments for: undone-0" in out
    wait_until(lambda: run(capsys, "reassign", "--bootstrap-server", bootstrap, "--list")[1]
               == "No partition reassignments found.\n", message="nothing in progress")
    assert set(cluster.wait_for_isr("undone", original).replicas) == original
    wait_until(lambda: not (cluster.brokers[2].data_dir / "undone-0").exists(),
               message="broker 2 holds no replica")


def test_a_reassignment_survives_the_controller(
        cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with zk_client(cluster) as zk:
        controller = json.loads(zk.get(CONTROLLER)[0])["brokerid"]
    stays, arrives = (b for b in (0, 1, 2) if b != controller)
    # a manual assignment: from the controller and another broker to the other two
    client = admin(cluster.bootstrap)
    client.create_topics([NewTopic("steady", num_partitions=1,
                                   replica_assignment=[[controller, stays]])],
                         operation_timeout=TIMEOUT)["steady"].result(TIMEOUT)
    assert cluster.wait_for_isr("steady", {controller, stays}).replicas == [controller, stays]
    bootstrap = ",".join(b.bootstrap for i, b in enumerate(cluster.brokers) if i != arrives)
    plan = plan_file(tmp_path, "steady", [stays, arrives])
    # started while the new replica cannot catch up, so the controller cannot finish it
    with paused(cluster.brokers[arrives]):
        assert run(capsys, "reassign", "--bootstrap-server", bootstrap,
                   "--reassignment-json-file", plan, "--execute")[0] == 0
        cluster.brokers[controller].kill()
    # its successor (a higher controller epoch) finishes it from what ZooKeeper holds
    wait_until(lambda: cluster.partition("steady").replicas == [stays, arrives]
               and set(cluster.partition("steady").isrs) == {stays, arrives},
               message="the reassignment completed by the new controller")
    cluster.brokers[controller].start()
    wait_until(lambda: not (cluster.brokers[controller].data_dir / "steady-0").exists(),
               message="the old controller's replica deleted on its return")


def test_generate_and_bad_plans(cluster: Cluster, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    create_topic(cluster.bootstrap, "proposed", partitions=2, replication_factor=2)
    topics = tmp_path / "topics.json"
    topics.write_text('{"topics":[{"topic":"proposed"}],"version":1}')
    code, out, err = run(capsys, "reassign", "--bootstrap-server", cluster.bootstrap,
                         "--generate", "--topics-to-move-json-file", str(topics),
                         "--broker-list", "1,2")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert lines[3] == "Proposed partition reassignment configuration"
    proposed = json.loads(lines[4])["partitions"]
    assert [(p["topic"], p["partition"]) for p in proposed] == [("proposed", 0), ("proposed", 1)]
    assert all(sorted(p["replicas"]) == [1, 2] for p in proposed)
    # bad plans: refused with the reason, nothing started
    for content, reason in (
            ('{"version":1,"partitions":[{"topic":"proposed","partition":0,"replicas":[1,1]}]}',
             "must be distinct"),
            ('{"version":1,"partitions":[{"topic":"proposed","partition":0}]}', '"replicas"'),
            ("not json", "is not JSON"),
            ('{"version":1,"partitions":[{"topic":"proposed","partition":0,"replicas":[1,7]}]}',
             "INVALID_REPLICA_ASSIGNMENT"),
            ('{"version":1,"partitions":[{"topic":"proposed","partition":5,"replicas":[1,2]}]}',
             "partitions not found: proposed-5")):
        plan = tmp_path / "bad.json"
        plan.write_text(content)
        code, _, err = run(capsys, "reassign", "--bootstrap-server", cluster.bootstrap,
                           "--reassignment-json-file", str(plan), "--execute")
        assert code == 1 and reason in err, err
    assert run(capsys, "reassign", "--bootstrap-server", cluster.bootstrap, "--list")[1] == \
        "No partition reassignments found.\n"
