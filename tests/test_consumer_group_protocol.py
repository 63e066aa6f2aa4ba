"""KIP-848's consumer group protocol by raw requests against the in-process broker: what each
error of ConsumerGroupHeartbeat means, incremental reconciliation (a partition moves only
once its owner revoked it), static members, leaving, ConsumerGroupDescribe, ListGroups'
group type, OffsetCommit/OffsetFetch v9's member-epoch checks, and a coordinator failover
(``unload`` then ``load`` of the group's ``__consumer_offsets`` partition) that keeps every
member's epochs and assignment.

Requests are built and decoded with sparklog's protocol client (kio); their encodings are
checked against kafka-python's classes by ``test_api_table``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from broker_fixtures import create_topic, unique_topic

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.state import Broker
from sparklog.client.connection import BrokerConnection
from sparklog.client.settings import ClientConfig
from sparklog.errors import ErrorCode
from sparklog.protocol.versions import ApiKey

pytestmark = pytest.mark.timeout(60)

CONFIG = {"offsets.topic.num.partitions": "3", "group.consumer.heartbeat.interval.ms": "700",
          "group.initial.rebalance.delay.ms": "0"}
REBALANCE_TIMEOUT = timedelta(seconds=30)
Owned = dict[uuid.UUID, set[int]]


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(Path(tmp_path_factory.mktemp("kip848")) / "data", CONFIG) as proc:
        yield proc


def connect(bootstrap: str) -> BrokerConnection:
    host, port = bootstrap.rsplit(":", 1)
    return BrokerConnection(host, int(port), ClientConfig(((host, int(port)),)))


@pytest.fixture
def conn(embedded: EmbeddedBroker) -> Iterator[BrokerConnection]:
    connection = connect(embedded.bootstrap)
    yield connection
    connection.close()


@pytest.fixture
def topic(request: pytest.FixtureRequest, embedded: EmbeddedBroker) -> str:
    """A created topic of four partitions."""
    return create_topic(embedded.bootstrap, unique_topic(request.node.name), partitions=4)


@pytest.fixture
def group(request: pytest.FixtureRequest) -> str:
    return unique_topic(f"group-{request.node.name}")


def topic_id(embedded: EmbeddedBroker, name: str) -> uuid.UUID:
    found = embedded.call(lambda broker: broker.topic_id(name))
    assert found is not None
    return found


def heartbeat(conn: BrokerConnection, group: str, member_id: str, epoch: int, *,
              topics: list[str] | None = None, regex: str | None = None,
              owned: Owned | None = None, instance_id: str | None = None,
              assignor: str | None = None, version: int = 1,
              rebalance_timeout: timedelta | None = None) -> Any:
    """One ConsumerGroupHeartbeat; a join (epoch 0) sends the full request."""
    joining = epoch == 0
    fields: dict[str, Any] = {
        "group_id": group, "member_id": member_id, "member_epoch": epoch,
        "instance_id": instance_id, "rack_id": None,
        "rebalance_timeout": rebalance_timeout or (REBALANCE_TIMEOUT if joining
                                                   else timedelta(milliseconds=-1)),
        "subscribed_topic_names": topics, "server_assignor": assignor,
        "topic_partitions": ([] if joining and owned is None else None if owned is None else [
            {"topic_id": t, "partitions": sorted(ps)} for t, ps in owned.items()])}
    if version >= 1:
        fields["subscribed_topic_regex"] = regex
    return conn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, fields)


def assignment(answer: Any) -> Owned | None:
    if answer.assignment is None:
        return None
    return {tp.topic_id: set(tp.partitions) for tp in answer.assignment.topic_partitions}


def describe(conn: BrokerConnection, group: str) -> Any:
    answer = conn.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1,
                          {"group_ids": [group], "include_authorized_operations": False})
    return answer.groups[0]


def join(conn: BrokerConnection, group: str, topic: str, **kwargs: Any) -> tuple[str, Any]:
    member_id = str(uuid.uuid4())
    answer = heartbeat(conn, group, member_id, 0, topics=[topic], **kwargs)
    assert answer.error_code == ErrorCode.NONE, answer.error_message
    return member_id, answer


def test_a_member_joins_and_gets_every_partition(conn: BrokerConnection, embedded: EmbeddedBroker,
                                                 topic: str, group: str) -> None:
    member_id, answer = join(conn, group, topic)
    assert (answer.member_id, answer.member_epoch) == (member_id, 1)
    assert answer.heartbeat_interval == timedelta(milliseconds=700)
    assert assignment(answer) == {topic_id(embedded, topic): {0, 1, 2, 3}}
    # a heartbeat with nothing changed carries no assignment
    again = heartbeat(conn, group, member_id, 1, owned={topic_id(embedded, topic): {0, 1, 2, 3}})
    assert (again.error_code, again.member_epoch, again.assignment) == (ErrorCode.NONE, 1, None)
    described = describe(conn, group)
    assert (described.error_code, described.group_state, described.group_epoch,
            described.assignment_epoch, described.assignor_name) == (
        ErrorCode.NONE, "Stable", 1, 1, "uniform")
    (member,) = described.members
    assert (member.member_id, member.member_epoch, member.member_type) == (member_id, 1, 1)
    assert [(tp.topic_name, sorted(tp.partitions))
            for tp in member.target_assignment.topic_partitions] == [(topic, [0, 1, 2, 3])]


def test_partitions_move_only_once_revoked(conn: BrokerConnection, embedded: EmbeddedBroker,
                                           topic: str, group: str) -> None:
    """Kafka's CurrentAssignmentBuilder: the second member gets its partitions only after the
    first reported them revoked; the first keeps its epoch until it does."""
    tid = topic_id(embedded, topic)
    a, _ = join(conn, group, topic)
    b, joined = join(conn, group, topic)
    assert (joined.member_epoch, assignment(joined)) == (2, {})  # still owned by a
    assert describe(conn, group).group_state == "Reconciling"
    # a must give up two partitions: it stays at epoch 1 and is told what to keep
    revoke = heartbeat(conn, group, a, 1, owned={tid: {0, 1, 2, 3}})
    assert revoke.member_epoch == 1
    kept = assignment(revoke)
    assert kept is not None and len(kept[tid]) == 2
    # a heartbeat still reporting the revoked partitions changes nothing
    still = heartbeat(conn, group, a, 1, owned={tid: {0, 1, 2, 3}})
    assert (still.member_epoch, still.assignment) == (1, None)
    waiting = heartbeat(conn, group, b, 2, owned={})
    assert (waiting.error_code, waiting.assignment) == (ErrorCode.NONE, None)
    # once revoked, a moves to epoch 2 and b gets the released partitions
    done = heartbeat(conn, group, a, 1, owned=kept)
    assert (done.error_code, done.member_epoch) == (ErrorCode.NONE, 2)
    moved = heartbeat(conn, group, b, 2, owned={})
    assert moved.error_code == ErrorCode.NONE
    assert assignment(moved) == {tid: {0, 1, 2, 3} - kept[tid]}
    assert describe(conn, group).group_state == "Stable"


def test_heartbeat_errors(conn: BrokerConnection, embedded: EmbeddedBroker, topic: str,
                          group: str) -> None:
    tid = topic_id(embedded, topic)
    member_id, _ = join(conn, group, topic)

    def error(answer: Any) -> ErrorCode:
        return ErrorCode(answer.error_code)

    assert error(heartbeat(conn, group, member_id, 5, owned={})) == ErrorCode.FENCED_MEMBER_EPOCH
    assert error(heartbeat(conn, group, "nobody", 1, owned={})) == ErrorCode.UNKNOWN_MEMBER_ID
    assert error(heartbeat(conn, "no-such-group", "m", 1)) == ErrorCode.GROUP_ID_NOT_FOUND
    # the previous epoch is accepted with a subset of the partitions (a lost answer) only
    assert error(heartbeat(conn, group, member_id, 0, topics=[topic],
                           owned={tid: {0}})) == ErrorCode.INVALID_REQUEST
    assert error(heartbeat(conn, group, "", 0, topics=[topic])) == ErrorCode.INVALID_REQUEST
    no_timeout = heartbeat(conn, group, str(uuid.uuid4()), 0, topics=[topic],
                           rebalance_timeout=timedelta(milliseconds=-1))
    assert error(no_timeout) == ErrorCode.INVALID_REQUEST
    assert "RebalanceTimeoutMs" in no_timeout.error_message
    assert error(heartbeat(conn, group, str(uuid.uuid4()), 0, topics=[topic],
                           assignor="sticky")) == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert error(heartbeat(conn, group, str(uuid.uuid4()), 0,
                           regex="(unclosed")) == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert error(heartbeat(conn, group, str(uuid.uuid4()), -3)) == ErrorCode.INVALID_REQUEST
    # v0: the coordinator names a joining member that sends no member id
    named = heartbeat(conn, group, "", 0, topics=[topic], version=0)
    assert named.error_code == ErrorCode.NONE and named.member_id


def test_a_classic_group_with_members_is_not_a_consumer_group(
        conn: BrokerConnection, topic: str, group: str) -> None:
    joined = conn.request(ApiKey.JOIN_GROUP, 3, {
        "group_id": group, "session_timeout": timedelta(seconds=30),
        "rebalance_timeout": timedelta(seconds=30), "member_id": "", "group_instance_id": None,
        "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})
    assert joined.error_code == ErrorCode.NONE
    answer = heartbeat(conn, group, str(uuid.uuid4()), 0, topics=[topic])
    assert answer.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    # and the other way round: a classic join to a consumer group with members
    consumer_group = f"{group}-848"
    join(conn, consumer_group, topic)
    refused = conn.request(ApiKey.JOIN_GROUP, 5, {
        "group_id": consumer_group, "session_timeout": timedelta(seconds=30),
        "rebalance_timeout": timedelta(seconds=30), "member_id": "", "group_instance_id": None,
        "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})
    assert refused.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_leaving_and_static_members(conn: BrokerConnection, embedded: EmbeddedBroker,
                                    topic: str, group: str) -> None:
    tid = topic_id(embedded, topic)
    static, first = join(conn, group, topic, instance_id="instance-1")
    assert assignment(first) == {tid: {0, 1, 2, 3}}
    other = str(uuid.uuid4())
    taken = heartbeat(conn, group, other, 0, topics=[topic], instance_id="instance-1")
    assert taken.error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    fenced = heartbeat(conn, group, other, 1, owned={}, instance_id="instance-1")
    assert fenced.error_code == ErrorCode.FENCED_INSTANCE_ID
    # a temporary leave (-2) keeps the assignment for the next member with the instance id
    left = heartbeat(conn, group, static, -2, instance_id="instance-1")
    assert (left.error_code, left.member_epoch) == (ErrorCode.NONE, -2)
    back = heartbeat(conn, group, other, 0, topics=[topic], instance_id="instance-1")
    assert back.error_code == ErrorCode.NONE
    assert (back.member_epoch, assignment(back)) == (1, {tid: {0, 1, 2, 3}})
    assert describe(conn, group).group_epoch == 1  # no rebalance
    # leaving for good (-1) bumps the group epoch and empties the group
    gone = heartbeat(conn, group, other, -1, instance_id="instance-1")
    assert (gone.error_code, gone.member_epoch) == (ErrorCode.NONE, -1)
    described = describe(conn, group)
    assert (described.group_state, described.group_epoch, described.members) == ("Empty", 2, ())
    assert heartbeat(conn, group, other, -1).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_list_and_describe_groups_by_type(conn: BrokerConnection, topic: str,
                                          group: str) -> None:
    join(conn, group, topic)
    listed = conn.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [],
                                                  "types_filter": ["consumer"]})
    found = {g.group_id: g for g in listed.groups}
    assert (found[group].group_type, found[group].protocol_type) == ("consumer", "consumer")
    classic_only = conn.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [],
                                                        "types_filter": ["classic"]})
    assert group not in {g.group_id for g in classic_only.groups}
    old = conn.request(ApiKey.DESCRIBE_GROUPS, 6, {"groups": [group],
                                                  "include_authorized_operations": False})
    assert old.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    unknown = describe(conn, f"{group}-none")
    assert unknown.error_code == ErrorCode.GROUP_ID_NOT_FOUND


def _commit(conn: BrokerConnection, group: str, topic: str, member_id: str, epoch: int,
            version: int = 9) -> ErrorCode:
    answer = conn.request(ApiKey.OFFSET_COMMIT, version, {
        "group_id": group, "generation_id_or_member_epoch": epoch, "member_id": member_id,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": 7, "committed_metadata": ""}]}]})
    return ErrorCode(answer.topics[0].partitions[0].error_code)


def _fetch(conn: BrokerConnection, group: str, member_id: str | None, epoch: int) -> ErrorCode:
    answer = conn.request(ApiKey.OFFSET_FETCH, 9, {"groups": [
        {"group_id": group, "member_id": member_id, "member_epoch": epoch, "topics": None}],
        "require_stable": False})
    return ErrorCode(answer.groups[0].error_code)


def test_commits_and_fetches_check_the_member_epoch(conn: BrokerConnection, topic: str,
                                                    group: str) -> None:
    member_id, _ = join(conn, group, topic)
    assert _commit(conn, group, topic, member_id, 1) == ErrorCode.NONE
    assert _commit(conn, group, topic, member_id, 0) == ErrorCode.STALE_MEMBER_EPOCH
    assert _commit(conn, group, topic, member_id, 2) == ErrorCode.STALE_MEMBER_EPOCH
    assert _commit(conn, group, topic, "nobody", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert _commit(conn, group, topic, "", -1) == ErrorCode.UNKNOWN_MEMBER_ID  # has members
    assert _commit(conn, group, topic, member_id, 1, version=8) == ErrorCode.UNSUPPORTED_VERSION
    assert _fetch(conn, group, member_id, 1) == ErrorCode.NONE
    assert _fetch(conn, group, member_id, 3) == ErrorCode.STALE_MEMBER_EPOCH
    assert _fetch(conn, group, "nobody", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert _fetch(conn, group, None, -1) == ErrorCode.NONE  # an admin's fetch
    heartbeat(conn, group, member_id, -1)
    assert _commit(conn, group, topic, "", -1) == ErrorCode.NONE  # an empty group: anyone


def _failover(embedded: EmbeddedBroker, group: str) -> None:
    def move(broker: Broker) -> None:
        partition = broker.coordinator.store.partition_for(group)
        broker.coordinator.unload(partition)
        broker.coordinator.load(partition)

    embedded.call(move)


def test_a_coordinator_failover_keeps_epochs_and_assignments(
        conn: BrokerConnection, embedded: EmbeddedBroker, topic: str, group: str) -> None:
    tid = topic_id(embedded, topic)
    a, _ = join(conn, group, topic, instance_id="a")
    b, _ = join(conn, group, topic)
    revoke = heartbeat(conn, group, a, 1, owned={tid: {0, 1, 2, 3}}, instance_id="a")
    kept = assignment(revoke)
    assert kept is not None
    before = describe(conn, group)
    assert before.group_state == "Reconciling"
    _failover(embedded, group)
    after = describe(conn, group)
    assert (after.group_state, after.group_epoch, after.assignment_epoch) == (
        before.group_state, before.group_epoch, before.assignment_epoch)
    assert {m.member_id: (m.member_epoch, m.assignment, m.target_assignment)
            for m in after.members} == {m.member_id: (m.member_epoch, m.assignment,
                                                      m.target_assignment)
                                        for m in before.members}
    # the members carry on where they were: a is still revoking, then b gets the rest
    done = heartbeat(conn, group, a, 1, owned=kept, instance_id="a")
    assert (done.error_code, done.member_epoch) == (ErrorCode.NONE, 2)
    moved = heartbeat(conn, group, b, 2, owned={})
    assert assignment(moved) == {tid: {0, 1, 2, 3} - kept[tid]}
    _failover(embedded, group)
    assert heartbeat(conn, group, b, 2, owned=assignment(moved)).error_code == ErrorCode.NONE
    # a static member's temporary leave survives a failover too
    assert heartbeat(conn, group, a, -2, instance_id="a").member_epoch == -2
    _failover(embedded, group)
    back = heartbeat(conn, group, str(uuid.uuid4()), 0, topics=[topic], instance_id="a")
    assert assignment(back) == kept
    # a deleted group stays deleted
    for member, instance in ((b, None), (back.member_id, "a")):
        assert heartbeat(conn, group, member, -1, instance_id=instance).error_code == 0
    deleted = conn.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": [group]})
    assert deleted.results[0].error_code == ErrorCode.NONE
    _failover(embedded, group)
    assert describe(conn, group).error_code == ErrorCode.GROUP_ID_NOT_FOUND
