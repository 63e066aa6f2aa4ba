"""Encoding Arrow columns into Confluent's wire format: the sink's ``valueFormat`` /
``keyFormat`` ``avro``, ``json`` and ``protobuf``, in the write task.

Invariants:
- Every encoded value is Confluent's framing (``frame``: magic byte 0, the schema id as 4
  big-endian bytes) followed by the body: Avro's binary encoding of the row with the schema
  (fastavro's ``schemaless_writer``), or the row as a JSON document (UTF-8). A null row
  stays a null value (a tombstone), unframed, as Confluent's serializers do.
- ``ColumnEncoding`` (``column_encoding``) is what the driver resolved; tasks never talk
  to a schema registry.
- ``encode`` turns one Arrow column into a binary column of the same length. The rows are
  converted to Python once per call (``to_pylist``, maps as dicts), so a caller bounds the
  memory by calling it per slice of ``CHUNK_ROWS`` rows (``chunks``).
- Avro bodies are encoded column by column (``avro_columnar``: Arrow compute kernels, no
  Python object per row) when the schema allows; otherwise row by row with fastavro, written
  one after another into one buffer whose offsets become the binary column's offsets (no
  bytes object per row); there a row that does not fit the schema raises ``EncodeError``
  naming the row's index in the column and fastavro's reason.
- Protobuf bodies are the message's indexes (``indexes_prefix``) and the message built
  from the row with protobuf's own classes (upb), row by row (timestamps as integers, no
  datetime per value): a null field is left unset
  (proto3: its default; a struct, an absent message); a null inside an array or as a map's
  value, or a value the field cannot hold, raises ``EncodeError`` naming the row.
- JSON documents follow Spark's ``to_json`` shapes: dates and timestamps in ISO 8601
  (a timestamp in UTC, ``Z``), binary as base64, decimals as numbers, nulls kept as null;
  dates and timestamps are converted in Arrow first (``_json_ready``), then the documents
  are built a whole column at a time (``json_columnar``) or, for a slice it does not take
  (binary, float32, control characters), with ``json`` row by row.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparklog.schemas import json_columnar
from sparklog.schemas.avro_columnar import Unsupported, encode_column
from sparklog.schemas.column_encoding import AVRO, JSON, PROTOBUF, ColumnEncoding
from sparklog.schemas.proto_files import TIMESTAMP
from sparklog.schemas.wire import indexes_prefix, prefix

CHUNK_ROWS = 16384
"""Rows encoded at a time: bounds a task's memory whatever its batch. Above Spark's
``spark.sql.execution.arrow.maxRecordsPerBatch`` (10,000), so a default batch is one slice:
the columnar encoder's cost is mostly per call (8,192-row slices split every batch in two
and ran at about 60% of the rate of whole 100,000-row columns)."""


class EncodeError(ValueError):
    """A row cannot be encoded with the column's schema."""


def chunks(batch: pa.RecordBatch, rows: int = CHUNK_ROWS) -> Iterator[pa.RecordBatch]:
    """``batch`` in slices of at most ``rows`` rows (zero-copy)."""
    for start in range(0, batch.num_rows, rows):
        yield batch.slice(start, rows)


def encoder(encoding: ColumnEncoding) -> Callable[[pa.Array], pa.Array]:
    """A function encoding an Arrow column (of the type the schema was resolved for)."""
    if encoding.format == AVRO:
        return _AvroEncoder(encoding).encode
    if encoding.format == JSON:
        return _JsonEncoder(encoding).encode
    if encoding.format == PROTOBUF:
        return _ProtobufEncoder(encoding).encode
    raise ValueError(f"unknown encoding format {encoding.format!r}")


def _has_map(arrow_type: pa.DataType) -> bool:
    if pa.types.is_map(arrow_type):
        return True
    return any(_has_map(arrow_type.field(i).type) for i in range(arrow_type.num_fields))


def _python_rows(column: pa.Array) -> list[Any]:
    """The column's rows as Python objects, maps as dicts (a cost paid only with maps)."""
    if _has_map(column.type):
        return column.to_pylist(maps_as_pydicts="strict")
    return column.to_pylist()


