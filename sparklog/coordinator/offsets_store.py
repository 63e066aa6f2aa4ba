"""``__consumer_offsets``: committed offsets and group metadata as records of a compacted topic.

Record formats (Kafka's, non-flexible; every key and value starts with an int16 version):
- offset commit key v1 (v0 reads the same): group ``string``, topic ``string``, partition
  ``int32``; value v3: offset ``int64``, leader epoch ``int32``, metadata ``string``, commit
  timestamp ``int64`` (values v0-v2, which Kafka wrote before, are read too: v0/v2 have no
  leader epoch, v1 adds an expire timestamp that we ignore);
- group metadata key v2: group ``string``; value v3: protocol type ``string``, generation
  ``int32``, protocol ``nullable string``, leader ``nullable string``, current state timestamp
  ``int64``, members ``[member id, group instance id (nullable), client id, client host,
  rebalance timeout int32, session timeout int32, subscription bytes, assignment bytes]``
  (values v0-v2 are read too: v0 lacks the rebalance timeout, v0-v1 the state timestamp,
  v0-v2 the instance id);
- a null value (tombstone) deletes its key.

Invariants:
- A group's records all live in partition ``abs(hashCode(group)) % partitions`` (Java's
  ``String.hashCode`` and Kafka's ``Utils.abs``), so one append carries everything a request
  changes, atomically, in one batch.
- Records are appended through ``PartitionLog.append`` like produced data (same validation,
  durability and cleaning); a caller changes its in-memory state only after the append
  returned, so nothing is acknowledged that is not in the log.
- ``replay`` streams each partition batch by batch (``offsets.load.buffer.size`` at a time)
  and keeps only the resulting state: the latest value per key, tombstoned keys dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from sparklog.coordinator.binary import Reader, Writer
from sparklog.errors import CorruptRecordError, ErrorCode, KafkaError
from sparklog.record.batch import HEADER_SIZE, parse_header
from sparklog.record.records import build_batch, decode_records
from sparklog.storage.log import PartitionLog
from sparklog.storage.log_manager import LogManager

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
OFFSETS_TOPIC_SEGMENT_BYTES = 104857600  # Kafka's offsets.topic.segment.bytes
LOAD_BUFFER_BYTES = 5 * 1024 * 1024  # Kafka's offsets.load.buffer.size

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

TopicPartition = tuple[str, int]
Record = tuple[bytes, bytes | None]
"""A key and its value; a None value is a tombstone."""

# How a failed append is answered (Kafka's GroupMetadataManager mapping).
_APPEND_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


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
    return Writer().int16(OFFSET_KEY_VERSION).string(group).string(topic).int32(partition).value()


def group_key(group: str) -> bytes:
    return Writer().int16(GROUP_KEY_VERSION).string(group).value()


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    reader = Reader(data)
    version = reader.int16()
    if version in (0, 1):
        return OffsetKey(reader.string(), reader.string(), reader.int32())
    if version == GROUP_KEY_VERSION:
        return GroupKey(reader.string())
    raise ValueError(f"unknown __consumer_offsets key version {version}")


def offset_value(value: OffsetAndMetadata) -> bytes:
    return (Writer().int16(OFFSET_VALUE_VERSION).int64(value.offset).int32(value.leader_epoch)
            .string(value.metadata).int64(value.commit_timestamp).value())


def decode_offset_value(data: bytes) -> OffsetAndMetadata:
    reader = Reader(data)
    version = reader.int16()
    if not 0 <= version <= OFFSET_VALUE_VERSION:
        raise ValueError(f"unknown offset commit value version {version}")
    offset = reader.int64()
    epoch = reader.int32() if version >= 3 else -1
    return OffsetAndMetadata(offset, epoch, reader.string(), reader.int64())


def group_value(value: GroupRecord) -> bytes:
    out = (Writer().int16(GROUP_VALUE_VERSION).string(value.protocol_type)
           .int32(value.generation).string(value.protocol).string(value.leader)
           .int64(value.state_timestamp).int32(len(value.members)))
    for m in value.members:
        (out.string(m.member_id).string(m.group_instance_id).string(m.client_id)
         .string(m.client_host).int32(m.rebalance_timeout_ms).int32(m.session_timeout_ms)
         .bytes(m.subscription).bytes(m.assignment))
    return out.value()


def decode_group_value(data: bytes) -> GroupRecord:
    reader = Reader(data)
    version = reader.int16()
    if not 0 <= version <= GROUP_VALUE_VERSION:
        raise ValueError(f"unknown group metadata value version {version}")
    protocol_type = reader.string()
    generation = reader.int32()
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    state_timestamp = reader.int64() if version >= 2 else -1
    members = []
    for _ in range(reader.count()):
        member_id = reader.string()
        instance_id = reader.nullable_string() if version >= 3 else None
        client_id, client_host = reader.string(), reader.string()
        rebalance_timeout = reader.int32() if version >= 1 else None
        session_timeout = reader.int32()
        if rebalance_timeout is None:  # v0 had one timeout for both
            rebalance_timeout = session_timeout
        members.append(MemberRecord(member_id, instance_id, client_id, client_host,
                                    rebalance_timeout, session_timeout, reader.bytes(),
                                    reader.bytes()))
    return GroupRecord(protocol_type, generation, protocol, leader, state_timestamp,
                       tuple(members))


# -- the topic ----------------------------------------------------------------------------------


@dataclass
class LoadedState:
    """What replaying ``__consumer_offsets`` leaves: the latest value of every live key."""

    groups: dict[str, GroupRecord]
    offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]]


class OffsetsStore:
    def __init__(self, logs: LogManager, partitions: int, leader_epoch: int,
                 on_append: Callable[[TopicPartition], None]) -> None:
        self.logs = logs
        self.configured_partitions = partitions
        self.leader_epoch = leader_epoch
        self.on_append = on_append

    @property
    def partitions(self) -> int:
        """The topic's real partition count (it wins over the setting once the topic exists)."""
        return self.logs.get_topic(OFFSETS_TOPIC).partitions

    def ensure_topic(self) -> None:
        if OFFSETS_TOPIC not in self.logs.topics:
            self.logs.create_topic(
                OFFSETS_TOPIC, self.configured_partitions,
                {"cleanup.policy": "compact", "segment.bytes": OFFSETS_TOPIC_SEGMENT_BYTES},
                internal=True)

    def partition_for(self, group: str) -> int:
        return partition_for(group, self.partitions)

    def append(self, group: str, records: list[Record], now_ms: int) -> None:
        """Append ``records`` of ``group`` as one batch; raise KafkaError with the code the
        request should be answered with when the log refuses it."""
        batch = build_batch([(key, value, (), now_ms) for key, value in records])
        try:
            partition = self.partition_for(group)
            self.logs.get_log(OFFSETS_TOPIC, partition).append(
                batch, now_ms=now_ms, leader_epoch=self.leader_epoch)
        except (KafkaError, OSError) as exc:
            code = (_APPEND_ERRORS.get(exc.code, ErrorCode.UNKNOWN_SERVER_ERROR)
                    if isinstance(exc, KafkaError) else ErrorCode.NOT_COORDINATOR)
            log.error("cannot append to %s for group %s: %s", OFFSETS_TOPIC, group, exc)
            raise KafkaError(str(exc), code) from exc
        self.on_append((OFFSETS_TOPIC, partition))

    def replay(self) -> LoadedState:
        state = LoadedState({}, {})
        count = 0
        for partition in range(self.partitions):
            for key, value in _records(self.logs.get_log(OFFSETS_TOPIC, partition)):
                count += 1
                _apply(state, key, value)
        log.info("replayed %d records of %s: %d groups with metadata, %d with offsets", count,
                 OFFSETS_TOPIC, len(state.groups), len(state.offsets))
        return state


