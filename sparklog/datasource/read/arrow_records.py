"""Raw Kafka record batches (as Fetch returns them) to Arrow record batches of the source schema.

Two decoders, one output: ``new_record_builder`` gives ``ColumnarRecordBuilder`` (the
compiled ``sparklog.record._columns``: records decoded in one pass straight into Arrow
buffers, no Python object per record) when the extension was built, else
``AiokafkaRecordBuilder`` (aiokafka's Cython record batch reader: one Python object per
record, gathered per Kafka batch into lists with C-level ``map``/``extend`` and turned into
Arrow arrays per output chunk). Which one serves is logged once per process at INFO. CRCs
are not re-checked (the broker validated each batch on append); every codec is read.

Invariants:
- ``add`` keeps exactly the records whose offset lies in [``start``, ``until``): records
  below ``start`` (a fetch returns the whole batch holding the fetch offset) and from
  ``until`` on are dropped. Control batches (transaction markers) are skipped; offsets
  missing inside a batch (compaction) are simply absent.
- A cut-short last batch (Fetch may truncate it) is ignored: ``next_position`` reports the
  offset after the last complete batch, where the next fetch must start.
- Every batch ``build`` returns has exactly ``arrow_source_schema(include_headers)``: the
  schema pyspark requires of a Python data source's Arrow output. Timestamps are
  microseconds, UTC; a tombstone has a null value. Both decoders give equal batches.
- Records that do not decode raise ``CorruptRecordError`` from either decoder (aiokafka's
  and cramjam's own exceptions are turned into it); a compressed batch's claimed sizes are
  checked before aiokafka, which trusts them, sees it (``compression.check_claims``).
- Output chunks are bounded by ``MAX_ROWS`` rows and about ``max_bytes`` of keys and values
  (``COLUMNAR_MAX_BYTES`` for the compiled decoder, ``MAX_BYTES`` for aiokafka's): the row
  limit of a chunk is ``max_bytes`` over the bytes per row measured so far (the
  first Kafka batch is measured exactly, then each built chunk), checked after each Kafka
  batch (at most a few MiB). No per-record size bookkeeping is done.
"""

from __future__ import annotations

import gc
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from operator import attrgetter
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.datasource.schema import arrow_source_schema
from sparklog.errors import CorruptRecordError
from sparklog.record.batch import (
    HEADER_SIZE,
    MAGIC_V2,
    BatchHeader,
    batch_size,
    complete_batches,
)
from sparklog.record.compression import check_claims
from sparklog.record.records import records_section

try:
    from sparklog.record._columns import RecordColumns
except ImportError:  # not built: aiokafka's decoder serves
    RecordColumns = None

T = TypeVar("T")
log = logging.getLogger(__name__)

MAX_ROWS = 1 << 16
MAX_BYTES = 2 << 20  # aiokafka's: small enough that a chunk's values are still in cache when built
COLUMNAR_MAX_BYTES = 8 << 20  # buffers wrapped, not gathered: fewer chunks, less per-chunk cost

_KEY = attrgetter("key")
_VALUE = attrgetter("value")
_OFFSET = attrgetter("offset")
_TIMESTAMP = attrgetter("timestamp")
_HEADERS = attrgetter("headers")

_TIMESTAMP_MS = pa.timestamp("ms", tz="UTC")
_TIMESTAMP_US = pa.timestamp("us", tz="UTC")


class UnsupportedRecordFormatError(ValueError):
    """A batch uses message format v0/v1 (magic < 2), which the source does not read."""


def next_position(records: bytes, position: int) -> int:
    """The offset after the last complete batch in ``records`` (``position`` if none)."""
    for header in complete_batches(records):
        if header.magic < MAGIC_V2:
            raise _legacy_format(header.base_offset)
        position = max(position, header.next_offset)
    return position


def first_batch_size(records: bytes) -> int | None:
    """Bytes the first batch needs (header included), if its length prefix is complete."""
    return batch_size(records)


def _legacy_format(offset: int) -> UnsupportedRecordFormatError:
    return UnsupportedRecordFormatError(
        f"the record batch at offset {offset} uses message format v0 or v1; the sparklog "
        "source reads format v2 (Kafka 0.11 and later) only")


def new_record_builder(topic: str, partition: int, include_headers: bool) -> RecordBuilder:
    """The compiled columnar builder when the extension was built, else aiokafka's."""
    global _announced
    columnar = RecordColumns is not None
    if not _announced:
        log.info("the sparklog source decodes record batches with %s", (
            "the compiled columnar decoder (sparklog.record._columns)" if columnar else
            "aiokafka's decoder: the compiled sparklog.record._columns was not built"))
        _announced = True
    if columnar:
        return ColumnarRecordBuilder(topic, partition, include_headers)
    return AiokafkaRecordBuilder(topic, partition, include_headers)


_announced = False


