"""Committing a sparklog source's offsets to its consumer group (``groupId``).

Used where the offsets are known: the stream reader in Spark's driver-side Python worker
(each batch's end, see ``read.stream_reader``) and the driver's listener
(``group_commits``: the final synchronous commit when a query stops). Each user has its own
``GroupTarget``, with its own consumer and ``OffsetCommitter``.

Invariants:
- A source's offsets are matched to its group by the source's own rule,
  ``Subscription.reads``: the partitions of the offsets it subscribes to (``subscribe``,
  ``assign`` or ``subscribePattern``); a pattern never matches an internal topic
  (``__consumer_offsets``), which is learned from Metadata as the reader learns it (once per
  topic name, and only for a pattern).
- Offsets are Spark's "next offset to read", which is Kafka's commit convention.
- Async commits are compare-and-set (``OffsetCommitter``): a late retry never overwrites a
  newer commit of the same target. Offsets equal to the last ones handed over are not
  committed again (an idle stream asks for its latest offsets at every trigger).
- A failure (Metadata unreachable, a commit refused) is logged and skips the commit; it
  never fails the query.
- The committing consumer uses the source's servers and client id only (its other
  ``kafka.*`` options are fetch settings, some with Java-only names); it joins no group.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException

from sparklog.client.errors import KafkaClientError
from sparklog.client.kafka import KafkaClient
from sparklog.client.rdkafka_log import routed
from sparklog.datasource.read.offsets import PartitionOffsets
from sparklog.datasource.read.read_options import ReadOptions
from sparklog.offsets.committer import CommitFailedError, OffsetCommitter

log = logging.getLogger(__name__)

Commits = dict[tuple[str, int], int]


@dataclass
class GroupTarget:
    """One sparklog source that commits to a consumer group (``options.group_id``)."""

    options: ReadOptions
    _committer: OffsetCommitter | None = field(default=None, init=False)
    _consumer: Consumer | None = field(default=None, init=False)
    _issued: Commits = field(default_factory=dict, init=False)
    """The offsets last handed to the committer (async or sync)."""
    _synced: Commits = field(default_factory=dict, init=False)
    """The offsets last committed synchronously."""
    _internal: dict[str, bool] = field(default_factory=dict, init=False)
    """Whether each topic seen so far is internal (asked of Metadata for a pattern)."""

    @property
    def group_id(self) -> str:
        assert self.options.group_id is not None
        return self.options.group_id

    def commits(self, end: PartitionOffsets) -> Commits:
        """The offsets of ``end`` that this source reads, keyed as the committer takes them."""
        subscription = self.options.subscription
        internal = (self._internal_topics({tp.topic for tp in end})
                    if subscription.pattern is not None else frozenset())
        return {(tp.topic, tp.partition): offset for tp, offset in end.items()
                if subscription.reads(tp, internal)}

    def _internal_topics(self, topics: set[str]) -> frozenset[str]:
        unknown = sorted(topics - self._internal.keys())
        if unknown:
            with KafkaClient(self.options.client, self.options.driver_retry) as client:
                cluster = client.metadata(unknown)
            self._internal.update({topic: topic in cluster.internal for topic in unknown})
        return frozenset(topic for topic in topics if self._internal[topic])

    def commit(self, end: PartitionOffsets, sync: bool) -> bool:
        """Commit the offsets of ``end`` this source reads: queued compare-and-set
        (``sync=False``) or now, retried until committed or failed for good (``sync=True``).
        Offsets equal to the last ones issued (async) or committed (sync) are skipped. A
        failure is logged, never raised; returns whether nothing failed."""
        try:
            offsets = self.commits(end)
            if sync and offsets and offsets != self._synced:
                self._committer_of().commit_sync(offsets)
                self._issued = self._synced = offsets
            elif not sync and offsets and offsets != self._issued:
                self._committer_of().commit_async(offsets)
                self._issued = offsets
        except (KafkaClientError, KafkaException, CommitFailedError) as exc:
            log.warning("offsets %s not committed to group %s: %s", end, self.group_id, exc)
            return False
        return True

    def _committer_of(self) -> OffsetCommitter:
        if self._committer is None:
            self._consumer = Consumer(routed(self._consumer_config()))
            self._committer = OffsetCommitter(self._consumer)
        return self._committer

    def _consumer_config(self) -> dict[str, Any]:
        client = self.options.client
        return {"bootstrap.servers": client.servers, "client.id": client.client_id,
                "group.id": self.group_id, "enable.auto.commit": False,
                **client.security.librdkafka()}

    def close(self) -> None:
        """Finish the queued async commits, then release the consumer."""
        committer, consumer = self._committer, self._consumer
        self._committer = self._consumer = None
        if committer is not None:
            committer.close()
        if consumer is not None:
            consumer.close()
