"""Record values decoded with the subject's schema from a schema registry, for the jobs
(``--schema-registry URL``, or the ``schema.registry.url`` setting, and no ``--schema``).

The jobs read the values as bytes and decode them in their own batch function, with the
decoders of ``sparklog.schemas`` (fastavro into the reader schema, Arrow's JSON reader),
rather than asking the source for typed columns: a value that does not decode then is a bad
row of the batch like a JSON value that does not parse, and goes to the dead-letter topic
through the job's own path (``sparklog.jobs.routing``), whose intents live next to the
table and are keyed by the job's writer and batch ids. The source's ``onDecodeError=
deadLetter`` sends from the read task, keyed by topic-partition and offset range, with its
intents in the executor's temp directory: a batch recomputed on another executor, or a
replay after the machine went, would send them again.

``RegistryValues`` has ``ParseSpec``'s interface (``schema``, ``required``, ``parse``,
``classify``): ``parse`` adds the decoded value as the struct ``PARSED`` with the reason a
value did not decode in its ``CORRUPT`` field, so ``good_rows`` / ``bad_rows`` split it as
they split parsed JSON.

Invariants:
- The reader schema is the subject's latest version (TopicNameStrategy's ``<topic>-value``
  unless ``--subject`` names another), asked again by ``refreshed`` at most once per batch,
  on the driver, before the batch is decoded; records of older (compatible) versions are
  read into it (Avro's schema resolution: added fields get their defaults). A record
  written with a version newer than the reader's cannot be in a batch decoded after that
  version was registered, since a serializer registers before it produces.
- The table's columns are the reader schema's top-level fields, all nullable; a new version
  that adds fields adds nullable columns to the table (the jobs write with
  ``schema_mode="merge"``); a changed type is still refused by ``sparklog.delta.schema``.
- A null value (a tombstone), bad framing, an unknown schema id or bytes that do not decode
  make a bad row, never a failed batch; a registry that does not answer fails the batch
  (no record's fault).
- A batch replayed after a crash is decoded with the latest version at the replay, which
  may be newer than its first attempt's. Its rows are committed all at once by the replay,
  and its dead letters are found by their origin, so a record lands once as long as it is
  good (or bad) under both versions: a compatible version that adds fields keeps good
  records good; a value that did not decode at all (framing, unknown id, bad bytes) stays
  bad. The one case not covered: a record whose writer schema the older reader could not
  resolve but the newer can, replayed across that registration.
- The registry client's settings are ``schema.registry.url`` (or ``--schema-registry``) and
  ``schema.registry.<setting>`` for confluent-kafka's ``basic.auth.user.info``,
  ``ssl.ca.location``, ``ssl.certificate.location``, ``ssl.key.location`` (the source's
  ``schemaRegistry.*`` names).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from sparklog.dlq.parse import CORRUPT, NULL_VALUE, PARSED
from sparklog.schemas.registry import ChosenSchema, RegistryConfig, SchemaLookupError, choose
from sparklog.schemas.wire import Decoded

if TYPE_CHECKING:
    import argparse

    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from sparklog.dlq.parse import ParseSpec
    from sparklog.jobs.routing import ValueSpec
    from sparklog.jobs.settings import JobSettings

log = logging.getLogger(__name__)

FORMATS = {"avro": "AVRO", "json": "JSON"}
SETTING_PREFIX = "schema.registry."
REGISTRY_SETTINGS = ("url", "basic.auth.user.info", "ssl.ca.location",
                     "ssl.certificate.location", "ssl.key.location")
"""The registry client's settings the jobs take (``RegistryConfig``'s, confluent-kafka's
names; the source's ``schemaRegistry.*`` are the same)."""
UNDECODABLE = "UndecodableRecord"


class RegistrySchemaError(ValueError):
    """The subject's schema cannot give the job its table columns; one line saying why."""


