"""The final synchronous commit of a ``groupId`` stream's progress, from the driver.

The stream reader commits each batch's end offsets itself (``read.stream_reader``, in
Spark's driver-side Python worker). What it cannot do is commit when the query stops: Spark
kills that worker without calling ``stop()``. This ``StreamingQueryListener``, installed in
the driver by ``sparklog.datasource.register``, sees every batch (``onQueryProgress``: each
source's ``endOffset``) and the end (``onQueryTerminated``), and commits the last batch's
end offsets synchronously when the query stops.

Invariants:
- The source's options are read from the query's analyzed plan and parsed by the source's
  own ``parse_read_options``: the group (``ReadOptions.group_id``: ``groupId`` or
  ``kafka.group.id``), the subscription and the client settings are exactly what the
  reader uses. Only sources that name a group are touched, through ``GroupTarget``, which
  commits only the partitions the source subscribes to.
- The listener commits nothing while the query runs (the reader does), so it adds one
  commit per query run: the offsets the reader committed last or newer ones, never older.
- A failure here (Metadata unreachable, options that no longer parse) is logged and skips
  the commit; it never fails the query. The checkpoint stays the source of truth.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

from sparklog.datasource.group_offsets import GroupTarget
from sparklog.datasource.options import OptionError
from sparklog.datasource.read.offsets import PartitionOffsets, from_json
from sparklog.datasource.read.read_options import parse_read_options

log = logging.getLogger(__name__)

SOURCE_NAME = "sparklog"


@dataclass
class QueryGroups:
    """The sparklog sources of a running query that commit to a group, and the end offsets
    of its last batch (every source's, merged; each target commits those it reads)."""

    targets: list[GroupTarget]
    end: PartitionOffsets = field(default_factory=dict)


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
    """Commits every ``groupId`` stream's last batch when it stops (see module doc)."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._queries: dict[str, QueryGroups] = {}

    def _groups_of(self, query_id: str) -> QueryGroups | None:
        """The query's group targets, read from its plan while it is active. Events arrive
        asynchronously, so a query may be gone by the time one is handled: a miss is not
        cached, and ``onQueryStarted`` resolves early so that later events find it."""
        if query_id not in self._queries:
            sources = sparklog_sources(self._spark, query_id)
            if sources is None:
                log.warning("query %s ended before its sparklog options could be read: its "
                            "last batch is not committed to a consumer group", query_id)
                return None
            self._queries[query_id] = QueryGroups(group_targets(sources))
        return self._queries[query_id]

    def onQueryStarted(self, event: Any) -> None:
        self._groups_of(str(event.id))

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        groups = self._groups_of(str(progress.id))
        if groups is None or not groups.targets:
            return
        end: PartitionOffsets = {}
        for source in progress.sources:
            try:
                end.update(from_json(json.loads(source.endOffset or "null")))
            except ValueError:  # not a sparklog (or Kafka) source's offsets
                continue
        if end:
            groups.end = end

    def onQueryTerminated(self, event: Any) -> None:
        groups = self._queries.pop(str(event.id), None)
        for target in groups.targets if groups is not None else ():
            try:
                if target.commit(groups.end, sync=True):
                    log.info("committed the final offsets of group %s", target.group_id)
            finally:
                target.close()


_installed: dict[int, GroupCommitListener] = {}


def install(spark: SparkSession) -> GroupCommitListener:
    """Add the listener to ``spark`` once (``sparklog.datasource.register`` calls this)."""
    key = id(spark)
    if key not in _installed:
        _installed[key] = GroupCommitListener(spark)
        spark.streams.addListener(_installed[key])
    return _installed[key]
