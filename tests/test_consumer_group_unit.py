"""The KIP-848 consumer group coordinator without the network: its records (checked against
bytes built by hand from Kafka's ``ConsumerGroup*`` schemas, and as ``dump-log`` prints
them), a restart replaying them, the
rebalance and session timeouts, the expiry of an empty group, and the assignor settings;
driven through ``GroupCoordinator.consumer`` on an in-memory ``__consumer_offsets``.
"""

from __future__ import annotations

import asyncio
import json
import struct
import time
import uuid
from contextlib import AbstractAsyncContextManager

import pytest
from coordinator_support import MemoryTopic, group_coordinator, run

from sparklog.broker.config import BrokerConfig
from sparklog.commands.record_decoders import offsets_decoder
from sparklog.coordinator.consumer_group_coordinator import (
    ConsumerGroupConfig,
    HeartbeatRequest,
    HeartbeatResult,
)
from sparklog.coordinator.group_coordinator import GroupCoordinator, OffsetCommit
from sparklog.coordinator.group_records import (
    ConsumerGroupKey,
    ConsumerRecordType,
    CurrentAssignmentRecord,
    apply_consumer_record,
    consumer_key,
    current_assignment_value,
    decode_key,
)
from sparklog.errors import ErrorCode, InvalidConfigError

pytestmark = pytest.mark.timeout(60)

TOPIC = "events"


def coordinator(log: MemoryTopic, **config: str
                ) -> AbstractAsyncContextManager[GroupCoordinator]:
    """A coordinator leading every partition of ``log`` (a restart: a new one on it)."""
    return group_coordinator(log, {"offsets.topic.num.partitions": "2", **config})


@pytest.fixture
def offsets_log() -> MemoryTopic:
    log = MemoryTopic(2)
    log.data_topics[TOPIC] = 4
    return log


def beat(coord: GroupCoordinator, member_id: str, epoch: int, *,
         owned: dict[uuid.UUID, frozenset[int]] | None = None, rebalance_ms: int = 30000,
         instance_id: str | None = None) -> HeartbeatResult:
    joining = epoch == 0
    return coord.consumer.heartbeat(HeartbeatRequest(
        "g", member_id, epoch, instance_id, None, rebalance_ms if joining else -1,
        (TOPIC,) if joining else None, None, None, {} if joining and owned is None else owned,
        "client", "/127.0.0.1", client_member_id=True))


def test_the_current_assignment_record_is_kafkas() -> None:
    """ConsumerGroupCurrentMemberAssignmentKey v8 (group, member) and its flexible value v0,
    byte for byte as Kafka's schema lays them out."""
    topic_id = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    key = consumer_key(ConsumerRecordType.CURRENT_ASSIGNMENT, "g", "m")
    assert key == struct.pack(">hh1sh1s", 8, 1, b"g", 1, b"m")
    value = current_assignment_value(CurrentAssignmentRecord(5, 4, 1, {topic_id: frozenset({2, 0})},
                                                             {}))
    assert value == (struct.pack(">hiib", 0, 5, 4, 1) + b"\x02" + topic_id.bytes
                     + b"\x03" + struct.pack(">ii", 0, 2) + b"\x00" + b"\x01" + b"\x00")
    decoded = decode_key(key)
    assert decoded == ConsumerGroupKey("g", ConsumerRecordType.CURRENT_ASSIGNMENT, "m")
    assert isinstance(decoded, ConsumerGroupKey)
    groups = {}
    # a tagged field Kafka may add later is skipped
    apply_consumer_record(groups, decoded, value[:-1] + b"\x01\x07\x01\x2a")
    assert groups["g"].current["m"] == CurrentAssignmentRecord(
        5, 4, 1, {topic_id: frozenset({0, 2})}, {})


