"""Consumer groups at Kafka 4's protocol versions, against a real broker process: kafka-python
3 (versions negotiated, checked in the broker's request metrics) and confluent-kafka groups,
and raw requests for what each new version means: batched FindCoordinator and OffsetFetch,
ListGroups filters, DescribeGroups v6's unknown group, topic ids in OffsetCommit and
OffsetFetch v10, ``require_stable`` with an open transaction, JoinGroup v9's
``skip_assignment``, SyncGroup v5's protocol check, OffsetDelete's rules.

Raw requests are built and decoded with sparklog's protocol client (kio); the encodings of
every version are checked against kafka-python's classes by ``test_api_table``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from broker_fixtures import (
    TIMEOUT,
    Rec,
    create_topic,
    module_broker,
    produce_confluent,
    request_counts,
    unique_topic,
    wait_until,
)
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from sparklog.broker.process import BrokerProcess
from sparklog.client.connection import BrokerConnection
from sparklog.client.settings import ClientConfig
from sparklog.coordinator.consumer_protocol import PROTOCOL_TYPE
from sparklog.errors import ErrorCode
from sparklog.protocol.versions import ApiKey

pytestmark = pytest.mark.timeout(90)

BROKER_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "1",
    "metrics.listener": "http://127.0.0.1:0",
}

broker = module_broker(BROKER_CONFIG)


@pytest.fixture
def topic(request: pytest.FixtureRequest, broker: BrokerProcess) -> str:
    """A created topic of two partitions."""
    return create_topic(broker.bootstrap, unique_topic(request.node.name), partitions=2)


@pytest.fixture
def conn(broker: BrokerProcess) -> Iterator[BrokerConnection]:
    host, port = broker.bootstrap.rsplit(":", 1)
    connection = BrokerConnection(host, int(port), ClientConfig(((host, int(port)),)))
    yield connection
    connection.close()


GROUP_APIS = ("FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup",
              "OffsetCommit", "OffsetFetch")


def versions_used(broker: BrokerProcess, before: dict[tuple[str, int], float],
                  apis: tuple[str, ...]) -> dict[str, set[int]]:
    """The versions of ``apis`` answered since the ``request_counts`` ``before``."""
    used: dict[str, set[int]] = {api: set() for api in apis}
    for (api, version), count in request_counts(broker).items():
        if api in used and count > before.get((api, version), 0):
            used[api].add(version)
    return used


def commit(conn: BrokerConnection, group: str, offsets: dict[tuple[str, int], int],
           version: int = 8, generation: int = -1) -> dict[tuple[str, int], int]:
    """A simple OffsetCommit (by topic name); each partition's error."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for (name, partition), offset in offsets.items():
        topics.setdefault(name, []).append({"partition_index": partition,
                                            "committed_offset": offset,
                                            "committed_metadata": ""})
    answer = conn.request(ApiKey.OFFSET_COMMIT, version, {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": "",
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()]})
    return {(t.name, p.partition_index): p.error_code for t in answer.topics
            for p in t.partitions}


def fetch(conn: BrokerConnection, group: str, partitions: list[tuple[str, int]] | None,
          *, require_stable: bool = False) -> dict[tuple[str, int], tuple[int, int]]:
    """OffsetFetch v7 of one group: (offset, error) per partition."""
    topics = None if partitions is None else [
        {"name": name, "partition_indexes": [p for t, p in partitions if t == name]}
        for name in dict.fromkeys(t for t, _ in partitions)]
    answer = conn.request(ApiKey.OFFSET_FETCH, 7, {"group_id": group, "topics": topics,
                                                   "require_stable": require_stable})
    assert answer.error_code == ErrorCode.NONE
    return {(t.name, p.partition_index): (p.committed_offset, p.error_code)
            for t in answer.topics for p in t.partitions}


