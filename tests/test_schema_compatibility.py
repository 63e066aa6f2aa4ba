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
