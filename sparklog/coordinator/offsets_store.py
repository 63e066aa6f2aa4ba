"""``__consumer_offsets`` as the group coordinator uses it: where a group's records go, how a
change is written, and what replaying a partition leaves.

Invariants:
- A group's records all live in its partition (``group_records.partition_for``), so one
  append carries everything a request changes, atomically, in one batch.
- A failed append raises ``KafkaError`` carrying the code the request is answered with
  (Kafka's GroupMetadataManager mapping: a missing partition is COORDINATOR_NOT_AVAILABLE,
  a lost leadership or a storage error NOT_COORDINATOR, an oversized batch
  INVALID_COMMIT_OFFSET_SIZE).
- ``replay`` keeps only the resulting state: the latest value per key, tombstoned keys
  dropped; a record that does not decode is logged and skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from sparklog.coordinator.group_records import (
    OFFSETS_TOPIC,
    GroupRecord,
    OffsetAndMetadata,
    OffsetKey,
    TopicPartition,
    decode_group_value,
    decode_key,
    decode_offset_value,
    partition_for,
)
from sparklog.coordinator.internal_topic import InternalTopic, Record, append_records, replay
from sparklog.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

_APPEND_ERRORS = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}


@dataclass
class LoadedState:
    """What replaying partitions of ``__consumer_offsets`` leaves: the latest value of every
    live key."""

    groups: dict[str, GroupRecord]
    offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]]


class OffsetsStore:
    def __init__(self, topic: InternalTopic, load_buffer_bytes: int) -> None:
        self.topic = topic
        self.load_buffer_bytes = load_buffer_bytes

    @property
    def partitions(self) -> int:
        return self.topic.partitions

    def partition_for(self, group: str) -> int:
        return partition_for(group, self.topic.partitions)

    def append(self, group: str, records: Sequence[Record], now_ms: int) -> None:
        """Append ``records`` of ``group`` as one batch (see the module invariants)."""
        try:
            append_records(self.topic, self.partition_for(group), records, now_ms)
        except (KafkaError, OSError) as exc:
            code = (_APPEND_ERRORS.get(exc.code, ErrorCode.UNKNOWN_SERVER_ERROR)
                    if isinstance(exc, KafkaError) else ErrorCode.NOT_COORDINATOR)
            log.error("cannot append to %s for group %s: %s", OFFSETS_TOPIC, group, exc)
            raise KafkaError(str(exc), code) from exc

    def replay(self, partition: int) -> LoadedState:
        state = LoadedState({}, {})
        count = 0
        for key, value in replay(self.topic, partition, self.load_buffer_bytes):
            count += 1
            _apply(state, key, value)
        log.info("replayed %d records of %s-%d: %d groups with metadata, %d with offsets",
                 count, OFFSETS_TOPIC, partition, len(state.groups), len(state.offsets))
        return state


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
