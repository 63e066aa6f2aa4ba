"""Compatibility checks of the schema registry, per schema type: the JSON Schema rules
(``json_compatibility``) on cases from Confluent's rule names, the levels' directions, and
the wiring of the ``avro`` package's checker against fastavro's schema resolution (what a
reader actually does with a writer's bytes)."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.broker.schema_registry.compatibility import check
from sparklog.broker.schema_registry.errors import RegistryError
from sparklog.broker.schema_registry.schema_types import ParsedSchema, parse


def _parsed(schema_type: str, schema: Any) -> ParsedSchema:
    def no_references(ref: Any) -> Any:
        raise AssertionError(ref)

    return parse(schema_type, json.dumps(schema), (), no_references)


def obj(properties: dict[str, Any], *, required: tuple[str, ...] = (), closed: bool = False
        ) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = list(required)
    if closed:
        out["additionalProperties"] = False
    return out


INT, NUM, STR = {"type": "integer"}, {"type": "number"}, {"type": "string"}

JSON_CASES = [
    # (name, old, new, BACKWARD incompatibilities by rule name)
    ("optional property added, closed", obj({"a": INT}, closed=True),
     obj({"a": INT, "b": STR}, closed=True), []),
    ("property added, open", obj({"a": INT}), obj({"a": INT, "b": STR}),
     ["PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"]),
    ("required property added, closed", obj({"a": INT}, closed=True),
     obj({"a": INT, "b": STR}, required=("b",), closed=True),
     ["REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"]),
    ("property removed, open", obj({"a": INT, "b": STR}), obj({"a": INT}), []),
    ("property removed, closed", obj({"a": INT, "b": STR}, closed=True),
     obj({"a": INT}, closed=True), ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"]),
    ("type widened", obj({"a": INT}), obj({"a": NUM}), []),
    ("type narrowed", obj({"a": NUM}), obj({"a": INT}), ["TYPE_NARROWED"]),
    ("type changed", obj({"a": INT}), obj({"a": STR}), ["TYPE_CHANGED"]),
    ("made required", obj({"a": INT}), obj({"a": INT}, required=("a",)),
     ["REQUIRED_ATTRIBUTE_ADDED"]),
    ("closed", obj({"a": INT}), obj({"a": INT}, closed=True),
     ["ADDITIONAL_PROPERTIES_REMOVED"]),
    ("enum narrowed", {"enum": ["x", "y"]}, {"enum": ["x"]}, ["ENUM_ARRAY_NARROWED"]),
    ("enum extended", {"enum": ["x"]}, {"enum": ["x", "y"]}, []),
    ("maxLength decreased", {"type": "string", "maxLength": 9},
     {"type": "string", "maxLength": 3}, ["MAX_LENGTH_DECREASED"]),
    ("items changed", {"type": "array", "items": INT}, {"type": "array", "items": STR},
     ["TYPE_CHANGED"]),
    ("anything to anything", {}, True, []),
]


@pytest.mark.parametrize(("old", "new", "expected"), [c[1:] for c in JSON_CASES],
                         ids=[c[0] for c in JSON_CASES])
def test_json_schema_rules(old: Any, new: Any, expected: list[str]) -> None:
    found = check("BACKWARD", _parsed("JSON", new), [_parsed("JSON", old)])
    assert [f.split(" ")[0] for f in found] == expected


def test_levels_read_in_their_direction() -> None:
    old = _parsed("JSON", obj({"a": NUM}))
    new = _parsed("JSON", obj({"a": INT}))  # new narrows: old reads new, new cannot read old
    assert check("BACKWARD", new, [old]) and not check("FORWARD", new, [old])
    assert check("FULL", new, [old]) and not check("NONE", new, [old])
    first = _parsed("AVRO", {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "int"}]})
    second = _parsed("AVRO", {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "int", "default": 0}]})
    third = _parsed("AVRO", {"type": "record", "name": "R", "fields": [
        {"name": "b", "type": "int", "default": 0}]})
    # third reads first's and second's data ('a' ignored, 'b' defaulted); second reads
    # third's ('a' defaulted) but first cannot ('a' has no default there): only the
    # transitive FORWARD, which checks against first too, refuses third
    assert not check("BACKWARD_TRANSITIVE", third, [first, second])
    assert not check("FORWARD", third, [first, second])
    assert check("FORWARD_TRANSITIVE", third, [first, second])


def _proto(body: str, package: str = "shop", syntax: str = "proto3") -> str:
    return f'syntax = "{syntax}";\npackage {package};\n{body}'


ORDER_V1 = "message Order { int32 id = 1; string note = 2; Line line = 3; " \
           "message Line { int64 qty = 1; } }"
PROTOBUF_CASES = [
    ("field added", ORDER_V1, ORDER_V1.replace("} }", "} int64 at = 4; }"), []),
    ("field removed", ORDER_V1, ORDER_V1.replace("string note = 2; ", ""), []),
    ("field renamed", ORDER_V1, ORDER_V1.replace("note", "remark"), []),
    ("int32 to int64 (one wire group)", ORDER_V1, ORDER_V1.replace("int32 id", "int64 id"),
     []),
    ("string to bytes", ORDER_V1, ORDER_V1.replace("string note", "bytes note"), []),
    ("int32 to string", ORDER_V1, ORDER_V1.replace("int32 id", "string id"),
     ["FIELD_SCALAR_KIND_CHANGED"]),
    ("int32 to sint32", ORDER_V1, ORDER_V1.replace("int32 id", "sint32 id"),
     ["FIELD_SCALAR_KIND_CHANGED"]),
    ("enum to int32", "message M { E e = 1; } enum E { A = 0; }",
     "message M { int32 e = 1; } enum E { A = 0; }", []),
    ("scalar to message", ORDER_V1, ORDER_V1.replace("int32 id", "Line id"),
     ["FIELD_KIND_CHANGED"]),
    ("message to map", ORDER_V1, ORDER_V1.replace("Line line", "map<string, Line> line"),
     ["FIELD_KIND_CHANGED"]),
    ("map value type", "message M { map<string, int32> m = 1; }",
     "message M { map<string, string> m = 1; }", ["FIELD_SCALAR_KIND_CHANGED"]),
    ("a nested message's field", ORDER_V1, ORDER_V1.replace("int64 qty", "double qty"),
     ["FIELD_SCALAR_KIND_CHANGED", "FIELD_NAMED_TYPE_CHANGED"]),
    ("a field's message type renamed", ORDER_V1 + " message Other { int64 qty = 1; }",
     ORDER_V1.replace("Line line", "Other line") + " message Other { int64 qty = 1; }",
     ["FIELD_NAMED_TYPE_CHANGED"]),
    ("message removed", ORDER_V1 + " message Refund { int32 id = 1; }", ORDER_V1,
     ["MESSAGE_REMOVED"]),
    ("message added", ORDER_V1, ORDER_V1 + " message Refund { int32 id = 1; }", []),
    ("package changed", ORDER_V1, "package other; " + ORDER_V1, ["PACKAGE_CHANGED"]),
    ("two fields into a new oneof", "message M { int32 a = 1; int32 b = 2; }",
     "message M { oneof o { int32 a = 1; int32 b = 2; } }",
     ["MULTIPLE_FIELDS_MOVED_TO_ONEOF"]),
    ("one field into a new oneof", "message M { int32 a = 1; }",
     "message M { oneof o { int32 a = 1; } }", []),
    ("a field into an existing oneof", "message M { int32 a = 1; oneof o { int32 b = 2; } }",
     "message M { oneof o { int32 a = 1; int32 b = 2; } }",
     ["FIELD_MOVED_TO_EXISTING_ONEOF"]),
    ("a oneof member removed", "message M { oneof o { int32 a = 1; int32 b = 2; } }",
     "message M { oneof o { int32 a = 1; } }", ["ONEOF_FIELD_REMOVED"]),
    ("a whole oneof removed", "message M { int32 x = 3; oneof o { int32 a = 1; } }",
     "message M { int32 x = 3; }", []),
    ("a oneof member moved out", "message M { oneof o { int32 a = 1; int32 b = 2; } }",
     "message M { int32 a = 1; int32 b = 2; }", []),
    ("proto3 optional is not a oneof", "message M { int32 a = 1; int32 b = 2; }",
     "message M { optional int32 a = 1; optional int32 b = 2; }", []),
    ("a recursive message", "message Node { int32 v = 1; repeated Node kids = 2; }",
     "message Node { int64 v = 1; repeated Node kids = 2; string name = 3; }", []),
]
PROTO2_CASES = [
    ("required field added", "message M { optional int32 a = 1; }",
     "message M { optional int32 a = 1; required int32 b = 2; }", ["REQUIRED_FIELD_ADDED"]),
    ("required field removed", "message M { optional int32 a = 1; required int32 b = 2; }",
     "message M { optional int32 a = 1; }", ["REQUIRED_FIELD_REMOVED"]),
]


def _parsed_proto(text: str, references: tuple[Any, ...] = (),
                  resolve: Any = None) -> ParsedSchema:
    return parse("PROTOBUF", text, references, resolve or (lambda ref: None))


@pytest.mark.parametrize(("old", "new", "expected", "syntax"),
                         [(*c[1:], "proto3") for c in PROTOBUF_CASES]
                         + [(*c[1:], "proto2") for c in PROTO2_CASES],
                         ids=[c[0] for c in PROTOBUF_CASES + PROTO2_CASES])
def test_protobuf_rules(old: str, new: str, expected: list[str], syntax: str) -> None:
    """Confluent's ProtobufSchemaDiff verdicts: ``new`` reads what ``old`` wrote."""
    def text(body: str) -> str:
        package = "shop"
        if body.startswith("package "):
            package, _, body = body[len("package "):].partition("; ")
        return _proto(body, package, syntax)

    found = check("BACKWARD", _parsed_proto(text(new)), [_parsed_proto(text(old))])
    assert [f.split("'")[1] for f in found] == expected
    assert all("additionalInfo:'#/" in f for f in found)


