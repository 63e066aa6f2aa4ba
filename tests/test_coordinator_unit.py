"""The group coordinator without the network: record codecs (checked against bytes built by
hand from Kafka's schemas), the consumer protocol parser, and the classic state machine driven
through ``GroupCoordinator`` on its narrow inputs (an in-memory ``__consumer_offsets``, no
data directory, no broker), with the exact errors real clients rely on; and, on a real
``Broker``, the topic it keeps its records in.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from coordinator_support import MemoryTopic, group_coordinator, run
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from sparklog.broker.config import BrokerConfig
from sparklog.broker.state import Broker
from sparklog.coordinator.consumer_protocol import subscribed_topics
from sparklog.coordinator.group import GroupState, JoinResult
from sparklog.coordinator.group_coordinator import GroupCoordinator, OffsetCommit
from sparklog.coordinator.group_records import (
    OFFSETS_TOPIC,
    GroupKey,
    GroupRecord,
    MemberRecord,
    OffsetAndMetadata,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    group_key,
    group_value,
    java_string_hashcode,
    offset_key,
    offset_value,
    partition_for,
)
from sparklog.errors import ErrorCode

pytestmark = pytest.mark.timeout(60)

E = ErrorCode
SESSION_MS = 1000  # generous: the machine may be busy
REBALANCE_MS = 1500
BASE_CONFIG = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "100",
    "offsets.topic.num.partitions": "4",
}


def subscription(*topics: str) -> bytes:
    return ConsumerProtocolSubscription(version=0, topics=list(topics), user_data=None).encode()


SUB = subscription("t")
RANGE = (("range", SUB),)


# -- codecs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("", 0), ("a", 97), ("hello", 99162322), ("Hello World", -862545276),
    ("polygenelubricants", -(1 << 31)),  # the famous Integer.MIN_VALUE hash
    ("\U0001F600", 0xD83D * 31 + 0xDE00),  # UTF-16 code units, as Java counts them
])
def test_java_string_hashcode(text: str, expected: int) -> None:
    assert java_string_hashcode(text) == expected


def test_partition_for_uses_kafka_utils_abs() -> None:
    assert partition_for("polygenelubricants", 7) == 0  # Utils.abs(MIN_VALUE) is 0
    assert partition_for("Hello World", 50) == 862545276 % 50
    assert partition_for("hello", 50) == 99162322 % 50


# An independent encoder of Kafka's non-flexible primitives, written from the schemas'
# JSON (GroupMetadataValue.json etc.), not with the code under test.
def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def i64(n: int) -> bytes:
    return struct.pack(">q", n)


def string(text: str | None) -> bytes:
    return i16(-1) if text is None else i16(len(text.encode())) + text.encode()


def data(raw: bytes) -> bytes:
    return i32(len(raw)) + raw


def test_keys_and_values_match_kafkas_bytes() -> None:
    assert offset_key("g", "t", 3) == i16(1) + string("g") + string("t") + i32(3)
    assert group_key("g") == i16(2) + string("g")
    assert decode_key(offset_key("g", "t", 3)) == OffsetKey("g", "t", 3)
    assert decode_key(i16(0) + string("g") + string("t") + i32(3)) == OffsetKey("g", "t", 3)
    assert decode_key(group_key("g")) == GroupKey("g")
    value = OffsetAndMetadata(42, 7, "meta", 1_700_000_000_000)
    assert offset_value(value) == i16(3) + i64(42) + i32(7) + string("meta") + i64(
        1_700_000_000_000)
    assert decode_offset_value(offset_value(value)) == value
    record = GroupRecord("consumer", 5, "range", "m1", 123, (
        MemberRecord("m1", None, "c1", "/127.0.0.1", 30000, 10000, SUB, b"\x00\x00"),
        MemberRecord("m2", "i2", "c2", "/10.0.0.1", 30000, 10000, SUB, b""),
    ))
    assert group_value(record) == (
        i16(3) + string("consumer") + i32(5) + string("range") + string("m1") + i64(123)
        + i32(2)
        + string("m1") + string(None) + string("c1") + string("/127.0.0.1") + i32(30000)
        + i32(10000) + data(SUB) + data(b"\x00\x00")
        + string("m2") + string("i2") + string("c2") + string("/10.0.0.1") + i32(30000)
        + i32(10000) + data(SUB) + data(b""))
    assert decode_group_value(group_value(record)) == record
    empty = GroupRecord("consumer", 6, None, None, 124, ())
    assert group_value(empty) == (i16(3) + string("consumer") + i32(6) + string(None)
                                  + string(None) + i64(124) + i32(0))
    assert decode_group_value(group_value(empty)) == empty


def test_older_value_versions_decode() -> None:
    v0 = i16(0) + i64(10) + string("m") + i64(99)
    v1 = i16(1) + i64(11) + string("m") + i64(99) + i64(500)
    v2 = i16(2) + i64(12) + string("m") + i64(99)
    assert decode_offset_value(v0) == OffsetAndMetadata(10, -1, "m", 99)
    assert decode_offset_value(v1) == OffsetAndMetadata(11, -1, "m", 99)
    assert decode_offset_value(v2) == OffsetAndMetadata(12, -1, "m", 99)
    group_v0 = (i16(0) + string("consumer") + i32(2) + string("range") + string("m1") + i32(1)
                + string("m1") + string("c1") + string("/h") + i32(6000) + data(SUB)
                + data(b"a"))
    assert decode_group_value(group_v0) == GroupRecord("consumer", 2, "range", "m1", -1, (
        MemberRecord("m1", None, "c1", "/h", 6000, 6000, SUB, b"a"),))
    group_v1 = (i16(1) + string("consumer") + i32(2) + string("range") + string("m1") + i32(1)
                + string("m1") + string("c1") + string("/h") + i32(9000) + i32(6000)
                + data(SUB) + data(b"a"))
    assert decode_group_value(group_v1) == GroupRecord("consumer", 2, "range", "m1", -1, (
        MemberRecord("m1", None, "c1", "/h", 9000, 6000, SUB, b"a"),))
    with pytest.raises(ValueError):
        decode_offset_value(i16(9))
    with pytest.raises(ValueError):
        decode_key(b"\x00\x01\x00")  # cut short
    with pytest.raises(ValueError):
        decode_group_value(group_v1[:-3])


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_of_every_version(version: int) -> None:
    fields: dict[str, Any] = {"topics": ["a", "bb"], "user_data": b"x"}
    if version >= 1:
        fields["owned_partitions"] = [
            ConsumerProtocolSubscription.TopicPartition(topic="a", partitions=[0, 1])]
    if version >= 2:
        fields["generation_id"] = 4
    if version >= 3:
        fields["rack_id"] = "r1"
    encoded = ConsumerProtocolSubscription(version=version, **fields).encode()
    assert subscribed_topics(encoded) == ("a", "bb")
    with pytest.raises(ValueError):
        subscribed_topics(encoded[:5])


# -- the state machine ----------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def offsets_log() -> MemoryTopic:
    return MemoryTopic(int(BASE_CONFIG["offsets.topic.num.partitions"]))


def coordinator(log: MemoryTopic, clock: Clock | None = None,
                **config: str) -> AbstractAsyncContextManager[GroupCoordinator]:
    """A coordinator on ``log`` (a restart: a new one on the same log)."""
    return group_coordinator(log, {**BASE_CONFIG, **config}, clock or time.time)


async def until(condition: Callable[[], bool]) -> None:
    """Let the coordinator's loop run until ``condition()`` holds (no fixed sleeps)."""
    while not condition():
        await asyncio.sleep(0.005)  # run's wait_for bounds the whole scenario