def topic_id(conn: BrokerConnection, name: str) -> uuid.UUID:
    answer = conn.request(ApiKey.METADATA, 12, {
        "topics": [{"name": name, "topic_id": None}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False})
    found: uuid.UUID = answer.topics[0].topic_id
    return found


# -- real clients ---------------------------------------------------------------------------


def _kafka_python(bootstrap: str, topic: str, group: str) -> KafkaConsumer:
    return KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                         enable_auto_commit=False, auto_offset_reset="earliest",
                         session_timeout_ms=6000, heartbeat_interval_ms=300,
                         fetch_max_wait_ms=50)


POLL_MS = 1000
"""One kafka-python poll: longer than a rebalance's JoinGroup and SyncGroup round trip."""


@contextmanager
def _polling(*consumers: KafkaConsumer) -> Iterator[list[int]]:
    """Poll each consumer from a thread of its own (as an application does) until the block
    ends; yields the offsets of the records they fetched.

    kafka-python 3.0.12 takes a rebalance's result only inside a poll that is waiting for
    it: a JoinGroup and SyncGroup round trip that completes after a poll timed out is
    dropped at the next poll, which either rejoins (the leader rejoins after every
    generation) or, when the leader's own assignment already refreshed what it compares,
    never applies the assignment nor heartbeats again (its session times out). Two
    consumers polled in turn with short timeouts from one thread meet that in most
    rebalances, since each waits in JoinGroup for the other's next poll."""
    got: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def run(consumer: KafkaConsumer) -> None:
        try:
            while not stop.is_set():
                for records in consumer.poll(timeout_ms=POLL_MS).values():
                    got.extend(r.offset for r in records)
        except BaseException as exc:  # raised again in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in consumers]
    for thread in threads:
        thread.start()
    try:
        yield got
    finally:
        stop.set()
        for thread in threads:
            thread.join(TIMEOUT)
        if errors:
            raise errors[0]


def test_kafka_python_group_at_its_newest_versions(broker: BrokerProcess, topic: str) -> None:
    """Two kafka-python 3 consumers (api_version unset) join, consume, commit, rebalance and
    leave, at the newest versions both sides know: the broker's newest, except where
    kafka-python's coordinator caps them (JoinGroup 7, OffsetCommit 8, OffsetFetch 8); all
    above what the broker served before (JoinGroup 5, SyncGroup 3, Heartbeat 3, LeaveGroup
    3, OffsetCommit 7, OffsetFetch 5, FindCoordinator 2)."""
    before = request_counts(broker)
    produce_confluent(broker.bootstrap, topic, [Rec(None, b"v", partition=i % 2)
                                                for i in range(10)])
    group = f"{topic}-g"
    first = _kafka_python(broker.bootstrap, topic, group)
    second = None
    try:
        with _polling(first) as got:
            wait_until(lambda: len(got) >= 10)
        assert sorted(got) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
        first.commit()
        assert [first.committed(KpTopicPartition(topic, p)) for p in (0, 1)] == [5, 5]
        second = _kafka_python(broker.bootstrap, topic, group)
        with _polling(first, second):
            wait_until(lambda: len(first.assignment()) == len(second.assignment()) == 1)
    finally:
        first.close()
        if second is not None:
            second.close()
    assert versions_used(broker, before, GROUP_APIS) == {
        "FindCoordinator": {6}, "JoinGroup": {7}, "SyncGroup": {5}, "Heartbeat": {4},
        "LeaveGroup": {5}, "OffsetCommit": {8}, "OffsetFetch": {8}}


