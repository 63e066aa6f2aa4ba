"""Committing a streaming query's progress to a Kafka consumer group, from the driver.

Spark calls neither a reader's ``stop()`` nor the last batch's ``commit()``, so the commits
live in a ``StreamingQueryListener`` in the driver's Python process, which does see every
batch (``onQueryProgress``: each source's ``endOffset``) and the end (``onQueryTerminated``).

Invariants:
- Only queries with a ``sparklog`` source carrying ``groupId`` (or ``kafka.group.id``) are
  touched; the group, bootstrap servers and ``kafka.*`` client settings come from the
  source's own options, read from the query's analyzed plan.
- Each completed batch's end offsets (Spark's "next offset to read", Kafka's commit
  convention) are committed asynchronously with compare-and-set, so a late retry never
  overwrites a newer batch's offsets; when the query stops, the last batch's offsets are
  committed synchronously. The checkpoint stays the source of truth for the stream: the
  group only mirrors it, so lag tools (``sparklog groups describe``) show the stream's lag.
- A source's offsets are matched to its group by topic: the topics in ``endOffset`` that the
  source subscribes to (``subscribe``, ``assign`` or ``subscribePattern``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from sparklog.offsets.committer import OffsetCommitter

log = logging.getLogger(__name__)

SOURCE_NAME = "sparklog"
GROUP_OPTIONS = ("groupId", "kafka.group.id")


@dataclass
class GroupTarget:
    """One sparklog source of a query that commits to a consumer group."""

    group_id: str
    options: dict[str, str]
    committer: OffsetCommitter | None = None
    consumer: Consumer | None = None
    last: dict[tuple[str, int], int] = field(default_factory=dict)

    def wants(self, topic: str) -> bool:
        opts = {k.lower(): v for k, v in self.options.items()}
        if "subscribe" in opts:
            return topic in [t.strip() for t in opts["subscribe"].split(",")]
        if "assign" in opts:
            return topic in json.loads(opts["assign"])
        if "subscribepattern" in opts:
            return re.fullmatch(opts["subscribepattern"], topic) is not None
        return False

    def commit_async(self, offsets: dict[tuple[str, int], int]) -> None:
        if not offsets:
            return
        if self.committer is None:
            self.consumer = Consumer(_client_config(self.options, self.group_id))
            self.committer = OffsetCommitter(self.consumer)
        self.last.update(offsets)
        self.committer.commit_async(offsets)

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


def _client_config(options: Mapping[str, str], group_id: str) -> dict[str, Any]:
    """The committing consumer's settings: the source's servers and client id only (its
    other ``kafka.*`` options are fetch settings, some with Java-only names)."""
    lowered = {k.lower(): v for k, v in options.items()}
    config: dict[str, Any] = {
        "bootstrap.servers": lowered.get("kafka.bootstrap.servers")
        or lowered.get("bootstrap.servers", ""),
        "group.id": group_id, "enable.auto.commit": False,
    }
    if "kafka.client.id" in lowered:
        config["client.id"] = lowered["kafka.client.id"]
    return config


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


def _group_of(options: Mapping[str, str]) -> str | None:
    lowered = {k.lower(): v for k, v in options.items()}
    for name in GROUP_OPTIONS:
        if lowered.get(name.lower()):
            return lowered[name.lower()]
    return None


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
            self._targets[query_id] = [GroupTarget(group, options) for options in sources
                                       if (group := _group_of(options))]
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
                end = json.loads(source.endOffset or "null")
            except ValueError:
                continue
            if not isinstance(end, dict):
                continue
            for target in targets:
                offsets = {(topic, int(p)): int(o) for topic, parts in end.items()
                           if target.wants(topic) for p, o in parts.items()}
                target.commit_async(offsets)

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
