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
- a null value (tombstone) deletes its key.

Invariants:
- A group's records all live in partition ``abs(hashCode(group)) % partitions`` (Java's
  ``String.hashCode`` and Kafka's ``Utils.abs``).
- Decoding raises ``ValueError`` and nothing else for bytes that are not such a record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparklog.protocol.data_records import DataSchema, Field, decode, encode

OFFSETS_TOPIC = "__consumer_offsets"

TopicPartition = tuple[str, int]

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


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    version = int.from_bytes(data[:2], "big", signed=True) if len(data) >= 2 else -1
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