def test_confluent_kafka_group_commits_and_rebalances(broker: BrokerProcess,
                                                       topic: str) -> None:
    """confluent-kafka 2.16's group: librdkafka commits and fetches offsets at v9 (KIP-848's
    version, a generation for a classic group); its other group APIs stay at older
    versions."""
    before = request_counts(broker)
    produce_confluent(broker.bootstrap, topic, [Rec(None, b"v", partition=i % 2)
                                                for i in range(6)])
    group = f"{topic}-g"
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": group,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 300}
    first, second = Consumer(conf), Consumer(conf)
    try:
        first.subscribe([topic])
        got = 0
        deadline = time.monotonic() + TIMEOUT
        while got < 6 and time.monotonic() < deadline:
            message = first.poll(0.2)
            got += message is not None and message.error() is None
        assert got == 6
        first.commit(asynchronous=False)
        committed = first.committed([TopicPartition(topic, p) for p in (0, 1)], TIMEOUT)
        assert [tp.offset for tp in committed] == [3, 3]
        second.subscribe([topic])

        def shared() -> bool:
            first.poll(0.05)
            second.poll(0.05)
            return len(first.assignment()) == 1 and len(second.assignment()) == 1

        wait_until(shared)
    finally:
        first.close()
        second.close()
    used = versions_used(broker, before, ("OffsetCommit", "OffsetFetch"))
    assert used == {"OffsetCommit": {9}, "OffsetFetch": {9}}


# -- raw requests: what each version means ----------------------------------------------------


def test_find_coordinator_batches_keys_and_refuses_share_groups(
        conn: BrokerConnection) -> None:
    # the connection was negotiated at the client's versions; ask at the ones under test
    batched = conn.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0,
                                                       "coordinator_keys": ["g1", "g2"]})
    assert [(c.key, c.error_code) for c in batched.coordinators] == [
        ("g1", ErrorCode.NONE), ("g2", ErrorCode.NONE)]
    assert all(c.node_id >= 0 and c.port > 0 for c in batched.coordinators)
    share = conn.request(ApiKey.FIND_COORDINATOR, 6, {"key_type": 2,
                                                     "coordinator_keys": ["s1", "s2"]})
    assert [(c.key, c.error_code, c.node_id) for c in share.coordinators] == [
        ("s1", ErrorCode.INVALID_REQUEST, -1), ("s2", ErrorCode.INVALID_REQUEST, -1)]
    assert all(c.error_message for c in share.coordinators)
    single = conn.request(ApiKey.FIND_COORDINATOR, 3, {"key": "g1", "key_type": 0})
    assert single.error_code == ErrorCode.NONE
    assert single.node_id == batched.coordinators[0].node_id


def test_list_groups_filters_by_state_and_type(conn: BrokerConnection, topic: str) -> None:
    group = f"{topic}-simple"
    assert commit(conn, group, {(topic, 0): 1}) == {(topic, 0): ErrorCode.NONE}

    def listed(version: int, **filters: list[str]) -> dict[str, Any]:
        answer = conn.request(ApiKey.LIST_GROUPS, version, filters)
        assert answer.error_code == ErrorCode.NONE
        return {g.group_id: g for g in answer.groups}

    every = listed(5)
    assert (every[group].group_state, every[group].group_type) == ("Empty", "classic")
    assert group in listed(4, states_filter=["empty"])
    assert group in listed(5, states_filter=[" EMPTY "], types_filter=["Classic"])
    assert group not in listed(4, states_filter=["Stable", "PreparingRebalance"])
    assert listed(5, types_filter=["consumer"]) == {}


def test_describe_groups_v6_answers_an_unknown_group_not_found(conn: BrokerConnection) -> None:
    unknown = unique_topic("no-such-group")
    old = conn.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [unknown],
                                                   "include_authorized_operations": False})
    assert (old.groups[0].error_code, old.groups[0].group_state) == (ErrorCode.NONE, "Dead")
    new = conn.request(ApiKey.DESCRIBE_GROUPS, 6, {"groups": [unknown],
                                                   "include_authorized_operations": False})
    assert new.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert unknown in new.groups[0].error_message


