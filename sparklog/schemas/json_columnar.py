"""JSON documents of a whole Arrow column at once, with Arrow's string kernels: no Python
object per row.

Invariants:
- ``encode_column`` gives, per row, a JSON text that parses to what ``json.dumps`` of the
  row writes in ``encode`` (Spark's ``to_json`` shapes): objects in field order, arrays,
  maps as objects, strings escaped (``"`` and ``\\``), numbers in their shortest form,
  decimals exact, ISO dates and timestamps (``encode._json_ready``), null as null.
- Columns it does not take raise ``Unsupported`` before any row is written: binary (base64
  has no Arrow kernel), a string with a control character, a float that is NaN or infinite
  (no JSON number), float32 (its shortest form is not the double's); the caller then
  encodes row by row.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

_EMPTY = pa.scalar("", pa.string())
_NULL = pa.scalar("null", pa.string())


class Unsupported(Exception):
    """The column needs the row-by-row encoder."""


def _join(*parts: pa.Array | str) -> pa.Array:
    """Element-wise concatenation; a null part (a don't-care row) counts as empty."""
    return pc.binary_join_element_wise(*parts, _EMPTY, null_handling="replace",
                                       null_replacement="")


def _string(column: pa.Array) -> pa.Array:
    if pc.any(pc.match_substring_regex(column, "[\\x00-\\x1f]")).as_py():
        raise Unsupported("a string with a control character")
    escaped = pc.replace_substring_regex(column, r'(["\\])', r"\\\1")
    return _join('"', escaped, '"')


def _number(column: pa.Array) -> pa.Array:
    kind = column.type
    if pa.types.is_float32(kind) or pa.types.is_float16(kind):
        raise Unsupported("float32")
    if pa.types.is_floating(kind) and pc.any(pc.invert(pc.is_finite(column))).as_py():
        raise Unsupported("a NaN or infinite float")
    return column.cast(pa.string())


def _value(column: pa.Array, nullable: bool) -> pa.Array:
    text = _text(column)
    return pc.if_else(column.is_valid(), text, _NULL) if nullable and column.null_count else text


def _text(column: pa.Array) -> pa.Array:
    kind = column.type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return _string(column.cast(pa.string()))
    if pa.types.is_boolean(kind):
        return pc.if_else(column, pa.scalar("true"), pa.scalar("false"))
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind):
        return _number(column)
    if pa.types.is_null(kind):
        return pa.array(["null"] * len(column), pa.string())
    if pa.types.is_struct(kind):
        parts: list[pa.Array | str] = []
        for i in range(kind.num_fields):
            field = kind.field(i)
            name = _string(pa.array([field.name], pa.string()))[0].as_py()
            parts += ["{" if i == 0 else ",", f"{name}:", _value(column.field(i), True)]
        return _join(*parts, "}") if parts else pa.array(["{}"] * len(column), pa.string())
    if pa.types.is_map(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
        offsets = column.offsets
        start, end = offsets[0].as_py(), offsets[-1].as_py()
        relative = pc.subtract(offsets, offsets[0])
        if pa.types.is_map(kind):
            keys = _string(column.keys.slice(start, end - start).cast(pa.string()))
            items = _join(keys, ":", _value(column.items.slice(start, end - start), True))
            opening, closing = "{", "}"
        else:
            items = _value(column.values.slice(start, end - start), True)
            opening, closing = "[", "]"
        lists = pa.ListArray.from_arrays(relative, items)
        return _join(opening, pc.binary_join(lists, ","), closing)
    raise Unsupported(f"{kind} in JSON")


def encode_column(column: pa.Array) -> pa.Array:
    """One JSON document per row of ``column`` (string; null rows give don't-care text)."""
    return _text(column)
