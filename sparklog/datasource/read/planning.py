"""Splitting offset ranges into Spark tasks, and capping a micro-batch (maxOffsetsPerTrigger).

Invariants:
- ``plan`` returns one ``KafkaInputPartition`` (one Spark task) per non-empty
  topic-partition range, split further when a range holds more than
  ``maxRecordsPerPartition`` offsets, and when there are fewer tasks than
  ``minPartitions``: each range is then cut into ceil(share of all offsets x
  minPartitions) pieces, so there are at least minPartitions tasks (Spark rounds to
  nearest, giving about minPartitions) unless there are fewer offsets than that.
  The pieces of a range are contiguous, disjoint and cover it exactly; the output order is
  deterministic (topic, partition, start).
- A ``KafkaInputPartition`` carries everything its task needs (ranges, client settings,
  the leader's address as a routing hint): tasks run in executor processes that see no
  driver state.
- ``rate_limit`` never admits more than ``limit`` offsets in total and never moves a
  partition past its latest offset; the admitted offsets are shared in proportion to each
  partition's lag (largest remainders rounded up, ties broken by partition), as Spark's
  Kafka source does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise

from pyspark.sql.datasource import InputPartition

from sparklog.client.settings import Address
from sparklog.datasource.read.offsets import PartitionOffsets, TopicPartition
from sparklog.datasource.read.read_options import TaskSettings


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """Offsets [start, until) of one topic-partition: one Spark task."""

    topic: str
    partition: int
    start: int
    until: int
    leader: Address | None
    settings: TaskSettings

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def plan(start: Mapping[TopicPartition, int], until: Mapping[TopicPartition, int],
         leaders: Mapping[TopicPartition, Address], settings: TaskSettings,
         min_partitions: int | None = None,
         max_records_per_partition: int | None = None) -> list[KafkaInputPartition]:
    """Tasks reading [start[tp], until[tp]) for every partition in both maps."""
    ranges = [(tp, start[tp], until[tp]) for tp in sorted(start.keys() & until.keys())
              if until[tp] > start[tp]]
    parts = {tp: 1 for tp, _, _ in ranges}
    if max_records_per_partition is not None:
        parts = {tp: -(-(end - begin) // max_records_per_partition)
                 for tp, begin, end in ranges}
    total = sum(end - begin for _, begin, end in ranges)
    if min_partitions is not None and sum(parts.values()) < min_partitions and total:
        parts = {tp: max(parts[tp], -(-(end - begin) * min_partitions // total))
                 for tp, begin, end in ranges}
    tasks = []
    for tp, begin, end in ranges:
        n = parts[tp]
        bounds = [begin + (end - begin) * i // n for i in range(n + 1)]
        tasks.extend(
            KafkaInputPartition(tp.topic, tp.partition, low, high, leaders.get(tp), settings)
            for low, high in pairwise(bounds) if high > low)
    return tasks


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               limit: int) -> PartitionOffsets:
    """End offsets admitting at most ``limit`` offsets over all partitions of ``latest``.

    ``start`` must hold every partition of ``latest``, at or below its latest offset.
    """
    lags = {tp: max(0, latest[tp] - start[tp]) for tp in latest}
    total = sum(lags.values())
    if total <= limit:
        return dict(latest)
    shares = {tp: limit * lag // total for tp, lag in lags.items()}
    left = limit - sum(shares.values())
    by_remainder = sorted(lags, key=lambda tp: (-(limit * lags[tp] % total), tp))
    for tp in by_remainder[:left]:
        shares[tp] += 1
    return {tp: start[tp] + shares[tp] for tp in latest}
