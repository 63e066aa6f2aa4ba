"""Online migration between classic and consumer groups (KIP-848, Kafka 4's
``group.consumer.migration.policy``) with real clients: confluent-kafka 2.16 members with
``group.protocol=classic`` consume, a ``group.protocol=consumer`` member joins (the group
upgrades; every partition stays assigned exactly once, the classic members keep consuming
and committing), the coordinator is unloaded and loaded again (the converted group and its
classic members come back from ``__consumer_offsets``), and the consumer member leaves (the
group downgrades to a classic group that rebalances its members); kafka-python 3 members
(eager, v0 subscriptions) upgrade the same way and their commits land. Raw requests walk
each step and every error path (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
INCONSISTENT_GROUP_PROTOCOL, REBALANCE_IN_PROGRESS, GROUP_ID_NOT_FOUND where the group or
the policy does not allow an upgrade).
"""

from __future__ import annotations

import dataclasses
import json
import struct
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from broker_fixtures import create_topic, produce_per_partition, unique_topic, wait_until
from confluent_kafka import Consumer, TopicPartition
from consumer_members import Member, consumer_conf, every_partition, shared, start_members
from kafka import KafkaConsumer
from test_consumer_group_protocol import assignment, connect, heartbeat, join, topic_id

from sparklog.broker.config import BrokerConfig
from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.state import Broker
from sparklog.cli import main
from sparklog.client.connection import BrokerConnection
from sparklog.commands.record_decoders import DECODERS
from sparklog.coordinator.consumer_group_coordinator import ConsumerGroupConfig, MigrationPolicy
from sparklog.coordinator.consumer_protocol import assigned_partitions, assignment_bytes
from sparklog.coordinator.group_records import (
    ClassicMemberMetadata,
    ConsumerGroupKey,
    ConsumerGroupRecords,
    ConsumerMemberRecord,
    ConsumerRecordType,
    apply_consumer_record,
    consumer_key,
    member_subscription_value,
    partition_for,
)
from sparklog.errors import ErrorCode, InvalidConfigError
from sparklog.protocol.versions import ApiKey

pytestmark = pytest.mark.timeout(120)