def parked(coord: GroupCoordinator, waiter: str, group: str = "g") -> int:
    """How many members of ``group`` have a JoinGroup (``join_waiter``) or SyncGroup
    (``sync_waiter``) parked."""
    found = coord.groups.get(group)
    members = found.members.values() if found is not None else ()
    return sum(getattr(m, waiter) is not None for m in members)


async def join(coord: GroupCoordinator, group: str = "g", member_id: str = "", *,
               instance: str | None = None, protocols: tuple[tuple[str, bytes], ...] = RANGE,
               session_ms: int = SESSION_MS, protocol_type: str = "consumer",
               require_known: bool = True) -> JoinResult:
    return await coord.join(
        group, member_id, instance, require_known_member_id=require_known and instance is None,
        client_id="client", client_host="/127.0.0.1", rebalance_timeout_ms=REBALANCE_MS,
        session_timeout_ms=session_ms, protocol_type=protocol_type, protocols=protocols)


async def join_new(coord: GroupCoordinator, group: str = "g", **kwargs: Any) -> JoinResult:
    """A new dynamic member's two JoinGroups (MEMBER_ID_REQUIRED, then with the id)."""
    first = await join(coord, group, **kwargs)
    if first.error != E.MEMBER_ID_REQUIRED:
        return first
    assert first.member_id.startswith("client-")
    return await join(coord, group, first.member_id, **kwargs)


