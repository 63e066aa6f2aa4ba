"""``__consumer_offsets`` as the group coordinator uses it: where a group's records go, how a
change is written, and what replaying a partition leaves.

Invariants:
- A group's records all live in its partition (``group_records.partition_for``), so one
  append carries everything a request changes, atomically, in one batch.
- A failed append raises ``KafkaError`` carrying the code the request is answered with
  (Kafka's GroupMetadataManager mapping: a missing partition is COORDINATOR_NOT_AVAILABLE,
  a lost leadership or a storage error NOT_COORDINATOR, an oversized batch
  INVALID_COMMIT_OFFSET_SIZE). Offsets committed inside a transaction (TxnOffsetCommit) are
  appended as that producer's transactional batch.
- ``replay`` keeps only the resulting state: the latest value per key, tombstoned keys
  dropped; offsets of a transaction count once its COMMIT marker is replayed, are dropped
  at its ABORT, and are returned as pending while it is open; a record that does not decode
  is logged and skipped.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from sparklog.coordinator.group_records import (
    OFFSETS_TOPIC,
    ConsumerGroupKey,
    ConsumerGroupRecords,
    GroupRecord,
    OffsetAndMetadata,
    OffsetKey,
    TopicPartition,
    apply_consumer_record,
    decode_group_value,
    decode_key,
    decode_offset_value,
    partition_for,
)
from sparklog.coordinator.internal_topic import (
    NO_PRODUCER,
    InternalTopic,
    Record,
    append_records,
    replay,
)
from sparklog.errors import ErrorCode
from sparklog.record.control import ControlType

log = logging.getLogger(__name__)

_APPEND_ERRORS = {
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
}

GroupOffsets = dict[str, dict[TopicPartition, OffsetAndMetadata]]
"""group -> its committed offsets."""


@dataclass
class LoadedState:
    """What replaying partitions of ``__consumer_offsets`` leaves: the latest value of every
    live key (classic groups' metadata, KIP-848 consumer groups' records), and the offsets
    of transactions still open (producer id -> group -> ...)."""

    groups: dict[str, GroupRecord] = field(default_factory=dict)
    consumer_groups: dict[str, ConsumerGroupRecords] = field(default_factory=dict)
    offsets: GroupOffsets = field(default_factory=dict)
    pending: dict[int, GroupOffsets] = field(default_factory=dict)


class OffsetsStore:
    def __init__(self, topic: InternalTopic, load_buffer_bytes: int) -> None:
        self.topic = topic
        self.load_buffer_bytes = load_buffer_bytes

    @property
    def partitions(self) -> int:
        return self.topic.partitions

    def partition_for(self, group: str) -> int:
        return partition_for(group, self.topic.partitions)

    def append(self, group: str, records: Sequence[Record], now_ms: int,
               producer: tuple[int, int] | None = None) -> None:
        """Append ``records`` of ``group`` as one batch, in ``producer``'s (id, epoch)
        transaction if given (see the module invariants)."""
        append_records(self.topic, self.partition_for(group), records, now_ms,
                       producer=producer, errors=_APPEND_ERRORS)

    def replay(self, partition: int) -> LoadedState:
        state = LoadedState()
        count = 0
        for item in replay(self.topic, partition, self.load_buffer_bytes):
            count += 1
            if item.marker is not None:
                _complete(state, item.producer_id, item.marker == ControlType.COMMIT)
            elif item.key is not None:
                _apply(state, item.key, item.value, item.producer_id)
        log.debug("replayed %d records of %s-%d: %d groups with metadata, %d with offsets",
                 count, OFFSETS_TOPIC, partition, len(state.groups), len(state.offsets))
        return state


def merge_offsets(into: GroupOffsets, offsets: GroupOffsets) -> None:
    for group, committed in offsets.items():
        into.setdefault(group, {}).update(committed)


def _complete(state: LoadedState, producer_id: int, commit: bool) -> None:
    done = state.pending.pop(producer_id, {})
    if commit:
        merge_offsets(state.offsets, done)


def _apply(state: LoadedState, key_bytes: bytes, value: bytes | None, producer_id: int) -> None:
    try:
        key = decode_key(key_bytes)
        if isinstance(key, OffsetKey):
            target = (state.offsets if producer_id == NO_PRODUCER
                      else state.pending.setdefault(producer_id, {}))
            offsets = target.setdefault(key.group, {})
            tp = (key.topic, key.partition)
            if value is None:
                offsets.pop(tp, None)
                if not offsets:
                    del target[key.group]
            else:
                offsets[tp] = decode_offset_value(value)
        elif isinstance(key, ConsumerGroupKey):
            apply_consumer_record(state.consumer_groups, key, value)
        elif value is None:
            state.groups.pop(key.group, None)
        else:
            state.groups[key.group] = decode_group_value(value)
    except ValueError as exc:
        log.warning("skipping an undecodable %s record: %s", OFFSETS_TOPIC, exc)
