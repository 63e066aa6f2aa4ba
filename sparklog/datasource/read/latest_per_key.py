"""``latestPerKey``: one task's topic-partition range reduced to the latest record of each key.

A compacted topic stands for a table: the latest record of each key, a tombstone (null
value) deleting its key. A key lives in one partition (the producer's partitioner puts it
there), so each task reduces its own partition's range and nothing is shuffled.

The task reads its range at least twice, with the plain reader (``fetcher.read_partition``):
1. the keys pass gathers (key, offset * 2 + 1 if a tombstone) for every keyed record and
   reduces the pairs with Arrow's hash aggregation to their maximum per key: each key's
   latest offset, and whether that record is a tombstone. Keys are kept exactly, as bytes
   (no digests, so no collisions).
2. the records pass keeps, from each Arrow chunk, the records whose offset is a key's latest
   and not a tombstone (``is_in`` over the kept offsets within the chunk's offsets). It
   starts at the first kept offset.

Memory is bounded by ``budget_bytes`` (``BUDGET_BYTES``, 64 MiB, by default), a bound on
the key state, not on the partition. The gathered pairs are reduced whenever they pass half
the budget; when the reduced state passes half the budget, the round gives up the upper half
of its key range (the keys from the median key on are dropped, and ignored from then on).
The next round covers the keys from there, and its keys pass rides along the previous
round's records pass: R rounds cost R + 1 reads of the range, R = 1 while the keys fit.

Invariants:
- The output is exactly the records of [start, until) that have the highest offset of their
  key within the range, minus tombstones and minus keyless records (not rows of a table): a
  key appears at most once; within a round, records come in offset order. That equals a
  plain read of the range with ``row_number() over (partition by key order by offset desc)
  = 1`` and a non-null value, provided the range did not change between the passes. The
  log cleaner can remove a kept record in between when its key got a newer record after
  ``until``; such keys are then missing, and a warning says how many.
- Isolation level, data loss (``failOnDataLoss``) and record selection are the plain
  reader's: each pass is a plain read.
- Memory: about ``budget_bytes`` of keys and ranks plus the aggregation's working space,
  one Arrow chunk, and 8 bytes per kept key of the round. Aggregation runs on the task's
  thread (``use_threads=False``): a Spark task has one core.
"""

from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from collections.abc import Generator, Iterator
from dataclasses import replace
from functools import reduce

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.datasource.read.fetcher import read_partition
from sparklog.datasource.read.planning import KafkaInputPartition

log = logging.getLogger(__name__)

BUDGET_BYTES = 64 << 20

_PAIRS = pa.schema([pa.field("key", pa.binary()), pa.field("rank", pa.int64())])


