"""``sparklog cluster up / status / down`` and the topic tools on the cluster it starts.

What a user trying replication relies on: ``up`` starts a ZooKeeper and N brokers that
outlive the command and prints the bootstrap list; ``topics create --replication-factor``
and ``topics describe`` show Leader, Replicas and Isr; a dead broker shows in ``status``
(exit 1) and in ``describe --under-replicated-partitions``; ``down`` stops everything; on a
one-broker cluster, consumer groups and transactions work (the internal topics'
replication factors fit the brokers).
``up`` runs as a process of its own (the cluster must outlive it), the other tools
in-process through ``sparklog.cli.main``; the cluster's processes are real.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from broker_fixtures import TIMEOUT, wait_until
from confluent_kafka import Consumer, Producer, TopicPartition

from sparklog.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cluster_up_describe_status_down(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "cluster")
    # in a process of its own, as a user runs it: the cluster must outlive it
    up = subprocess.run([sys.executable, "-m", "sparklog.cli", "cluster", "up", "--brokers",
                         "3", "--racks", "a,b,c", "--data-dir", data],
                        capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stderr
    bootstrap = up.stdout.splitlines()[-1]
    assert len(bootstrap.split(",")) == 3
    state = json.loads((tmp_path / "cluster" / "cluster.json").read_text())
    try:
        code, _, err = run(capsys, "cluster", "up", "--data-dir", data)
        assert code == 1 and "already runs" in err
        assert run(capsys, "topics", "create", "--topic", "orders", "--partitions", "3",
                   "--replication-factor", "3", "--bootstrap", bootstrap)[0] == 0

        def describe(*flags: str) -> list[str]:
            return run(capsys, "topics", "describe", "--topic", "orders", *flags,
                       "--bootstrap", bootstrap)[1].splitlines()

        wait_until(lambda: all("Isr: " in line and len(line.split("Isr: ")[1].split("\t")[0]
                                                        .split(",")) == 3
                               for line in describe()[1:]), message="full ISRs")
        lines = describe()
        assert "ReplicationFactor: 3" in lines[0]
        for p, line in enumerate(lines[1:]):
            fields = dict(f.split(": ") for f in line.strip().split("\t"))
            assert fields["Partition"] == str(p)
            assert sorted(fields["Replicas"].split(",")) == ["0", "1", "2"]
            assert fields["Leader"] == fields["Replicas"].split(",")[0]
        assert describe("--under-replicated-partitions") == []
        os.kill(state["brokers"][2]["pid"], signal.SIGKILL)
        wait_until(lambda: len(describe("--under-replicated-partitions")) == 3,
                   message="every partition under-replicated")
        assert describe("--unavailable-partitions") == []
        code, out, _ = run(capsys, "cluster", "status", "--data-dir", data)
        assert code == 1
        assert f"broker 2 on 127.0.0.1:{state['brokers'][2]['port']}: not running" in out
    finally:
        code, out, err = run(capsys, "cluster", "down", "--data-dir", data)
    assert code == 0, err
    for entry in [state["zookeeper"], *state["brokers"]]:
        wait_until(lambda pid=entry["pid"]: not Path(f"/proc/{pid}").exists(),
                   message=f"process {entry['pid']} gone")
    assert run(capsys, "cluster", "status", "--data-dir", data)[0] == 1


def test_groups_and_transactions_on_a_one_broker_cluster(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "single")
    up = subprocess.run([sys.executable, "-m", "sparklog.cli", "cluster", "up", "--brokers",
                         "1", "--data-dir", data], capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stderr
    bootstrap = up.stdout.splitlines()[-1]
    try:
        # the internal topics' replication factors fit the one broker: a transactional
        # producer (with offsets sent to its transaction) finds its coordinators
        assert run(capsys, "topics", "create", "--topic", "orders",
                   "--bootstrap", bootstrap)[0] == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "billing",
                             "isolation.level": "read_committed",
                             "auto.offset.reset": "earliest", "log_level": 3})
        try:
            producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "one",
                                 "log_level": 3})
            producer.init_transactions(TIMEOUT)
            producer.begin_transaction()
            producer.produce("orders", b"paid")
            producer.send_offsets_to_transaction([TopicPartition("orders", 0, 1)],
                                                 consumer.consumer_group_metadata(), TIMEOUT)
            producer.commit_transaction(TIMEOUT)
            (committed,) = consumer.committed([TopicPartition("orders", 0)], TIMEOUT)
            assert committed.offset == 1
            consumer.assign([TopicPartition("orders", 0, 0)])
            message = None
            while message is None:
                message = consumer.poll(TIMEOUT)
            assert message.value() == b"paid"
        finally:
            consumer.close()
    finally:
        code, _, err = run(capsys, "cluster", "down", "--data-dir", data)
    assert code == 0, err
