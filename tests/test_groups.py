"""Consumer groups against a real broker (``BrokerProcess``) with real clients: partitions
shared without overlap, rebalances on join, leave and crash, commits of every kind, offsets
that survive broker restarts and crashes, the assignment strategies, static membership, and
groups of kafka-python and aiokafka consumers.

Rebalances are kept fast: the broker starts the first rebalance at once
(``group.initial.rebalance.delay.ms=0``) and consumers heartbeat every 300 ms. Ownership is
checked at every assignment callback: a partition may only be assigned to a member once its
previous owner gave it up.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AioTopicPartition
from broker_fixtures import (
    TIMEOUT,
    Rec,
    create_topic,
    module_broker,
    numbered,
    private_broker,
    produce_confluent,
    unique_topic,
)
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.structs import OffsetAndMetadata

from sparklog.broker.process import BrokerProcess

pytestmark = pytest.mark.timeout(90)

SESSION_MS = 6000
BROKER_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "5",
}
CONSUMER_CONFIG: dict[str, Any] = {
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "session.timeout.ms": SESSION_MS,
    "heartbeat.interval.ms": 300,
    "max.poll.interval.ms": 20000,
    "fetch.wait.max.ms": 50,
    "log_level": 4,
}


broker = module_broker(BROKER_CONFIG)
fresh_broker = private_broker(BROKER_CONFIG)


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    return unique_topic(request.node.name)


def consumer_config(bootstrap: str, group: str, **conf: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "group.id": group, **CONSUMER_CONFIG, **conf}


# -- members that record what they own -----------------------------------------------------------


class Ownership:
    """Which member owns each partition, and every assignment that broke exclusivity."""

    def __init__(self) -> None:
        self.owner: dict[int, str] = {}
        self.violations: list[str] = []


class Member:
    """A confluent-kafka group member; callbacks run inside ``poll`` (one thread drives all)."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, ownership: Ownership,
                 **conf: Any) -> None:
        self.name = name
        self.ownership = ownership
        self.owned: set[int] = set()
        self.records: list[tuple[int, int]] = []
        self.assignments = 0
        self.consumer = Consumer(consumer_config(bootstrap, group, **conf))
        self.consumer.subscribe([topic], on_assign=self._assigned, on_revoke=self._revoked,
                                on_lost=self._revoked)
        self.closed = False

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.assignments += 1
        for tp in partitions:
            holder = self.ownership.owner.get(tp.partition)
            if holder not in (None, self.name):
                self.ownership.violations.append(
                    f"partition {tp.partition} assigned to {self.name} while {holder} owns it")
            self.ownership.owner[tp.partition] = self.name
            self.owned.add(tp.partition)

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            if self.ownership.owner.get(tp.partition) == self.name:
                del self.ownership.owner[tp.partition]
            self.owned.discard(tp.partition)

    def poll(self, timeout: float = 0.05) -> None:
        msg = self.consumer.poll(timeout)
        if msg is None:
            return
        if msg.error():
            raise AssertionError(f"{self.name}: {msg.error()}")
        assert msg.partition() in self.owned, f"{self.name} read a partition it does not own"
        self.records.append((msg.partition(), msg.offset()))

    def close(self) -> None:
        self.consumer.close()
        self.closed = True


def drive(members: list[Member], until: Callable[[], bool], timeout: float = TIMEOUT,
          what: str = "the group to settle") -> None:
    """Poll every open member in turn until ``until()``."""
    started = time.monotonic()
    while not until():
        if time.monotonic() - started > timeout:
            owned = {m.name: sorted(m.owned) for m in members if not m.closed}
            raise AssertionError(f"timed out waiting for {what}; owned: {owned}")
        for member in members:
            if not member.closed:
                member.poll()


def keep_polling(members: list[Member], seconds: float) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        for member in members:
            if not member.closed:
                member.poll()


def shares(members: list[Member], partitions: int, *sizes: int) -> Callable[[], bool]:
    """The open members own every partition, exclusively, in shares of ``sizes``."""
    def check() -> bool:
        owned = [m.owned for m in members if not m.closed]
        union = set().union(*owned)
        return (sorted(len(o) for o in owned) == sorted(sizes)
                and union == set(range(partitions)) and sum(map(len, owned)) == partitions)
    return check


