"""An in-memory ``__consumer_offsets`` for coordinator tests: the coordinator's narrow inputs
(its topic, a partition-count lookup) without a data directory or a broker.

``MemoryTopic`` keeps each partition's batches as appended (each validated whole, as a log
validates a produced batch) and replays them; it outlives coordinator instances, so a test
restarts a coordinator on the same records as a broker restart would. ``data_topics`` is the
partition count of each data topic the coordinator looks up (with a stable id from its name,
which makes it the consumer groups' ``TopicCatalog`` too).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager

from sparklog.coordinator.consumer_group_coordinator import ConsumerGroupConfig
from sparklog.coordinator.group_coordinator import GroupConfig, GroupCoordinator
from sparklog.coordinator.offsets_store import OffsetsStore
from sparklog.errors import UnknownTopicOrPartitionError
from sparklog.record.batch import validate_produced


class MemoryTopic:
    def __init__(self, partitions: int, name: str = "__consumer_offsets") -> None:
        self._name = name
        self._batches: list[list[bytes]] = [[] for _ in range(partitions)]
        self.data_topics: dict[str, int] = {}

    @property
    def name(self) -> str:
        return self._name

    @property
    def partitions(self) -> int:
        return len(self._batches)

    def append(self, partition: int, batch: bytes, now_ms: int) -> None:
        if not 0 <= partition < self.partitions:
            raise UnknownTopicOrPartitionError(f"{self._name}-{partition}")
        validate_produced(batch)
        self._batches[partition].append(batch)

    def batches(self, partition: int, buffer_bytes: int) -> Iterator[bytes]:
        return iter(list(self._batches[partition]))

    def partition_count(self, topic: str) -> int:
        return self.data_topics.get(topic, 0)

    def topic_id(self, topic: str) -> uuid.UUID | None:
        """A stable id per data topic (the coordinator's ``TopicCatalog``)."""
        return uuid.uuid5(uuid.NAMESPACE_URL, topic) if topic in self.data_topics else None

    def topic_names(self) -> Iterator[str]:
        return iter(list(self.data_topics))


@asynccontextmanager
async def group_coordinator(log: MemoryTopic, props: Mapping[str, str],
                            clock: Callable[[], float] = time.time
                            ) -> AsyncIterator[GroupCoordinator]:
    """A coordinator on ``log`` with the broker settings ``props``, leading every partition
    (a restart: a new one on the same log)."""
    settings = GroupConfig.from_props(props)
    coord = GroupCoordinator(settings, OffsetsStore(log, settings.load_buffer_bytes), log,
                             lambda: int(clock() * 1000), ConsumerGroupConfig.from_props(props))
    coord.start()
    for partition in range(coord.store.partitions):
        coord.load(partition)  # as the leader of every partition
    try:
        yield coord
    finally:
        coord.stop()


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 30))
