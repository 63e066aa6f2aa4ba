"""Spark types to Avro schemas (for the sink's ``valueFormat=avro``), and whether a Spark type's
rows fit a given Avro schema (``useLatestVersion``, an inline schema).

Spark types are taken in their JSON form (``DataType.jsonValue()``: ``"long"``,
``"decimal(10,2)"``, ``{"type": "struct", "fields": [...]}``), so this module needs no pyspark.

Invariants:
- ``avro_schema`` follows Spark's ``SchemaConverters.toAvroType``: boolean; byte, short and
  int as ``int``; long; float; double; string (char and varchar too); binary as ``bytes``;
  date as ``int`` of logical type ``date``; timestamp as ``long`` ``timestamp-micros``,
  timestamp_ntz as ``long`` ``local-timestamp-micros``; decimal(p, s) as a ``fixed`` of the
  fewest bytes holding p digits with logical type ``decimal``, named ``<record>.fixed``;
  arrays; maps with string keys; a struct as a record named by its field (the top one
  ``topLevelRecord`` in namespace ``""`` unless given), nested records namespaced by their
  parents' names. One difference, on purpose: a nullable type is the union
  ``["null", type]`` with default null (Spark writes ``[type, "null"]`` without a default),
  so that adding a nullable column is a BACKWARD-compatible change in a schema registry, as
  Confluent's serializers users expect.
- Interval types, maps with non-string keys and names Avro does not allow are refused with a
  ``SchemaMappingError`` naming the column (its dotted path from the top).
- ``fit_error`` answers None when every row of the Spark type can be written with the Avro
  schema (Avro's promotions int -> long -> float -> double allowed, a record field missing
  from the rows must have a default, a null needs a union with null), else a message naming
  the first column that does not fit.
"""

from __future__ import annotations

import re
from typing import Any