class KeyRound:
    """The latest offset of every key in [``low``, ``high``) of one range (one round).

    ``high`` is None (unbounded) until the keys outgrow the budget, then the round's
    exclusive upper key; ``low`` None is the smallest key.
    """

    def __init__(self, low: bytes | None, budget_bytes: int) -> None:
        self.low = low
        self.high: bytes | None = None
        self._half_budget = max(1, budget_bytes // 2)
        self._state = _PAIRS.empty_table()
        self._pending: list[pa.Table] = []
        self._pending_bytes = 0

    def add(self, chunk: pa.RecordBatch) -> None:
        """Gather the keyed records of ``chunk`` (a source schema batch) within the range."""
        keys = chunk.column("key")
        tombstone = pc.cast(pc.is_null(chunk.column("value")), pa.int64())
        rank = pc.add(pc.multiply(chunk.column("offset"), 2), tombstone)
        pairs = pa.Table.from_arrays([keys, rank], schema=_PAIRS)
        selected = self._selection(keys)
        if selected is not None:
            pairs = pairs.filter(selected)  # nulls (keyless records) are dropped too
        if pairs.num_rows:
            self._pending.append(pairs)
            self._pending_bytes += pairs.nbytes
            if self._pending_bytes > self._half_budget:
                self._reduce()

    def _selection(self, keys: pa.Array) -> pa.Array | None:
        """The records to gather (keyed, within the range); None for all of them."""
        conditions = []
        if self.low is not None:
            conditions.append(pc.greater_equal(keys, pa.scalar(self.low, pa.binary())))
        if self.high is not None:
            conditions.append(pc.less(keys, pa.scalar(self.high, pa.binary())))
        if not conditions and keys.null_count:
            conditions.append(pc.is_valid(keys))
        return reduce(pc.and_, conditions) if conditions else None

    def _reduce(self) -> None:
        """Reduce the state and the gathered pairs to one row per key; shrink the key range
        while the state is over half the budget."""
        pairs = pa.concat_tables([self._state, *self._pending])
        self._pending, self._pending_bytes = [], 0
        latest = pairs.group_by("key", use_threads=False).aggregate([("rank", "max")])
        state = pa.Table.from_arrays([latest["key"], latest["rank_max"]], schema=_PAIRS)
        while state.nbytes > self._half_budget and state.num_rows > 1:
            keys = state["key"]
            median = keys[pc.sort_indices(keys)[state.num_rows // 2].as_py()].as_py()
            state = state.filter(pc.less(keys, pa.scalar(median, pa.binary())))
            self.high = median
        self._state = state

    def kept_offsets(self) -> pa.Array:
        """The sorted offsets of the round's keys' latest records that are not tombstones."""
        self._reduce()
        rank = self._state["rank"].combine_chunks()
        self._state = _PAIRS.empty_table()
        live = pc.filter(rank, pc.equal(pc.bit_wise_and(rank, 1), 0))
        offsets = pc.shift_right(live, 1)
        return pc.take(offsets, pc.sort_indices(offsets))


def read_latest_per_key(task: KafkaInputPartition,
                        budget_bytes: int = BUDGET_BYTES) -> Iterator[pa.RecordBatch]:
    """The latest record of each key of the task's range, as Arrow batches (module doc)."""
    keys = KeyRound(None, budget_bytes)
    for chunk in read_partition(task):
        keys.add(chunk)
    rounds, missing = 1, 0
    while True:
        kept = keys.kept_offsets()
        following = None if keys.high is None else KeyRound(keys.high, budget_bytes)
        emitted = yield from _records_pass(task, kept, following)
        missing += len(kept) - emitted
        if following is None:
            break
        keys, rounds = following, rounds + 1
    if rounds > 1:
        log.info("latestPerKey: %s-%d [%d, %d) read in %d rounds of keys (more keys than "
                 "%d bytes hold)", task.topic, task.partition, task.start, task.until, rounds,
                 budget_bytes)
    if missing:
        log.warning("latestPerKey: %d latest records of %s-%d [%d, %d) were gone when read "
                    "(compacted meanwhile: their keys got newer records after offset %d); "
                    "those keys are missing", missing, task.topic, task.partition,
                    task.start, task.until, task.until)


def _records_pass(task: KafkaInputPartition, kept: pa.Array,
                  following: KeyRound | None) -> Generator[pa.RecordBatch, None, int]:
    """Yield the records of ``kept`` offsets, feeding every chunk to the next round's keys
    if there is one; return how many records were yielded."""
    if following is None:
        if not len(kept):
            return 0
        task = replace(task, start=kept[0].as_py())  # nothing before it is kept
    index = _int64_view(kept)
    emitted = 0
    for chunk in read_partition(task):
        if following is not None:
            following.add(chunk)
        offsets = chunk.column("offset")
        low = bisect_left(index, offsets[0].as_py())
        high = bisect_right(index, offsets[-1].as_py())
        if high > low:
            rows = chunk.filter(pc.is_in(offsets, value_set=kept.slice(low, high - low)))
            emitted += rows.num_rows
            yield rows
    return emitted


def _int64_view(values: pa.Array) -> memoryview:
    """The int64 values of ``values`` (no nulls) as a sequence ``bisect`` can search, no copy."""
    if not len(values):
        return memoryview(b"").cast("q")
    data = memoryview(values.buffers()[1]).cast("B").cast("q")
    return data[values.offset:values.offset + len(values)]