def test_offset_commit_and_fetch_v10_address_topics_by_id(conn: BrokerConnection,
                                                          topic: str) -> None:
    group, known, unknown = f"{topic}-g", topic_id(conn, topic), uuid.uuid4()
    answer = conn.request(ApiKey.OFFSET_COMMIT, 10, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"topic_id": tid, "partitions": [
            {"partition_index": 1, "committed_offset": 7, "committed_metadata": "m"}]}
            for tid in (known, unknown)]})
    assert [(t.topic_id, t.partitions[0].error_code) for t in answer.topics] == [
        (known, ErrorCode.NONE), (unknown, ErrorCode.UNKNOWN_TOPIC_ID)]
    assert fetch(conn, group, [(topic, 1)]) == {(topic, 1): (7, ErrorCode.NONE)}
    fetched = conn.request(ApiKey.OFFSET_FETCH, 10, {"groups": [
        {"group_id": group, "member_id": None, "member_epoch": -1,
         "topics": [{"topic_id": tid, "partition_indexes": [1]} for tid in (known, unknown)]}],
        "require_stable": False})
    (answered,) = fetched.groups
    assert [(t.topic_id, t.partitions[0].committed_offset, t.partitions[0].error_code)
            for t in answered.topics] == [(known, 7, ErrorCode.NONE),
                                          (unknown, -1, ErrorCode.UNKNOWN_TOPIC_ID)]
    every = conn.request(ApiKey.OFFSET_FETCH, 10, {"groups": [
        {"group_id": group, "topics": None}], "require_stable": False})
    assert [(t.topic_id, [p.committed_offset for p in t.partitions])
            for t in every.groups[0].topics] == [(known, [7])]


def test_offset_fetch_v8_answers_each_group(conn: BrokerConnection, topic: str) -> None:
    first, second, unknown = f"{topic}-a", f"{topic}-b", f"{topic}-none"
    commit(conn, first, {(topic, 0): 3})
    commit(conn, second, {(topic, 0): 9, (topic, 1): 4})
    answer = conn.request(ApiKey.OFFSET_FETCH, 8, {"groups": [
        {"group_id": first, "topics": [{"name": topic, "partition_indexes": [0, 1]}]},
        {"group_id": second, "topics": None},
        {"group_id": unknown, "topics": [{"name": topic, "partition_indexes": [0]}]}]})
    found = {g.group_id: (g.error_code, {(t.name, p.partition_index): p.committed_offset
                                         for t in g.topics for p in t.partitions})
             for g in answer.groups}
    assert found == {first: (ErrorCode.NONE, {(topic, 0): 3, (topic, 1): -1}),
                     second: (ErrorCode.NONE, {(topic, 0): 9, (topic, 1): 4}),
                     unknown: (ErrorCode.NONE, {(topic, 0): -1})}


def test_offset_commit_v9_to_an_unknown_group_is_group_id_not_found(
        conn: BrokerConnection, topic: str) -> None:
    group = f"{topic}-never"
    assert commit(conn, group, {(topic, 0): 1}, version=8, generation=1) == {
        (topic, 0): ErrorCode.ILLEGAL_GENERATION}
    assert commit(conn, group, {(topic, 0): 1}, version=9, generation=1) == {
        (topic, 0): ErrorCode.GROUP_ID_NOT_FOUND}


def test_require_stable_sees_an_open_transactional_commit(broker: BrokerProcess,
                                                          conn: BrokerConnection,
                                                          topic: str) -> None:
    group = f"{topic}-txn"
    commit(conn, group, {(topic, 0): 2})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": f"{topic}-tid"})
    try:
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 5)],
                                             consumer.consumer_group_metadata(), TIMEOUT)
        wanted = [(topic, 0), (topic, 1)]
        assert fetch(conn, group, wanted, require_stable=True) == {
            (topic, 0): (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT), (topic, 1): (-1, ErrorCode.NONE)}
        assert fetch(conn, group, None, require_stable=True) == {
            (topic, 0): (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)}
        assert fetch(conn, group, wanted) == {(topic, 0): (2, ErrorCode.NONE),
                                              (topic, 1): (-1, ErrorCode.NONE)}
        producer.commit_transaction(TIMEOUT)
        wait_until(lambda: fetch(conn, group, wanted, require_stable=True)[(topic, 0)]
                   == (5, ErrorCode.NONE))
    finally:
        consumer.close()