def _records(partition_log: PartitionLog) -> Iterator[Record]:
    """Every (key, value) of the partition, one read buffer at a time."""
    offset = partition_log.log_start_offset
    while offset < partition_log.log_end_offset:
        found = partition_log.read(offset, LOAD_BUFFER_BYTES)
        if found is None:
            return
        data = found.read()
        position = 0
        while position + HEADER_SIZE <= len(data):
            header = parse_header(data, position)
            if position + header.size > len(data):
                break  # cut short by the buffer: read again from this batch
            if not header.is_control:
                for record in decode_records(data, header):
                    if record.key is not None:
                        yield record.key, record.value
            offset = header.next_offset
            position += header.size
        if position == 0:
            raise CorruptRecordError(f"no whole batch at offset {offset} of {partition_log}")


def _apply(state: LoadedState, key_bytes: bytes, value: bytes | None) -> None:
    try:
        key = decode_key(key_bytes)
        if isinstance(key, OffsetKey):
            offsets = state.offsets.setdefault(key.group, {})
            tp = (key.topic, key.partition)
            if value is None:
                offsets.pop(tp, None)
                if not offsets:
                    del state.offsets[key.group]
            else:
                offsets[tp] = decode_offset_value(value)
        elif value is None:
            state.groups.pop(key.group, None)
        else:
            state.groups[key.group] = decode_group_value(value)
    except ValueError as exc:
        log.warning("skipping an undecodable %s record: %s", OFFSETS_TOPIC, exc)
