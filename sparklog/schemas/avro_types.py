"""Avro schemas as Arrow types, mapped as Spark's ``SchemaConverters.toSqlType`` maps them.

The mapping (Avro -> Arrow -> Spark): null -> null (NullType); boolean; int -> int32, with
``date`` -> date32 (DateType); long -> int64, with ``timestamp-millis`` /
``timestamp-micros`` -> timestamp[us, UTC] (TimestampType) and ``local-timestamp-*`` ->
timestamp[us] (TimestampNTZType); float -> float32; double -> float64; string (``uuid``
too) and enum -> string; bytes and fixed -> binary, or decimal128(precision, scale) with
the ``decimal`` logical type; record -> struct; array -> list; map -> map<string, ...>.
A union of null and one type is that type, nullable; ``[int, long]`` is long and
``[float, double]`` double (Spark's widenings). Other unions and recursive records are
refused (``UnsupportedSchemaError``), as are time-of-day logical types, which the decoder
would hand over as ``datetime.time`` (Spark maps them to their int or long: strip the
logical type).

Invariants:
- Nullability is Spark's: a field, array item or map value is nullable exactly when its
  Avro type is a union containing null.
- List items are named ``element`` and maps are ``map<string, T>`` with non-null keys:
  what ``pyspark``'s ``to_arrow_type`` gives back for the Spark type, so arrays built with
  these types need no cast.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from sparklog.schemas.unsupported import UnsupportedSchemaError

_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
    "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(), "string": pa.string(),
}
_LOGICAL: dict[tuple[str, str], pa.DataType] = {
    ("int", "date"): pa.date32(),
    ("long", "timestamp-millis"): pa.timestamp("us", tz="UTC"),
    ("long", "timestamp-micros"): pa.timestamp("us", tz="UTC"),
    ("long", "local-timestamp-millis"): pa.timestamp("us"),
    ("long", "local-timestamp-micros"): pa.timestamp("us"),
}
_REFUSED_LOGICAL = {"time-millis", "time-micros", "timestamp-nanos", "local-timestamp-nanos"}
_WIDENINGS = {frozenset({"int", "long"}): pa.int64(), frozenset({"float", "double"}): pa.float64()}


def arrow_type(schema: str | dict | list) -> pa.DataType:
    """The Arrow type of values of ``schema`` (Avro schema JSON text, or parsed)."""
    parsed = json.loads(schema) if isinstance(schema, str) else schema
    return _Mapper().map(parsed, "", None)[0]


class _Mapper:
    def __init__(self) -> None:
        self.named: dict[str, Any] = {}  # full name -> definition
        self.open: set[str] = set()  # records being mapped (recursion)

    def map(self, schema: Any, path: str, namespace: str | None) -> tuple[pa.DataType, bool]:
        """``(type, nullable)`` of ``schema`` at ``path`` (for messages)."""
        if isinstance(schema, list):
            return self._union(schema, path, namespace)
        if isinstance(schema, str):
            if schema in _PRIMITIVES:
                return _PRIMITIVES[schema], schema == "null"
            return self._named(schema, path, namespace)
        kind = schema.get("type")
        logical = schema.get("logicalType")
        if isinstance(kind, str) and logical is not None:
            if logical in _REFUSED_LOGICAL:
                raise UnsupportedSchemaError(
                    f"{_where(path)}: logical type {logical} is not supported; drop the "
                    "logicalType to read the underlying number")
            if logical == "decimal" and kind in ("bytes", "fixed"):
                if kind == "fixed":
                    self._define(schema, namespace)
                return pa.decimal128(int(schema["precision"]), int(schema.get("scale", 0))), False
            if (kind, logical) in _LOGICAL:
                return _LOGICAL[kind, logical], False
        if kind in ("record", "error"):
            return self._record(schema, path, namespace)
        if kind == "enum":
            self._define(schema, namespace)
            return pa.string(), False
        if kind == "fixed":
            self._define(schema, namespace)
            return pa.binary(), False
        if kind == "array":
            item, nullable = self.map(schema["items"], f"{path}[]", namespace)
            return pa.list_(pa.field("element", item, nullable)), False
        if kind == "map":
            value, nullable = self.map(schema["values"], f"{path}{{}}", namespace)
            return pa.map_(pa.string(), pa.field("value", value, nullable)), False
        return self.map(kind, path, namespace)

    def _union(self, branches: list, path: str, namespace: str | None) -> tuple[pa.DataType, bool]:
        others = [b for b in branches if b != "null"]
        nullable = len(others) < len(branches)
        if len(others) == 1:
            return self.map(others[0], path, namespace)[0], nullable
        if all(isinstance(b, str) for b in others) and frozenset(others) in _WIDENINGS:
            return _WIDENINGS[frozenset(others)], nullable
        raise UnsupportedSchemaError(
            f"{_where(path)}: the union {json.dumps(branches)} is not supported (only a union "
            "of null and one type, [int, long] and [float, double] are)")

    def _record(self, schema: dict, path: str, namespace: str | None) -> tuple[pa.DataType, bool]:
        name = self._define(schema, namespace)
        self.open.add(name)
        inner = schema.get("namespace", name.rpartition(".")[0] or None)
        fields = []
        for field in schema["fields"]:
            child = f"{path}.{field['name']}" if path else field["name"]
            kind, nullable = self.map(field["type"], child, inner)
            fields.append(pa.field(field["name"], kind, nullable))
        self.open.discard(name)
        return pa.struct(fields), False

    def _named(self, name: str, path: str, namespace: str | None) -> tuple[pa.DataType, bool]:
        full = name if "." in name or namespace is None else f"{namespace}.{name}"
        definition = self.named.get(full, self.named.get(name))
        if definition is None:
            raise UnsupportedSchemaError(f"{_where(path)}: unknown type {name!r}: neither "
                                         "defined before its use nor by a schema reference")
        if _full_name(definition, namespace) in self.open:
            raise UnsupportedSchemaError(f"{_where(path)}: the record {name} is recursive; "
                                         "Spark types cannot hold recursive records")
        return self.map({**definition, "name": _full_name(definition, namespace)}, path,
                        namespace)

    def _define(self, schema: dict, namespace: str | None) -> str:
        name = _full_name(schema, namespace)
        self.named[name] = schema
        return name


def _full_name(schema: dict, namespace: str | None) -> str:
    name = schema["name"]
    if "." in name:
        return name
    space = schema.get("namespace", namespace)
    return f"{space}.{name}" if space else name


def _where(path: str) -> str:
    return f"field {path}" if path else "the schema"