def data_batches(records: bytes, start: int, until: int) -> Iterator[BatchHeader]:
    """Headers of the complete data batches of ``records`` holding offsets in [start, until),
    in order: control batches are skipped, a cut-short last batch is ignored, a batch of
    format v0/v1 is refused. (Dropping the batches of aborted transactions, for
    read_committed, is one more test here: Kafka's consumers drop them batch by batch.)"""
    for header in complete_batches(records):
        if header.magic < MAGIC_V2:
            raise _legacy_format(header.base_offset)
        if header.base_offset >= until:
            return
        if not header.is_control and header.next_offset > start:
            yield header


class RecordBuilder(ABC):
    """Accumulates the records of one topic-partition and builds bounded Arrow chunks: the
    chunk bounds and schema both decoders share."""

    max_bytes = MAX_BYTES

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = arrow_source_schema(include_headers)
        self._header_type = self.schema.field("headers").type if include_headers else None
        self._row_limit: int | None = None  # None until the first batch was measured

    @property
    @abstractmethod
    def rows(self) -> int:
        """Records accumulated in the chunk being built."""

    @property
    def full(self) -> bool:
        return self._row_limit is not None and self.rows >= self._row_limit

    def _set_row_limit(self, rows: int, nbytes: int) -> None:
        self._row_limit = max(1, min(MAX_ROWS, self.max_bytes * rows // max(1, nbytes)))

    @abstractmethod
    def add(self, records: bytes, start: int, until: int) -> Iterator[pa.RecordBatch]:
        """Decode ``records``; yield a chunk each time one fills up (call ``build`` at end)."""

    @abstractmethod
    def build(self) -> pa.RecordBatch:
        """The accumulated records as one Arrow batch (possibly empty); starts a new chunk."""

    def _common_columns(self, n: int) -> list[pa.Array]:
        """The topic and partition columns of ``n`` rows."""
        return [pa.repeat(pa.scalar(self.topic, pa.string()), n),
                pa.repeat(pa.scalar(self.partition, pa.int32()), n)]


class ColumnarRecordBuilder(RecordBuilder):
    """Records decoded by the compiled ``RecordColumns`` into Arrow buffers, wrapped as
    arrays without a copy."""

    max_bytes = COLUMNAR_MAX_BYTES

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        super().__init__(topic, partition, include_headers)
        self._columns = RecordColumns(include_headers)

    @property
    def rows(self) -> int:
        return self._columns.rows

    def add(self, records: bytes, start: int, until: int) -> Iterator[pa.RecordBatch]:
        columns = self._columns
        for header in data_batches(records, start, until):
            added = columns.add(records_section(records, header), header, start, until)
            if self._row_limit is None and added:
                self._set_row_limit(added, columns.data_bytes)
            if self.full:
                yield self.build()

    def build(self) -> pa.RecordBatch:
        taken = self._columns.take()
        n = taken.rows
        keys, values = _binary_array(taken.keys, pa.binary()), _binary_array(taken.values,
                                                                             pa.binary())
        if n:
            self._set_row_limit(n, taken.data_bytes)
        columns = [
            keys, values, *self._common_columns(n),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(taken.offsets)]),
            pa.Array.from_buffers(_TIMESTAMP_US, n, [None, pa.py_buffer(taken.timestamps)]),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(taken.timestamp_types)]),
        ]
        if self.include_headers:
            columns.append(self._header_column(taken, n))
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def _header_column(self, taken: RecordColumns, n: int) -> pa.Array:
        assert self._header_type is not None
        element = self._header_type.value_type
        keys = _binary_array(taken.header_keys, pa.string())
        try:
            keys.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise CorruptRecordError(f"header key is not UTF-8: {exc}") from None
        entries = pa.StructArray.from_arrays(
            [keys, _binary_array(taken.header_values, pa.binary())], fields=list(element))
        offsets = pa.Array.from_buffers(pa.int32(), n + 1,
                                        [None, pa.py_buffer(taken.header_offsets)])
        return pa.ListArray.from_arrays(offsets, entries, type=self._header_type)


def _aiokafka_read(read: Callable[[], T]) -> T:
    """``read()``, with what aiokafka raises for bytes it cannot decode (its
    CorruptRecordException, cramjam's errors, struct's) as ``CorruptRecordError``."""
    try:
        return read()
    except CorruptRecordError:
        raise
    except Exception as exc:
        raise CorruptRecordError(f"aiokafka cannot decode the records: {exc}") from exc


def _binary_array(column: object, kind: pa.DataType) -> pa.Array:
    """A compiled ``BinaryColumn`` as an Arrow binary or string array (no copy)."""
    validity = pa.py_buffer(column.validity) if column.null_count else None
    return pa.Array.from_buffers(kind, column.length, [
        validity, pa.py_buffer(column.offsets), pa.py_buffer(column.data)],
        null_count=column.null_count)