def _as_integers(arrow_type: pa.DataType) -> pa.DataType:
    """``arrow_type`` with dates as int32 days and microsecond timestamps as int64: the
    values Avro's ``date`` and ``*-timestamp-micros`` hold, without a Python datetime per
    value (to_pylist's and fastavro's conversions). Fields become nullable: Arrow refuses to
    cast a non-nullable field of a struct whose parent row is null (Spark sends such)."""
    if pa.types.is_date32(arrow_type):
        return pa.int32()
    if pa.types.is_timestamp(arrow_type) and arrow_type.unit == "us":
        return pa.int64()
    if pa.types.is_map(arrow_type):
        return pa.map_(arrow_type.key_type, _as_integers(arrow_type.item_type))
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        items = arrow_type.value_field.with_type(
            _as_integers(arrow_type.value_type)).with_nullable(True)
        return pa.list_(items) if pa.types.is_list(arrow_type) else pa.large_list(items)
    if pa.types.is_struct(arrow_type):
        return pa.struct([f.with_type(_as_integers(f.type)).with_nullable(True)
                          for f in arrow_type])
    return arrow_type


class _AvroEncoder:
    def __init__(self, encoding: ColumnEncoding) -> None:
        import fastavro  # in the tasks that encode Avro only

        self._write = fastavro.schemaless_writer
        self._raw_schema = json.loads(encoding.schema)
        self._schema = fastavro.parse_schema(self._raw_schema)
        self._prefix = prefix(encoding.schema_id)
        # A schema with millisecond timestamps needs the datetimes fastavro converts.
        self._integers = "-millis" not in encoding.schema
        self._columnar = True

    def encode(self, column: pa.Array) -> pa.Array:
        if self._columnar:
            try:
                bodies = encode_column(column, self._raw_schema)
            except Unsupported:
                self._columnar = False  # this schema and column need the row encoder
            else:
                return _framed(self._prefix, bodies, column)
        return self._rows(column)

    def _rows(self, column: pa.Array) -> pa.Array:
        buffer = io.BytesIO()
        offsets = [0]
        write, schema, prefix = self._write, self._schema, self._prefix
        integers = _as_integers(column.type) if self._integers else column.type
        plain = column if integers == column.type else column.cast(integers)
        for index, row in enumerate(_python_rows(plain)):
            if row is not None:
                buffer.write(prefix)
                try:
                    write(buffer, schema, row)
                except (ValueError, TypeError, KeyError, AttributeError) as error:
                    raise EncodeError(f"row {index} does not fit the Avro schema: "
                                      f"{error}") from None
            offsets.append(buffer.tell())
        return _binary(buffer.getbuffer(), offsets, column)


def _binary(data: memoryview, offsets: list[int], column: pa.Array) -> pa.Array:
    """A binary column over ``data`` sliced by ``offsets``, null where ``column`` is."""
    validity = column.is_valid().buffers()[1] if column.null_count else None
    offsets_buffer = pa.array(offsets, pa.int32()).buffers()[1]
    if len(data) >= 2 ** 31:
        raise EncodeError("a chunk of encoded values exceeds 2 GiB: write smaller rows")
    return pa.Array.from_buffers(pa.binary(), len(column),
                                 [validity, offsets_buffer, pa.py_buffer(data)],
                                 null_count=column.null_count)


def _framed(prefix: bytes, bodies: pa.Array, column: pa.Array) -> pa.Array:
    """``prefix`` + body per row; null where ``column`` is."""
    framed = pc.binary_join_element_wise(pa.scalar(prefix), bodies, pa.scalar(b""))
    return pc.if_else(column.is_valid(), framed, pa.scalar(None, pa.binary()))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime.date):  # datetime is a date too
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return float(value)
    raise TypeError(f"{type(value).__name__} has no JSON form")


