"""The broker's internal topics (``__consumer_offsets``, later ``__transaction_state``) as the
coordinators see them: an ``InternalTopic`` over this broker's logs.

Invariants:
- An internal topic is created, compacted and marked internal, the first time the broker
  starts (``offsets.topic.num.partitions``, ``offsets.topic.segment.bytes``); afterwards
  its real partition count wins over the setting, as in Kafka.
- Appends go through ``PartitionLog.append`` like produced data (same validation,
  durability and cleaning), stamped with the partition's current leader epoch
  (``leader_epoch``), and are then reported (``on_append``: the replica manager moves the
  partition's high watermark and wakes fetches waiting on it); nothing here bypasses the
  log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from sparklog.storage.log_manager import LogManager

TopicPartition = tuple[str, int]


class LogTopic:
    """One internal topic of a ``LogManager``."""

    def __init__(self, logs: LogManager, name: str, partitions: int,
                 configs: Mapping[str, Any], leader_epoch: Callable[[TopicPartition], int],
                 on_append: Callable[[TopicPartition], None]) -> None:
        self._logs = logs
        self._name = name
        self._leader_epoch = leader_epoch
        self._on_append = on_append
        if name not in logs.topics:
            logs.create_topic(name, partitions, {"cleanup.policy": "compact", **configs},
                              internal=True)

    @property
    def name(self) -> str:
        return self._name

    @property
    def partitions(self) -> int:
        return self._logs.get_topic(self._name).partitions

    def append(self, partition: int, batch: bytes, now_ms: int) -> None:
        self._logs.get_log(self._name, partition).append(
            batch, now_ms=now_ms, leader_epoch=self._leader_epoch((self._name, partition)))
        self._on_append((self._name, partition))

    def batches(self, partition: int, buffer_bytes: int) -> Iterator[bytes]:
        return self._logs.get_log(self._name, partition).batches(buffer_bytes)
