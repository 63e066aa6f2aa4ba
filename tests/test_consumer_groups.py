"""KIP-848 consumer groups with a real client: confluent-kafka 2.16 with
``group.protocol=consumer`` against the in-process broker. Members join and share every
partition exactly once, a fourth member joins three that keep consuming (they keep what does
not move to it; ``bench/group_join.py`` measures their pause), a member leaves, a member is
killed (its session times out), a static member restarts into its own assignment, a regular
expression picks up a new topic, and commits carry the member epoch.

Each member runs its consumer on a thread of its own; the killed member is a child process.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest
from broker_fixtures import TIMEOUT, create_topic, produce_per_partition, unique_topic, wait_until
from confluent_kafka import Consumer, TopicPartition
from consumer_members import (
    Member,
    consumer_conf,
    every_partition,
    join_fourth,
    shared,
    start_members,
)
from prometheus_client.parser import text_string_to_metric_families

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.state import Broker
from sparklog.cli import main

pytestmark = pytest.mark.timeout(120)

SESSION_TIMEOUT_MS = 3000
CONFIG = {
    "offsets.topic.num.partitions": "3",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "group.initial.rebalance.delay.ms": "0",
    "metrics.listener": "http://127.0.0.1:0",
}


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(Path(tmp_path_factory.mktemp("kip848")) / "data", CONFIG) as proc:
        yield proc


@pytest.fixture
def group(request: pytest.FixtureRequest) -> str:
    return unique_topic(f"group-{request.node.name}")


def group_epochs(embedded: EmbeddedBroker, group: str) -> tuple[int, int]:
    def epochs(broker: Broker) -> tuple[int, int]:
        found = broker.coordinator.consumer.groups[group]
        return found.group_epoch, found.assignment_epoch

    return embedded.call(epochs)


def test_members_consume_every_partition_exactly_once(embedded: EmbeddedBroker,
                                                      group: str) -> None:
    topic = create_topic(embedded.bootstrap, unique_topic("shared"), partitions=6)
    members = start_members(3, consumer_conf(embedded.bootstrap, group), [topic])
    try:
        wait_until(lambda: shared(members, every_partition(topic, 6)))
        assert all(len(m.assigned) == 2 for m in members)  # uniform: balanced
        produce_per_partition(embedded.bootstrap, topic, dict.fromkeys(range(6), 50))
        wait_until(lambda: sum(len(m.received) for m in members) >= 300)
        time.sleep(0.5)
    finally:
        for member in members:
            member.stop()
    got = [record for member in members for record in member.records()]
    assert sorted(got) == sorted((topic, p, o) for p in range(6) for o in range(50))
    assert not [e for m in members for e in m.errors]


def test_a_fourth_member_joins_without_taking_the_others_partitions_away(
        embedded: EmbeddedBroker, group: str) -> None:
    """While a fourth member joins three that keep consuming, each of the three only gives
    up the partitions that move to it: none of them is ever left with nothing (a classic
    eager rebalance revokes everything first), and nothing is consumed twice. How long the
    three pause, against the classic protocol, is measured by ``bench/group_join.py``."""
    run = join_fourth(embedded.bootstrap, group, "consumer")
    for member in run.members[:3]:
        held = member.assignments_since(run.joined)
        assert all(held), held
        assert all(later <= earlier for earlier, later in pairwise(held)), held
        assert len(held[-1]) == 3, held  # 12 partitions over four members, uniform
    assert run.consumed_twice() == 0


def rebalances(embedded: EmbeddedBroker) -> dict[str, float]:
    """The coordinator's rebalance counters, as ``/metrics`` exports them."""
    assert embedded.metrics_url is not None
    with urllib.request.urlopen(embedded.metrics_url + "metrics", timeout=TIMEOUT) as answer:
        text = answer.read().decode()
    return {family.name.removeprefix("kafka_coordinator_group_"): family.samples[0].value
            for family in text_string_to_metric_families(text)
            if family.name.startswith("kafka_coordinator_group_")}


def test_a_member_leaving_hands_its_partitions_over(embedded: EmbeddedBroker,
                                                    group: str) -> None:
    topic = create_topic(embedded.bootstrap, unique_topic("leave"), partitions=4)
    members = start_members(2, consumer_conf(embedded.bootstrap, group), [topic])
    try:
        wait_until(lambda: shared(members, every_partition(topic, 4)))
        epoch, _ = group_epochs(embedded, group)
        counted = rebalances(embedded)
        members[0].stop()
        wait_until(lambda: members[1].assigned == every_partition(topic, 4))
        assert group_epochs(embedded, group)[0] == epoch + 1
        after = rebalances(embedded)  # one new target assignment, no classic rebalance
        assert after["consumer_group_rebalance"] == counted["consumer_group_rebalance"] + 1
        assert after["group_completed_rebalance"] == counted["group_completed_rebalance"]
        produce_per_partition(embedded.bootstrap, topic, dict.fromkeys(range(4), 5))
        wait_until(lambda: len(members[1].received) >= 20)
    finally:
        for member in members:
            member.stop()
    assert sorted(members[1].records()) == sorted((topic, p, o) for p in range(4)
                                                  for o in range(5))


KILLED_MEMBER = """
import sys, time
from confluent_kafka import Consumer
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                     "group.protocol": "consumer", "auto.offset.reset": "earliest"})
consumer.subscribe([sys.argv[3]])
while True:
    consumer.poll(0.1)
    if consumer.assignment():
        print("assigned", flush=True)
"""