def close_all(members: list[Member]) -> None:
    for member in members:
        if not member.closed:
            member.close()


# -- sharing and rebalancing --------------------------------------------------------------------


def test_three_consumers_share_six_partitions(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=6)
    ownership = Ownership()
    members = [Member(f"m{n}", broker.bootstrap, f"{topic}-g", topic, ownership)
               for n in range(3)]
    try:
        drive(members, shares(members, 6, 2, 2, 2))
        sent = produce_confluent(broker.bootstrap, topic,
                                 [Rec(None, str(i).encode(), partition=i % 6) for i in range(60)])
        drive(members, lambda: sum(len(m.records) for m in members) >= 60,
              what="every record")
        consumed = [r for m in members for r in m.records]
        assert sorted(consumed) == sorted((r.partition, r.offset) for r in sent)  # no duplicate
        for member in members:
            assert {p for p, _ in member.records} == member.owned
        assert ownership.violations == []
    finally:
        close_all(members)


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_joins_and_leaves_move_partitions_without_overlap(broker: BrokerProcess, topic: str,
                                                          strategy: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=6)
    produce_confluent(broker.bootstrap, topic,
                      [Rec(None, b"x", partition=i % 6) for i in range(30)])
    ownership = Ownership()
    conf = {"partition.assignment.strategy": strategy}
    group = f"{topic}-g"
    members = [Member(f"m{n}", broker.bootstrap, group, topic, ownership, **conf)
               for n in range(2)]
    try:
        drive(members, shares(members, 6, 3, 3), what="two members")
        members.append(Member("m2", broker.bootstrap, group, topic, ownership, **conf))
        drive(members, shares(members, 6, 2, 2, 2), what="the third member's share")
        members[0].close()
        drive(members, shares(members, 6, 3, 3), what="the leaver's partitions to move")
        assert ownership.violations == []
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # outlives its futures
        described = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
        assert described.partition_assignor == strategy
        assert sorted(m.client_id for m in described.members) == ["rdkafka", "rdkafka"]
    finally:
        close_all(members)


_CHILD = """
import json, sys
from confluent_kafka import Consumer
conf, topic = json.loads(sys.argv[1]), sys.argv[2]
consumer = Consumer(conf)
consumer.subscribe([topic], on_assign=lambda c, ps: print(
    "ASSIGNED", json.dumps(sorted(p.partition for p in ps)), flush=True))
while True:
    consumer.poll(0.1)
"""


def test_killed_member_loses_its_partitions_after_the_session_timeout(
        broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=6)
    group = f"{topic}-g"
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, json.dumps(consumer_config(broker.bootstrap, group)),
         topic], stdout=subprocess.PIPE, text=True)
    child_owns: list[list[int]] = []
    reader = threading.Thread(target=lambda: child_owns.extend(
        json.loads(line.split(" ", 1)[1]) for line in child.stdout  # type: ignore[union-attr]
        if line.startswith("ASSIGNED")), daemon=True)
    reader.start()
    ownership = Ownership()
    survivor = Member("survivor", broker.bootstrap, group, topic, ownership)
    try:
        drive([survivor], lambda: len(survivor.owned) == 3 and bool(child_owns)
              and len(child_owns[-1]) == 3, what="the child to own half")
        assert set(child_owns[-1]) | survivor.owned == set(range(6))
        child.kill()  # SIGKILL: no LeaveGroup, the heartbeats just stop
        child.wait()
        drive([survivor], lambda: len(survivor.owned) == 6, timeout=SESSION_MS / 1000 + 15,
              what="the dead member's partitions")
        # the coordinator removed it for its silence (no LeaveGroup came from it)
        log = broker.log_file.read_text()
        assert re.search(rf"group {re.escape(group)}: member \S+ failed its session timeout", log)
        assert not re.search(rf"group {re.escape(group)}: member \S+ left$", log, re.MULTILINE)
    finally:
        child.kill()
        survivor.close()