def state(coord: GroupCoordinator, group: str = "g") -> GroupState:
    return coord.groups[group].state


def test_member_id_required_then_a_generation_with_the_leader(offsets_log: MemoryTopic) -> None:
    async def scenario() -> None:
        async with coordinator(offsets_log) as coord:
            first = await join(coord)
            assert (first.error, first.generation) == (E.MEMBER_ID_REQUIRED, -1)
            joined = await join(coord, "g", first.member_id)
            assert joined.error == E.NONE
            assert (joined.generation, joined.protocol, joined.leader) == (1, "range",
                                                                          first.member_id)
            assert joined.members == ((first.member_id, None, SUB),)
            assert state(coord) is GroupState.COMPLETING_REBALANCE
            synced = await coord.sync("g", 1, joined.member_id, None, {joined.member_id: b"A"})
            assert (synced.error, synced.assignment) == (E.NONE, b"A")
            assert state(coord) is GroupState.STABLE
            assert coord.heartbeat("g", joined.member_id, None, 1) == E.NONE
            # v0-v3 join (no MEMBER_ID_REQUIRED round trip) of a second member
            second = await asyncio.gather(join(coord, require_known=False),
                                          join(coord, "g", joined.member_id))
            assert {r.generation for r in second} == {2}
            assert [len(r.members) for r in second].count(2) == 1  # only the leader sees them

    run(scenario)


def test_rebalance_errors_and_relayed_assignment(offsets_log: MemoryTopic) -> None:
    async def scenario() -> None:
        async with coordinator(offsets_log) as coord:
            offsets_log.data_topics["t"] = 1
            a = await join_new(coord)
            await coord.sync("g", 1, a.member_id, None, {a.member_id: b"all"})
            b_task = asyncio.create_task(join_new(coord))
            await until(lambda: parked(coord, "join_waiter") == 1)
            assert state(coord) is GroupState.PREPARING_REBALANCE
            assert coord.heartbeat("g", a.member_id, None, 1) == E.REBALANCE_IN_PROGRESS
            # commits of the current generation are still accepted while preparing
            assert coord.commit("g", a.member_id, None, 1, {("t", 0): OffsetCommit(1, -1, "")}
                                ) == {("t", 0): E.NONE}
            a2 = await join(coord, "g", a.member_id)
            b = await b_task
            assert a2.generation == b.generation == 2
            assert a2.leader == a.member_id and len(a2.members) == 2 and b.members == ()
            assert coord.heartbeat("g", a.member_id, None, 2) == E.NONE  # joined: may heartbeat
            assert coord.commit("g", a.member_id, None, 2, {("t", 0): OffsetCommit(1, -1, "")}
                                ) == {("t", 0): E.REBALANCE_IN_PROGRESS}
            follower = asyncio.create_task(coord.sync("g", 2, b.member_id, None, {}))
            await until(lambda: parked(coord, "sync_waiter") == 1)
            assert not follower.done()  # waits for the leader
            leader = await coord.sync("g", 2, a.member_id, None,
                                      {a.member_id: b"p0", b.member_id: b"p1"})
            assert (leader.assignment, (await follower).assignment) == (b"p0", b"p1")
            assert coord.heartbeat("g", a.member_id, None, 1) == E.ILLEGAL_GENERATION
            assert coord.heartbeat("g", "nobody", None, 2) == E.UNKNOWN_MEMBER_ID
            assert coord.heartbeat("nogroup", "nobody", None, 2) == E.UNKNOWN_MEMBER_ID
            assert coord.heartbeat("", "nobody", None, 2) == E.INVALID_GROUP_ID
            assert (await coord.sync("g", 1, a.member_id, None, {})).error == E.ILLEGAL_GENERATION
            stale = coord.commit("g", a.member_id, None, 1, {("t", 0): OffsetCommit(1, -1, "")})
            assert stale == {("t", 0): E.ILLEGAL_GENERATION}
            simple = coord.commit("g", "", None, -1, {("t", 0): OffsetCommit(1, -1, "")})
            assert simple == {("t", 0): E.UNKNOWN_MEMBER_ID}  # not Empty: members only
            assert coord.delete("g") == E.NON_EMPTY_GROUP

    run(scenario)


