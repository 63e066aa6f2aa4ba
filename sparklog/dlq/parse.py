"""Parsing JSON record values with a DDL schema, splitting good rows from dead letters.

Detection (Spark's own JSON parser, so every job parses identically): ``from_json`` in
PERMISSIVE mode with a corrupt-record column (``columnNameOfCorruptRecord``). A record is bad
when its value is null (a tombstone), when Spark filled the corrupt-record column (malformed
JSON, or a field that does not convert to its type), when the value is not a JSON object, or
when a top-level field the DDL declares ``NOT NULL`` is missing or null.

Invariants:
- ``split`` (``parse``, then ``good_rows`` and ``bad_rows`` of its output) is lazy (no Spark
  job runs) and every input row lands in exactly one of its two outputs: ``good`` (the
  schema's columns, all nullable) or ``bad`` (the record's ``key``, ``value``, ``topic``,
  ``partition``, ``offset``, ``timestamp_ms`` and ``headers``).
- ``classify`` runs in Python on bad rows only, to name the failure for the dead letter; it
  never decides whether a row is bad (Spark did).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DecimalType,
    FractionalType,
    IntegralType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from sparklog.datasource.schema import HEADER_TYPE
from sparklog.delta.schema import nullable

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

CORRUPT = "_sparklog_corrupt"
PARSED = "_sparklog_parsed"

NULL_VALUE = "NullValue"
MALFORMED_JSON = "MalformedJson"
NOT_AN_OBJECT = "NotAnObject"
MISSING_FIELD = "MissingRequiredField"
SCHEMA_MISMATCH = "SchemaMismatch"


class SchemaError(ValueError):
    """A DDL schema that does not parse; the message is one line naming the problem."""


@dataclass(frozen=True)
class ParseSpec:
    ddl: str
    schema: StructType  # what good rows look like: the DDL's columns, all nullable
    required: tuple[str, ...]  # top-level columns declared NOT NULL

    @classmethod
    def from_ddl(cls, ddl: str) -> ParseSpec:
        """Parse a DDL schema (``"id BIGINT NOT NULL, user STRING"``); needs a SparkSession.
        A schema that does not parse raises ``SchemaError`` with the first line of Spark's
        message (the rest is a drawing of the DDL)."""
        try:
            declared = StructType.fromDDL(ddl)
        except (AnalysisException, ParseException) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SchemaError(f"--schema {ddl!r} is not a DDL schema: {first}") from None
        if CORRUPT in declared.fieldNames() or PARSED in declared.fieldNames():
            raise SchemaError(f"column names {CORRUPT} and {PARSED} are reserved")
        schema = nullable(declared)
        assert isinstance(schema, StructType)
        return cls(ddl, schema, tuple(f.name for f in declared if not f.nullable))

    @property
    def with_corrupt(self) -> StructType:
        return StructType([*self.schema.fields, StructField(CORRUPT, StringType())])

    def parse(self, df: DataFrame) -> DataFrame:
        """``parse(df, self)``: the interface ``sparklog.jobs.routing`` splits a batch by."""
        return parse(df, self)

    def classify(self, value: bytes | None) -> tuple[str, str]:
        return classify(value, self)


def parse(df: DataFrame, spec: ParseSpec) -> DataFrame:
    """``df`` (the Kafka source schema) with the parsed value as a struct column ``PARSED``."""
    return df.withColumn(PARSED, F.from_json(
        F.col("value").cast("string"), spec.with_corrupt,
        {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}))


def _parsed_ok(spec: ParseSpec) -> Column:
    struct = F.col(PARSED)
    ok: Column = (F.col("value").isNotNull() & struct.isNotNull()
                  & struct.getField(CORRUPT).isNull())
    for name in spec.required:
        ok = ok & struct.getField(name).isNotNull()
    return ok


def good_rows(parsed: DataFrame, spec: ParseSpec) -> DataFrame:
    """The rows of ``parse``'s output that parsed, as the schema's columns."""
    struct = F.col(PARSED)
    return parsed.where(_parsed_ok(spec)).select(
        *[struct.getField(f.name).alias(f.name) for f in spec.schema])


def bad_rows(parsed: DataFrame, spec: ParseSpec) -> DataFrame:
    """The rows of ``parse``'s output that did not parse, as the record's coordinates."""
    headers = (F.col("headers") if "headers" in parsed.columns
               else F.lit(None).cast(ArrayType(HEADER_TYPE)))
    return parsed.where(~_parsed_ok(spec)).select(
        "key", "value", "topic", "partition", "offset",
        F.floor(F.unix_micros("timestamp") / 1000).cast("long").alias("timestamp_ms"),
        headers.alias("headers"))


def split(df: DataFrame, spec: ParseSpec) -> tuple[DataFrame, DataFrame]:
    """``(good, bad)`` rows of a DataFrame with the Kafka source schema; see the module."""
    parsed = parse(df, spec)
    return good_rows(parsed, spec), bad_rows(parsed, spec)


def classify(value: bytes | None, spec: ParseSpec) -> tuple[str, str]:
    """The error class and message for a value ``split`` found bad."""
    if value is None:
        return NULL_VALUE, "the record has no value (a tombstone): nothing to parse"
    try:
        document = json.loads(value)
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError
        return MALFORMED_JSON, f"{type(error).__name__}: {error}"
    if not isinstance(document, dict):
        return NOT_AN_OBJECT, f"expected a JSON object, got {_json_type(document)}"
    missing = [name for name in spec.required if document.get(name) is None]
    if missing:
        return MISSING_FIELD, (f"required (NOT NULL) field(s) missing or null: "
                               f"{', '.join(missing)}")
    for field in spec.schema:
        found = document.get(field.name)
        if found is not None and not _fits(field.dataType, found):
            return SCHEMA_MISMATCH, (f"field {field.name}: expected "
                                     f"{field.dataType.simpleString()}, got {_json_type(found)} "
                                     f"{json.dumps(found)[:80]}")
    return SCHEMA_MISMATCH, f"a field does not convert to the schema {spec.ddl}"


def _fits(data_type: DataType, value: Any) -> bool:
    """Whether Spark's JSON parser can take ``value`` for ``data_type`` (True when unsure)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(data_type, IntegralType):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(data_type, FractionalType) and not isinstance(data_type, DecimalType):
        return number
    if isinstance(data_type, BooleanType):
        return isinstance(value, bool)
    if isinstance(data_type, StructType | MapType):
        return isinstance(value, dict)
    if isinstance(data_type, ArrayType):
        return isinstance(value, list)
    return True


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number",
             float: "number"}
    return names.get(type(value), type(value).__name__)