def test_static_member_restart_keeps_its_partitions_without_a_rebalance(
        broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=4)
    group = f"{topic}-g"
    ownership = Ownership()
    a = Member("a", broker.bootstrap, group, topic, ownership, **{"group.instance.id": "a"})
    b = Member("b", broker.bootstrap, group, topic, ownership, **{"group.instance.id": "b"})
    members = [a, b]
    try:
        drive(members, shares(members, 4, 2, 2))
        a_partitions, b_assignments = set(a.owned), b.assignments
        a.close()  # a static member does not leave the group on close
        for p in a_partitions:
            ownership.owner.pop(p, None)
        restarted = Member("a2", broker.bootstrap, group, topic, ownership,
                           **{"group.instance.id": "a"})
        members.append(restarted)
        drive(members, lambda: restarted.owned == a_partitions,
              what="the restarted instance's partitions")
        keep_polling(members, 1.5)  # time for a rebalance to show, if one had started
        assert b.assignments == b_assignments and len(b.owned) == 2  # b saw no rebalance
        assert ownership.violations == []
    finally:
        close_all(members)


# -- commits ----------------------------------------------------------------------------------


def test_sync_async_and_explicit_commits_round_trip(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=1)
    produce_confluent(broker.bootstrap, topic, numbered(10))
    tp = TopicPartition(topic, 0)
    done: list[tuple[Any, list[TopicPartition]]] = []
    consumer = Consumer(consumer_config(broker.bootstrap, f"{topic}-g",
                                        on_commit=lambda err, parts: done.append((err, parts))))
    consumer.subscribe([topic])
    try:
        messages: list[Message] = []
        deadline = time.monotonic() + TIMEOUT
        while len(messages) < 10 and time.monotonic() < deadline:
            messages.extend(m for m in consumer.consume(10, timeout=0.5) if not m.error())
        assert len(messages) == 10

        def committed() -> tuple[int, str | None]:
            (found,) = consumer.committed([tp], timeout=TIMEOUT)
            return found.offset, found.metadata

        consumer.commit(message=messages[2], asynchronous=False)
        assert committed()[0] == 3
        consumer.commit(offsets=[TopicPartition(topic, 0, 6, metadata="async")],
                        asynchronous=True)
        deadline = time.monotonic() + TIMEOUT
        while not done and time.monotonic() < deadline:
            consumer.poll(0.1)
        assert done and done[0][0] is None
        assert committed() == (6, "async")
        consumer.commit(offsets=[TopicPartition(topic, 0, 8, metadata="explicit")],
                        asynchronous=False)
        assert committed() == (8, "explicit")
    finally:
        consumer.close()

    # kafka-python: a "simple" commit (manual assignment, no group membership)
    kp = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=f"{topic}-kp",
                       enable_auto_commit=False)
    try:
        kp_tp = KpTopicPartition(topic, 0)
        kp.assign([kp_tp])
        kp.commit({kp_tp: OffsetAndMetadata(4, "kafka-python", -1)})
        assert kp.committed(kp_tp, metadata=True)[:2] == (4, "kafka-python")
    finally:
        kp.close()

    # aiokafka: a group member's commit with metadata, read back by confluent-kafka
    async def aiokafka_commit() -> None:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap,
                                    group_id=f"{topic}-aio", enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            await consumer.getmany(timeout_ms=2000)
            aio_tp = AioTopicPartition(topic, 0)
            await consumer.commit({aio_tp: (5, "aiokafka")})
            assert await consumer.committed(aio_tp) == 5
        finally:
            await consumer.stop()

    asyncio.run(asyncio.wait_for(aiokafka_commit(), TIMEOUT))
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-aio"})
    try:
        (found,) = reader.committed([tp], timeout=TIMEOUT)
        assert (found.offset, found.metadata) == (5, "aiokafka")
    finally:
        reader.close()