def _join_body(group: str, instance: str, protocol: str = "range", member_id: str = "",
               session_s: float = 10) -> dict[str, Any]:
    return {"group_id": group, "session_timeout": timedelta(seconds=session_s),
            "rebalance_timeout": timedelta(seconds=10), "member_id": member_id,
            "group_instance_id": instance, "protocol_type": "sparklog-test",
            "protocols": [{"name": protocol, "metadata": b"m"}], "reason": "a test"}


def _join(conn: BrokerConnection, version: int, group: str, instance: str,
          protocol: str = "range", **more: Any) -> Any:
    return conn.request(ApiKey.JOIN_GROUP, version, _join_body(group, instance, protocol, **more))


def _sync_body(group: str, joined: Any, protocol: str, assignments: list[dict[str, Any]],
               instance: str = "i1") -> dict[str, Any]:
    return {"group_id": group, "generation_id": joined.generation_id,
            "member_id": joined.member_id, "group_instance_id": instance,
            "protocol_type": "sparklog-test", "protocol_name": protocol,
            "assignments": assignments}


def _sync(conn: BrokerConnection, group: str, joined: Any, protocol: str,
          assignments: list[dict[str, Any]]) -> Any:
    return conn.request(ApiKey.SYNC_GROUP, 5, _sync_body(group, joined, protocol, assignments))


def _heartbeat(conn: BrokerConnection, group: str, joined: Any, instance: str) -> int:
    error: int = conn.request(ApiKey.HEARTBEAT, 4, {
        "group_id": group, "generation_id": joined.generation_id,
        "member_id": joined.member_id, "group_instance_id": instance}).error_code
    return error


def test_members_stay_alive_while_the_leader_completes_the_rebalance(
        broker: BrokerProcess, conn: BrokerConnection, topic: str) -> None:
    """Kafka's CompletingRebalance: a member that got its JoinGroup answer may heartbeat
    (NONE, its session restarts), and a follower whose SyncGroup waits for the leader's
    counts as alive, however long past its session timeout the leader takes."""
    group = f"{topic}-slow-leader"
    session_s = 1.0  # the module's group.min.session.timeout.ms
    leader = _join(conn, 9, group, "i1", session_s=session_s)
    assert _sync(conn, group, leader, "range", []).error_code == ErrorCode.NONE
    host, port = broker.bootstrap.rsplit(":", 1)
    other = BrokerConnection(host, int(port), ClientConfig(((host, int(port)),)))
    try:
        other.send(ApiKey.JOIN_GROUP, 9, _join_body(group, "i2", session_s=session_s))
        wait_until(lambda: _heartbeat(conn, group, leader, "i1")
                   == ErrorCode.REBALANCE_IN_PROGRESS)
        leader = _join(conn, 9, group, "i1", member_id=leader.member_id, session_s=session_s)
        follower = other.receive()
        assert (leader.generation_id, follower.generation_id) == (2, 2)
        assert (follower.error_code, follower.leader) == (ErrorCode.NONE, leader.member_id)
        other.send(ApiKey.SYNC_GROUP, 5, _sync_body(group, follower, "range", [], "i2"))
        deadline = time.monotonic() + 2.5 * session_s
        while time.monotonic() < deadline:  # the leader takes its time to assign
            assert _heartbeat(conn, group, leader, "i1") == ErrorCode.NONE
            time.sleep(0.2)
        synced = conn.request(ApiKey.SYNC_GROUP, 5, _sync_body(group, leader, "range", [
            {"member_id": leader.member_id, "assignment": b"p0"},
            {"member_id": follower.member_id, "assignment": b"p1"}]))
        assert (synced.error_code, synced.assignment) == (ErrorCode.NONE, b"p0")
        answer = other.receive()
        assert (answer.error_code, answer.assignment) == (ErrorCode.NONE, b"p1")
        assert _heartbeat(other, group, follower, "i2") == ErrorCode.NONE
    finally:
        other.close()