def _json_ready(column: pa.Array) -> pa.Array:
    """``column`` with dates and timestamps as their JSON forms, in Arrow: ISO dates, ISO
    timestamps (UTC, ``Z``; without a zone for timestamp_ntz). to_pylist then makes no
    datetime per value for ``json`` to convert (about three times the rows/s on rows with a
    timestamp). Decimals stay Decimals: Arrow's cast to double is not correctly rounded."""
    kind = column.type
    if pa.types.is_date32(kind):
        return column.cast(pa.string())
    if pa.types.is_timestamp(kind):
        # The values are UTC instants whatever the zone: formatted as a zone-less timestamp
        # (a zone's formatting costs a time zone lookup per call) and suffixed with Z.
        text = pc.replace_substring(column.view(pa.timestamp(kind.unit)).cast(pa.string()),
                                    " ", "T", max_replacements=1)
        return text if kind.tz is None else pc.binary_join_element_wise(text, "Z", "")
    if pa.types.is_struct(kind):
        fields = [kind.field(i) for i in range(kind.num_fields)]
        children = [_json_ready(column.field(i)) for i in range(kind.num_fields)]
        if all(c is column.field(i) for i, c in enumerate(children)):
            return column
        return pa.StructArray.from_arrays(
            children, fields=[f.with_type(c.type) for f, c in zip(fields, children, strict=True)],
            mask=column.is_null() if column.null_count else None)
    if pa.types.is_map(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
        offsets = column.offsets
        start, end = offsets[0].as_py(), offsets[-1].as_py()
        relative = pc.subtract(offsets, offsets[0])
        mask = column.is_null() if column.null_count else None
        if pa.types.is_map(kind):
            items = column.items.slice(start, end - start)
            ready = _json_ready(items)
            if ready is items:
                return column
            return pa.MapArray.from_arrays(relative, column.keys.slice(start, end - start),
                                           ready, mask=mask)
        values = column.values.slice(start, end - start)
        ready = _json_ready(values)
        if ready is values:
            return column
        return type(column).from_arrays(relative, ready, mask=mask)
    return column


class _JsonEncoder:
    def __init__(self, encoding: ColumnEncoding) -> None:
        self._prefix = prefix(encoding.schema_id)
        self._dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False,
                                       default=_json_default).encode

    def encode(self, column: pa.Array) -> pa.Array:
        ready = _json_ready(column)
        try:
            documents = json_columnar.encode_column(ready)
        except json_columnar.Unsupported:  # this slice goes row by row
            prefix, dumps = self._prefix, self._dumps
            return pa.array([None if row is None else prefix + dumps(row).encode()
                             for row in _python_rows(ready)], pa.binary())
        return _framed(self._prefix, documents.cast(pa.binary()), column)


class _ProtobufEncoder:
    def __init__(self, encoding: ColumnEncoding) -> None:
        from google.protobuf import message_factory

        from sparklog.schemas.protobuf_types import message_descriptor, message_indexes

        descriptor = message_descriptor(encoding.schema, encoding.message)
        self._class = message_factory.GetMessageClass(descriptor)
        self._prefix = prefix(encoding.schema_id) + indexes_prefix(message_indexes(descriptor))
        self._fields = _message_fields(descriptor)

    def encode(self, column: pa.Array) -> pa.Array:
        buffer = io.BytesIO()
        offsets = [0]
        build, prefix, fields = self._class, self._prefix, self._fields
        integers = _as_integers(column.type)
        plain = column if integers == column.type else column.cast(integers)
        for index, row in enumerate(_python_rows(plain)):
            if row is not None:
                buffer.write(prefix)
                try:
                    buffer.write(build(**fields(row)).SerializeToString())
                except (ValueError, TypeError, KeyError, AttributeError) as error:
                    raise EncodeError(f"row {index} does not fit the Protobuf message "
                                      f"{build.DESCRIPTOR.full_name}: {error}") from None
            offsets.append(buffer.tell())
        return _binary(buffer.getbuffer(), offsets, column)


Fields = Callable[[Any], Any]


def _timestamp(micros: int) -> dict[str, int]:
    """Microseconds since the epoch (the column cast by ``_as_integers``) as a
    ``google.protobuf.Timestamp``'s fields: no datetime per value."""
    seconds, rest = divmod(micros, 1_000_000)
    return {"seconds": seconds, "nanos": rest * 1000}


def _message_fields(descriptor: Any) -> Fields:
    """A function of a row (a dict) to the message's constructor arguments: null fields
    left out, recursively through messages, repeated messages and map values (whose keys
    are data, kept as they are), microseconds as Timestamps. Planned once per message
    type: a message of scalars only costs one dict comprehension a row."""
    converters: list[tuple[str, Fields]] = []
    for field in descriptor.fields:
        kind = field.message_type
        how = "one"
        if kind is not None and kind.GetOptions().map_entry:
            kind, how = kind.fields_by_name["value"].message_type, "map"
        elif field.is_repeated:
            how = "list"
        if kind is not None:
            nested = _timestamp if kind.full_name == TIMESTAMP \
                else _message_fields(kind)
            converters.append((field.name, _applied(how, nested)))

    def fields(row: dict[str, Any]) -> dict[str, Any]:
        out = {name: value for name, value in row.items() if value is not None}
        for name, convert in converters:
            if name in out:
                out[name] = convert(out[name])
        return out

    return fields


def _applied(how: str, nested: Fields) -> Fields:
    """``nested`` applied to a field's value: one message, each of a repeated field's, each
    of a map's values (a null inside is left for protobuf to refuse)."""
    if how == "map":
        return lambda value: {k: v if v is None else nested(v) for k, v in value.items()}
    if how == "list":
        return lambda value: [v if v is None else nested(v) for v in value]
    return nested