def _consume_in_group(bootstrap: str, group: str, topic: str, count: int,
                      commit_after: int | None = None) -> list[tuple[int, int]]:
    """Join ``group``, read ``count`` records, commit after the ``commit_after``-th one."""
    consumer = Consumer(consumer_config(bootstrap, group))
    consumer.subscribe([topic])
    got: list[tuple[int, int]] = []
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is None or msg.error():
                continue
            got.append((msg.partition(), msg.offset()))
            if len(got) == commit_after:
                consumer.commit(message=msg, asynchronous=False)
    finally:
        consumer.close()
    assert len(got) == count, got
    return got


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_committed_offsets_survive_a_broker_restart(fresh_broker: BrokerProcess, topic: str,
                                                    how: str) -> None:
    create_topic(fresh_broker.bootstrap, topic, partitions=1)
    produce_confluent(fresh_broker.bootstrap, topic, numbered(20))
    group = f"{topic}-g"
    first = _consume_in_group(fresh_broker.bootstrap, group, topic, 10, commit_after=10)
    assert first == [(0, n) for n in range(10)]
    if how == "stop":
        fresh_broker.stop()
    else:
        fresh_broker.kill()  # SIGKILL: no flush, no clean-shutdown marker
    fresh_broker.start()
    second = _consume_in_group(fresh_broker.bootstrap, group, topic, 10)
    assert second == [(0, n) for n in range(10, 20)]  # resumed at the committed offset
    admin = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
    assert admin.describe_consumer_groups([group])[group].result(TIMEOUT).state.name == "EMPTY"


def test_two_groups_read_one_topic_independently(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    sent = produce_confluent(broker.bootstrap, topic,
                             [Rec(None, b"v", partition=i % 2) for i in range(20)])
    everything = sorted((r.partition, r.offset) for r in sent)
    a = _consume_in_group(broker.bootstrap, f"{topic}-a", topic, 20, commit_after=20)
    b = _consume_in_group(broker.bootstrap, f"{topic}-b", topic, 20)
    assert sorted(a) == sorted(b) == everything
    checker = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-b"})
    try:
        found = checker.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=TIMEOUT)
        assert [f.offset for f in found] == [-1001, -1001]  # b committed nothing; a did
    finally:
        checker.close()


# -- kafka-python and aiokafka groups -------------------------------------------------------------


def test_kafka_python_group_consumes_and_commits(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    produce_confluent(broker.bootstrap, topic, [Rec(None, b"v", partition=i % 2)
                                                for i in range(10)])
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=f"{topic}-g",
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300,
                             fetch_max_wait_ms=50)
    try:
        got: list[int] = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 10 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                got.extend(r.offset for r in records)
        assert len(got) == 10
        consumer.commit()
        assert [consumer.committed(KpTopicPartition(topic, p)) for p in (0, 1)] == [5, 5]
    finally:
        consumer.close()


def test_aiokafka_members_share_a_topic(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    produce_confluent(broker.bootstrap, topic, [Rec(None, b"v", partition=i % 2)
                                                for i in range(20)])

    async def scenario() -> None:
        consumers = [AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap,
                                      group_id=f"{topic}-g", enable_auto_commit=False,
                                      auto_offset_reset="earliest",
                                      session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300,
                                      fetch_max_wait_ms=50) for _ in range(2)]
        for consumer in consumers:
            await consumer.start()
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + TIMEOUT
            while loop.time() < deadline:
                assigned = [c.assignment() for c in consumers]
                if all(len(a) == 1 for a in assigned) and assigned[0] != assigned[1]:
                    break
                await asyncio.gather(*(c.getmany(timeout_ms=100) for c in consumers))
            assert [len(c.assignment()) for c in consumers] == [1, 1]
            assert sorted(tp.partition for c in consumers for tp in c.assignment()) == [0, 1]
        finally:
            for consumer in consumers:
                await consumer.stop()

    asyncio.run(asyncio.wait_for(scenario(), TIMEOUT * 2))


def test_describe_and_list_through_the_admin_client(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    group = f"{topic}-g"
    ownership = Ownership()
    member = Member("m", broker.bootstrap, group, topic, ownership, **{"client.id": "describer"})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        drive([member], lambda: len(member.owned) == 2)
        described = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
        assert (described.state.name, described.partition_assignor) == ("STABLE", "range")
        (info,) = described.members
        assert (info.client_id, info.host) == ("describer", "/127.0.0.1")
        assert sorted(tp.partition for tp in info.assignment.topic_partitions) == [0, 1]
        listed = admin.list_consumer_groups().result(TIMEOUT).valid
        assert group in {g.group_id for g in listed}
        futures = admin.delete_consumer_groups([group], request_timeout=TIMEOUT)
        with pytest.raises(Exception) as refused:
            futures[group].result(TIMEOUT)
        assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        member.close()
    admin.delete_consumer_groups([group])[group].result(TIMEOUT)
    gone = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
    assert gone.state.name == "DEAD"
