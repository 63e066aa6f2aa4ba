"""JSON Schemas as Arrow types, mapped as Spark's ``from_json`` would read them.

The mapping: ``object`` with ``properties`` -> struct (fields in the order given); ``array``
-> list of its ``items``; ``string`` -> string, with ``format: date-time`` -> timestamp[us,
UTC] (TimestampType) and ``format: date`` -> date32 (DateType); ``integer`` -> int64;
``number`` -> float64 (so is ``[integer, number]``); ``boolean``; ``enum`` / ``const``
without a type -> string. ``"null"`` in a type list, and a ``oneOf`` / ``anyOf`` of null and
one schema, are that schema. Local ``$ref``s (``#/definitions/...``, ``#/$defs/...``) are
followed. Refused (``UnsupportedSchemaError``): objects without ``properties`` (maps),
other unions, references to documents that are not the schema's registry references
(those are written into it first: ``sparklog.schemas.references``), recursive definitions,
a top level that is not an object.

Invariants:
- Every field is nullable, as ``from_json`` makes them: a missing property reads as null.
- List items are named ``element``, as ``pyspark``'s ``to_arrow_type`` names them.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from sparklog.schemas.avro_types import UnsupportedSchemaError

_SIMPLE: dict[str, pa.DataType] = {
    "integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_(), "string": pa.string(),
    "null": pa.null(),
}
_FORMATS = {"date-time": pa.timestamp("us", tz="UTC"), "date": pa.date32()}


def arrow_type(schema: str | dict) -> pa.DataType:
    """The Arrow struct type of documents of ``schema`` (JSON Schema text, or parsed)."""
    root = json.loads(schema) if isinstance(schema, str) else schema
    kind = _Mapper(root).map(root, "", ())
    if not pa.types.is_struct(kind):
        raise UnsupportedSchemaError("the schema's top level must be an object with "
                                     "properties, to read as a struct of columns")
    return kind


class _Mapper:
    def __init__(self, root: dict) -> None:
        self.root = root

    def map(self, schema: Any, path: str, refs: tuple[str, ...]) -> pa.DataType:
        if schema is True or schema == {}:
            raise UnsupportedSchemaError(f"{_where(path)}: an unconstrained schema has no "
                                         "column type")
        ref = schema.get("$ref")
        if ref is not None:
            return self.map(self._resolve(ref, path, refs), path, (*refs, ref))
        for keyword in ("oneOf", "anyOf"):
            if keyword in schema:
                others = [s for s in schema[keyword] if s.get("type") != "null"]
                if len(others) != 1:
                    raise UnsupportedSchemaError(f"{_where(path)}: {keyword} of several "
                                                 "non-null schemas is not supported")
                return self.map(others[0], path, refs)
        kind = schema.get("type")
        if isinstance(kind, list):
            kinds = {k for k in kind if k != "null"}
            if kinds == {"integer", "number"}:
                return pa.float64()
            if len(kinds) != 1:
                raise UnsupportedSchemaError(f"{_where(path)}: the type list {kind} is not "
                                             "supported (null and one type are)")
            kind = kinds.pop()
        if kind is None and ("enum" in schema or "const" in schema):
            return pa.string()
        if kind is None and "properties" in schema:
            kind = "object"
        if kind == "object":
            properties = schema.get("properties")
            if not properties:
                raise UnsupportedSchemaError(f"{_where(path)}: an object without properties "
                                             "(a map) is not supported")
            return pa.struct([pa.field(name, self.map(sub, _join(path, name), refs))
                              for name, sub in properties.items()])
        if kind == "array":
            item = self.map(schema.get("items", {}), f"{path}[]", refs)
            return pa.list_(pa.field("element", item))
        if kind == "string" and schema.get("format") in _FORMATS:
            return _FORMATS[schema["format"]]
        if kind in _SIMPLE:
            return _SIMPLE[kind]
        raise UnsupportedSchemaError(f"{_where(path)}: type {kind!r} is not supported")

    def _resolve(self, ref: str, path: str, refs: tuple[str, ...]) -> Any:
        if not ref.startswith("#"):
            raise UnsupportedSchemaError(f"{_where(path)}: $ref {ref!r} names another "
                                         "document, which is none of the schema's references")
        if ref in refs:
            raise UnsupportedSchemaError(f"{_where(path)}: $ref {ref!r} is recursive; Spark "
                                         "types cannot hold recursive structures")
        target: Any = self.root
        for part in filter(None, ref[1:].split("/")):
            target = target[part.replace("~1", "/").replace("~0", "~")]
        return target


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _where(path: str) -> str:
    return f"field {path}" if path else "the schema"