def test_static_leader_rejoins_with_skip_assignment_and_sync_checks_the_protocol(
        conn: BrokerConnection, topic: str) -> None:
    group = f"{topic}-static"
    joined = _join(conn, 9, group, "i1")
    assert (joined.error_code, joined.leader, joined.protocol_type, joined.skip_assignment) == (
        ErrorCode.NONE, joined.member_id, "sparklog-test", False)
    assert _sync(conn, group, joined, "other", []).error_code == \
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    synced = _sync(conn, group, joined, "range",
                   [{"member_id": joined.member_id, "assignment": b"mine"}])
    assert (synced.error_code, synced.assignment, synced.protocol_type,
            synced.protocol_name) == (ErrorCode.NONE, b"mine", "sparklog-test", "range")
    # v9: the rejoined static leader is told it leads, gets the members, skips assigning
    rejoined = _join(conn, 9, group, "i1")
    assert rejoined.member_id != joined.member_id
    assert (rejoined.error_code, rejoined.leader, rejoined.skip_assignment) == (
        ErrorCode.NONE, rejoined.member_id, True)
    assert [m.member_id for m in rejoined.members] == [rejoined.member_id]
    assert rejoined.generation_id == joined.generation_id
    # before v9 it is answered with its old id as the leader, so it does not act as one
    again = _join(conn, 8, group, "i1")
    assert (again.leader, again.members) == (rejoined.member_id, ())
    synced = _sync(conn, group, again, "range", [])
    assert (synced.error_code, synced.assignment) == (ErrorCode.NONE, b"mine")


def _delete_offsets(conn: BrokerConnection, group: str,
                    partitions: dict[str, list[int]]) -> tuple[int, dict[tuple[str, int], int]]:
    answer = conn.request(ApiKey.OFFSET_DELETE, 0, {"group_id": group, "topics": [
        {"name": name, "partitions": [{"partition_index": p} for p in indexes]}
        for name, indexes in partitions.items()]})
    return answer.error_code, {(t.name, p.partition_index): p.error_code
                               for t in answer.topics for p in t.partitions}


def test_offset_delete_follows_kafkas_rules(broker: BrokerProcess, conn: BrokerConnection,
                                            topic: str) -> None:
    other = create_topic(broker.bootstrap, unique_topic("other"), partitions=2)
    group = f"{topic}-del"
    commit(conn, group, {(topic, 0): 4, (other, 0): 6, (other, 1): 8})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    try:
        consumer.subscribe([topic])
        wait_until(lambda: consumer.poll(0.1) is None and len(consumer.assignment()) == 2)
        error, result = _delete_offsets(conn, group, {topic: [0], other: [0, 7],
                                                      "no-such-topic": [0]})
        assert error == ErrorCode.NONE
        assert result == {(topic, 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
                          (other, 0): ErrorCode.NONE,
                          (other, 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                          ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert fetch(conn, group, [(topic, 0), (other, 0), (other, 1)]) == {
            (topic, 0): (4, ErrorCode.NONE), (other, 0): (-1, ErrorCode.NONE),
            (other, 1): (8, ErrorCode.NONE)}
    finally:
        consumer.close()
    # Empty now: the topic it consumed can lose its offsets too
    assert _delete_offsets(conn, group, {topic: [0]}) == (ErrorCode.NONE,
                                                           {(topic, 0): ErrorCode.NONE})
    assert fetch(conn, group, [(topic, 0)]) == {(topic, 0): (-1, ErrorCode.NONE)}
    assert _delete_offsets(conn, f"{topic}-none", {topic: [0]}) == (
        ErrorCode.GROUP_ID_NOT_FOUND, {})


def test_offset_delete_refuses_a_non_consumer_group_with_members(conn: BrokerConnection,
                                                                 topic: str) -> None:
    group = f"{topic}-connect"
    commit(conn, group, {(topic, 0): 4})
    joined = _join(conn, 9, group, "i1")
    assert joined.error_code == ErrorCode.NONE and PROTOCOL_TYPE != "sparklog-test"
    assert _delete_offsets(conn, group, {topic: [0]}) == (ErrorCode.NON_EMPTY_GROUP, {})
    assert fetch(conn, group, [(topic, 0)]) == {(topic, 0): (4, ErrorCode.NONE)}