def test_protobuf_checks_the_files_references_give() -> None:
    """An imported message changed incompatibly between the versions a field's file
    imports; a file the parser cannot build is registered unchecked, as before."""
    from sparklog.broker.schema_registry.records import Reference, SchemaEntry

    common = {1: _proto("message Money { int64 cents = 1; }", "common"),
              2: _proto("message Money { string cents = 1; }", "common")}

    def resolve(ref: Reference) -> SchemaEntry:
        return SchemaEntry("money", ref.version, ref.version, "PROTOBUF", common[ref.version])

    def bill(version: int) -> ParsedSchema:
        return _parsed_proto(_proto('import "common/money.proto"; '
                                    "message Bill { common.Money due = 1; }"),
                             (Reference("common/money.proto", "money", version),), resolve)

    found = check("BACKWARD", bill(2), [bill(1)])
    assert [f.split("'")[1] for f in found] == ["FIELD_SCALAR_KIND_CHANGED",
                                                "FIELD_NAMED_TYPE_CHANGED"]
    assert check("BACKWARD", bill(1), [bill(1)]) == []
    assert check("BACKWARD", _parsed_proto("message M { int32 a = ; }"), [bill(1)]) == []


def test_invalid_schemas_are_42201() -> None:
    for schema_type, text in (("AVRO", '{"type": "record"}'), ("AVRO", "{"),
                              ("JSON", "[1]"), ("PROTOBUF", " "), ("XML", "<a/>")):
        with pytest.raises(RegistryError) as refused:
            parse(schema_type, text, (), lambda ref: None)  # type: ignore[arg-type,return-value]
        assert refused.value.error_code == 42201


