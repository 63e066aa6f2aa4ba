"""The sink's ``valueFormat`` / ``keyFormat``: a column encoded in Confluent's wire format with
a schema of a schema registry, chosen on the driver as Confluent's serializers choose it.

Options (``<col>`` is ``value`` or ``key``): ``<col>Format`` (``binary``: the column's
string or binary bytes as they are, the default; ``avro``; ``json`` for JSON Schema;
``protobuf``),
``schemaRegistry.url`` and ``schemaRegistry.basic.auth.user.info``, ``<col>Subject``
(default TopicNameStrategy: ``<topic>-<col>``, which needs the ``topic`` option),
``<col>Schema`` (an inline schema instead of the one derived from the column's Spark type),
``<col>AvroRecordName`` / ``<col>AvroRecordNamespace`` (the derived Avro record's name,
Spark's ``topLevelRecord`` and ``""`` by default), ``<col>ProtobufMessage`` (the derived
message's name, ``TopLevelRecord`` by default, or the message of a given file written, its
first by default), ``autoRegisterSchemas`` (default true, as
``auto.register.schemas``) and ``useLatestVersion`` (default false, ``use.latest.version``).

Invariants:
- ``column_encoding`` runs on the driver (from ``sink_spec``), before any task starts:
  options are checked first, without a network call; then the registry is asked once:
  ``useLatestVersion=true`` takes the subject's latest schema (its type must be the format's
  and the column's rows must fit it, else a ``SinkSchemaError`` naming the column);
  otherwise the derived (or inline) schema is registered (``autoRegisterSchemas=true``: a
  registration the registry refuses, e.g. an incompatible change, fails the write with the
  registry's message) or looked up (``false``: a schema not registered fails the write).
- The result is a picklable ``ColumnEncoding`` (schema id and text): tasks never talk to the
  registry. ``batch_encoder`` builds, in a task, the function that replaces the encoded
  columns of a batch by their binary encodings, slice by slice (``encode.chunks``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.types import StructType

from sparklog.datasource.options import OptionError, get_option, parse_bool, parse_choice
from sparklog.schemas.column_encoding import AVRO, JSON, PROTOBUF, ColumnEncoding
from sparklog.schemas.spark_to_avro import (
    TOP_LEVEL_RECORD,
    SchemaMappingError,
    avro_schema,
)
from sparklog.schemas.spark_to_avro import fit_error as avro_fit_error
from sparklog.schemas.spark_to_json_schema import fit_error as json_fit_error
from sparklog.schemas.spark_to_json_schema import json_schema
from sparklog.schemas.spark_to_protobuf import TOP_LEVEL_MESSAGE, protobuf_schema
from sparklog.schemas.spark_to_protobuf import fit_error as protobuf_fit_error

BINARY = "binary"
FORMATS = (BINARY, AVRO, JSON, PROTOBUF)
REGISTRY_URL, REGISTRY_USER_INFO = "schemaRegistry.url", "schemaRegistry.basic.auth.user.info"
AUTO_REGISTER, USE_LATEST = "autoRegisterSchemas", "useLatestVersion"
_SCHEMA_TYPES = {AVRO: "AVRO", JSON: "JSON", PROTOBUF: "PROTOBUF"}


def options_of(column: str) -> set[str]:
    """The option names of one column's encoding."""
    return {f"{column}{suffix}" for suffix in ("Format", "Subject", "Schema", "AvroRecordName",
                                               "AvroRecordNamespace", "ProtobufMessage")}


ENCODING_OPTIONS = (options_of("value") | options_of("key")
                    | {REGISTRY_URL, REGISTRY_USER_INFO, AUTO_REGISTER, USE_LATEST})
"""Every option this module reads (the sink's known options include them)."""


class SinkEncodingError(ValueError):
    """A column cannot be encoded as asked: no schema fits it, or the registry refused it."""


def column_format(options: Mapping[str, str], column: str) -> str:
    return parse_choice(options, f"{column}Format", FORMATS, BINARY)


def _derived_schema(options: Mapping[str, str], column: str, fmt: str,
                    spark_type: Any) -> str:
    try:
        if fmt == AVRO:
            name = get_option(options, f"{column}AvroRecordName") or TOP_LEVEL_RECORD
            namespace = get_option(options, f"{column}AvroRecordNamespace") or ""
            return json.dumps(avro_schema(spark_type, name, namespace))
        if fmt == PROTOBUF:
            return protobuf_schema(spark_type, get_option(options, f"{column}ProtobufMessage")
                                   or TOP_LEVEL_MESSAGE)
        return json.dumps(json_schema(spark_type))
    except SchemaMappingError as error:
        raise SinkEncodingError(f"{column}Format={fmt}: {error}") from None


