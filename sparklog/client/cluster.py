"""Topic partitions and what Metadata says about a cluster.

Invariants:
- A ``TopicPartition`` is a plain (topic, partition) tuple: hashable, ordered by topic then
  partition, picklable, printed as Kafka prints it (``events-0``).
- A ``Cluster`` is one Metadata answer, immutable: the brokers by node id, each existing
  topic's partitions with their leader's node id, and which of those topics are internal
  (``is_internal``, e.g. ``__consumer_offsets``). Topics that do not exist are absent.
- Importing this module imports nothing of the protocol (Spark's planner process imports it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from sparklog.client.settings import Address


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class Cluster:
    """What Metadata said: brokers, and each topic's partitions with their leader node."""

    brokers: Mapping[int, Address]
    topics: Mapping[str, Mapping[int, int]]
    internal: frozenset[str] = frozenset()

    def partitions(self, topics: Iterable[str]) -> list[TopicPartition]:
        return sorted(TopicPartition(t, p) for t in topics for p in self.topics.get(t, ()))
