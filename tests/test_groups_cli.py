"""``sparklog groups`` against a real broker: describe with lag, reset-offsets (plan, execute,
refusal for an active group, every kind of target), list, delete, and delete-offsets.

The tool runs in-process through ``sparklog.cli.main``; its stdout and stderr are captured.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from broker_fixtures import (
    TIMEOUT,
    Rec,
    create_topic,
    module_broker,
    produce_confluent,
    unique_topic,
)
from confluent_kafka import Consumer, TopicPartition

from sparklog.broker.process import BrokerProcess
from sparklog.cli import main

pytestmark = pytest.mark.timeout(90)

BROKER_CONFIG = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}
BASE_TIME_MS = 1_700_000_000_000  # 2023-11-14T22:13:20Z


broker = module_broker(BROKER_CONFIG)


@pytest.fixture
def topic(request: pytest.FixtureRequest, broker: BrokerProcess) -> str:
    """A topic with two partitions of ten records, stamped BASE_TIME_MS + offset seconds."""
    name = create_topic(broker.bootstrap, unique_topic(request.node.name), partitions=2)
    produce_confluent(broker.bootstrap, name, [
        Rec(None, b"v", partition=p, timestamp=BASE_TIME_MS + i * 1000)
        for p in (0, 1) for i in range(10)])
    return name


def groups(broker: BrokerProcess, capsys: pytest.CaptureFixture[str], *args: str
           ) -> tuple[int, str, str]:
    code = main(["groups", *args, "--bootstrap", broker.bootstrap])
    out, err = capsys.readouterr()
    return code, out, err


def rows(out: str, header: str) -> list[list[str]]:
    """The rows of the table whose header starts with ``header``, split on whitespace."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if " ".join(line.split()).startswith(header))
    table = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        table.append(line.split())
    return table


