"""Spark types to JSON Schemas (for the sink's ``valueFormat=json``), and whether a Spark type's
rows fit a given JSON Schema (``useLatestVersion``, an inline schema).

Spark types are taken in their JSON form (``DataType.jsonValue()``), as ``spark_to_avro``.

Invariants:
- ``json_schema`` gives a draft-07 schema of the documents ``encode`` writes (Spark's
  ``to_json`` shapes): boolean; byte, short, int and long as ``integer``; float, double and
  decimal as ``number``; string (char, varchar); binary as a base64 ``string``; date as a
  ``string`` of format ``date``, timestamp as ``date-time`` (ISO 8601 with its offset),
  timestamp_ntz as a plain ``string``; arrays as ``items``; maps (string keys) as an object
  of ``additionalProperties``; a struct as a closed object (``additionalProperties: false``)
  whose non-nullable fields are ``required``. A nullable type adds ``"null"`` to ``type``.
  The schemas are closed so that adding a nullable column is BACKWARD-compatible in a
  registry (an optional property added to a closed writer's model).
- ``fit_error`` answers None when every row of the Spark type validates against the schema
  on the keywords checked (``type``, ``properties``, ``required``, ``additionalProperties``,
  ``items``; a null is written as null, so a nullable column needs ``"null"`` in its
  ``type``), else a message naming the first column that does not fit.
"""

from __future__ import annotations

from typing import Any

from sparklog.schemas.spark_to_avro import SchemaMappingError, decimal_of, spark_type_name

DRAFT = "http://json-schema.org/draft-07/schema#"
_PRIMITIVES: dict[str, dict[str, Any]] = {
    "boolean": {"type": "boolean"}, "byte": {"type": "integer"},
    "short": {"type": "integer"}, "integer": {"type": "integer"}, "long": {"type": "integer"},
    "float": {"type": "number"}, "double": {"type": "number"}, "string": {"type": "string"},
    "binary": {"type": "string", "contentEncoding": "base64"}, "null": {"type": "null"},
    "date": {"type": "string", "format": "date"},
    "timestamp": {"type": "string", "format": "date-time"},
    "timestamp_ntz": {"type": "string"},
}


def json_schema(spark_type: Any, title: str | None = None) -> dict[str, Any]:
    """The JSON Schema (a JSON-ready object) of a non-null column of ``spark_type``."""
    schema = {"$schema": DRAFT, **({"title": title} if title else {})}
    return {**schema, **_json(spark_type, False, "value")}


def _json(spark_type: Any, nullable: bool, path: str) -> dict[str, Any]:
    kind = spark_type_name(spark_type)
    schema: dict[str, Any]
    if kind in _PRIMITIVES:
        schema = dict(_PRIMITIVES[kind])
    elif decimal_of(spark_type) is not None:
        schema = {"type": "number"}
    elif kind == "array":
        schema = {"type": "array", "items": _json(spark_type["elementType"],
                                                  spark_type["containsNull"], f"{path}[]")}
    elif kind == "map":
        if spark_type_name(spark_type["keyType"]) != "string":
            raise SchemaMappingError(f"column {path} is a map with keys of type "
                                     f"{spark_type['keyType']}: JSON objects have string keys")
        schema = {"type": "object", "additionalProperties": _json(
            spark_type["valueType"], spark_type["valueContainsNull"], f"{path}{{}}")}
    elif kind == "struct":
        fields = spark_type["fields"]
        schema = {"type": "object",
                  "properties": {f["name"]: _json(f["type"], f["nullable"],
                                                  f"{path}.{f['name']}") for f in fields},
                  "required": [f["name"] for f in fields if not f["nullable"]],
                  "additionalProperties": False}
        if not schema["required"]:
            del schema["required"]
    else:
        raise SchemaMappingError(f"column {path} has type {kind}, which has no JSON type")
    if nullable and kind != "null":
        schema["type"] = [schema["type"], "null"]
    return schema


def _types(schema: Any) -> set[str] | None:
    """The JSON types a schema allows; None for any."""
    if schema is True or not isinstance(schema, dict) or "type" not in schema:
        return None
    found = schema["type"]
    return {found} if isinstance(found, str) else set(found)


def fit_error(spark_type: Any, schema: Any, nullable: bool = False,
              path: str = "value") -> str | None:
    """None when rows of ``spark_type`` validate against ``schema``; else why not."""
    allowed = _types(schema)
    if schema is False:
        return f"column {path}: the schema allows nothing"
    if allowed is None:
        return None
    if nullable and "null" not in allowed:
        return f"column {path} is nullable but the schema's type does not allow null"
    mine = _json(spark_type, False, path)["type"]
    if not (mine in allowed or (mine == "integer" and "number" in allowed)):
        return (f"column {path} of type {spark_type_name(spark_type)} ({mine}) does not fit "
                f"the schema's type {schema['type']}")
    kind = spark_type_name(spark_type)
    if kind == "array" and "items" in schema:
        return fit_error(spark_type["elementType"], schema["items"],
                         spark_type["containsNull"], f"{path}[]")
    if kind == "map" and isinstance(schema.get("additionalProperties"), dict):
        return fit_error(spark_type["valueType"], schema["additionalProperties"],
                         spark_type["valueContainsNull"], f"{path}{{}}")
    if kind != "struct":
        return None
    properties = schema.get("properties", {})
    columns = {f["name"]: f for f in spark_type["fields"]}
    for name in schema.get("required", []):
        if name not in columns:
            return f"column {path}.{name} is missing: the schema requires it"
    for name, column in columns.items():
        if name not in properties:
            if schema.get("additionalProperties", True) is False:
                return f"column {path}.{name} is not a property of the schema"
            continue
        reason = fit_error(column["type"], properties[name], column["nullable"],
                           f"{path}.{name}")
        if reason is not None:
            return reason
    return None