TOP_LEVEL_RECORD = "topLevelRecord"
"""Spark's name for the top record when none is given."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DECIMAL = re.compile(r"^decimal\((\d+),\s*(-?\d+)\)$")
_PRIMITIVES: dict[str, Any] = {
    "boolean": "boolean", "byte": "int", "short": "int", "integer": "int", "long": "long",
    "float": "float", "double": "double", "string": "string", "binary": "bytes",
    "null": "null",
    "date": {"type": "int", "logicalType": "date"},
    "timestamp": {"type": "long", "logicalType": "timestamp-micros"},
    "timestamp_ntz": {"type": "long", "logicalType": "local-timestamp-micros"},
}
_PROMOTIONS = {"int": ("int", "long", "float", "double"), "long": ("long", "float", "double"),
               "float": ("float", "double"), "double": ("double",), "string": ("string",),
               "bytes": ("bytes",), "boolean": ("boolean",), "null": ("null",)}


class SchemaMappingError(ValueError):
    """A Spark type has no Avro / JSON Schema counterpart, or does not fit a given schema."""


def spark_type_name(spark_type: Any) -> str:
    """A primitive's name with char(n)/varchar(n) read as string; a complex type's kind."""
    if isinstance(spark_type, dict):
        return str(spark_type["type"])
    name = str(spark_type)
    return "string" if name.startswith(("char(", "varchar(")) else name


def decimal_of(spark_type: Any) -> tuple[int, int] | None:
    """(precision, scale) of a ``decimal(p,s)`` type, else None."""
    match = _DECIMAL.match(spark_type) if isinstance(spark_type, str) else None
    return (int(match[1]), int(match[2])) if match else None


def _fixed_size(precision: int) -> int:
    """Spark's ``minBytesForPrecision``: the fewest bytes whose signed range holds
    ``precision`` decimal digits."""
    size = 1
    while 2 ** (8 * size - 1) < 10 ** precision:
        size += 1
    return size


def avro_schema(spark_type: Any, record_name: str = TOP_LEVEL_RECORD,
                namespace: str = "") -> Any:
    """The Avro schema (a JSON-ready object) of a non-null column of ``spark_type``."""
    return _avro(spark_type, False, record_name, namespace, "value")


def _avro(spark_type: Any, nullable: bool, name: str, namespace: str, path: str) -> Any:
    kind = spark_type_name(spark_type)
    schema: Any
    if kind in _PRIMITIVES:
        schema = _PRIMITIVES[kind]
    elif (digits := decimal_of(spark_type)) is not None:
        precision, scale = digits
        schema = {"type": "fixed", "name": f"{namespace}.{name}.fixed" if namespace
                  else f"{name}.fixed", "size": _fixed_size(precision),
                  "logicalType": "decimal", "precision": precision, "scale": scale}
    elif kind == "array":
        schema = {"type": "array", "items": _avro(spark_type["elementType"],
                                                  spark_type["containsNull"], name, namespace,
                                                  f"{path}[]")}
    elif kind == "map":
        if spark_type_name(spark_type["keyType"]) != "string":
            raise SchemaMappingError(f"column {path} is a map with keys of type "
                                     f"{spark_type['keyType']}: Avro maps have string keys")
        schema = {"type": "map", "values": _avro(spark_type["valueType"],
                                                 spark_type["valueContainsNull"], name,
                                                 namespace, f"{path}{{}}")}
    elif kind == "struct":
        schema = _record(spark_type, name, namespace, path)
    else:
        raise SchemaMappingError(f"column {path} has type {kind}, which has no Avro type")
    return ["null", schema] if nullable and kind != "null" else schema


def _record(spark_type: dict[str, Any], name: str, namespace: str, path: str) -> Any:
    if not _NAME.match(name):
        raise SchemaMappingError(f"column {path}: {name!r} is not a valid Avro record name")
    child_namespace = f"{namespace}.{name}" if namespace else name
    fields = []
    for field in spark_type["fields"]:
        field_name, field_path = field["name"], f"{path}.{field['name']}"
        if not _NAME.match(field_name):
            raise SchemaMappingError(f"column {field_path}: {field_name!r} is not a valid "
                                     "Avro field name ([A-Za-z_][A-Za-z0-9_]*)")
        avro = _avro(field["type"], field["nullable"], field_name, child_namespace,
                     field_path)
        fields.append({"name": field_name, "type": avro, **(
            {"default": None} if isinstance(avro, list) else {})})
    record: dict[str, Any] = {"type": "record", "name": name}
    if namespace:
        record["namespace"] = namespace
    record["fields"] = fields
    return record


def fit_error(spark_type: Any, avro: Any, nullable: bool = False,
              path: str = "value") -> str | None:
    """None when rows of ``spark_type`` can be encoded with ``avro``; else why not."""
    return _fit(spark_type, avro, nullable, path, {}, "")


def _named(avro: Any, names: dict[str, Any], namespace: str) -> tuple[Any, str]:
    """Resolve a reference to a named type; record the named types defined on the way."""
    if isinstance(avro, str) and avro not in _PROMOTIONS:
        full = avro if "." in avro or not namespace else f"{namespace}.{avro}"
        return names.get(full, names.get(avro, avro)), namespace
    if isinstance(avro, dict) and avro.get("type") in ("record", "fixed", "enum"):
        name = avro["name"]
        space = avro.get("namespace", namespace) if "." not in name else name.rsplit(".", 1)[0]
        full = name if "." in name else (f"{space}.{name}" if space else name)
        names[full] = avro
        return avro, space
    return avro, namespace


def _fit(spark_type: Any, avro: Any, nullable: bool, path: str, names: dict[str, Any],
         namespace: str) -> str | None:
    avro, namespace = _named(avro, names, namespace)
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        if nullable and len(branches) == len(avro):
            return f"column {path} is nullable but the schema's union has no null"
        reasons = [_fit(spark_type, b, False, path, names, namespace) for b in branches]
        return None if None in reasons else (reasons[0] if reasons else
                                             f"column {path}: the schema allows only null")
    if nullable:
        return f"column {path} is nullable but the schema's type is not a union with null"
    avro_type = avro["type"] if isinstance(avro, dict) else avro
    if isinstance(avro_type, dict | list):
        return _fit(spark_type, avro_type, False, path, names, namespace)
    logical = avro.get("logicalType") if isinstance(avro, dict) else None
    kind = spark_type_name(spark_type)
    found = f"column {path} of type {kind} does not fit the schema's {logical or avro_type}"
    if (digits := decimal_of(spark_type)) is not None:
        ok = (logical == "decimal" and avro_type in ("fixed", "bytes")
              and avro.get("scale", 0) == digits[1] and avro["precision"] >= digits[0])
        return None if ok else found
    if kind in ("date", "timestamp", "timestamp_ntz"):
        wanted = {"date": ("date",), "timestamp": ("timestamp-micros", "timestamp-millis"),
                  "timestamp_ntz": ("local-timestamp-micros", "local-timestamp-millis")}[kind]
        return None if logical in wanted else found
    if kind in _PRIMITIVES:
        base = _PRIMITIVES[kind]
        return None if avro_type in _PROMOTIONS[base] or (
            base == "string" and avro_type == "enum") or (
            base == "bytes" and avro_type == "fixed") else found
    if kind == "array":
        return found if avro_type != "array" else _fit(
            spark_type["elementType"], avro["items"], spark_type["containsNull"],
            f"{path}[]", names, namespace)
    if kind == "map":
        return found if avro_type != "map" else _fit(
            spark_type["valueType"], avro["values"], spark_type["valueContainsNull"],
            f"{path}{{}}", names, namespace)
    if kind != "struct" or avro_type != "record":
        return found
    columns = {f["name"]: f for f in spark_type["fields"]}
    for field in avro["fields"]:
        column = columns.pop(field["name"], None)
        if column is None:
            if "default" not in field:
                return (f"column {path}.{field['name']} is missing: the schema's field has "
                        "no default")
            continue
        reason = _fit(column["type"], field["type"], column["nullable"],
                      f"{path}.{field['name']}", names, namespace)
        if reason is not None:
            return reason
    if columns:
        return f"column {path}.{next(iter(columns))} is not a field of the schema"
    return None
