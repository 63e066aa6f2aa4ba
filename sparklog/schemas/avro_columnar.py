"""Avro's binary encoding of a whole Arrow column at once, with Arrow compute kernels: no
Python object per row.

Each Avro type encodes a column into a binary column of one body per row, and a record is
its fields' bodies joined row by row (``binary_join_element_wise``), an array its items'
bodies joined per list (``binary_join``) between a block count and the closing 0.

Invariants:
- ``encode_column`` gives, per row, exactly the bytes fastavro's ``schemaless_writer``
  writes for the row (the tests decode them with fastavro), for the schemas the sink
  derives and the usual registered ones: null, boolean, int and long (zig-zag varints;
  any Arrow integer, date32 or microsecond timestamp column), float and double, string and
  bytes, ``fixed`` decimals of the column's scale, records whose fields the column has,
  arrays, maps, and unions of null and one type (either order).
- Anything else (enums, bytes decimals, named-type references, wider unions, a record field
  the column lacks, a millisecond timestamp) raises ``Unsupported`` before any row is
  written; the caller then encodes row by row with fastavro.
- A row whose value is null where the schema has no null (Spark's null struct with
  required children) encodes as don't-care bytes only where a parent's null discards them.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

_EMPTY = pa.scalar(b"", pa.binary())
_MAX_VARINT = 10


class Unsupported(Exception):
    """The column or schema needs the row-by-row encoder."""


def _u64(value: int) -> pa.Scalar:
    return pa.scalar(value, pa.uint64())


def _fixed_bytes(data: pa.Buffer, length: int, size: int, offset: int = 0,
                 validity: pa.Buffer | None = None) -> pa.Array:
    """``length`` values of ``size`` bytes each laid end to end in ``data``, as binary."""
    return pa.Array.from_buffers(pa.binary(size), length, [validity, data],
                                 offset=offset).cast(pa.binary())


def varints(values: pa.Array) -> pa.Array:
    """Avro's zig-zag varint of each integer (no nulls), as one binary value per row: byte k
    of a row is present (not null) while the value has bits left at 7k, and the bytes are
    joined skipping the absent ones."""
    values = values.cast(pa.int64())
    sign = pc.if_else(pc.less(values, 0), pa.scalar(-1, pa.int64()), pa.scalar(0, pa.int64()))
    rest = pc.bit_wise_xor(pc.shift_left(values, 1), sign).view(pa.uint64())
    parts = []
    for k in range(_MAX_VARINT):
        later = pc.shift_right(rest, _u64(7))
        more = pc.not_equal(later, _u64(0))
        byte = pc.bit_wise_or(pc.bit_wise_and(rest, _u64(0x7F)),
                              pc.if_else(more, _u64(0x80), _u64(0))).cast(pa.uint8())
        present = None if k == 0 else pc.not_equal(rest, _u64(0)).buffers()[1]
        parts.append(_fixed_bytes(byte.buffers()[1], len(byte), 1, validity=present))
        if not pc.any(more).as_py():
            break
        rest = later
    if len(parts) == 1:
        return parts[0]
    return pc.binary_join_element_wise(*parts, _EMPTY, null_handling="skip")


def _fixed_width(column: pa.Array, value_type: pa.DataType) -> pa.Array:
    """Little-endian values of ``value_type`` (Avro's float, double, boolean bytes)."""
    column = column.cast(value_type).fill_null(pa.scalar(0, value_type))
    return _fixed_bytes(column.buffers()[1], len(column), value_type.bit_width // 8,
                        offset=column.offset)


def _integers(column: pa.Array) -> pa.Array:
    kind = column.type
    if pa.types.is_timestamp(kind):
        if kind.unit != "us":
            raise Unsupported("a timestamp not in microseconds")
        column = column.cast(pa.int64())
    elif pa.types.is_date32(kind):
        column = column.cast(pa.int32())
    elif not pa.types.is_integer(kind):
        raise Unsupported(f"{kind} as an Avro int")
    return varints(column.fill_null(0))


def _bytes(column: pa.Array) -> pa.Array:
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        column = column.view(pa.binary() if pa.types.is_string(kind) else pa.large_binary())
    elif not (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        raise Unsupported(f"{kind} as Avro bytes")
    lengths = pc.binary_length(column).fill_null(0)
    return pc.binary_join_element_wise(varints(lengths), column.cast(pa.binary()), _EMPTY,
                                       null_handling="replace", null_replacement=b"")


def _decimal(column: pa.Array, schema: dict[str, Any]) -> pa.Array:
    """A ``fixed`` decimal: the unscaled value's big-endian two's complement in ``size``
    bytes (Arrow's decimal128 is 16 little-endian bytes)."""
    kind = column.type
    if (schema["type"] != "fixed" or not pa.types.is_decimal128(kind)
            or kind.scale != schema.get("scale", 0)):
        raise Unsupported("a decimal other than a fixed of the column's scale")
    size = int(schema["size"])
    raw = _fixed_bytes(column.buffers()[1], len(column), 16, offset=column.offset)
    return pc.binary_slice(pc.binary_reverse(raw), 16 - size, 16)


def _blocks(counts: pa.Array, joined: pa.Array) -> pa.Array:
    """Avro's array / map framing: count, items, 0; or 0 alone when empty."""
    counts = counts.fill_null(0)
    full = pc.binary_join_element_wise(varints(counts), joined, pa.scalar(b"\x00"), _EMPTY,
                                       null_handling="replace", null_replacement=b"")
    return pc.if_else(pc.greater(counts, 0), full, pa.scalar(b"\x00"))


def _counts(column: pa.Array) -> pa.Array:
    """Each list's (or map's) length, from its offsets."""
    offsets = column.offsets
    return pc.subtract(offsets.slice(1), offsets.slice(0, len(column)))


def _per_list(column: pa.Array, items: pa.Array) -> pa.Array:
    """The items' bodies (of the column's own values) joined per list row."""
    offsets = column.offsets
    lists = pa.ListArray.from_arrays(pc.subtract(offsets, offsets[0]), items)
    return pc.binary_join(lists, _EMPTY)


def _values_of(column: pa.Array, values: pa.Array) -> pa.Array:
    offsets = column.offsets
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    return values.slice(start, end - start)


def _union(column: pa.Array, schema: list[Any]) -> pa.Array:
    if len(schema) != 2 or "null" not in schema:
        raise Unsupported("a union other than null and one type")
    null_index = schema.index("null")
    other = encode_column(column, schema[1 - null_index])
    tag = pa.scalar(bytes((2 * (1 - null_index),)))
    some = pc.binary_join_element_wise(tag, other, _EMPTY)
    return pc.if_else(column.is_valid(), some, pa.scalar(bytes((2 * null_index,))))


def _record(column: pa.Array, schema: dict[str, Any]) -> pa.Array:
    if not pa.types.is_struct(column.type):
        raise Unsupported(f"{column.type} as an Avro record")
    names = {column.type.field(i).name: i for i in range(column.type.num_fields)}
    parts = []
    for field in schema["fields"]:
        if field["name"] not in names:
            raise Unsupported(f"record field {field['name']} is not in the column")
        parts.append(encode_column(column.field(names[field["name"]]), field["type"]))
    if not parts:
        return pa.array([b""] * len(column), pa.binary())
    return pc.binary_join_element_wise(*parts, _EMPTY, null_handling="replace",
                                       null_replacement=b"")


def encode_column(column: pa.Array, schema: Any) -> pa.Array:
    """One Avro body per row of ``column`` (binary); see the module invariants."""
    if isinstance(schema, list):
        return _union(column, schema)
    if isinstance(schema, dict) and schema.get("logicalType") == "decimal":
        return _decimal(column, schema)
    kind = schema["type"] if isinstance(schema, dict) else schema
    logical = schema.get("logicalType") if isinstance(schema, dict) else None
    if isinstance(kind, list | dict):
        return encode_column(column, kind)
    if logical is not None and logical not in ("date", "timestamp-micros",
                                               "local-timestamp-micros"):
        raise Unsupported(f"logical type {logical}")
    if kind in ("int", "long"):
        return _integers(column)
    if kind == "null":
        return pa.array([b""] * len(column), pa.binary())
    if kind == "boolean":
        return _fixed_width(column, pa.uint8())
    if kind in ("float", "double"):
        if not (pa.types.is_floating(column.type) or pa.types.is_integer(column.type)):
            raise Unsupported(f"{column.type} as an Avro {kind}")
        return _fixed_width(column, pa.float32() if kind == "float" else pa.float64())
    if kind in ("string", "bytes"):
        return _bytes(column)
    if kind == "record":
        return _record(column, schema)
    if kind == "array" and (pa.types.is_list(column.type)
                            or pa.types.is_large_list(column.type)):
        items = encode_column(_values_of(column, column.values), schema["items"])
        return _blocks(_counts(column), _per_list(column, items))
    if kind == "map" and pa.types.is_map(column.type):
        keys = _bytes(_values_of(column, column.keys))
        values = encode_column(_values_of(column, column.items), schema["values"])
        pairs = pc.binary_join_element_wise(keys, values, _EMPTY)
        return _blocks(_counts(column), _per_list(column, pairs))
    raise Unsupported(f"Avro type {kind} for a column of {column.type}")
