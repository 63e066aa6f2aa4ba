"""Typed columns' options: which format the key and value are in, and where their schemas are.

Options (``<column>`` is ``value`` or ``key``): ``<column>Format`` (``binary``, the default:
the column stays bytes; ``avro``; ``json``; ``protobuf``); the schema, inline as
``<column>Schema`` (Avro schema JSON, a JSON Schema, or a Protobuf file: ``.proto`` text
or the base64 ``FileDescriptorProto`` confluent-kafka registers) or from the
registry at ``schemaRegistry.url``: the subject ``<column>Subject`` (default
TopicNameStrategy's ``<topic>-<column>``, so one topic), its latest version unless
``<column>SchemaVersion`` or ``<column>SchemaId`` names one; for protobuf,
``<column>ProtobufMessage`` names the message read (default: the file's first). Registry
client settings in confluent-kafka's names: ``schemaRegistry.basic.auth.user.info``
(``user:password``), ``schemaRegistry.ssl.ca.location``,
``schemaRegistry.ssl.certificate.location``, ``schemaRegistry.ssl.key.location``.
``onDecodeError``: ``fail`` (default), ``skip`` or ``deadLetter`` (to ``deadLetterTopic``).

Invariants:
- ``parse_typed_options`` does no I/O; it returns None when neither column has a format
  other than binary (the source's schema and read path are then exactly the untyped ones),
  else a ``TypedOptions`` whose every column with a format has a schema source: inline,
  or the registry. Schema options for a binary column, ``<column>ProtobufMessage`` for
  another format than protobuf, a version and an id together,
  ``deadLetterTopic`` without ``onDecodeError=deadLetter`` (and the reverse) are refused.
- With an inline schema and no registry, values are the bare encoding (as Spark's
  ``from_avro`` / ``from_json`` read them); with a registry, values are in Confluent's
  wire format (Protobuf's with its message indexes), an inline schema then being the
  reader schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pyarrow as pa

from sparklog.datasource.options import OptionError, get_option, parse_choice, parse_int
from sparklog.schemas.registry import RegistryConfig

FORMATS = ("binary", "avro", "json", "protobuf")
ON_DECODE_ERROR = ("fail", "skip", "deadLetter")
COLUMNS = ("key", "value")
_PER_COLUMN = ("Format", "Schema", "Subject", "SchemaVersion", "SchemaId", "ProtobufMessage")
REGISTRY_SETTINGS = ("url", "basic.auth.user.info", "ssl.ca.location",
                     "ssl.certificate.location", "ssl.key.location")
TYPED_OPTIONS = frozenset(
    [f"{column}{suffix}" for column in COLUMNS for suffix in _PER_COLUMN]
    + [f"schemaRegistry.{name}" for name in REGISTRY_SETTINGS]
    + ["onDecodeError", "deadLetterTopic"])


@dataclass(frozen=True)
class ColumnOptions:
    column: str  # key or value
    format: str  # avro, json or protobuf
    inline_schema: str | None
    subject: str | None
    version: int | None
    schema_id: int | None
    message: str | None = None  # protobuf: the message read (None: the file's first)


@dataclass(frozen=True)
class TypedOptions:
    columns: tuple[ColumnOptions, ...]
    registry: RegistryConfig | None
    on_decode_error: str
    dead_letter_topic: str | None


def parse_typed_options(options: Mapping[str, str]) -> TypedOptions | None:
    registry = _registry(options)
    columns = tuple(column for name in COLUMNS
                    if (column := _column(options, name, registry)) is not None)
    on_error = parse_choice(options, "onDecodeError", ON_DECODE_ERROR, "fail")
    dead_letter_topic = get_option(options, "deadLetterTopic")
    if (on_error == "deadLetter") != bool(dead_letter_topic):
        raise OptionError("options onDecodeError=deadLetter and deadLetterTopic go together: "
                          "name the dead-letter topic with deadLetterTopic")
    if not columns:
        if registry is not None or get_option(options, "onDecodeError") is not None:
            raise OptionError("options schemaRegistry.* and onDecodeError apply to typed "
                              "columns: set valueFormat (or keyFormat) to avro, json or protobuf")
        return None
    return TypedOptions(columns, registry, on_error, dead_letter_topic)


def _registry(options: Mapping[str, str]) -> RegistryConfig | None:
    settings = tuple((name, value) for name in REGISTRY_SETTINGS
                     if (value := get_option(options, f"schemaRegistry.{name}")) is not None)
    if not settings:
        return None
    if "url" not in dict(settings):
        raise OptionError("option schemaRegistry.url is required with the other "
                          "schemaRegistry.* options")
    return RegistryConfig(settings)


def _column(options: Mapping[str, str], column: str,
            registry: RegistryConfig | None) -> ColumnOptions | None:
    name = f"{column}Format"
    kind = parse_choice(options, name, FORMATS, "binary")
    given = [f"{column}{suffix}" for suffix in _PER_COLUMN[1:]
             if get_option(options, f"{column}{suffix}") is not None]
    if kind == "binary":
        if given:
            raise OptionError(f"option {given[0]} needs {name} avro, json or protobuf (the "
                              f"{column} column is bytes by default)")
        return None
    message = get_option(options, f"{column}ProtobufMessage")
    if message is not None and kind != "protobuf":
        raise OptionError(f"option {column}ProtobufMessage needs {name}=protobuf")
    inline = get_option(options, f"{column}Schema")
    version = parse_int(options, f"{column}SchemaVersion", None, minimum=1)
    schema_id = parse_int(options, f"{column}SchemaId", None, minimum=0)
    if inline is None and registry is None:
        raise OptionError(f"option {name}={kind} needs a schema: schemaRegistry.url (the "
                          f"subject's schema) or {column}Schema (inline)")
    if inline is not None and (version is not None or schema_id is not None):
        raise OptionError(f"option {column}Schema gives the schema inline: it cannot be "
                          f"combined with {column}SchemaVersion or {column}SchemaId")
    if version is not None and schema_id is not None:
        raise OptionError(f"options {column}SchemaVersion and {column}SchemaId both choose "
                          "the schema: give one")
    return ColumnOptions(column, kind, inline, get_option(options, f"{column}Subject"),
                         version, schema_id, message)


@dataclass(frozen=True)
class ColumnDecoding:
    """A column's schema as resolved on the driver: what its tasks decode with."""

    column: str  # key or value
    format: str  # avro, json or protobuf
    schema_str: str  # the reader schema
    schema_id: int | None  # its registry id (None: inline)
    arrow_type: pa.DataType
    framed: bool  # values in Confluent's wire format (a registry was given)
    message: str | None = None  # protobuf: the message read (None: the file's first)


@dataclass(frozen=True)
class Decoding:
    """Everything a task needs to decode its typed columns (shipped in ``TaskSettings``)."""

    columns: tuple[ColumnDecoding, ...]
    registry: RegistryConfig | None
    on_decode_error: str
    dead_letter_topic: str | None

    def arrow_type(self, column: str) -> pa.DataType | None:
        return next((c.arrow_type for c in self.columns if c.column == column), None)