CONSUMER_SESSION_MS = 3000
CONFIG = {
    "offsets.topic.num.partitions": "3",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.session.timeout.ms": str(CONSUMER_SESSION_MS),
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(Path(tmp_path_factory.mktemp("migration")) / "data", CONFIG) as proc:
        yield proc


def member_kinds(embedded: EmbeddedBroker, group: str) -> dict[str, bool] | None:
    """Member id -> uses the classic protocol, of the consumer group (None: not one)."""
    def kinds(broker: Broker) -> dict[str, bool] | None:
        found = broker.coordinator.consumer.groups.get(group)
        if found is None:
            return None
        return {m.member_id: m.classic is not None for m in found.members.values()}

    return embedded.call(kinds)


def classic_members(embedded: EmbeddedBroker, group: str) -> tuple[str, int]:
    def state(broker: Broker) -> tuple[str, int]:
        found = broker.coordinator.groups.get(group)
        return ("", 0) if found is None else (str(found.state), len(found.members))

    return embedded.call(state)


def reload(embedded: EmbeddedBroker, group: str) -> None:
    """A coordinator failover in place: the group's partition unloaded and replayed."""
    def again(broker: Broker) -> None:
        partition = partition_for(group, 3)
        broker.coordinator.unload(partition)
        broker.coordinator.load(partition)

    embedded.call(again)


def upgraded_column(embedded: EmbeddedBroker, group: str,
                    capsys: pytest.CaptureFixture[str]) -> list[str]:
    """``sparklog groups describe --members --verbose``'s UPGRADED column, sorted."""
    code = main(["groups", "describe", "--group", group, "--members", "--verbose",
                 "--bootstrap", embedded.bootstrap])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = [line.split() for line in out.splitlines() if line.strip()]
    column = lines[0].index("UPGRADED")
    return sorted(line[column] for line in lines[1:])


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_upgrade_replay_and_downgrade(embedded: EmbeddedBroker, strategy: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Eager classic members (range: they revoke everything to rejoin) and cooperative ones
    (their subscriptions report what they own, and they give up only what moves)."""
    group = unique_topic("migrating")
    topic = create_topic(embedded.bootstrap, unique_topic("migrated"), partitions=6)
    partitions = every_partition(topic, 6)
    classic = start_members(2, consumer_conf(embedded.bootstrap, group, "classic", **{
        "partition.assignment.strategy": strategy}), [topic])
    modern: Member | None = None
    try:
        wait_until(lambda: shared(classic, partitions))
        assert member_kinds(embedded, group) is None
        produce_per_partition(embedded.bootstrap, topic, dict.fromkeys(range(6), 20))
        wait_until(lambda: sum(len(m.received) for m in classic) >= 120)

        modern = Member(consumer_conf(embedded.bootstrap, group), [topic])
        modern.start()
        wait_until(lambda: shared([*classic, modern], partitions))
        kinds = member_kinds(embedded, group)
        assert kinds is not None and sorted(kinds.values()) == [False, True, True]
        produce_per_partition(embedded.bootstrap, topic, dict.fromkeys(range(6), 20))
        wait_until(lambda: sum(len(m.received) for m in (*classic, modern)) >= 240)
        assert all(not m.errors for m in (*classic, modern))
        assert upgraded_column(embedded, group, capsys) == ["false", "false", "true"]

        # A coordinator failover keeps the converted group, its classic members included.
        reload(embedded, group)
        assert member_kinds(embedded, group) == kinds
        produce_per_partition(embedded.bootstrap, topic, dict.fromkeys(range(6), 20))
        wait_until(lambda: sum(len(m.received) for m in (*classic, modern)) >= 360)

        modern.stop()  # the last consumer-protocol member leaves: back to a classic group
        wait_until(lambda: member_kinds(embedded, group) is None)
        wait_until(lambda: classic_members(embedded, group) == ("Stable", 2))
        wait_until(lambda: shared(classic, partitions))
        produce_per_partition(embedded.bootstrap, topic, dict.fromkeys(range(6), 20))
        every = {(topic, p, o) for p in range(6) for o in range(80)}
        wait_until(lambda: {r for m in (*classic, modern) for r in m.records()} == every)
    finally:
        for member in (*classic, *([modern] if modern else [])):
            member.stop()
    assert all(not m.errors for m in (*classic, modern))


class KafkaPythonMember(Member):
    """A kafka-python 3 consumer (the classic protocol, an eager assignor's v0 subscription)
    polling on its own thread."""

    def run(self) -> None:
        consumer = KafkaConsumer(*self.topics, bootstrap_servers=self.conf["bootstrap.servers"],
                                 group_id=self.conf["group.id"], auto_offset_reset="earliest",
                                 enable_auto_commit=True, auto_commit_interval_ms=200,
                                 heartbeat_interval_ms=300, session_timeout_ms=10000)
        try:
            while not self.stopping.is_set():
                for tp, records in consumer.poll(timeout_ms=50).items():
                    self.received.extend((time.monotonic(), tp.topic, tp.partition, r.offset)
                                         for r in records)
                self.assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        finally:
            consumer.close()
            self.assigned = set()


def test_kafka_python_members_upgrade_and_commit(embedded: EmbeddedBroker) -> None:
    group = unique_topic("kafka-python-migrating")
    topic = create_topic(embedded.bootstrap, unique_topic("kafka-python"), partitions=4)
    partitions = every_partition(topic, 4)
    conf = consumer_conf(embedded.bootstrap, group)
    classic = [KafkaPythonMember(conf, [topic]) for _ in range(2)]
    for member in classic:
        member.start()
    modern = Member(conf, [topic])
    try:
        wait_until(lambda: shared(classic, partitions))
        modern.start()
        wait_until(lambda: shared([*classic, modern], partitions))
        kinds = member_kinds(embedded, group)
        assert kinds is not None and sorted(kinds.values()) == [False, True, True]
        produce_per_partition(embedded.bootstrap, topic, dict.fromkeys(range(4), 25))
        every = {(topic, p, o) for p in range(4) for o in range(25)}
        wait_until(lambda: {r for m in (*classic, modern) for r in m.records()} == every)
        # every member's commits land: the group's committed offsets reach the log end
        committed = Consumer(conf | {"group.protocol": "classic"})
        try:
            wait_until(lambda: [tp.offset for tp in committed.committed(
                [TopicPartition(topic, p) for p in range(4)], timeout=10)] == [25] * 4)
        finally:
            committed.close()
    finally:
        for member in (*classic, modern):
            member.stop()
    assert all(not m.errors for m in (*classic, modern))


def test_a_classic_members_record_round_trips_and_dumps() -> None:
    """ConsumerGroupMemberMetadataValue's tagged ClassicMemberMetadata: replayed as written,
    and shown by ``dump-log --offsets-decoder`` (left out for a consumer-protocol member)."""
    classic = ConsumerMemberRecord(None, None, "client", "/127.0.0.1", ("events",), None, 300,
                                   None, ClassicMemberMetadata(10000, (("range", b"\0\1"),)))
    key = ConsumerGroupKey("g", ConsumerRecordType.MEMBER_SUBSCRIPTION, "m")
    raw_key = consumer_key(ConsumerRecordType.MEMBER_SUBSCRIPTION, "g", "m")
    for record in (classic, dataclasses.replace(classic, classic=None)):
        groups: dict[str, ConsumerGroupRecords] = {}
        apply_consumer_record(groups, key, member_subscription_value(record))
        assert groups["g"].members["m"] == record
        _, shown = DECODERS["offsets"](raw_key, member_subscription_value(record))
        data = json.loads(shown)["data"]
        assert data.get("classicMemberMetadata") == (None if record.classic is None else {
            "sessionTimeoutMs": 10000, "supportedProtocols": [{"name": "range",
                                                               "metadata": "AAE="}]})


def test_migration_policy_setting() -> None:
    assert ConsumerGroupConfig.from_props({}).migration_policy is MigrationPolicy.BIDIRECTIONAL
    config = ConsumerGroupConfig.from_props({"group.consumer.migration.policy": "Upgrade"})
    assert config.migration_policy.upgrades and not config.migration_policy.downgrades
    with pytest.raises(InvalidConfigError, match=r"group\.consumer\.migration\.policy"):
        BrokerConfig({"group.consumer.migration.policy": "sideways"})


# -- raw requests: each step and error path ------------------------------------------------


@pytest.fixture
def conn(embedded: EmbeddedBroker) -> Iterator[BrokerConnection]:
    connection = connect(embedded.bootstrap)
    yield connection
    connection.close()


def subscription_v0(*topics: str) -> bytes:
    """A ``ConsumerProtocolSubscription`` v0 (an eager client's: it owns nothing)."""
    body = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    return body + struct.pack(">i", -1)


def classic_join(conn: BrokerConnection, group: str, member_id: str, topic: str, *,
                 protocol_type: str = "consumer", protocol: str = "range",
                 instance_id: str | None = None,
                 rebalance_timeout: timedelta = timedelta(seconds=30)) -> Any:
    """JoinGroup v9 (a dynamic member's second join when MEMBER_ID_REQUIRED asks for it)."""
    def request(member: str) -> Any:
        return conn.request(ApiKey.JOIN_GROUP, 9, {
            "group_id": group, "session_timeout": timedelta(seconds=30),
            "rebalance_timeout": rebalance_timeout, "member_id": member,
            "group_instance_id": instance_id, "protocol_type": protocol_type,
            "protocols": [{"name": protocol, "metadata": subscription_v0(topic)}],
            "reason": None})

    answer = request(member_id)
    if answer.error_code == ErrorCode.MEMBER_ID_REQUIRED:
        answer = request(answer.member_id)
    return answer


def classic_sync(conn: BrokerConnection, group: str, member_id: str, generation: int, *,
                 assignments: dict[str, bytes] | None = None, protocol: str = "range") -> Any:
    return conn.request(ApiKey.SYNC_GROUP, 5, {
        "group_id": group, "generation_id": generation, "member_id": member_id,
        "group_instance_id": None, "protocol_type": "consumer", "protocol_name": protocol,
        "assignments": [{"member_id": m, "assignment": a}
                        for m, a in (assignments or {}).items()]})


def classic_heartbeat(conn: BrokerConnection, group: str, member_id: str,
                      generation: int, instance_id: str | None = None) -> ErrorCode:
    return ErrorCode(conn.request(ApiKey.HEARTBEAT, 4, {
        "group_id": group, "generation_id": generation, "member_id": member_id,
        "group_instance_id": instance_id}).error_code)


def classic_commit(conn: BrokerConnection, group: str, member_id: str, generation: int,
                   topic: str) -> ErrorCode:
    answer = conn.request(ApiKey.OFFSET_COMMIT, 8, {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
        "group_instance_id": None, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": 3, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]})
    return ErrorCode(answer.topics[0].partitions[0].error_code)


def test_upgrade_and_downgrade_by_raw_requests(embedded: EmbeddedBroker,
                                               conn: BrokerConnection) -> None:
    group = unique_topic("raw-migrating")
    topic = create_topic(embedded.bootstrap, unique_topic("raw-migrated"), partitions=4)
    tid = topic_id(embedded, topic)
    # A classic group of one member that leads and assigns itself every partition.
    joined = classic_join(conn, group, "", topic)
    classic_id = joined.member_id
    assert (joined.error_code, joined.leader, joined.generation_id) == (ErrorCode.NONE,
                                                                        classic_id, 1)
    everything = assignment_bytes(0, {topic: frozenset(range(4))})
    synced = classic_sync(conn, group, classic_id, 1, assignments={classic_id: everything})
    assert synced.error_code == ErrorCode.NONE

    # A consumer-protocol member joins: the group upgrades, the classic member keeps its
    # partitions (generation 1 became its member epoch) until it rejoins.
    modern, first = join(conn, group, topic)
    assert first.member_epoch == 2 and assignment(first) == {}
    assert member_kinds(embedded, group) == {classic_id: True, modern: False}
    assert classic_commit(conn, group, classic_id, 1, topic) == ErrorCode.NONE
    assert classic_heartbeat(conn, group, classic_id, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    assert classic_sync(conn, group, classic_id, 1).error_code == \
        ErrorCode.REBALANCE_IN_PROGRESS
    assert classic_heartbeat(conn, group, classic_id, 7) == ErrorCode.ILLEGAL_GENERATION
    assert classic_heartbeat(conn, group, "nobody", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert classic_heartbeat(conn, group, modern, 2) == ErrorCode.UNKNOWN_MEMBER_ID
    assert classic_join(conn, group, "", topic, protocol_type="connect").error_code == \
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert classic_join(conn, group, "", topic, protocol="roundrobin").error_code == \
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL

    # The classic member rejoins (eager: it revoked everything) and gets its half.
    rejoined = classic_join(conn, group, classic_id, topic)
    assert (rejoined.error_code, rejoined.generation_id, rejoined.leader,
            rejoined.protocol_name) == (ErrorCode.NONE, 2, "", "range")
    assert classic_sync(conn, group, classic_id, 2, protocol="other").error_code == \
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    synced = classic_sync(conn, group, classic_id, 2)
    assert synced.error_code == ErrorCode.NONE and synced.protocol_name == "range"
    ((_, kept),) = assigned_partitions(synced.assignment)
    assert len(kept) == 2
    assert classic_heartbeat(conn, group, classic_id, 2) == ErrorCode.NONE
    assert classic_commit(conn, group, classic_id, 2, topic) == ErrorCode.NONE
    assert classic_commit(conn, group, classic_id, 1, topic) == ErrorCode.ILLEGAL_GENERATION
    second = heartbeat(conn, group, modern, 2, owned={})
    assert assignment(second) == {tid: set(range(4)) - set(kept)}

    # The consumer member leaves: a classic group again, which rebalances (generation 4,
    # after the group epoch 3 its leaving made).
    assert heartbeat(conn, group, modern, -1).error_code == ErrorCode.NONE
    assert member_kinds(embedded, group) is None
    assert classic_heartbeat(conn, group, classic_id, 3) == ErrorCode.REBALANCE_IN_PROGRESS
    # ... as it is in __consumer_offsets: a failover finds the classic group, Stable
    reload(embedded, group)
    assert member_kinds(embedded, group) is None
    assert classic_heartbeat(conn, group, classic_id, 3) == ErrorCode.NONE
    assert classic_commit(conn, group, classic_id, 3, topic) == ErrorCode.NONE
    back = classic_join(conn, group, classic_id, topic)
    assert (back.error_code, back.generation_id, back.leader) == (ErrorCode.NONE, 4,
                                                                  classic_id)


def test_a_classic_member_that_never_syncs_is_removed(embedded: EmbeddedBroker,
                                                     conn: BrokerConnection) -> None:
    """A classic member of a consumer group must follow its JoinGroup with a SyncGroup
    within its rebalance timeout (Kafka's sync timeout): one that went silent after joining
    is removed then, long before its 30 s session runs out, and holds nothing meanwhile."""
    group = unique_topic("raw-unsynced")
    topic = create_topic(embedded.bootstrap, unique_topic("raw-unsynced"), partitions=2)
    modern, first = join(conn, group, topic)
    joined = classic_join(conn, group, "", topic, rebalance_timeout=timedelta(seconds=1))
    assert joined.error_code == ErrorCode.NONE
    assert member_kinds(embedded, group) == {modern: False, joined.member_id: True}
    started, epoch = time.monotonic(), first.member_epoch

    def removed() -> bool:
        nonlocal epoch
        epoch = heartbeat(conn, group, modern, epoch, owned={}).member_epoch  # stays alive
        return member_kinds(embedded, group) == {modern: False}

    wait_until(removed, timeout=15)
    assert time.monotonic() - started < 15


def test_a_silent_consumer_member_downgrades_the_group(embedded: EmbeddedBroker,
                                                      conn: BrokerConnection) -> None:
    """The last consumer-protocol member's session runs out (a killed consumer): the group
    becomes classic again as if it had left."""
    group = unique_topic("raw-expiring")
    topic = create_topic(embedded.bootstrap, unique_topic("raw-expired"), partitions=2)
    joined = classic_join(conn, group, "", topic)
    classic_id = joined.member_id
    assert classic_sync(conn, group, classic_id, 1, assignments={
        classic_id: assignment_bytes(0, {topic: frozenset({0, 1})})}).error_code == \
        ErrorCode.NONE
    join(conn, group, topic)  # and never heard of again
    assert member_kinds(embedded, group) is not None
    started = time.monotonic()
    wait_until(lambda: member_kinds(embedded, group) is None)
    assert time.monotonic() - started >= CONSUMER_SESSION_MS / 1000 - 1
    assert classic_members(embedded, group) == ("PreparingRebalance", 1)
    back = classic_join(conn, group, classic_id, topic)
    assert (back.error_code, back.leader) == (ErrorCode.NONE, classic_id)


def test_static_members_across_protocols(embedded: EmbeddedBroker,
                                        conn: BrokerConnection) -> None:
    """A static classic member restarting replaces its old self under a new member id (the
    old one is fenced); one replacing the last consumer-protocol member's instance
    downgrades the group."""
    group = unique_topic("raw-static")
    topic = create_topic(embedded.bootstrap, unique_topic("raw-static"), partitions=2)
    joined = classic_join(conn, group, "", topic, instance_id="classic-1")
    first = joined.member_id
    assert classic_sync(conn, group, first, 1, assignments={
        first: assignment_bytes(0, {topic: frozenset({0, 1})})}).error_code == ErrorCode.NONE
    _, answer = join(conn, group, topic, instance_id="modern-1")
    assert answer.member_epoch == 2
    restarted = classic_join(conn, group, "", topic, instance_id="classic-1")
    assert restarted.error_code == ErrorCode.NONE and restarted.member_id != first
    assert classic_heartbeat(conn, group, first, 1, "classic-1") == ErrorCode.FENCED_INSTANCE_ID
    assert classic_join(conn, group, first, topic, instance_id="classic-1").error_code == \
        ErrorCode.FENCED_INSTANCE_ID
    assert classic_join(conn, group, first, topic, instance_id="unknown").error_code == \
        ErrorCode.UNKNOWN_MEMBER_ID
    kinds = member_kinds(embedded, group)
    assert kinds is not None and sorted(kinds.values()) == [False, True]
    # The consumer-protocol instance comes back speaking the classic protocol: downgrade.
    replaced = classic_join(conn, group, "", topic, instance_id="modern-1")
    assert replaced.error_code == ErrorCode.NONE
    assert member_kinds(embedded, group) is None
    assert classic_members(embedded, group) == ("PreparingRebalance", 2)


def test_a_classic_group_that_cannot_upgrade(embedded: EmbeddedBroker, conn: BrokerConnection,
                                             tmp_path: Path) -> None:
    topic = create_topic(embedded.bootstrap, unique_topic("not-upgraded"), partitions=1)
    other = unique_topic("connect-group")
    assert classic_join(conn, other, "", topic, protocol_type="connect").error_code == \
        ErrorCode.NONE
    answer = heartbeat(conn, other, str(uuid.uuid4()), 0, topics=[topic])
    assert answer.error_code == ErrorCode.GROUP_ID_NOT_FOUND  # not the consumer protocol
    config = CONFIG | {"group.consumer.migration.policy": "downgrade"}
    with EmbeddedBroker(tmp_path / "data", config) as refusing:
        other_conn = connect(refusing.bootstrap)
        try:
            group = unique_topic("policy")
            topic = create_topic(refusing.bootstrap, unique_topic("policy"), partitions=1)
            assert classic_join(other_conn, group, "", topic).error_code == ErrorCode.NONE
            answer = heartbeat(other_conn, group, str(uuid.uuid4()), 0, topics=[topic])
            assert answer.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        finally:
            other_conn.close()