def test_protocol_checks(offsets_log: MemoryTopic) -> None:
    async def scenario() -> None:
        async with coordinator(offsets_log) as coord:
            both = (("range", SUB), ("roundrobin", SUB))
            a = await join_new(coord, protocols=both)
            await coord.sync("g", 1, a.member_id, None, {})
            other_type = await join(coord, protocol_type="connect")
            assert other_type.error == E.INCONSISTENT_GROUP_PROTOCOL
            no_common = await join(coord, protocols=(("sticky", SUB),))
            assert no_common.error == E.INCONSISTENT_GROUP_PROTOCOL
            assert (await join(coord, "new", protocols=())).error == E.INCONSISTENT_GROUP_PROTOCOL
            assert (await join(coord, session_ms=50)).error == E.INVALID_SESSION_TIMEOUT
            assert (await join(coord, "g", "unknown-id")).error == E.UNKNOWN_MEMBER_ID
            # the protocol most members prefer among those all support wins
            prefer_rr = (("roundrobin", SUB), ("range", SUB))
            results = await asyncio.gather(join_new(coord, protocols=prefer_rr),
                                           join_new(coord, protocols=prefer_rr),
                                           join(coord, "g", a.member_id, protocols=both))
            assert {(r.generation, r.protocol) for r in results} == {(2, "roundrobin")}

    run(scenario)


def test_session_timeout_removes_a_silent_member(offsets_log: MemoryTopic) -> None:
    async def scenario() -> None:
        async with coordinator(offsets_log) as coord:
            a = await join_new(coord)
            await coord.sync("g", 1, a.member_id, None, {})
            b_join = asyncio.create_task(join_new(coord))
            await until(lambda: parked(coord, "join_waiter") == 1)
            a2 = await join(coord, "g", a.member_id)
            b = await b_join
            await asyncio.gather(coord.sync("g", 2, a.member_id, None, {}),
                                 coord.sync("g", 2, b.member_id, None, {}))
            # a keeps heartbeating, b goes silent: after its session b is removed
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 3 * SESSION_MS / 1000
            error = E.NONE
            while error == E.NONE and loop.time() < deadline:
                await asyncio.sleep(0.1)
                error = coord.heartbeat("g", a.member_id, None, a2.generation)
            assert error == E.REBALANCE_IN_PROGRESS
            assert b.member_id not in coord.groups["g"].members
            a3 = await join(coord, "g", a.member_id)
            assert (a3.generation, [m[0] for m in a3.members]) == (3, [a.member_id])

    run(scenario)


def test_members_that_do_not_rejoin_are_dropped_after_the_rebalance_timeout(
        offsets_log: MemoryTopic) -> None:
    async def scenario() -> None:
        async with coordinator(offsets_log) as coord:
            a, b = await asyncio.gather(join_new(coord), join_new(coord))
            if a.generation != b.generation:  # the first one may complete alone: align
                a, b = await asyncio.gather(join(coord, "g", a.member_id),
                                            join(coord, "g", b.member_id))
            generation = a.generation
            await asyncio.gather(coord.sync("g", generation, a.member_id, None, {}),
                                 coord.sync("g", generation, b.member_id, None, {}))
            # only a rejoins (b keeps its session alive by heartbeats, but never rejoins)
            rejoin = asyncio.create_task(join(coord, "g", a.member_id,
                                              protocols=(("range", subscription("u")),)))
            answers = []
            while not rejoin.done():
                if coord.groups["g"].generation == generation:  # b goes when it completes,
                    # which the rejoin's task may see only one turn of the loop later
                    answers.append(coord.heartbeat("g", b.member_id, None, generation))
                await asyncio.sleep(0.05)
            result = rejoin.result()
            # the join waited for b while b was alive and told to rejoin, then went on without
            assert E.REBALANCE_IN_PROGRESS in answers and E.UNKNOWN_MEMBER_ID not in answers
            assert [m[0] for m in result.members] == [a.member_id]
            assert coord.heartbeat("g", b.member_id, None, generation) == E.UNKNOWN_MEMBER_ID

    run(scenario)