def _fit(fmt: str, spark_type: Any, schema: str, what: str, message: str | None) -> None:
    if fmt == PROTOBUF:
        from sparklog.schemas.proto_files import message_descriptor  # protobuf: when used
        from sparklog.schemas.unsupported import UnsupportedSchemaError

        try:
            descriptor = message_descriptor(schema, message)
        except UnsupportedSchemaError as error:
            raise SinkEncodingError(f"{what}: {error}") from None
        reason = protobuf_fit_error(spark_type, descriptor)
    else:
        try:
            parsed = json.loads(schema)
        except ValueError as error:
            raise OptionError(f"{what} is not JSON: {error}") from None
        reason = (avro_fit_error if fmt == AVRO else json_fit_error)(spark_type, parsed)
    if reason is not None:
        raise SinkEncodingError(f"the rows do not fit {what}: {reason}")


def column_encoding(options: Mapping[str, str], schema: StructType, column: str,
                    topic: str | None) -> ColumnEncoding | None:
    """The resolved encoding of ``column``; None for ``binary``. See the module invariants."""
    fmt = column_format(options, column)
    if fmt == BINARY:
        return None
    url = get_option(options, REGISTRY_URL)
    if not url:
        raise OptionError(f"option {column}Format={fmt} needs option {REGISTRY_URL}")
    subject = get_option(options, f"{column}Subject") or (topic and f"{topic}-{column}")
    if not subject:
        raise OptionError(f"option {column}Format={fmt} needs the topic option (for the "
                          f"subject <topic>-{column}) or option {column}Subject")
    spark_type = schema[column].dataType.jsonValue()
    use_latest = parse_bool(options, USE_LATEST, False)
    auto_register = parse_bool(options, AUTO_REGISTER, True)
    inline = get_option(options, f"{column}Schema")
    message = get_option(options, f"{column}ProtobufMessage") if fmt == PROTOBUF else None
    if inline is not None:
        _fit(fmt, spark_type, inline, f"option {column}Schema", message)
    text = inline if inline is not None else _derived_schema(options, column, fmt,
                                                              spark_type)
    from sparklog.schemas.registry_client import RegistryError, SchemaRegistry  # driver only

    registry = SchemaRegistry(url, get_option(options, REGISTRY_USER_INFO))
    schema_type = _SCHEMA_TYPES[fmt]
    try:
        if use_latest:
            latest = registry.latest(subject)
            if latest.schema_type != schema_type:
                raise SinkEncodingError(
                    f"the latest schema of subject {subject!r} is {latest.schema_type}, not "
                    f"{schema_type} as {column}Format={fmt} needs")
            latest_text = registry.standalone(latest)
            _fit(fmt, spark_type, latest_text,
                 f"the latest schema (version {latest.version}) of subject {subject!r}",
                 message)
            return ColumnEncoding(fmt, subject, latest.schema_id, latest_text, message)
        if auto_register:
            return ColumnEncoding(fmt, subject, registry.register(subject, text, schema_type),
                                  text, message)
        found = registry.lookup(subject, text, schema_type)
    except RegistryError as error:
        raise SinkEncodingError(f"schema registry {registry.url}, subject {subject!r}: "
                                f"{error}") from None
    if found is None:
        raise SinkEncodingError(
            f"the {column} column's schema is not registered under subject {subject!r} and "
            f"{AUTO_REGISTER}=false: register it, or set {AUTO_REGISTER}=true or "
            f"{USE_LATEST}=true; the schema: {text}")
    return ColumnEncoding(fmt, subject, found.schema_id, text, message)


def batch_encoder(encodings: Mapping[str, ColumnEncoding | None]
                  ) -> Callable[[pa.RecordBatch], Iterator[pa.RecordBatch]] | None:
    """In a task: a function giving a batch's slices (``CHUNK_ROWS`` rows) with each
    encoded column replaced by its encoding; None when no column is encoded."""
    from sparklog.schemas.encode import chunks, encoder  # Arrow's kernels: in tasks only

    encoders = {name: encoder(e) for name, e in encodings.items() if e is not None}
    if not encoders:
        return None

    def encode(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        names = batch.schema.names
        for chunk in chunks(batch):
            yield pa.RecordBatch.from_arrays(
                [encoders[name](chunk.column(i)) if name in encoders else chunk.column(i)
                 for i, name in enumerate(names)], names=names)

    return encode