PRIMITIVES = st.sampled_from(["int", "long", "float", "double", "string", "boolean",
                              "bytes"])
DEFAULTS = {"int": 0, "long": 0, "float": 0.0, "double": 0.0, "string": "", "boolean": False,
            "bytes": ""}


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from("abcdef"), unique=True, max_size=5))
    fields = []
    for name in names:
        kind = draw(PRIMITIVES)
        field: dict[str, Any] = {"name": name, "type": kind}
        if draw(st.booleans()):
            field["default"] = DEFAULTS[kind]
        fields.append(field)
    return {"type": "record", "name": "R", "fields": fields}


def _datum(schema: dict[str, Any]) -> dict[str, Any]:
    return {f["name"]: DEFAULTS[f["type"]] if f["type"] != "bytes" else b"" for f in
            schema["fields"]}


@settings(max_examples=300, deadline=None, database=None)
@given(writer=records(), reader=records())
def test_avro_backward_verdicts_match_what_a_reader_does(writer: dict[str, Any],
                                                         reader: dict[str, Any]) -> None:
    """BACKWARD says the new schema reads the old one's data exactly when fastavro's
    schema resolution can read a record written with the old one into the new one."""
    compatible = not check("BACKWARD", _parsed("AVRO", reader), [_parsed("AVRO", writer)])
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(writer), _datum(writer))
    body.seek(0)
    try:
        fastavro.schemaless_reader(body, fastavro.parse_schema(writer),
                                   fastavro.parse_schema(reader))
        readable = True
    except (fastavro.read.SchemaResolutionError, ValueError, TypeError, EOFError):
        readable = False
    assert compatible == readable