def member(bootstrap: str, group: str, topic: str, **conf: Any) -> Consumer:
    """A group member that owns both partitions of ``topic`` (returned once it does)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "heartbeat.interval.ms": 300, "log_level": 4, **conf})
    consumer.subscribe([topic])
    deadline = time.monotonic() + TIMEOUT
    while len(consumer.assignment()) < 2:
        assert time.monotonic() < deadline, "the member never got its partitions"
        consumer.poll(0.1)
    return consumer


def commit(consumer: Consumer, topic: str, offsets: dict[int, int]) -> None:
    consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                    asynchronous=False)


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 4})
    try:
        found = reader.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=TIMEOUT)
        return {tp.partition: tp.offset for tp in found}
    finally:
        reader.close()


def test_describe_shows_members_offsets_and_lag(broker: BrokerProcess, topic: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    group = f"{topic}-g"
    consumer = member(broker.bootstrap, group, topic, **{"client.id": "lagging"})
    try:
        commit(consumer, topic, {0: 4, 1: 7})
        code, out, _ = groups(broker, capsys, "describe", "--group", group)
        assert code == 0, out
        (summary,) = rows(out, "GROUP COORDINATOR")
        assert summary[0] == group and summary[-3:] == ["range", "Stable", "1"]
        offsets = rows(out, "GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG")
        member_id = offsets[0][6]
        assert offsets == [[group, topic, "0", "4", "10", "6", member_id, "/127.0.0.1", "lagging"],
                           [group, topic, "1", "7", "10", "3", member_id, "/127.0.0.1", "lagging"]]
        assert rows(out, "GROUP CONSUMER-ID") == [
            [group, member_id, "/127.0.0.1", "lagging", "2", f"{topic}(0,1)"]]
    finally:
        consumer.close()
    code, out, _ = groups(broker, capsys, "describe", "--group", group)
    assert code == 0
    assert rows(out, "GROUP COORDINATOR")[0][-2:] == ["Empty", "0"]
    assert [r[3:] for r in rows(out, "GROUP TOPIC")] == [["4", "10", "6", "-", "-", "-"],
                                                        ["7", "10", "3", "-", "-", "-"]]
    assert f"Consumer group '{group}' has no active members." in out


def test_reset_offsets_plans_then_executes(broker: BrokerProcess, topic: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    group = f"{topic}-g"
    consumer = member(broker.bootstrap, group, topic)
    commit(consumer, topic, {0: 8, 1: 9})
    code, _, err = groups(broker, capsys, "reset-offsets", "--group", group, "--topic", topic,
                          "--to-earliest", "--execute")
    assert code == 1
    assert "inactive" in err and "Stable" in err  # refused while the group has a member
    consumer.close()
    assert committed(broker.bootstrap, group, topic) == {0: 8, 1: 9}

    def reset(*target: str, execute: bool = True) -> list[list[str]]:
        flags = ("--execute",) if execute else ()
        code, out, err = groups(broker, capsys, "reset-offsets", "--group", group, *target,
                                *flags)
        assert code == 0, err
        assert ("Dry run" in err) is not execute
        return [r[2:] for r in rows(out, "GROUP TOPIC PARTITION NEW-OFFSET")]

    assert reset("--topic", topic, "--to-earliest", execute=False) == [["0", "0"], ["1", "0"]]
    assert committed(broker.bootstrap, group, topic) == {0: 8, 1: 9}  # a plan changes nothing
    assert reset("--topic", topic, "--to-earliest") == [["0", "0"], ["1", "0"]]
    assert committed(broker.bootstrap, group, topic) == {0: 0, 1: 0}
    assert reset("--topic", f"{topic}:1", "--to-offset", "5") == [["1", "5"]]
    assert reset("--all-topics", "--shift-by", "-2") == [["0", "0"], ["1", "3"]]  # clamped at 0
    assert reset("--topic", topic, "--to-offset", "99") == [["0", "10"], ["1", "10"]]
    assert reset("--topic", topic, "--to-datetime", "2023-11-14T22:13:26Z") == [["0", "6"],
                                                                              ["1", "6"]]
    assert reset("--topic", topic, "--to-latest") == [["0", "10"], ["1", "10"]]
    assert committed(broker.bootstrap, group, topic) == {0: 10, 1: 10}
    # and the group resumes there: the next record it reads is the one produced now
    produce_confluent(broker.bootstrap, topic, [Rec(None, b"next", partition=0)])
    resumed = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                        "auto.offset.reset": "earliest", "log_level": 4})
    resumed.subscribe([topic])
    try:
        deadline = time.monotonic() + TIMEOUT
        msg = None
        while msg is None and time.monotonic() < deadline:
            msg = resumed.poll(0.1)
        assert msg is not None and (msg.partition(), msg.offset(), msg.value()) == (0, 10, b"next")
    finally:
        resumed.close()


def test_reset_offsets_usage_errors(broker: BrokerProcess, topic: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    group = f"{topic}-new"
    code, _, err = groups(broker, capsys, "reset-offsets", "--group", group, "--topic", topic,
                          "--shift-by", "1")
    assert code == 1 and "no committed offset" in err
    code, _, err = groups(broker, capsys, "reset-offsets", "--group", group, "--topic",
                          f"{topic}:7", "--to-earliest")
    assert code == 1 and "no partition 7" in err
    code, _, err = groups(broker, capsys, "reset-offsets", "--group", group, "--topic",
                          "no-such-topic", "--to-earliest")
    assert code == 1 and "does not exist" in err
    # a group that does not exist yet can be given offsets (it is created Empty)
    code, _, _ = groups(broker, capsys, "reset-offsets", "--group", group, "--topic", topic,
                        "--to-offset", "3", "--execute")
    assert code == 0
    assert committed(broker.bootstrap, group, topic) == {0: 3, 1: 3}


def test_list_and_delete(broker: BrokerProcess, topic: str,
                         capsys: pytest.CaptureFixture[str]) -> None:
    group = f"{topic}-g"
    consumer = member(broker.bootstrap, group, topic)
    commit(consumer, topic, {0: 1, 1: 1})
    try:
        code, out, _ = groups(broker, capsys, "list")
        assert code == 0 and group in out.split()
        code, _, err = groups(broker, capsys, "delete", "--group", group)
        assert code == 1 and "has members" in err
    finally:
        consumer.close()
    code, out, _ = groups(broker, capsys, "list", "--state")
    assert [group, "Empty"] in rows(out, "GROUP STATE")
    code, out, _ = groups(broker, capsys, "delete", "--group", group)
    assert (code, out) == (0, f"Deleted group {group}.\n")
    code, out, _ = groups(broker, capsys, "list")
    assert group not in out.split()
    assert committed(broker.bootstrap, group, topic) == {0: -1001, 1: -1001}
    code, _, err = groups(broker, capsys, "delete", "--group", group)
    assert code == 1 and "does not exist" in err
    code, _, err = groups(broker, capsys, "describe", "--group", group)
    assert code == 1 and "does not exist" in err


def test_delete_offsets_of_a_topic_the_group_no_longer_consumes(
        broker: BrokerProcess, topic: str, capsys: pytest.CaptureFixture[str]) -> None:
    group = f"{topic}-g"
    consumer = member(broker.bootstrap, group, topic)
    try:
        commit(consumer, topic, {0: 4, 1: 7})
        code, out, err = groups(broker, capsys, "delete-offsets", "--group", group,
                                "--topic", f"{topic}:0")
        assert code == 1
        assert rows(out, "TOPIC PARTITION STATUS") == [
            [topic, "0", "Error:", "GROUP_SUBSCRIBED_TO_TOPIC", "(86)"]]
        assert "kept the offsets of 1 partitions" in err
        assert committed(broker.bootstrap, group, topic) == {0: 4, 1: 7}
    finally:
        consumer.close()
    code, out, err = groups(broker, capsys, "delete-offsets", "--group", group,
                            "--topic", f"{topic}:0")
    assert (code, err) == (0, "")
    assert rows(out, "TOPIC PARTITION STATUS") == [[topic, "0", "Successful"]]
    assert committed(broker.bootstrap, group, topic) == {0: -1001, 1: 7}
    code, out, _ = groups(broker, capsys, "delete-offsets", "--group", group, "--topic", topic)
    assert code == 0
    assert rows(out, "TOPIC PARTITION STATUS") == [[topic, "0", "Successful"],
                                                   [topic, "1", "Successful"]]
    assert committed(broker.bootstrap, group, topic) == {0: -1001, 1: -1001}
    code, out, err = groups(broker, capsys, "delete-offsets", "--group", f"{topic}-none",
                            "--topic", topic)
    assert (code, out) == (1, "")
    assert "does not exist" in err
