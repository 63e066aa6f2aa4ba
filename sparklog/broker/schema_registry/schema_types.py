"""Parsing the schema types the registry serves: AVRO (the ``avro`` package), JSON (JSON
Schema documents) and PROTOBUF (stored as given; checked with the files its references
give), each with its references resolved.

Invariants:
- ``parse`` either returns a ``ParsedSchema`` or raises Confluent's 42201 (invalid schema):
  a schema that does not parse is never stored.
- A schema's identity (``ParsedSchema.identity``) is its type, its canonical text (AVRO and
  JSON: the document re-serialized compactly, key order kept, as Confluent compares them)
  and its references, so registering the same schema twice finds the same id.
- References are resolved through ``resolve`` (subject and version -> the registered
  version), depth first, each named type defined once: an AVRO schema sees the named types
  of its references, a JSON schema's ``"$ref": NAME`` its reference named NAME.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import avro.errors
import avro.name
import avro.schema

from sparklog.broker.schema_registry.errors import invalid_schema
from sparklog.broker.schema_registry.records import Reference, SchemaEntry
from sparklog.schemas.references import protobuf_bundle

TYPES = ("JSON", "PROTOBUF", "AVRO")
MAX_REFERENCE_DEPTH = 32

Resolve = Callable[[Reference], SchemaEntry]


@dataclass(frozen=True)
class ParsedSchema:
    schema_type: str
    canonical: str
    references: tuple[Reference, ...]
    parsed: Any = field(compare=False, hash=False)
    """AVRO: ``avro.schema.Schema``; JSON: the document with ``referenced`` beside it;
    PROTOBUF: the text with the files its references give (``protobuf_bundle``)."""
    referenced: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def identity(self) -> tuple[str, str, tuple[Reference, ...]]:
        return self.schema_type, self.canonical, self.references

    @cached_property
    def built(self) -> Any:
        """PROTOBUF: the file built with its imports, once (None when it does not build)."""
        from sparklog.broker.schema_registry.protobuf_compatibility import built

        return built(self.parsed)


def parse(schema_type: str, text: str, references: tuple[Reference, ...],
          resolve: Resolve) -> ParsedSchema:
    if schema_type not in TYPES:
        raise invalid_schema(f"unknown schema type {schema_type}")
    if schema_type == "PROTOBUF":
        if not text.strip():
            raise invalid_schema("empty PROTOBUF schema")
        imports = [(ref.name, entry.schema) for ref, entry in _walk(references, resolve, 0)]
        return ParsedSchema(schema_type, text, references, protobuf_bundle(text, imports))
    try:
        document = json.loads(text)
        canonical = json.dumps(document, separators=(",", ":"))
    except (ValueError, RecursionError) as exc:
        raise invalid_schema(f"{text[:200]!r}: {exc}") from None
    if schema_type == "JSON":
        if not isinstance(document, (dict, bool)):
            raise invalid_schema("a JSON schema is an object or a boolean")
        referenced = {ref.name: json.loads(entry.schema)
                      for ref, entry in _walk(references, resolve, 0)}
        return ParsedSchema(schema_type, canonical, references, document, referenced)
    names = avro.name.Names()
    try:
        for _, entry in _walk(references, resolve, 0):
            avro.schema.make_avsc_object(json.loads(entry.schema), names)
        parsed = avro.schema.make_avsc_object(document, names)
    except (avro.errors.AvroException, ValueError, TypeError, AttributeError,
            RecursionError) as exc:
        raise invalid_schema(f"{text[:200]!r}: {exc}") from None
    return ParsedSchema(schema_type, canonical, references, parsed)


def _walk(references: tuple[Reference, ...], resolve: Resolve, depth: int
          ) -> list[tuple[Reference, SchemaEntry]]:
    """The references and theirs, depth first (a referenced schema before its referrer),
    each once."""
    if depth > MAX_REFERENCE_DEPTH:
        raise invalid_schema("references nested too deep")
    out: list[tuple[Reference, SchemaEntry]] = []
    for ref in references:
        entry = resolve(ref)
        for found in [*_walk(entry.references, resolve, depth + 1), (ref, entry)]:
            if found not in out:
                out.append(found)
    return out
