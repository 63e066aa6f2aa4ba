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
            # the group's coordinator loaded first: librdkafka's send_offsets_to_transaction
            # can wait forever, past its timeout, on a coordinator that was still loading
            # (confluentinc/librdkafka#5456); the consumer's own lookup retries it
            (before,) = consumer.committed([TopicPartition("orders", 0)], TIMEOUT)
            assert before.offset < 0
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


def _cluster_up(data: str, brokers: int) -> tuple[str, dict]:
    """``cluster up`` in a process of its own: the bootstrap list and ``cluster.json``."""
    up = subprocess.run([sys.executable, "-m", "sparklog.cli", "cluster", "up", "--brokers",
                         str(brokers), "--data-dir", data],
                        capture_output=True, text=True, timeout=300)
    assert up.returncode == 0, up.stderr
    return up.stdout.splitlines()[-1], json.loads((Path(data) / "cluster.json").read_text())


def _by_hand(data: str, entry: dict) -> subprocess.Popen[bytes]:
    """Broker ``entry`` of the cluster started by hand (``sparklog broker``, a relative
    ``--data-dir``), as a user restarts one after a kill -9."""
    return subprocess.Popen(
        [sys.executable, "-m", "sparklog.cli", "broker", "--data-dir", f"broker-{entry['id']}",
         "--listen", f"127.0.0.1:{entry['port']}",
         *(item for key, value in entry["config"].items() for item in ("--set", f"{key}={value}"))],
        cwd=data, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _kill(capsys: pytest.CaptureFixture[str], data: str, pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: run(capsys, "cluster", "status", "--data-dir", data)[0] == 1,
               message=f"pid {pid} seen down")


def test_one_broker_starts_stops_and_restarts_and_down_finds_one_restarted_by_hand(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "cluster")
    bootstrap, state = _cluster_up(data, 3)
    hand = None
    try:
        assert run(capsys, "topics", "create", "--topic", "orders", "--partitions", "2",
                   "--replication-factor", "3", "--bootstrap", bootstrap)[0] == 0
        _kill(capsys, data, state["brokers"][1]["pid"])
        code, out, err = run(capsys, "cluster", "start", "1", "--data-dir", data)
        assert code == 0, err
        assert out.startswith(f"broker 1 started on 127.0.0.1:{state['brokers'][1]['port']}")
        code, _, err = run(capsys, "cluster", "start", "1", "--data-dir", data)
        assert code == 1 and "broker 1 already runs" in err
        code, out, _ = run(capsys, "cluster", "stop", "2", "--data-dir", data)
        assert code == 0 and out.startswith("broker 2 stopped")
        code, out, _ = run(capsys, "cluster", "status", "--data-dir", data)
        assert code == 1
        assert f"broker 2 on 127.0.0.1:{state['brokers'][2]['port']}: not running" in out
        assert run(capsys, "cluster", "restart", "2", "--data-dir", data)[0] == 0

        # broker 0 killed and restarted by hand: status, the rolling restart and down find it
        _kill(capsys, data, state["brokers"][0]["pid"])
        hand = _by_hand(data, state["brokers"][0])
        wait_until(lambda: f"running (pid {hand.pid})" in run(
            capsys, "cluster", "status", "--data-dir", data)[1], message="the broker by hand")
        code, out, err = run(capsys, "cluster", "restart", "--rolling", "--timeout", "120",
                             "--data-dir", data)
        assert code == 0, err
        steps = [line.split(" (")[0].split(" on ")[0] for line in out.splitlines()
                 if line.startswith("broker ")]
        assert sorted(steps) == sorted(f"broker {i} {what}" for i in range(3)
                                       for what in ("stopped", "started"))
        assert all(steps[i].split()[1] == steps[i + 1].split()[1] for i in range(0, 6, 2))
        assert sum(line.startswith("every ISR full") for line in out.splitlines()) == 4
        assert out.splitlines()[-1] == "rolling restart of 3 broker(s) done, every ISR full"
        assert hand.wait(timeout=TIMEOUT) == 0  # replaced, after a controlled shutdown
        code, out, _ = run(capsys, "cluster", "status", "--data-dir", data)
        assert code == 0, out

        _kill(capsys, data, json.loads((Path(data) / "cluster.json").read_text()
                                       )["brokers"][0]["pid"])
        hand = _by_hand(data, state["brokers"][0])
        wait_until(lambda: f"running (pid {hand.pid})" in run(
            capsys, "cluster", "status", "--data-dir", data)[1], message="found again")
    finally:
        code, out, err = run(capsys, "cluster", "down", "--data-dir", data)
        if hand is not None and hand.poll() is None:
            hand.kill()
    assert code == 0, err
    assert out == "stopped 3 broker(s) and ZooKeeper\n"
    assert hand.wait(timeout=TIMEOUT) == 0  # down stopped it: a controlled shutdown