def test_initial_rebalance_delay_gathers_early_members(offsets_log: MemoryTopic) -> None:
    async def scenario() -> None:
        async with coordinator(offsets_log, **{"group.initial.rebalance.delay.ms": "500"}) as coord:
            first = asyncio.create_task(join_new(coord))
            await until(lambda: parked(coord, "join_waiter") == 1)
            second = asyncio.create_task(join_new(coord))
            a, b = await asyncio.gather(first, second)
            assert a.generation == b.generation == 1
            assert len(a.members) + len(b.members) == 2

    run(scenario)


def test_static_member_rejoins_without_a_rebalance(offsets_log: MemoryTopic) -> None:
    async def scenario() -> None:
        async with coordinator(offsets_log) as coord:
            a = await join(coord, instance="i-a")  # static: no MEMBER_ID_REQUIRED
            assert a.error == E.NONE and a.member_id.startswith("i-a-")
            await coord.sync("g", 1, a.member_id, "i-a", {a.member_id: b"A"})
            again = await join(coord, instance="i-a")  # restarted, same metadata
            assert again.error == E.NONE and again.member_id != a.member_id
            assert again.generation == 1 and state(coord) is GroupState.STABLE
            assert again.leader == a.member_id  # the old id: not asked to assign again
            assert coord.heartbeat("g", a.member_id, "i-a", 1) == E.FENCED_INSTANCE_ID
            assert coord.heartbeat("g", again.member_id, "i-a", 1) == E.NONE
            synced = await coord.sync("g", 1, again.member_id, "i-a", {})
            assert synced.assignment == b"A"
            assert coord.leave("g", [(a.member_id, "i-a")]) == (E.NONE, [E.FENCED_INSTANCE_ID])
            # changed metadata: a rebalance
            changed = await join(coord, instance="i-a", protocols=(("range", subscription("u")),))
            assert changed.generation == 2
        async with coordinator(offsets_log) as coord:
            # the replacement was stored: it survives a restart (generation 2 was not synced)
            group = coord.groups["g"]
            assert (group.state, group.generation) == (GroupState.STABLE, 1)
            assert group.static_members == {"i-a": again.member_id}

    run(scenario)


def test_leave_group_v3_removes_several_members(offsets_log: MemoryTopic) -> None:
    async def scenario() -> None:
        async with coordinator(offsets_log) as coord:
            results = await asyncio.gather(*(join(coord, instance=f"i{n}") for n in range(3)))
            final = await asyncio.gather(*(join(coord, "g", r.member_id, instance=f"i{n}")
                                           for n, r in enumerate(results)))
            ids = [r.member_id for r in final]
            top, errors = coord.leave("g", [(ids[0], "i0"), ("", "i1"), ("nobody", None)])
            assert (top, errors) == (E.NONE, [E.NONE, E.NONE, E.UNKNOWN_MEMBER_ID])
            assert list(coord.groups["g"].members) == [ids[2]]
            assert coord.leave("g", [(ids[2], "i2")]) == (E.NONE, [E.NONE])
            await until(lambda: state(coord) is GroupState.EMPTY)
            assert coord.leave("nogroup", [("x", None)]) == (E.NONE, [E.UNKNOWN_MEMBER_ID])

    run(scenario)