class AiokafkaRecordBuilder(RecordBuilder):
    """Records decoded by aiokafka's Cython reader (the fallback decoder)."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        super().__init__(topic, partition, include_headers)
        self._reset()

    def _reset(self) -> None:
        self._keys: list[bytes | None] = []
        self._values: list[bytes | None] = []
        self._rows = 0
        # Offsets as runs: a range per stretch of consecutive offsets (built in Arrow, no
        # Python int per record), a list for a batch with gaps (compaction).
        self._offsets: list[range | list[int]] = []
        self._timestamps: list[int] = []
        self._type_runs: list[tuple[int, int]] = []  # (row count, timestamp type) per batch
        self._headers: list[list[tuple[str, bytes | None]]] = []

    @property
    def rows(self) -> int:
        return self._rows

    def add(self, records: bytes, start: int, until: int) -> Iterator[pa.RecordBatch]:
        # imported here: a worker decoding with the compiled decoder never loads aiokafka
        from aiokafka.record.default_records import DefaultRecordBatch
        from aiokafka.record.memory_records import MemoryRecords

        for header in data_batches(records, start, until):
            section = memoryview(records)[header.position + HEADER_SIZE:
                                          header.position + header.size]
            check_claims(header.compression, section)
        reader = MemoryRecords(records)
        while reader.has_next():
            batch = _aiokafka_read(reader.next_batch)
            if not isinstance(batch, DefaultRecordBatch):
                raise _legacy_format(batch.next_offset - 1)
            if batch.is_control_batch or batch.next_offset <= start:
                continue
            if batch.base_offset >= until:
                break
            added = _aiokafka_read(lambda: self._add_batch(batch, start, until))  # noqa: B023
            if added:
                self._type_runs.append((added, batch.timestamp_type))
            if self.full:
                yield self.build()

    def _add_batch(self, batch: Any, start: int, until: int) -> int:
        """Append the batch's records in [start, until) to the columns; how many there were.

        The cyclic garbage collector is paused meanwhile: the decoder makes one tracked
        object per record and holding a batch's worth of them would trigger a collection
        every 700; records form no cycles, so nothing is left for it to find.
        """
        paused = gc.isenabled()
        gc.disable()
        try:
            whole = batch.base_offset >= start and batch.next_offset <= until
            selected = list(batch) if whole else [r for r in batch if start <= r.offset < until]
            keys, values = self._keys, self._values
            before = len(keys)
            keys += map(_KEY, selected)
            values += map(_VALUE, selected)
            offsets = self._offsets
            if whole and len(selected) == batch.next_offset - batch.base_offset:  # no gaps
                last = offsets[-1] if offsets else None
                if isinstance(last, range) and last.stop == batch.base_offset:
                    offsets[-1] = range(last.start, batch.next_offset)
                else:
                    offsets.append(range(batch.base_offset, batch.next_offset))
            else:
                offsets.append(list(map(_OFFSET, selected)))
            self._rows += len(selected)
            self._timestamps += map(_TIMESTAMP, selected)
            if self.include_headers:
                self._headers += map(_HEADERS, selected)
        finally:
            if paused:
                gc.enable()
        if self._row_limit is None and selected:
            self._set_row_limit(len(selected), sum(map(len, filter(None, values[before:])))
                                + sum(map(len, filter(None, keys[before:]))))
        return len(selected)

    def build(self) -> pa.RecordBatch:
        n = self._rows
        keys = (pa.nulls(n, pa.binary()) if self._keys.count(None) == n
                else pa.array(self._keys, pa.binary()))
        values = pa.array(self._values, pa.binary())
        if n:
            self._set_row_limit(n, keys.nbytes + values.nbytes)
        columns = [
            keys,
            values,
            *self._common_columns(n),
            self._offset_column(),
            pa.array(self._timestamps, pa.int64()).cast(_TIMESTAMP_MS).cast(_TIMESTAMP_US),
            self._timestamp_types(),
        ]
        if self.include_headers:
            columns.append(self._header_column())
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)

    def _timestamp_types(self) -> pa.Array:
        runs = self._type_runs
        if len({kind for _, kind in runs}) <= 1:
            kind = runs[0][1] if runs else 0
            return pa.repeat(pa.scalar(kind, pa.int32()), self._rows)
        return pa.concat_arrays([pa.repeat(pa.scalar(kind, pa.int32()), count)
                                 for count, kind in runs])

    def _offset_column(self) -> pa.Array:
        parts = [_arange(part.start, part.stop) if isinstance(part, range)
                 else pa.array(part, pa.int64()) for part in self._offsets]
        return pa.concat_arrays(parts) if parts else pa.array([], pa.int64())

    def _header_column(self) -> pa.Array:
        assert self._header_type is not None
        offsets = [0]
        keys: list[str] = []
        values: list[bytes | None] = []
        for record_headers in self._headers:
            for key, value in record_headers:
                keys.append(key)
                values.append(value)
            offsets.append(len(keys))
        element = self._header_type.value_type
        entries = pa.StructArray.from_arrays(
            [pa.array(keys, pa.string()), pa.array(values, pa.binary())],
            fields=list(element))
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), entries,
                                        type=self._header_type)


_ONE = pa.scalar(1, pa.int64())


def _arange(start: int, stop: int) -> pa.Array:
    """int64 [start, stop) computed in Arrow: a running sum of ones, shifted."""
    ones = pa.repeat(_ONE, stop - start)
    return pc.add(pc.cumulative_sum(ones), pa.scalar(start - 1, pa.int64()))
