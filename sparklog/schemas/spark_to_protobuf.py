"""Spark types as a Protobuf file (the sink's derived ``valueFormat=protobuf`` schema), and
whether rows of a Spark type fit a message of a given file.

The mapping is the reverse of the reader's (``protobuf_types``, spark-protobuf's
``SchemaConverters``), in proto3: long -> int64; integer, short and byte -> int32; boolean
-> bool; float; double; string; binary -> bytes; timestamp -> ``google.protobuf.Timestamp``;
struct -> a message (nested structs are messages nested in it, named after their field in
CamelCase); array -> repeated; map -> map (keys string, integral or boolean). Fields are
numbered from 1 in the struct's order. Refused (``SchemaMappingError``, naming the field):
decimal, date, timestamp_ntz and interval types, arrays of arrays or maps, maps of arrays or
maps, and field names that are not Protobuf identifiers.

Invariants:
- proto3's implicit presence: a null scalar is written as its default, a null struct as an
  absent message, which the reader reads back as null.
- ``fit_error`` names the first Spark field the message cannot hold (missing by name, or
  of a kind the field's type does not take); message fields the rows lack are left unset.
- Pure functions of Spark's JSON type form (``DataType.jsonValue()``): no pyspark import.
"""

from __future__ import annotations

import re
from typing import Any

from sparklog.schemas.proto_files import TIMESTAMP, type_name
from sparklog.schemas.spark_to_avro import SchemaMappingError

TOP_LEVEL_MESSAGE = "TopLevelRecord"
"""The derived message's name unless ``<column>ProtobufMessage`` names one (Spark's Avro
``topLevelRecord``, capitalized as Protobuf's style has it)."""
_SCALARS = {"long": "int64", "integer": "int32", "short": "int32", "byte": "int32",
            "boolean": "bool", "float": "float", "double": "double", "string": "string",
            "binary": "bytes"}
_MAP_KEYS = ("string", "long", "integer", "short", "byte", "boolean")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def protobuf_schema(spark_type: dict[str, Any], name: str = TOP_LEVEL_MESSAGE) -> str:
    """The ``.proto`` text of one message (``name``) holding rows of ``spark_type``."""
    if not isinstance(spark_type, dict) or spark_type.get("type") != "struct":
        raise SchemaMappingError("a Protobuf message needs a struct column")
    _check_name(name, "the message name")
    uses_timestamp: list[bool] = []
    body = _message(name, spark_type, "", uses_timestamp, "  ")
    head = 'syntax = "proto3";\n'
    if uses_timestamp:
        head += 'import "google/protobuf/timestamp.proto";\n'
    return f"{head}\n{body}"


def _check_name(name: str, what: str) -> None:
    if not _IDENTIFIER.match(name):
        raise SchemaMappingError(f"{what} {name!r} is not a Protobuf identifier")


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or "Field"


def _message(name: str, struct: dict[str, Any], path: str, uses_timestamp: list[bool],
             indent: str) -> str:
    nested: list[str] = []
    fields: list[str] = []
    taken = {f["name"] for f in struct["fields"]}  # a nested message's name is none of them
    for number, field in enumerate(struct["fields"], 1):
        where = f"{path}.{field['name']}" if path else field["name"]
        _check_name(field["name"], f"the field {where}: its name")
        kind = field["type"]
        label = ""
        if isinstance(kind, dict) and kind.get("type") == "array":
            label, kind = "repeated ", kind["elementType"]
            if isinstance(kind, dict) and kind.get("type") in ("array", "map"):
                raise SchemaMappingError(f"the field {where}: an array of {kind['type']}s "
                                         "has no Protobuf type (repeated holds no repeated)")
        if isinstance(kind, dict) and kind.get("type") == "map":
            key, value = kind["keyType"], kind["valueType"]
            if key not in _MAP_KEYS:
                raise SchemaMappingError(f"the field {where}: a map key of type {key} has no "
                                         "Protobuf map key type")
            if isinstance(value, dict) and value.get("type") in ("array", "map"):
                raise SchemaMappingError(f"the field {where}: a map of {value['type']}s has "
                                         "no Protobuf type")
            value_name = _type(value, where, f"{_camel(field['name'])}Value", nested,
                               uses_timestamp, indent, taken)
            fields.append(f"{indent}map<{_SCALARS[key]}, {value_name}> {field['name']} = "
                          f"{number};")
            continue
        type_name = _type(kind, where, _camel(field["name"]), nested, uses_timestamp, indent,
                          taken)
        fields.append(f"{indent}{label}{type_name} {field['name']} = {number};")
    lines = [f"{indent[:-2]}message {name} {{", *nested, *fields, f"{indent[:-2]}}}"]
    return "\n".join(lines)