def test_a_restart_replays_epochs_and_assignments(offsets_log: MemoryTopic) -> None:
    async def scenario() -> None:
        async with coordinator(offsets_log) as coord:
            a = beat(coord, "a", 0)
            b = beat(coord, "b", 0)
            topic_id = next(iter(a.assignment or {}))
            revoking = beat(coord, "a", 1, owned={topic_id: frozenset(range(4))})
            kept = (revoking.assignment or {})[topic_id]
            assert (a.member_epoch, b.member_epoch, revoking.member_epoch) == (1, 2, 1)
            assert coord.commit("g", "a", None, 1, {(TOPIC, 0): OffsetCommit(3, -1, "")},
                                unknown_group_not_found=True) == {(TOPIC, 0): ErrorCode.NONE}
        async with coordinator(offsets_log) as coord:
            group = coord.consumer.groups["g"]
            assert (group.group_epoch, group.assignment_epoch) == (2, 2)
            assert {m.member_id: (m.member_epoch, m.state.name) for m in
                    group.members.values()} == {"a": (1, "UNREVOKED_PARTITIONS"),
                                                "b": (2, "UNRELEASED_PARTITIONS")}
            done = beat(coord, "a", 1, owned={topic_id: kept})
            assert (done.error, done.member_epoch) == (ErrorCode.NONE, 2)
            moved = beat(coord, "b", 2, owned={})
            assert moved.assignment == {topic_id: frozenset(range(4)) - kept}
            assert coord.fetch_offsets("g", [(TOPIC, 0)], "a", 2)[1][(TOPIC, 0)].offset == 3

    run(scenario)


def test_a_member_that_does_not_revoke_in_time_is_fenced(offsets_log: MemoryTopic) -> None:
    async def scenario() -> None:
        async with coordinator(offsets_log) as coord:
            beat(coord, "a", 0, rebalance_ms=200)
            beat(coord, "b", 0)
            topic_id = uuid.uuid5(uuid.NAMESPACE_URL, TOPIC)
            assert beat(coord, "a", 1, owned={topic_id: frozenset(range(4))}).member_epoch == 1
            group = coord.consumer.groups["g"]
            while "a" in group.members:
                await asyncio.sleep(0.02)
            assert beat(coord, "a", 1, owned={}).error == ErrorCode.UNKNOWN_MEMBER_ID
            assert beat(coord, "b", 2, owned={}).assignment == {topic_id: frozenset(range(4))}

    run(scenario)


def test_a_silent_member_leaves_at_its_session_timeout_and_the_empty_group_expires(
        offsets_log: MemoryTopic) -> None:
    async def scenario() -> None:
        async with coordinator(offsets_log, **{"group.consumer.session.timeout.ms": "200",
                                               "offsets.retention.minutes": "1"}) as coord:
            started = time.monotonic()
            beat(coord, "a", 0)
            group = coord.consumer.groups["g"]
            while group.members:
                await asyncio.sleep(0.02)
            assert time.monotonic() - started >= 0.2
            assert group.group_epoch == 2  # joined, then removed
            coord.expire_offsets()  # no offsets, no members: the group goes
            assert "g" not in coord.consumer.groups
        async with coordinator(offsets_log) as coord:
            assert "g" not in coord.consumer.groups  # tombstoned

    run(scenario)


def test_the_configured_assignors() -> None:
    config = ConsumerGroupConfig.from_props({"group.consumer.assignors":
                                             "org.apache.kafka.coordinator.group.assignor."
                                             "RangeAssignor, uniform"})
    assert config.assignors == ("range", "uniform")
    with pytest.raises(InvalidConfigError, match=r"group\.consumer\.assignors"):
        BrokerConfig({"group.consumer.assignors": "sticky"})


def test_dump_log_decodes_the_consumer_group_records() -> None:
    """``sparklog dump-log --offsets-decoder`` prints them as Kafka's tool does."""
    topic_id = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    key = consumer_key(ConsumerRecordType.CURRENT_ASSIGNMENT, "g", "m")
    value = current_assignment_value(CurrentAssignmentRecord(5, 4, 1, {topic_id: frozenset({2})},
                                                             {}))
    key_text, payload = offsets_decoder(key, value)
    assert json.loads(key_text) == {"type": "8", "data": {"groupId": "g", "memberId": "m"}}
    assert json.loads(payload) == {"version": "0", "data": {
        "memberEpoch": 5, "previousMemberEpoch": 4, "state": 1,
        "assignedPartitions": [{"topicId": "ABEiM0RVZneImaq7zN3u_w", "partitions": [2]}],
        "partitionsPendingRevocation": []}}
    epoch_key = consumer_key(ConsumerRecordType.GROUP_EPOCH, "g")
    assert offsets_decoder(epoch_key, None) == ('{"type":"3","data":{"groupId":"g"}}',
                                                "<DELETE>")
