"""The records of ``__consumer_offsets``: committed offsets and group metadata, in Kafka's format.

Formats (Kafka's ``OffsetCommitKey``, ``GroupMetadataKey``, ``OffsetCommitValue``,
``GroupMetadataValue`` message schemas, non-flexible versions; every key and value starts
with an int16 version):
- offset commit key v1 (v0 reads the same): group, topic, partition;
- group metadata key v2: group;
- offset commit value, written v3: offset, leader epoch, metadata, commit timestamp (v0-v2
  are read too: v0 and v2 have no leader epoch, v1 adds an expire timestamp, ignored);
- group metadata value, written v3: protocol type, generation, protocol (nullable), leader
  (nullable), current state timestamp, members [member id, group instance id (nullable),
  client id, client host, rebalance timeout, session timeout, subscription, assignment]
  (v0-v2 are read too: v0 lacks the rebalance timeout, v0-v1 the state timestamp, v0-v2
  the instance id);
- KIP-848's consumer group records (Kafka's ``ConsumerGroup*`` schemas): non-flexible keys
  whose version is the record type, flexible v0 values: group epoch (key 3: group; value:
  epoch), subscription metadata (4: group; topics [id, name, partitions, partition racks
  (written empty, as Kafka 4 does)]), member subscription (5: group, member; instance id,
  rack, client id and host, subscribed topic names and regex, rebalance timeout, server
  assignor, and tagged (0) a classic member's session timeout and protocols), target
  assignment epoch (6: group; epoch), a member's target assignment (7:
  group, member; [topic id, partitions]), a member's current assignment (8: group, member;
  member epoch, previous member epoch, state, assigned partitions and those pending
  revocation);
- a null value (tombstone) deletes its key; a tombstone of a consumer group's epoch (key 3)
  deletes what is left of the group (Kafka writes it last).

Invariants:
- A group's records all live in partition ``abs(hashCode(group)) % partitions`` (Java's
  ``String.hashCode`` and Kafka's ``Utils.abs``).
- Decoding raises ``ValueError`` and nothing else for bytes that are not such a record.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from sparklog.protocol.data_records import DataSchema, Field, decode, encode

OFFSETS_TOPIC = "__consumer_offsets"

TopicPartition = tuple[str, int]
TopicAssignment = Mapping[uuid.UUID, frozenset[int]]
"""Partitions by topic id (KIP-848's records and assignors name topics by id)."""

_OFFSET_KEY = DataSchema("OffsetCommitKey", (
    Field("group", "string"), Field("topic", "string"), Field("partition", "int32"),
), newest=1)
_GROUP_KEY = DataSchema("GroupMetadataKey", (Field("group", "string"),), newest=2)
_OFFSET_VALUE = DataSchema("OffsetCommitValue", (
    Field("offset", "int64"),
    Field("leader_epoch", "int32", first=3),
    Field("metadata", "string"),
    Field("commit_timestamp", "int64"),
    Field("expire_timestamp", "int64", first=1, last=1),
), newest=3)
_MEMBER = DataSchema("MemberMetadata", (
    Field("member_id", "string"),
    Field("group_instance_id", "string", first=3, nullable_from=3),
    Field("client_id", "string"),
    Field("client_host", "string"),
    Field("rebalance_timeout", "int32", first=1),
    Field("session_timeout", "int32"),
    Field("subscription", "bytes"),
    Field("assignment", "bytes"),
), newest=3)
_GROUP_VALUE = DataSchema("GroupMetadataValue", (
    Field("protocol_type", "string"),
    Field("generation", "int32"),
    Field("protocol", "string", nullable_from=0),
    Field("leader", "string", nullable_from=0),
    Field("current_state_timestamp", "int64", first=2),
    Field("members", struct=_MEMBER),
), newest=3)

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupRecord:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int
    members: tuple[MemberRecord, ...]


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


class ConsumerRecordType(IntEnum):
    """The key versions of KIP-848's consumer group records."""

    GROUP_EPOCH = 3
    SUBSCRIPTION_METADATA = 4
    MEMBER_SUBSCRIPTION = 5
    TARGET_ASSIGNMENT_EPOCH = 6
    TARGET_ASSIGNMENT_MEMBER = 7
    CURRENT_ASSIGNMENT = 8


_PER_MEMBER = (ConsumerRecordType.MEMBER_SUBSCRIPTION, ConsumerRecordType.TARGET_ASSIGNMENT_MEMBER,
               ConsumerRecordType.CURRENT_ASSIGNMENT)


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """A consumer group record's key; ``member_id`` is "" for the group-level ones."""

    group: str
    record_type: ConsumerRecordType
    member_id: str = ""


@dataclass(frozen=True, slots=True)
class ConsumerMemberRecord:
    """A member's subscription (ConsumerGroupMemberMetadataValue)."""

    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None
    """Set for a member that speaks the classic protocol inside a consumer group."""


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """A classic member's JoinGroup settings (the value's tagged ClassicMemberMetadata)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class CurrentAssignmentRecord:
    """A member's reconciled state (ConsumerGroupCurrentMemberAssignmentValue)."""

    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: TopicAssignment
    pending_revocation: TopicAssignment


@dataclass
class ConsumerGroupRecords:
    """What replaying a consumer group's records leaves: the latest value of each."""

    epoch: int = 0
    subscription_metadata: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    """Topic name -> (id, partition count) of every subscribed topic that exists."""
    members: dict[str, ConsumerMemberRecord] = field(default_factory=dict)
    assignment_epoch: int = 0
    targets: dict[str, TopicAssignment] = field(default_factory=dict)
    current: dict[str, CurrentAssignmentRecord] = field(default_factory=dict)


_CONSUMER_KEYS = {
    record_type: DataSchema(f"ConsumerGroupKey{record_type}", (
        Field("group", "string", first=record_type),
        *((Field("member_id", "string", first=record_type),) if record_type in _PER_MEMBER else ()),
    ), newest=record_type)
    for record_type in ConsumerRecordType}
_TOPIC_PARTITIONS = DataSchema("TopicPartitions", (
    Field("topic_id", "uuid"), Field("partitions", "[]int32")), flexible_from=0)
_EPOCH_VALUE = DataSchema("ConsumerGroupMetadataValue", (Field("epoch", "int32"),),
                          flexible_from=0)
_PARTITION_METADATA_VALUE = DataSchema("ConsumerGroupPartitionMetadataValue", (
    Field("topics", struct=DataSchema("TopicMetadata", (
        Field("topic_id", "uuid"), Field("topic_name", "string"),
        Field("num_partitions", "int32"),
        Field("partition_metadata", struct=DataSchema("PartitionMetadata", (
            Field("partition", "int32"), Field("racks", "[]string")), flexible_from=0)),
    ), flexible_from=0)),
), flexible_from=0)
_MEMBER_VALUE = DataSchema("ConsumerGroupMemberMetadataValue", (
    Field("instance_id", "string", nullable_from=0),
    Field("rack_id", "string", nullable_from=0),
    Field("client_id", "string"),
    Field("client_host", "string"),
    Field("subscribed_topic_names", "[]string"),
    Field("subscribed_topic_regex", "string", nullable_from=0),
    Field("rebalance_timeout_ms", "int32"),
    Field("server_assignor", "string", nullable_from=0),
    Field("classic_member_metadata", tag=0, single=True, struct=DataSchema(
        "ClassicMemberMetadata", (
            Field("session_timeout_ms", "int32"),
            Field("supported_protocols", struct=DataSchema("ClassicProtocol", (
                Field("name", "string"), Field("metadata", "bytes")), flexible_from=0)),
        ), flexible_from=0)),
), flexible_from=0)
_TARGET_EPOCH_VALUE = DataSchema("ConsumerGroupTargetAssignmentMetadataValue", (
    Field("assignment_epoch", "int32"),), flexible_from=0)
_TARGET_MEMBER_VALUE = DataSchema("ConsumerGroupTargetAssignmentMemberValue", (
    Field("topic_partitions", struct=_TOPIC_PARTITIONS),), flexible_from=0)
_CURRENT_VALUE = DataSchema("ConsumerGroupCurrentMemberAssignmentValue", (
    Field("member_epoch", "int32"),
    Field("previous_member_epoch", "int32"),
    Field("state", "int8"),
    Field("assigned_partitions", struct=_TOPIC_PARTITIONS),
    Field("partitions_pending_revocation", struct=_TOPIC_PARTITIONS),
), flexible_from=0)
CONSUMER_VALUE_VERSION = 0


# -- Java's String.hashCode and the partition of a group ----------------------------------------


def java_string_hashcode(text: str) -> int:
    """``String.hashCode``: s[0]*31^(n-1) + ... over UTF-16 code units, as a signed int32."""
    raw = text.encode("utf-16-be")
    value = 0
    for i in range(0, len(raw), 2):
        value = (value * 31 + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def partition_for(group: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(group.hashCode()) % partitions`` (``Utils.abs(MIN_VALUE)`` is 0)."""
    code = java_string_hashcode(group)
    return (0 if code == -(1 << 31) else abs(code)) % partitions


# -- keys and values ----------------------------------------------------------------------------


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return encode(_OFFSET_KEY, OFFSET_KEY_VERSION,
                  {"group": group, "topic": topic, "partition": partition})


def group_key(group: str) -> bytes:
    return encode(_GROUP_KEY, GROUP_KEY_VERSION, {"group": group})


def consumer_key(record_type: ConsumerRecordType, group: str, member_id: str = "") -> bytes:
    return encode(_CONSUMER_KEYS[record_type], record_type,
                  {"group": group, "member_id": member_id})


def decode_key(data: bytes) -> OffsetKey | GroupKey | ConsumerGroupKey:
    version = int.from_bytes(data[:2], "big", signed=True) if len(data) >= 2 else -1
    if version in _CONSUMER_KEYS:
        _, key = decode(_CONSUMER_KEYS[version], data)
        return ConsumerGroupKey(key.group, ConsumerRecordType(version),
                                getattr(key, "member_id", ""))
    if version == GROUP_KEY_VERSION:
        _, key = decode(_GROUP_KEY, data)
        return GroupKey(key.group)
    if version in (0, 1):
        _, key = decode(_OFFSET_KEY, data)
        return OffsetKey(key.group, key.topic, key.partition)
    raise ValueError(f"unknown {OFFSETS_TOPIC} key version {version}")


def offset_value(value: OffsetAndMetadata) -> bytes:
    return encode(_OFFSET_VALUE, OFFSET_VALUE_VERSION, {
        "offset": value.offset, "leader_epoch": value.leader_epoch,
        "metadata": value.metadata, "commit_timestamp": value.commit_timestamp})


def decode_offset_value(data: bytes) -> OffsetAndMetadata:
    _, value = decode(_OFFSET_VALUE, data)
    return OffsetAndMetadata(value.offset, getattr(value, "leader_epoch", -1), value.metadata,
                             value.commit_timestamp)


def group_value(value: GroupRecord) -> bytes:
    return encode(_GROUP_VALUE, GROUP_VALUE_VERSION, {
        "protocol_type": value.protocol_type, "generation": value.generation,
        "protocol": value.protocol, "leader": value.leader,
        "current_state_timestamp": value.state_timestamp,
        "members": [{
            "member_id": m.member_id, "group_instance_id": m.group_instance_id,
            "client_id": m.client_id, "client_host": m.client_host,
            "rebalance_timeout": m.rebalance_timeout_ms, "session_timeout": m.session_timeout_ms,
            "subscription": m.subscription, "assignment": m.assignment,
        } for m in value.members],
    })


def decode_group_value(data: bytes) -> GroupRecord:
    _, value = decode(_GROUP_VALUE, data)
    return GroupRecord(value.protocol_type, value.generation, value.protocol, value.leader,
                       getattr(value, "current_state_timestamp", -1),
                       tuple(_member(m) for m in value.members))


def _member(m: Any) -> MemberRecord:
    # v0 had one timeout for both
    return MemberRecord(m.member_id, getattr(m, "group_instance_id", None), m.client_id,
                        m.client_host, getattr(m, "rebalance_timeout", m.session_timeout),
                        m.session_timeout, m.subscription, m.assignment)


# -- consumer group values (KIP-848) ---------------------------------------------------------


def group_epoch_value(epoch: int) -> bytes:
    return encode(_EPOCH_VALUE, CONSUMER_VALUE_VERSION, {"epoch": epoch})


def subscription_metadata_value(topics: Mapping[str, tuple[uuid.UUID, int]]) -> bytes:
    return encode(_PARTITION_METADATA_VALUE, CONSUMER_VALUE_VERSION, {"topics": [
        {"topic_id": topic_id, "topic_name": name, "num_partitions": count,
         "partition_metadata": ()}
        for name, (topic_id, count) in sorted(topics.items())]})


def member_subscription_value(member: ConsumerMemberRecord) -> bytes:
    return encode(_MEMBER_VALUE, CONSUMER_VALUE_VERSION, {
        "instance_id": member.instance_id, "rack_id": member.rack_id,
        "client_id": member.client_id, "client_host": member.client_host,
        "subscribed_topic_names": member.subscribed_topic_names,
        "subscribed_topic_regex": member.subscribed_topic_regex,
        "rebalance_timeout_ms": member.rebalance_timeout_ms,
        "server_assignor": member.server_assignor,
        "classic_member_metadata": None if member.classic is None else {
            "session_timeout_ms": member.classic.session_timeout_ms,
            "supported_protocols": [{"name": name, "metadata": metadata}
                                    for name, metadata in member.classic.protocols]}})


def target_epoch_value(epoch: int) -> bytes:
    return encode(_TARGET_EPOCH_VALUE, CONSUMER_VALUE_VERSION, {"assignment_epoch": epoch})


def target_member_value(assignment: TopicAssignment) -> bytes:
    return encode(_TARGET_MEMBER_VALUE, CONSUMER_VALUE_VERSION,
                  {"topic_partitions": _topic_partitions(assignment)})


def current_assignment_value(current: CurrentAssignmentRecord) -> bytes:
    return encode(_CURRENT_VALUE, CONSUMER_VALUE_VERSION, {
        "member_epoch": current.member_epoch,
        "previous_member_epoch": current.previous_member_epoch, "state": current.state,
        "assigned_partitions": _topic_partitions(current.assigned),
        "partitions_pending_revocation": _topic_partitions(current.pending_revocation)})


def _topic_partitions(assignment: TopicAssignment) -> list[dict[str, Any]]:
    return [{"topic_id": topic_id, "partitions": tuple(sorted(partitions))}
            for topic_id, partitions in sorted(assignment.items()) if partitions]


def _assignment(topic_partitions: Any) -> dict[uuid.UUID, frozenset[int]]:
    return {tp.topic_id: frozenset(tp.partitions) for tp in topic_partitions if tp.partitions}


_CONSUMER_VALUES = {
    ConsumerRecordType.GROUP_EPOCH: _EPOCH_VALUE,
    ConsumerRecordType.SUBSCRIPTION_METADATA: _PARTITION_METADATA_VALUE,
    ConsumerRecordType.MEMBER_SUBSCRIPTION: _MEMBER_VALUE,
    ConsumerRecordType.TARGET_ASSIGNMENT_EPOCH: _TARGET_EPOCH_VALUE,
    ConsumerRecordType.TARGET_ASSIGNMENT_MEMBER: _TARGET_MEMBER_VALUE,
    ConsumerRecordType.CURRENT_ASSIGNMENT: _CURRENT_VALUE,
}


def decode_consumer_value(record_type: ConsumerRecordType, data: bytes) -> Any:
    """A consumer group record's value as its schema's entity (fields by Kafka's names in
    snake case), for tools; ``ValueError`` if it does not decode."""
    return decode(_CONSUMER_VALUES[record_type], data)[1]


def apply_consumer_record(groups: dict[str, ConsumerGroupRecords], key: ConsumerGroupKey,
                          value: bytes | None) -> None:
    """Replay one consumer group record into ``groups`` (``ValueError`` if it does not
    decode; see the module docstring for tombstones)."""
    kind, member = key.record_type, key.member_id
    if value is None:
        group = groups.get(key.group)
        if kind is ConsumerRecordType.GROUP_EPOCH:
            groups.pop(key.group, None)
        elif group is not None:
            {ConsumerRecordType.SUBSCRIPTION_METADATA: lambda: group.subscription_metadata.clear(),
             ConsumerRecordType.MEMBER_SUBSCRIPTION: lambda: group.members.pop(member, None),
             ConsumerRecordType.TARGET_ASSIGNMENT_EPOCH: lambda: None,
             ConsumerRecordType.TARGET_ASSIGNMENT_MEMBER: lambda: group.targets.pop(member, None),
             ConsumerRecordType.CURRENT_ASSIGNMENT: lambda: group.current.pop(member, None),
             }[kind]()
        return
    group = groups.setdefault(key.group, ConsumerGroupRecords())
    if kind is ConsumerRecordType.GROUP_EPOCH:
        group.epoch = decode(_EPOCH_VALUE, value)[1].epoch
    elif kind is ConsumerRecordType.SUBSCRIPTION_METADATA:
        topics = decode(_PARTITION_METADATA_VALUE, value)[1].topics
        group.subscription_metadata = {t.topic_name: (t.topic_id, t.num_partitions)
                                       for t in topics}
    elif kind is ConsumerRecordType.MEMBER_SUBSCRIPTION:
        m = decode(_MEMBER_VALUE, value)[1]
        group.members[member] = ConsumerMemberRecord(
            m.instance_id, m.rack_id, m.client_id, m.client_host,
            tuple(m.subscribed_topic_names), m.subscribed_topic_regex, m.rebalance_timeout_ms,
            m.server_assignor, None if m.classic_member_metadata is None else
            ClassicMemberMetadata(m.classic_member_metadata.session_timeout_ms, tuple(
                (p.name, p.metadata) for p in m.classic_member_metadata.supported_protocols)))
    elif kind is ConsumerRecordType.TARGET_ASSIGNMENT_EPOCH:
        group.assignment_epoch = decode(_TARGET_EPOCH_VALUE, value)[1].assignment_epoch
    elif kind is ConsumerRecordType.TARGET_ASSIGNMENT_MEMBER:
        group.targets[member] = _assignment(
            decode(_TARGET_MEMBER_VALUE, value)[1].topic_partitions)
    else:
        c = decode(_CURRENT_VALUE, value)[1]
        group.current[member] = CurrentAssignmentRecord(
            c.member_epoch, c.previous_member_epoch, c.state,
            _assignment(c.assigned_partitions), _assignment(c.partitions_pending_revocation))
