"""Driver side: which partitions a query reads, and where its ranges start and end.

Invariants:
- Everything is asked of the cluster through ``KafkaClient`` (Metadata, ListOffsets), so
  it works against any Kafka broker; the client is opened lazily and ``close`` ends it.
  The object holds no other state, so it can be (re)built in a cold process at any time.
- ``resolve`` turns an ``OffsetSpec`` into an offset for exactly the partitions asked for:
  -2/earliest is the log start offset, -1/latest the log end offset (high watermark), a
  timestamp the first offset whose record timestamp is at or after it.
- Specific offsets and per-partition timestamps must name exactly the partitions being
  read (as Spark requires), else ``OptionError`` lists both sets.
- A timestamp no record reaches resolves to latest when allowed, else ``OptionError``
  naming the partition, the timestamp and the option that allows it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sparklog.client.errors import RetriableError
from sparklog.client.kafka import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, KafkaClient
from sparklog.client.settings import Address
from sparklog.datasource.options import OptionError
from sparklog.datasource.read.offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartition
from sparklog.datasource.read.read_options import (
    EarliestOffsets,
    LatestOffsets,
    OffsetSpec,
    ReadOptions,
    SpecificOffsets,
    TimestampOffsets,
)


class OffsetReader:
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._client: KafkaClient | None = None

    @property
    def client(self) -> KafkaClient:
        if self._client is None:
            self._client = KafkaClient(self.options.client, self.options.driver_retry)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> OffsetReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def partitions(self) -> list[TopicPartition]:
        """The partitions the subscription reads now (fresh Metadata), sorted."""
        subscription = self.options.subscription
        return subscription.partitions(self.client.metadata(subscription.metadata_topics()))

    def leaders(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, Address]:
        """Leader address of each partition that has one (a routing hint for tasks), as the
        client last learnt it: ``partitions``' Metadata of the same micro-batch, or a
        Metadata request for a partition it does not know."""
        found = {}
        for tp in tps:
            try:
                found[tp] = self.client.leader_address(tp)
            except RetriableError:  # no leader now: the task finds one itself
                continue
        return found

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        return self.client.offsets_at(tps, EARLIEST_TIMESTAMP)

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        return self.client.offsets_at(tps, LATEST_TIMESTAMP)

    def resolve(self, spec: OffsetSpec, tps: Sequence[TopicPartition]) -> PartitionOffsets:
        """Offsets of ``tps`` for ``spec``."""
        if isinstance(spec, EarliestOffsets):
            return self.earliest(tps)
        if isinstance(spec, LatestOffsets):
            return self.latest(tps)
        if isinstance(spec, SpecificOffsets):
            _check_same_partitions(spec.option, spec.offsets, tps)
            offsets = dict(spec.offsets)
            special = {tp: offset for tp, offset in offsets.items() if offset in (EARLIEST, LATEST)}
            if special:
                offsets.update(self.client.list_offsets(special))
            return offsets
        return self._by_timestamp(spec, tps)

    def _by_timestamp(self, spec: TimestampOffsets,
                      tps: Sequence[TopicPartition]) -> PartitionOffsets:
        if spec.per_partition is not None:
            _check_same_partitions(spec.option, spec.per_partition, tps)
            wanted = dict(spec.per_partition)
        else:
            assert spec.timestamp is not None
            wanted = dict.fromkeys(tps, spec.timestamp)
        listed = self.client.list_offsets(wanted)
        offsets = {tp: offset for tp, offset in listed.items() if offset >= 0}
        missing = sorted(tp for tp in wanted if tp not in offsets)
        if missing and not spec.latest_if_missing:
            tp = missing[0]
            raise OptionError(
                f"option {spec.option}: no record of {tp} has a timestamp at or after "
                f"{wanted[tp]}; set startingOffsetsByTimestampStrategy=latest to start such "
                "partitions at latest instead")
        if missing:
            offsets.update(self.latest(missing))
        return offsets


def _check_same_partitions(option: str, given: PartitionOffsets,
                           tps: Sequence[TopicPartition]) -> None:
    if set(given) != set(tps):
        raise OptionError(
            f"option {option} must give every partition that is read, and only those; given: "
            f"{_names(given)}; read: {_names(tps)}")


def _names(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(str(tp) for tp in sorted(tps)) or "none"
