"""``spark.readStream.format("sparklog")``: micro-batches over Kafka offsets.

Offsets are ``{"topic": {"partition": next offset}}`` (``offsets.to_json``): what Spark
checkpoints and hands back to ``partitions(start, end)``.

Invariants:
- The driver-side methods run in one long-lived Python process per query run; only
  ``read`` runs on executors, on a pickled copy made before any of them: the reader pickles
  without its Kafka connection and every task gets what it needs in its input partition.
  The Kafka client (driver) and the decoder (executors) are imported where they are first
  used, so the planner process that only builds and pickles the reader imports neither.
  A task first settles its worker's heap (``worker_heap.settle``): PySpark collects a
  reused worker whole after each task.
- ``partitions(start, end)`` needs nothing but the two offsets (a restarted query replays
  its last batch with them before anything else): partitions in ``end`` but not ``start``
  are new and read from their earliest offset.
- ``latestOffset(start, limit)`` discovers partitions (new ones, and new topics matching
  subscribePattern, start at earliest), and caps the batch: ``ReadAllAvailable`` takes
  everything; otherwise ``maxOffsetsPerTrigger`` (shared in proportion to lag) and
  ``minOffsetsPerTrigger`` (wait for that many new offsets, at most ``maxTriggerDelay``
  since the last batch) apply. It never returns an offset past the AvailableNow target, and
  returns ``start`` itself when a batch should not run yet.
- Partitions that disappeared and partitions whose latest offset fell below the start are
  data loss (``failOnDataLoss``): fail, or log, drop or restart them at latest.
- Typed columns' schemas are resolved once per query run, at the first ``partitions``
  (``typed_columns.resolve``), and shipped in every task, which decodes with them.
- Offsets live in Spark's checkpoint. With ``groupId`` (or ``kafka.group.id``) the reader
  mirrors them into that consumer group (``sparklog.datasource.group_offsets``), from the
  driver-side worker, with no other call needed: ``commit(end)`` commits ``end``
  asynchronously, and ``latestOffset(start, ...)`` commits ``start`` (the end of the last
  completed batch, or the initial offsets): asynchronously when a batch follows,
  synchronously when none does (the stream is idle, or an AvailableNow run is done),
  because Spark never delivers the last batch's ``commit``. Commits are compare-and-set
  and never fail the query (a failure is logged). ``stop()`` is never called by Spark, so
  the driver's listener (``sparklog.datasource.register``) adds a final synchronous commit
  when the query stops.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from sparklog.datasource.read.data_loss import report_data_loss
from sparklog.datasource.read.offsets import PartitionOffsets, from_json, to_json
from sparklog.datasource.read.planning import KafkaInputPartition, plan, rate_limit
from sparklog.datasource.read.read_options import TaskSettings, parse_read_options
from sparklog.datasource.read.typed_options import Decoding
from sparklog.datasource.worker_heap import settle

if TYPE_CHECKING:
    from sparklog.datasource.group_offsets import GroupTarget
    from sparklog.datasource.read.offset_reader import OffsetReader


class FailedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream reader that could not be built: every call raises why (``stop`` does
    nothing), so Spark reports the error itself rather than its own about the missing
    reader."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def _fail(self, *args: object) -> Any:
        raise self.error

    initialOffset = latestOffset = partitions = commit = read = _fail
    prepareForTriggerAvailableNow = _fail

    def stop(self) -> None:
        pass


class SparklogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = parse_read_options(options, streaming=True)
        self._offsets: OffsetReader | None = None
        self._target: PartitionOffsets | None = None  # the AvailableNow end
        self._latest: PartitionOffsets | None = None  # for reportLatestOffset
        self._last_batch_time = 0.0  # when latestOffset last admitted a batch (time.time())
        self._group: GroupTarget | None = None  # the groupId's committer (driver worker)
        self._decoding: Decoding | None = None  # typed columns' schemas, once per query run
        self._loaded = schema  # the DataFrame's schema, which the typed columns must give

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_offsets"] = None
        state["_group"] = None
        return state

    @property
    def offsets(self) -> OffsetReader:
        if self._offsets is None:
            from sparklog.datasource.read.offset_reader import OffsetReader

            self._offsets = OffsetReader(self.options)
        return self._offsets

    # -- driver -----------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        return to_json(self.offsets.resolve(self.options.starting, self.offsets.partitions()))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.offsets.latest(self.offsets.partitions())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        latest = self._target
        if latest is None:
            latest = self.offsets.latest(self.offsets.partitions())
        self._latest = latest
        base = self._base(from_json(start), latest)
        end = self._admit(base, latest, limit)
        following = start if end is None else to_json(end)
        self._commit_group(start, sync=following == start)
        return following

    def _base(self, start: PartitionOffsets, latest: PartitionOffsets) -> PartitionOffsets:
        """Where each partition of ``latest`` continues from, after data loss checks."""
        fail = self.options.fail_on_data_loss
        gone = sorted(start.keys() - latest.keys())
        if gone:
            report_data_loss(fail, "partitions " + ", ".join(map(str, gone)) + " no longer "
                             "exist (deleted topic?); offsets not read from them are lost")
        base = {tp: start[tp] for tp in latest if tp in start}
        base.update(self.offsets.earliest(latest.keys() - start.keys()))
        for tp in sorted(base):
            if latest[tp] < base[tp]:
                report_data_loss(fail, f"{tp}: the latest offset {latest[tp]} is below the "
                                 f"offset {base[tp]} already read (topic recreated or log "
                                 "truncated)")
                base[tp] = latest[tp]
        return base

    def _admit(self, base: PartitionOffsets, latest: PartitionOffsets,
               limit: ReadLimit) -> PartitionOffsets | None:
        """The end of the next batch, or None when it should wait (minOffsetsPerTrigger)."""
        now = time.time()
        cap: int | None = None
        if isinstance(limit, ReadMaxRows):
            cap = limit.max_rows
        elif isinstance(limit, ReadMinRows):
            cap = self.options.max_offsets_per_trigger
            available = sum(latest[tp] - base[tp] for tp in latest)
            waited = now - self._last_batch_time
            if (self._target is None and available < limit.min_rows
                    and waited < self.options.max_trigger_delay_s):
                return None
        end = dict(latest) if cap is None else rate_limit(base, latest, cap)
        if end != base:
            self._last_batch_time = now
        return end

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else to_json(self._latest)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        first, until = from_json(start), from_json(end)
        first.update(self.offsets.earliest(until.keys() - first.keys()))
        ranged = [tp for tp in until if tp in first and until[tp] > first[tp]]
        leaders = self.offsets.leaders(ranged) if ranged else {}
        return list(plan(first, until, leaders, self._task_settings(),
                         self.options.min_partitions, self.options.max_records_per_partition))

    def _task_settings(self) -> TaskSettings:
        """The tasks' settings, with the typed columns' schemas resolved on first use: one
        reader schema for the whole run (the DataFrame's), whatever versions follow."""
        settings = self.options.task_settings
        if self.options.typed is None:
            return settings
        if self._decoding is None:
            from sparklog.datasource.read.typed_columns import resolve

            self._decoding = resolve(self.options.typed, self.options.subscription,
                                     self._loaded, self.options.include_headers)
        return replace(settings, decoding=self._decoding)

    def commit(self, end: dict) -> None:
        """Spark's checkpoint holds ``end``; mirror it into the group, if any."""
        self._commit_group(end, sync=False)

    def _commit_group(self, offsets: dict, sync: bool) -> None:
        if self.options.group_id is None:
            return
        if self._group is None:
            from sparklog.datasource.group_offsets import GroupTarget

            self._group = GroupTarget(self.options)
        self._group.commit(from_json(offsets), sync)

    def stop(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
        if self._group is not None:
            self._group.close()

    # -- executors --------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from sparklog.datasource.read.fetcher import read_partition

        assert isinstance(partition, KafkaInputPartition)
        settle()
        if partition.settings.decoding is not None:
            from sparklog.datasource.read.typed_columns import read_typed

            return read_typed(partition, read_partition)
        return read_partition(partition)