def test_a_killed_member_loses_its_partitions_at_its_session_timeout(
        embedded: EmbeddedBroker, group: str) -> None:
    topic = create_topic(embedded.bootstrap, unique_topic("killed"), partitions=4)
    child = subprocess.Popen([sys.executable, "-c", KILLED_MEMBER, embedded.bootstrap, group,
                              topic], stdout=subprocess.PIPE, text=True)
    members = start_members(1, consumer_conf(embedded.bootstrap, group), [topic])
    try:
        assert child.stdout is not None and child.stdout.readline() == "assigned\n"
        wait_until(lambda: len(members[0].assigned) == 2)
        child.send_signal(signal.SIGKILL)
        child.wait(TIMEOUT)
        killed = time.monotonic()
        wait_until(lambda: members[0].assigned == every_partition(topic, 4))
        took = time.monotonic() - killed
    finally:
        child.kill()
        for member in members:
            member.stop()
    assert SESSION_TIMEOUT_MS / 1000 - 1 < took < SESSION_TIMEOUT_MS / 1000 + 5


def test_a_static_member_restarts_into_its_assignment(embedded: EmbeddedBroker,
                                                      group: str) -> None:
    topic = create_topic(embedded.bootstrap, unique_topic("static"), partitions=4)
    conf = consumer_conf(embedded.bootstrap, group)
    a = Member(conf | {"group.instance.id": "a"}, [topic])
    b = Member(conf | {"group.instance.id": "b"}, [topic])
    a.start()
    b.start()
    restarted = None
    try:
        wait_until(lambda: shared([a, b], every_partition(topic, 4)))
        held_by_a, held_by_b = set(a.assigned), set(b.assigned)
        epochs = group_epochs(embedded, group)
        a.stop()
        time.sleep(1.5)  # three heartbeats: b keeps its partitions, a's wait for it
        assert b.assigned == held_by_b
        restarted = Member(conf | {"group.instance.id": "a"}, [topic])
        restarted.start()
        wait_until(lambda: restarted.assigned == held_by_a)
        assert b.assigned == held_by_b
        assert group_epochs(embedded, group) == epochs  # no rebalance at all
    finally:
        for member in (a, b, restarted):
            if member is not None:
                member.stop()


def test_a_regex_subscription_picks_up_a_new_topic(embedded: EmbeddedBroker,
                                                   group: str) -> None:
    prefix = unique_topic("regex")
    first = create_topic(embedded.bootstrap, f"{prefix}-a", partitions=2)
    members = start_members(1, consumer_conf(embedded.bootstrap, group), [f"^{prefix}-.*"])
    try:
        wait_until(lambda: members[0].assigned == every_partition(first, 2))
        second = create_topic(embedded.bootstrap, f"{prefix}-b", partitions=2)
        produce_per_partition(embedded.bootstrap, second, {0: 3, 1: 3})
        wait_until(lambda: members[0].assigned == every_partition(first, 2)
                   | every_partition(second, 2))
        wait_until(lambda: len(members[0].received) >= 6)
    finally:
        for member in members:
            member.stop()
    assert {(t, p) for t, p, _ in members[0].records()} == every_partition(second, 2)


def test_commits_carry_the_member_epoch(embedded: EmbeddedBroker, group: str) -> None:
    topic = create_topic(embedded.bootstrap, unique_topic("commits"), partitions=2)
    produce_per_partition(embedded.bootstrap, topic, {0: 4, 1: 6})
    consumer = Consumer(consumer_conf(embedded.bootstrap, group) | {"enable.auto.commit": False})
    consumer.subscribe([topic])
    try:
        got = 0
        deadline = time.monotonic() + TIMEOUT
        while got < 10 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                got += 1
        assert got == 10
        committed = consumer.commit(asynchronous=False)
        assert committed is not None and all(tp.error is None for tp in committed)
        offsets = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)],
                                     timeout=10)
        assert [tp.offset for tp in offsets] == [4, 6]
    finally:
        consumer.close()


def test_groups_describe_shows_type_epochs_and_assignments(
        embedded: EmbeddedBroker, group: str, capsys: pytest.CaptureFixture[str]) -> None:
    topic = create_topic(embedded.bootstrap, unique_topic("tool"), partitions=2)
    members = start_members(1, consumer_conf(embedded.bootstrap, group)
                            | {"group.instance.id": "tool-1"}, [topic])
    try:
        wait_until(lambda: members[0].assigned == every_partition(topic, 2))
        code = main(["groups", "describe", "--group", group, "--verbose",
                     "--bootstrap", embedded.bootstrap])
        out, err = capsys.readouterr()
        assert code == 0, err
        lines = [line.split() for line in out.splitlines() if line.strip()]
        state = lines[lines.index(["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY",
                                   "STATE", "TYPE", "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH",
                                   "#MEMBERS"]) + 1]
        assert state[0] == group and state[-6:] == ["uniform", "Stable", "consumer", "1", "1",
                                                    "1"]
        header = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                  "#PARTITIONS", "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                  "TARGET-ASSIGNMENT", "UPGRADED"]
        (member,) = lines[lines.index(header) + 1:]
        assert member[2] == "tool-1" and member[5:] == [
            "2", "1", f"{topic}(0,1)", "1", f"{topic}(0,1)", "true"]
    finally:
        for m in members:
            m.stop()
