"""Committing a streaming query's progress to a Kafka consumer group, from the driver.

Spark calls neither a reader's ``stop()`` nor the last batch's ``commit()``, so the commits
live in a ``StreamingQueryListener`` in the driver's Python process, which does see every
batch (``onQueryProgress``: each source's ``endOffset``) and the end (``onQueryTerminated``).

Invariants:
- The source's options are read from the query's analyzed plan and parsed by the source's
  own ``parse_read_options``: the group (``ReadOptions.group_id``: ``groupId`` or
  ``kafka.group.id``), the subscription and the client settings (bootstrap servers, client
  id) are exactly what the reader uses. Only sources that name a group are touched.
- A source's offsets are matched to its group by the source's own rule,
  ``Subscription.reads``: the partitions in ``endOffset`` that it subscribes to
  (``subscribe``, ``assign`` or ``subscribePattern``); a pattern never matches an internal
  topic (``__consumer_offsets``), which is learned from Metadata as the reader learns it
  (once per topic name, and only for a pattern).
- Each completed batch's end offsets (Spark's "next offset to read", Kafka's commit
  convention) are committed asynchronously with compare-and-set, so a late retry never
  overwrites a newer batch's offsets; when the query stops, the last batch's offsets are
  committed synchronously. The checkpoint stays the source of truth for the stream: the
  group only mirrors it, so lag tools (``sparklog groups describe``) show the stream's lag.
- A failure here (Metadata unreachable, options that no longer parse) is logged and skips
  a commit; it never fails the query.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from sparklog.client.errors import KafkaClientError
from sparklog.client.kafka import KafkaClient
from sparklog.datasource.options import OptionError
from sparklog.datasource.read.offsets import PartitionOffsets, from_json
from sparklog.datasource.read.read_options import ReadOptions, parse_read_options
from sparklog.offsets.committer import OffsetCommitter

log = logging.getLogger(__name__)

SOURCE_NAME = "sparklog"

Commits = dict[tuple[str, int], int]


@dataclass
class GroupTarget:
    """One sparklog source of a query that commits to a consumer group."""

    options: ReadOptions
    committer: OffsetCommitter | None = None
    consumer: Consumer | None = None
    last: Commits = field(default_factory=dict)
    internal: dict[str, bool] = field(default_factory=dict)
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
        unknown = sorted(topics - self.internal.keys())
        if unknown:
            with KafkaClient(self.options.client, self.options.driver_retry) as client:
                cluster = client.metadata(unknown)
            self.internal.update({topic: topic in cluster.internal for topic in unknown})
        return frozenset(topic for topic in topics if self.internal[topic])

    def commit_async(self, offsets: Commits) -> None:
        if not offsets:
            return
        if self.committer is None:
            self.consumer = Consumer(self._consumer_config())
            self.committer = OffsetCommitter(self.consumer)
        self.last.update(offsets)
        self.committer.commit_async(offsets)

    def _consumer_config(self) -> dict[str, Any]:
        """The committing consumer's settings: the source's servers and client id (its other
        ``kafka.*`` options are fetch settings, some with Java-only names)."""
        client = self.options.client
        return {"bootstrap.servers": client.servers, "client.id": client.client_id,
                "group.id": self.group_id, "enable.auto.commit": False}

    def close(self) -> None:
        """The final synchronous commit of the last batch's offsets, then release."""
        if self.committer is None or self.consumer is None:
            return
        try:
            self.committer.commit_sync(self.last)
            log.info("committed final offsets of group %s: %s", self.group_id, self.last)
        finally:
            self.committer.close()
            self.consumer.close()


def sparklog_sources(spark: SparkSession, query_id: str) -> list[dict[str, str]] | None:
    """The options of each sparklog source of an active query, from its analyzed plan; None
    when the query is no longer active."""
    query = spark.streams.get(query_id)
    if query is None:
        return None
    plan = query._jsq.streamingQuery().analyzedPlan()
    found = []
    leaves = plan.collectLeaves().iterator()
    while leaves.hasNext():
        leaf = leaves.next()
        if leaf.getClass().getSimpleName() != "StreamingRelationV2":
            continue
        if str(leaf.sourceName()).lower() == SOURCE_NAME:
            found.append(dict(leaf.extraOptions().asCaseSensitiveMap()))
    return found


def group_targets(sources: list[dict[str, str]]) -> list[GroupTarget]:
    """A target for each source whose options name a consumer group."""
    targets = []
    for raw in sources:
        try:
            options = parse_read_options(raw, streaming=True)
        except OptionError as exc:  # the query started with them, so this is unexpected
            log.warning("sparklog source options do not parse (%s): its progress is not "
                        "committed to a consumer group", exc)
            continue
        if options.group_id is not None:
            targets.append(GroupTarget(options))
    return targets


class GroupCommitListener(StreamingQueryListener):
    """Mirrors every sparklog stream's progress into its consumer group (see module doc)."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._targets: dict[str, list[GroupTarget]] = {}

    def _targets_of(self, query_id: str) -> list[GroupTarget]:
        """The query's group targets, read from its plan while it is active. Events arrive
        asynchronously, so a query may be gone by the time one is handled: a miss is not
        cached, and ``onQueryStarted`` resolves early so that later events find it."""
        if query_id not in self._targets:
            sources = sparklog_sources(self._spark, query_id)
            if sources is None:
                log.warning("query %s ended before its sparklog options could be read: its "
                            "progress is not committed to a consumer group", query_id)
                return []
            self._targets[query_id] = group_targets(sources)
        return self._targets[query_id]

    def onQueryStarted(self, event: Any) -> None:
        self._targets_of(str(event.id))

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        targets = self._targets_of(str(progress.id))
        if not targets:
            return
        for source in progress.sources:
            try:
                end = from_json(json.loads(source.endOffset or "null"))
            except ValueError:  # not a sparklog (or Kafka) source's offsets
                continue
            for target in targets:
                try:
                    target.commit_async(target.commits(end))
                except KafkaClientError as exc:
                    log.warning("offsets of batch %s not committed to group %s: %s",
                                progress.batchId, target.group_id, exc)

    def onQueryTerminated(self, event: Any) -> None:
        for target in self._targets.pop(str(event.id), []):
            try:
                target.close()
            except Exception:
                log.exception("final offset commit of group %s failed", target.group_id)


_installed: dict[int, GroupCommitListener] = {}


def install(spark: SparkSession) -> GroupCommitListener:
    """Add the listener to ``spark`` once (``sparklog.datasource.register`` calls this)."""
    key = id(spark)
    if key not in _installed:
        _installed[key] = GroupCommitListener(spark)
        spark.streams.addListener(_installed[key])
    return _installed[key]