def test_commits_survive_a_restart_and_groups_come_back(offsets_log: MemoryTopic) -> None:
    async def scenario() -> None:
        async with coordinator(offsets_log) as coord:
            offsets_log.data_topics["t"] = 2
            assert coord.commit("simple", "", None, -1, {
                ("t", 0): OffsetCommit(5, 0, "five"), ("t", 1): OffsetCommit(6, -1, None),
                ("t", 9): OffsetCommit(1, -1, ""), ("x", 0): OffsetCommit(1, -1, "")}) == {
                ("t", 0): E.NONE, ("t", 1): E.NONE, ("t", 9): E.UNKNOWN_TOPIC_OR_PARTITION,
                ("x", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
            assert coord.commit("simple", "", None, -1, {("t", 0): OffsetCommit(
                1, -1, "x" * 5000)}) == {("t", 0): E.OFFSET_METADATA_TOO_LARGE}
            assert coord.commit("nogroup", "m", None, 3, {("t", 0): OffsetCommit(1, -1, "")}
                                ) == {("t", 0): E.ILLEGAL_GENERATION}
            a = await join_new(coord)
            await coord.sync("g", 1, a.member_id, None, {a.member_id: b"assigned"})
            assert coord.commit("g", a.member_id, None, 1, {("t", 1): OffsetCommit(9, 0, "m")}
                                ) == {("t", 1): E.NONE}
            assert coord.commit("gone", "", None, -1, {("t", 1): OffsetCommit(3, 0, "")}
                                ) == {("t", 1): E.NONE}
            assert coord.delete("gone") == E.NONE
            assert coord.delete("gone") == E.GROUP_ID_NOT_FOUND
        async with coordinator(offsets_log) as coord:
            error, offsets = coord.fetch_offsets("simple", None)
            assert error == E.NONE
            assert {tp: (o.offset, o.leader_epoch, o.metadata) for tp, o in offsets.items()
                    if o is not None} == {("t", 0): (5, 0, "five"), ("t", 1): (6, -1, "")}
            assert coord.fetch_offsets("simple", [("t", 0), ("t", 7)])[1][("t", 7)] is None
            assert "gone" not in coord.groups
            group = coord.groups["g"]
            assert (group.state, group.generation, group.leader) == (GroupState.STABLE, 1,
                                                                      a.member_id)
            # the live member carries on with its generation: no rebalance needed
            assert coord.heartbeat("g", a.member_id, None, 1) == E.NONE
            assert (await coord.sync("g", 1, a.member_id, None, {})).assignment == b"assigned"
            _, summary = coord.describe("g")
            assert (summary.state, summary.protocol, summary.members[0].assignment) == (
                "Stable", "range", b"assigned")
            assert coord.describe("nogroup")[1].state == "Dead"
            assert sorted(coord.list_groups()[1]) == [("g", "consumer", "Stable"),
                                                      ("simple", "", "Empty")]
            # a member that died while the broker was down is removed by its session timeout
            await until(lambda: state(coord) is GroupState.EMPTY)

    run(scenario)


def test_offsets_of_empty_groups_expire(offsets_log: MemoryTopic) -> None:
    clock = Clock()

    async def scenario() -> None:
        async with coordinator(offsets_log, clock, **{"offsets.retention.minutes": "1"}) as coord:
            offsets_log.data_topics["t"] = 1
            coord.commit("simple", "", None, -1, {("t", 0): OffsetCommit(1, -1, "")})
            a = await join_new(coord)
            await coord.sync("g", 1, a.member_id, None, {})
            coord.commit("g", a.member_id, None, 1, {("t", 0): OffsetCommit(2, -1, "")})
            clock.now += 120
            coord.expire_offsets()
            assert "simple" not in coord.groups  # expired from its commit
            assert coord.fetch_offsets("g", None)[1]  # not Empty: kept
            assert coord.leave("g", [(a.member_id, None)]) == (E.NONE, [E.NONE])
            await until(lambda: state(coord) is GroupState.EMPTY)
            clock.now += 30
            coord.expire_offsets()
            assert coord.fetch_offsets("g", None)[1]  # Empty for 30 s only
            clock.now += 31
            coord.expire_offsets()
            assert "g" not in coord.groups
        async with coordinator(offsets_log, clock) as coord:
            assert coord.groups == {}  # the tombstones were written

    run(scenario)


def test_partition_count_change_triggers_a_rebalance(offsets_log: MemoryTopic) -> None:
    async def scenario() -> None:
        async with coordinator(offsets_log) as coord:
            offsets_log.data_topics["t"] = 2
            a = await join_new(coord)
            await coord.sync("g", 1, a.member_id, None, {})
            assert coord.heartbeat("g", a.member_id, None, 1) == E.NONE
            offsets_log.data_topics["t"] = 4
            assert coord.heartbeat("g", a.member_id, None, 1) == E.REBALANCE_IN_PROGRESS
            assert (await join(coord, "g", a.member_id)).generation == 2

    run(scenario)


def test_deleted_offsets_stay_deleted_across_a_restart(offsets_log: MemoryTopic) -> None:
    """OffsetDelete's tombstones: the partitions named lose their offsets, also when the
    coordinator replays its log; a topic the members subscribe to keeps them; an Empty group
    left without offsets dies."""
    async def scenario() -> None:
        async with coordinator(offsets_log) as coord:
            offsets_log.data_topics.update({"t": 2, "u": 1})
            one = OffsetCommit(1, -1, "")
            coord.commit("simple", "", None, -1, {("t", 0): one, ("t", 1): one, ("u", 0): one})
            assert coord.delete_offsets("simple", [("t", 0), ("u", 0)]) == (
                E.NONE, {("t", 0): E.NONE, ("u", 0): E.NONE})
            a = await join_new(coord)  # subscribes to "t" (SUB)
            await coord.sync("g", 1, a.member_id, None, {})
            coord.commit("g", a.member_id, None, 1, {("t", 0): one, ("u", 0): one})
            assert coord.delete_offsets("g", [("t", 0), ("u", 0)]) == (
                E.NONE, {("t", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): E.NONE})
            assert coord.delete_offsets("nogroup", [("t", 0)]) == (E.GROUP_ID_NOT_FOUND, {})
            coord.commit("gone", "", None, -1, {("t", 1): one})
            assert coord.delete_offsets("gone", [("t", 1)]) == (E.NONE, {("t", 1): E.NONE})
            assert "gone" not in coord.groups
        async with coordinator(offsets_log) as coord:
            assert list(coord.fetch_offsets("simple", None)[1]) == [("t", 1)]
            assert list(coord.fetch_offsets("g", None)[1]) == [("t", 0)]
            assert "gone" not in coord.groups

    run(scenario)


def test_client_reasons_are_logged_with_rebalances_and_departures(
        offsets_log: MemoryTopic, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        async with coordinator(offsets_log) as coord:
            first = await coord.join(
                "g", "", "i-a", require_known_member_id=False, client_id="c",
                client_host="/127.0.0.1", rebalance_timeout_ms=REBALANCE_MS,
                session_timeout_ms=SESSION_MS, protocol_type="consumer", protocols=RANGE,
                reason="the consumer started")
            assert coord.leave("g", [(first.member_id, "i-a")], ["the consumer closed"]) == (
                E.NONE, [E.NONE])

    with caplog.at_level("INFO", logger="sparklog.coordinator.group_coordinator"):
        run(scenario)
    assert "joined; client reason: the consumer started" in caplog.text
    assert "left; client reason: the consumer closed" in caplog.text


def test_stop_answers_parked_requests_and_refuses_new_ones(tmp_path: Path) -> None:
    """On a real broker: closing it stops its coordinator."""
    async def scenario() -> None:
        broker = Broker(BrokerConfig(BASE_CONFIG), tmp_path)
        broker.start()
        await broker.replicas.start(())  # a single node: it leads every partition
        coord = broker.coordinator
        a = await join_new(coord)
        pending = asyncio.create_task(join_new(coord))
        await until(lambda: parked(coord, "join_waiter") == 1)
        broker.close()
        assert (await pending).error == E.NOT_COORDINATOR
        assert coord.heartbeat("g", a.member_id, None, 1) == E.COORDINATOR_NOT_AVAILABLE
        assert coord.list_groups()[0] == E.COORDINATOR_NOT_AVAILABLE

    run(scenario)


def test_offsets_topic_is_compacted_internal_and_replayed_in_chunks(tmp_path: Path) -> None:
    """On a real broker: the topic it creates, and a replay that reads it a few batches at a
    time (``offsets.load.buffer.size``)."""
    big = {**BASE_CONFIG, "offset.metadata.max.bytes": "100000"}

    async def scenario() -> None:
        broker = Broker(BrokerConfig(big), tmp_path)
        broker.start()
        await broker.replicas.start(())  # a single node: it leads every partition
        topic = broker.logs.topics[OFFSETS_TOPIC]
        assert (topic.partitions, topic.internal, topic.config.compact) == (4, True, True)
        broker.logs.create_topic("t", 1)
        for n in range(100):
            assert broker.coordinator.commit(f"g{n % 7}", "", None, -1, {
                ("t", 0): OffsetCommit(n, -1, str(n) * 10_000)}) == {("t", 0): E.NONE}
        broker.close()
        broker = Broker(BrokerConfig({**big, "offsets.load.buffer.size": "50000"}), tmp_path)
        broker.start()
        await broker.replicas.start(())  # a single node: it leads every partition
        coord = broker.coordinator
        loaded = {g: coord.fetch_offsets(g, None)[1][("t", 0)] for g in coord.groups}
        broker.close()
        assert {g: o.offset for g, o in loaded.items() if o} == {
            f"g{k}": max(n for n in range(100) if n % 7 == k) for k in range(7)}

    run(scenario)