@dataclass(frozen=True)
class RegistryValues:
    config: RegistryConfig
    subject: str
    format: str  # avro or json
    chosen: ChosenSchema
    arrow_type: pa.StructType  # of the decoded value
    schema: StructType  # the table's columns: the record's fields, all nullable
    required: tuple[str, ...] = ()

    @classmethod
    def latest(cls, config: RegistryConfig, subject: str,
               value_format: str | None = None) -> RegistryValues:
        """The subject's latest version; ``value_format`` None: the schema's own type."""
        from pyspark.sql.pandas.types import from_arrow_type

        from sparklog.delta.schema import nullable

        try:
            chosen = choose(config, subject)
        except SchemaLookupError as exc:
            raise RegistrySchemaError(str(exc)) from None
        kind = next((k for k, v in FORMATS.items() if v == chosen.schema_type), None)
        if kind is None or (value_format is not None and value_format != kind):
            raise RegistrySchemaError(
                f"subject {subject!r} has a {chosen.schema_type} schema: the job reads "
                + (f"--value-format {value_format}" if value_format else "avro or json"))
        try:
            if kind == "avro":
                from sparklog.schemas.avro_types import arrow_type
            else:
                from sparklog.schemas.json_types import arrow_type
            value_type = arrow_type(chosen.schema_str)
        except ValueError as exc:  # UnsupportedSchemaError, or not JSON
            raise RegistrySchemaError(f"subject {subject!r} version {chosen.version}: "
                                      f"{exc}") from None
        if not isinstance(value_type, pa.StructType):
            raise RegistrySchemaError(f"subject {subject!r} version {chosen.version} is not a "
                                      f"record ({value_type}): a table needs named fields")
        schema = nullable(from_arrow_type(value_type))
        return cls(config, subject, kind, chosen, value_type, schema)  # type: ignore[arg-type]

    @property
    def describe(self) -> str:
        return (f"subject {self.subject} version {self.chosen.version} (id "
                f"{self.chosen.schema_id}, {self.format})")

    def refreshed(self) -> RegistryValues:
        """The subject's latest version now: ``self`` when unchanged, else the new one
        (logged as one line naming the columns it adds)."""
        latest = self.latest(self.config, self.subject, self.format)
        if latest.chosen.schema_id == self.chosen.schema_id:
            return self
        added = [n for n in latest.schema.fieldNames() if n not in self.schema.fieldNames()]
        log.info("%s -> version %d (id %s): %s", self.describe, latest.chosen.version,
                 latest.chosen.schema_id,
                 f"adds column(s) {', '.join(added)}" if added else "no new column")
        return latest

    # -- ParseSpec's interface ---------------------------------------------------------------

    def parse(self, df: DataFrame) -> DataFrame:
        """``df`` (the Kafka source schema) with the decoded value as the struct ``PARSED``
        (the fields and ``CORRUPT``): an Arrow UDF (no pandas), one decoder per task."""
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import to_arrow_type
        from pyspark.sql.types import StringType, StructField
        from pyspark.sql.types import StructType as Struct

        parsed = Struct([*self.schema.fields, StructField(CORRUPT, StringType())])
        parsed_type = to_arrow_type(parsed, timezone="UTC")
        make_decoder = self._decoder_factory()
        decoders: list[Callable[[list[bytes | None]], Decoded]] = []  # the task's one

        def decode(values: pa.Array) -> pa.Array:
            if not decoders:
                decoders.append(make_decoder())
            return _parsed(decoders[0](values.to_pylist()), parsed_type)

        return df.withColumn(PARSED, F.arrow_udf(decode, parsed)(F.col("value")))

    def classify(self, value: bytes | None) -> tuple[str, str]:
        """The error class and message for a value ``parse`` found bad (decoded again)."""
        if value is None:
            return NULL_VALUE, "the record has no value (a tombstone): nothing to decode"
        errors = self._decoder_factory()()([value]).errors
        return UNDECODABLE, (f"the value does not decode as {self.format} of "
                             f"{self.describe}: {errors.get(0, 'unknown reason')}")

    def _decoder_factory(self) -> Callable[[], Callable[[list[bytes | None]], Decoded]]:
        """What makes a decoder in a task (picklable: no client is made before the call)."""
        config, schema_str, schema_id = self.config, self.chosen.schema_str, self.chosen.schema_id
        value_type, kind = self.arrow_type, self.format

        def make() -> Callable[[list[bytes | None]], Decoded]:
            if kind == "avro":
                from sparklog.schemas.avro_decode import AvroDecoder
                from sparklog.schemas.registry import WriterSchemas

                return AvroDecoder(schema_str, value_type, framed=True, reader_id=schema_id,
                                   writer_schema=WriterSchemas(config)).decode
            from sparklog.schemas.json_decode import JsonDecoder

            return JsonDecoder(value_type, framed=True).decode

        return make


def _parsed(decoded: Decoded, parsed_type: pa.StructType) -> pa.StructArray:
    """The decoded values' fields and ``CORRUPT`` (why a value did not decode) as one struct
    of Spark's Arrow type; a row is null only where the value was null."""
    rows = len(decoded.array)
    corrupt = pa.array([decoded.errors.get(row) for row in range(rows)], pa.string())
    fields = list(parsed_type)
    children = [child.cast(field.type)
                for child, field in zip(decoded.array.flatten(), fields, strict=False)]
    return pa.StructArray.from_arrays([*children, corrupt], fields=fields)


def value_spec(args: argparse.Namespace, settings: JobSettings,
               topic: str) -> ParseSpec | RegistryValues:
    """How the job reads values: ``--schema``'s DDL, else the registry's schema of
    ``--subject`` (default ``<topic>-value``) at ``--schema-registry`` or the
    ``schema.registry.url`` setting."""
    from sparklog.dlq.parse import ParseSpec

    if args.schema:
        return ParseSpec.from_ddl(args.schema)
    given = {name: settings.values.get(f"{SETTING_PREFIX}{name}", "")
             for name in REGISTRY_SETTINGS}
    given["url"] = args.schema_registry or given["url"]
    if not given["url"]:
        raise SystemExit("give --schema (a DDL schema of JSON values) or --schema-registry URL "
                         "(the subject's schema; or the schema.registry.url setting)")
    values = RegistryValues.latest(RegistryConfig(tuple((k, v) for k, v in given.items() if v)),
                                   args.subject or f"{topic}-value", args.value_format)
    log.info("values decoded with %s", values.describe)
    return values


def table_schema_mode(spec: ValueSpec, settings: JobSettings) -> str | None:
    """The Delta sink's schema mode: ``merge`` for the registry's schema (a new version's
    added fields become columns), else the ``delta.schemaMode`` setting."""
    return "merge" if isinstance(spec, RegistryValues) else settings.schema_mode()