def _type(kind: Any, where: str, nested_name: str, nested: list[str],
          uses_timestamp: list[bool], indent: str, taken: set[str]) -> str:
    if isinstance(kind, str) and kind in _SCALARS:
        return _SCALARS[kind]
    if kind == "timestamp":
        uses_timestamp.append(True)
        return TIMESTAMP
    if isinstance(kind, dict) and kind.get("type") == "struct":
        name = nested_name
        while name in taken:
            name += "_"
        taken.add(name)
        nested.append(_message(name, kind, where, uses_timestamp, indent + "  "))
        return name
    shown = kind if isinstance(kind, str) else kind.get("type")
    raise SchemaMappingError(f"the field {where}: Spark type {shown} has no Protobuf type")


def fit_error(spark_type: dict[str, Any], message: Any) -> str | None:
    """Why rows of ``spark_type`` do not fit the Protobuf ``message`` (a descriptor)."""
    if not isinstance(spark_type, dict) or spark_type.get("type") != "struct":
        return "a Protobuf message needs a struct column"
    return _struct_fit(spark_type, message, "")


def _struct_fit(struct: dict[str, Any], message: Any, path: str) -> str | None:
    for field in struct["fields"]:
        where = f"{path}.{field['name']}" if path else field["name"]
        target = message.fields_by_name.get(field["name"])
        if target is None:
            return f"the message {message.full_name} has no field {where}"
        reason = _field_fit(field["type"], target, where)
        if reason is not None:
            return reason
    return None


def _field_fit(kind: Any, field: Any, where: str) -> str | None:
    is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
    if isinstance(kind, dict) and kind.get("type") == "map":
        if not is_map:
            return f"{where} is a map in the rows, not in the message"
        entry = field.message_type.fields_by_name
        return (_value_fit(kind["keyType"], entry["key"], f"{where} (key)")
                or _value_fit(kind["valueType"], entry["value"], f"{where} (value)"))
    if is_map:
        return f"{where} is a map in the message, not in the rows"
    if isinstance(kind, dict) and kind.get("type") == "array":
        if not field.is_repeated:
            return f"{where} is an array in the rows, not repeated in the message"
        return _value_fit(kind["elementType"], field, where)
    if field.is_repeated:
        return f"{where} is repeated in the message, not an array in the rows"
    return _value_fit(kind, field, where)


_TAKES = {
    "long": ("INT64", "SINT64", "SFIXED64", "UINT64", "FIXED64"),
    "integer": ("INT32", "SINT32", "SFIXED32", "UINT32", "FIXED32", "INT64", "SINT64",
                "SFIXED64", "UINT64", "FIXED64"),
    "boolean": ("BOOL",), "float": ("FLOAT", "DOUBLE"), "double": ("DOUBLE",),
    "string": ("STRING", "ENUM"), "binary": ("BYTES",),
}
_TAKES["short"] = _TAKES["byte"] = _TAKES["integer"]


def _value_fit(kind: Any, field: Any, where: str) -> str | None:
    if isinstance(kind, dict) and kind.get("type") == "struct":
        if field.message_type is None or field.message_type.full_name == TIMESTAMP:
            return f"{where} is a struct in the rows, not a message in the message"
        return _struct_fit(kind, field.message_type, where)
    if kind == "timestamp":
        if field.message_type is None or field.message_type.full_name != TIMESTAMP:
            return f"{where} is a timestamp in the rows, not a {TIMESTAMP}"
        return None
    taken = _TAKES.get(kind) if isinstance(kind, str) else None
    if taken is None:
        shown = kind if isinstance(kind, str) else kind.get("type")
        return f"{where}: Spark type {shown} has no Protobuf type"
    if type_name(field) not in taken:
        shown = field.message_type.full_name if field.message_type is not None \
            else type_name(field).lower()
        return f"{where} is {kind} in the rows, which a {shown} field does " \
               "not hold"
    return None
