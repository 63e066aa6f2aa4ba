"""Compatibility levels and the check a new schema must pass against a subject's versions.

Levels (Confluent's): BACKWARD (the default: the new schema reads data written with the
latest version), FORWARD (the latest version reads data written with the new one), FULL
(both), their TRANSITIVE forms (against every live version, not only the latest) and NONE.

Invariants:
- ``check`` returns the incompatibilities found (empty: compatible). Soft-deleted versions
  are never checked against (the caller passes live versions only, oldest first).
- AVRO is checked with the ``avro`` package's ``ReaderWriterCompatibilityChecker`` (Avro's
  schema resolution rules); JSON with ``json_compatibility``; PROTOBUF with
  ``protobuf_compatibility`` (Confluent's rules; a file the parser cannot build is accepted
  unchecked, and logged). A change of schema type under any level but NONE is refused, as
  Confluent refuses it.
"""

from __future__ import annotations

import logging

from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from sparklog.broker.schema_registry.json_compatibility import json_incompatibilities
from sparklog.broker.schema_registry.protobuf_compatibility import (
    incompatibilities as protobuf_incompatibilities,
)
from sparklog.broker.schema_registry.schema_types import ParsedSchema

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE",
          "FULL", "FULL_TRANSITIVE")
DEFAULT_LEVEL = "BACKWARD"
log = logging.getLogger(__name__)


def reader_writer(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    """What keeps ``reader`` from reading data written with ``writer``."""
    if reader.schema_type != writer.schema_type:
        return [f"Incompatible schema type: {writer.schema_type} to {reader.schema_type}"]
    if reader.schema_type == "AVRO":
        try:
            result = ReaderWriterCompatibilityChecker().get_compatibility(reader.parsed,
                                                                          writer.parsed)
        except RecursionError:
            return ["the schemas are nested too deep to compare"]
        if result.compatibility is SchemaCompatibilityType.compatible:
            return []
        return [f"{{errorType:'{kind.name}', description:'{message}', "
                f"additionalInfo:'{location}'}}"
                for kind, message, location in zip(
                    result.incompatibilities, result.messages, result.locations, strict=False)
                ] or ["incompatible"]
    if reader.schema_type == "JSON":
        return json_incompatibilities(reader.parsed, writer.parsed, reader.referenced,
                                      writer.referenced)
    if writer.built is None or reader.built is None:
        log.info("a PROTOBUF schema does not build here; registered without a "
                 "compatibility check")
        return []
    return protobuf_incompatibilities(writer.built, reader.built)


def check(level: str, new: ParsedSchema, live: list[ParsedSchema]) -> list[str]:
    """Incompatibilities of ``new`` with the ``live`` versions (oldest first) at ``level``."""
    if level == "NONE" or not live:
        return []
    against = live if level.endswith("_TRANSITIVE") else live[-1:]
    found: list[str] = []
    for old in reversed(against):
        if level.startswith(("BACKWARD", "FULL")):
            found += reader_writer(new, old)
        if level.startswith(("FORWARD", "FULL")):
            found += reader_writer(old, new)
        if found:
            break
    return found
