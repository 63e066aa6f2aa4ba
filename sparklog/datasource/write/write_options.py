"""What a ``df.write`` / ``df.writeStream`` ``.format("sparklog")`` asks for, validated once.

The writer's constructor runs ``sink_spec(options, schema)`` on the driver, before any task
starts, and ships the resulting ``SinkSpec`` to every write task.

Invariants:
- Every problem a request can have without talking to a broker is an ``OptionError`` (unknown
  options, ``kafka.*`` settings that would weaken delivery) or a ``SinkSchemaError`` (missing
  ``value`` column, a column of a type the sink cannot write, no topic at all), raised
  here, so no record is ever sent by a write that was bound to fail on its schema.
- The producer is always idempotent: ``enable.idempotence`` is forced on and a user's
  ``false`` is refused (librdkafka then insists on ``acks=all``). ``transactional.id`` is
  refused: with ``deliveryGuarantee=exactly-once`` the sink derives one per task from
  ``transactionalIdPrefix``, which defaults to a digest of the streaming query's checkpoint
  location (the same after a restart, distinct between queries) or, for a batch write, a
  random one per write.
- ``deliveryGuarantee`` is ``at-least-once`` (the default) or ``exactly-once``, Flink's
  words; exactly-once sets ``transaction.timeout.ms`` to 15 minutes (the broker's default
  ceiling) unless a ``kafka.transaction.timeout.ms`` option gives it.
- Columns are found by their exact lower-case names, as Spark's Kafka sink does; columns
  other than ``key``, ``value``, ``headers``, ``topic`` and ``partition`` are ignored, so a
  DataFrame read with the ``sparklog`` source can be written back unchanged.
- ``spark.kafka.producer.cache.timeout`` (Spark's name and default, 10m, given as a sink
  option) is how long a Python worker keeps an idle producer for the next task
  (``producer_cache``).
- ``valueFormat`` / ``keyFormat`` ``avro`` or ``json`` (``encodings``): the column may be
  of any type its schema can hold (a struct, typically), and its schema is resolved with
  the schema registry last, once every check above and librdkafka's of the producer
  settings (``check_config``) have passed, so a write refused for its options registers
  nothing; the spec carries the resolved ``ColumnEncoding``s.
- A ``SinkSpec`` is frozen and picklable (plain strings, numbers, booleans, a dict and
  frozen ``ColumnEncoding``s).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaException, Producer
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from sparklog.client.settings import (
    SECURITY_KEYS,
    ClientConfig,
    ClientSecurity,
    SettingsError,
    parse_bootstrap,
)
from sparklog.datasource.options import (
    OptionError,
    check_known,
    get_option,
    kafka_params,
    parse_duration_s,
)
from sparklog.datasource.schema import HEADER_TYPE
from sparklog.datasource.write.encodings import (
    BINARY,
    ENCODING_OPTIONS,
    column_encoding,
    column_format,
)
from sparklog.schemas.column_encoding import ColumnEncoding

PRODUCER_CACHE_TIMEOUT = "spark.kafka.producer.cache.timeout"
"""Spark's setting, taken as a sink option: a Python data source cannot read Spark's confs."""
PRODUCER_CACHE_TIMEOUT_DEFAULT = "10m"
"""Spark's default for it."""
SINK_OPTIONS = {"topic", "checkpointLocation", "deliveryGuarantee", "transactionalIdPrefix",
                PRODUCER_CACHE_TIMEOUT, *ENCODING_OPTIONS}
"""Options besides ``kafka.*`` and ``bootstrap.servers``; Spark itself passes
``checkpointLocation`` to a streaming writer."""
AT_LEAST_ONCE, EXACTLY_ONCE = "at-least-once", "exactly-once"
TRANSACTION_TIMEOUT_MS = "900000"
"""Exactly-once's ``transaction.timeout.ms``: Kafka's default ``transaction.max.timeout.ms``,
the longest a broker allows unless configured otherwise."""

PRODUCER_DEFAULTS: Mapping[str, str] = {
    # Java's default partitioner, so a key lands where Spark's Kafka sink would put it.
    "partitioner": "murmur2_random",
}
"""Producer settings a user's ``kafka.*`` option may override."""

_REFUSED = {
    "transactional.id": "the sink derives one transactional id per task (with "
                        "deliveryGuarantee=exactly-once): set transactionalIdPrefix instead",
    "delivery.report.only.error": "the sink checks every delivery report itself",
}
"""``kafka.*`` settings the sink owns; librdkafka itself rejects unknown or invalid ones
(``producer.check_config``), including an ``acks`` other than ``all`` with idempotence."""


class SinkSchemaError(ValueError):
    """The DataFrame to write lacks a required column or has a column of the wrong type."""


@dataclass(frozen=True)
class SinkSpec:
    """Everything a write task needs: the producer's settings and which columns to read."""

    producer_config: dict[str, str]
    topic: str | None
    """The ``topic`` option; when set, it wins over a ``topic`` column."""
    key: bool = False
    headers: bool = False
    topic_column: bool = False
    partition: bool = False
    transactional_id_prefix: str | None = None
    """Set with exactly-once: every task writes in a transaction of an id with this prefix."""
    checkpoint_location: str | None = None
    """A streaming query's checkpoint, where exactly-once keeps its commit intents."""
    producer_cache_timeout_s: float = 600.0  # PRODUCER_CACHE_TIMEOUT_DEFAULT
    """How long an idle producer is kept for a later task of the same worker."""
    value_encoding: ColumnEncoding | None = None
    """``valueFormat`` avro or json: the schema the tasks encode the value column with."""
    key_encoding: ColumnEncoding | None = None

    @property
    def exactly_once(self) -> bool:
        return self.transactional_id_prefix is not None

    @property
    def bootstrap(self) -> str:
        return self.producer_config["bootstrap.servers"]

    def client_config(self) -> ClientConfig:
        """The protocol client's settings (the driver's and tasks' transaction APIs): the
        producer's servers and security."""
        return ClientConfig(parse_bootstrap(self.bootstrap, "kafka.bootstrap.servers"),
                            client_id="sparklog-sink",
                            security=ClientSecurity.from_settings(self.producer_config))


def producer_config(options: Mapping[str, str]) -> dict[str, str]:
    """The confluent-kafka settings: defaults, then ``kafka.*`` options, idempotence on."""
    user = kafka_params(options)
    for name, reason in _REFUSED.items():
        if name in user:
            raise OptionError(f"option kafka.{name} is not allowed: {reason}")
    idempotence = user.get("enable.idempotence", "true")
    if idempotence.strip().lower() != "true":
        raise OptionError(
            f"option kafka.enable.idempotence={idempotence} is not allowed: the sink always "
            "uses the "
            "idempotent producer so that retries inside a task never duplicate or reorder "
            "records; remove the option")
    try:
        security = ClientSecurity.from_settings(user, "kafka.")
    except SettingsError as exc:
        raise OptionError(str(exc)) from None
    plain = {k: v for k, v in user.items() if k.lower() not in SECURITY_KEYS}
    return {**PRODUCER_DEFAULTS, **plain, **security.librdkafka(), "enable.idempotence": "true"}


def _type_name(data_type: DataType) -> str:
    return data_type.simpleString()


def _check_type(schema: StructType, column: str, allowed: tuple[DataType, ...]) -> bool:
    """Whether ``column`` exists; raise when it does with a type outside ``allowed``."""
    if column not in schema.fieldNames():
        return False
    found = schema[column].dataType
    if not any(_same_type(found, want) for want in allowed):
        raise SinkSchemaError(
            f"column {column!r} has type {_type_name(found)}; the sparklog sink accepts "
            + " or ".join(_type_name(t) for t in allowed) + f" for {column!r}")
    return True


def _same_type(found: DataType, want: DataType) -> bool:
    """Type equality ignoring nullability (of array elements and struct fields)."""
    if isinstance(want, ArrayType):
        return isinstance(found, ArrayType) and _same_type(found.elementType, want.elementType)
    if isinstance(want, StructType):
        return (isinstance(found, StructType) and len(found.fields) == len(want.fields)
                and all(f.name == w.name and _same_type(f.dataType, w.dataType)
                        for f, w in zip(found.fields, want.fields, strict=True)))
    return found == want


def _transactional_id_prefix(options: Mapping[str, str], checkpoint: str | None,
                             streaming: bool) -> str | None:
    """The prefix of the tasks' transactional ids; None for at-least-once."""
    guarantee = (get_option(options, "deliveryGuarantee") or AT_LEAST_ONCE).strip().lower()
    if guarantee not in (AT_LEAST_ONCE, EXACTLY_ONCE):
        raise OptionError(f"option deliveryGuarantee={guarantee} is not a delivery guarantee "
                          f"of the sparklog sink; allowed: {AT_LEAST_ONCE}, {EXACTLY_ONCE}")
    prefix = get_option(options, "transactionalIdPrefix")
    if guarantee == AT_LEAST_ONCE:
        if prefix is not None:
            raise OptionError("option transactionalIdPrefix needs "
                              f"deliveryGuarantee={EXACTLY_ONCE}")
        return None
    if prefix is not None:
        if not prefix.strip():
            raise OptionError("option transactionalIdPrefix must not be empty")
        return prefix
    if not streaming:
        return f"sparklog-write-{uuid.uuid4().hex[:16]}"
    if not checkpoint:
        raise OptionError(f"deliveryGuarantee={EXACTLY_ONCE} needs the query's "
                          "checkpointLocation, where it keeps its commit intents")
    digest = hashlib.sha256(checkpoint.rstrip("/").encode()).hexdigest()[:16]
    return f"sparklog-sink-{digest}"


def sink_spec(options: Mapping[str, str], schema: StructType, *,
              streaming: bool = False) -> SinkSpec:
    """Validate the options and the input schema of a write; see the module invariants."""
    check_known(options, SINK_OPTIONS, "sparklog sink")
    config = producer_config(options)
    checkpoint = get_option(options, "checkpointLocation") if streaming else None
    prefix = _transactional_id_prefix(options, checkpoint, streaming)
    if prefix is not None:
        config.setdefault("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS)
    topic = get_option(options, "topic")
    if topic is not None and not topic.strip():
        raise OptionError("option topic must not be empty")
    text = (StringType(), BinaryType())
    value_format, key_format = column_format(options, "value"), column_format(options, "key")
    # an encoded column may be of any type its schema holds, checked once it is resolved
    if not ("value" in schema.fieldNames() if value_format != BINARY
            else _check_type(schema, "value", text)):
        raise SinkSchemaError(
            "the DataFrame has no 'value' column (string or binary), which the sparklog sink "
            f"requires; its columns: {', '.join(schema.fieldNames()) or '(none)'}")
    key = ("key" in schema.fieldNames() if key_format != BINARY
           else _check_type(schema, "key", text))
    if key_format != BINARY and not key:
        raise SinkSchemaError(f"option keyFormat={key_format} needs a 'key' column")
    topic_column = _check_type(schema, "topic", (StringType(),))
    if topic is None and not topic_column:
        raise SinkSchemaError(
            "no topic to write to: set the 'topic' option or add a string column 'topic'")
    check_config(config)
    return SinkSpec(
        producer_config=config,
        topic=topic,
        key=key,
        headers=_check_type(schema, "headers", (ArrayType(HEADER_TYPE),)),
        topic_column=topic_column and topic is None,
        partition=_check_type(schema, "partition", (IntegerType(),)),
        transactional_id_prefix=prefix,
        checkpoint_location=checkpoint if prefix is not None else None,
        producer_cache_timeout_s=parse_duration_s(options, PRODUCER_CACHE_TIMEOUT,
                                                  PRODUCER_CACHE_TIMEOUT_DEFAULT),
        value_encoding=column_encoding(options, schema, "value", topic),
        key_encoding=column_encoding(options, schema, "key", topic) if key else None,
    )


def check_config(config: Mapping[str, str]) -> None:
    """Have librdkafka validate producer settings without contacting a broker (~2 ms)."""
    try:
        Producer({**config, "bootstrap.servers": "", "log_level": 0})
    except KafkaException as error:
        raise OptionError(f"invalid kafka.* option: {error.args[0].str()}") from None
    except (TypeError, ValueError) as error:  # settings confluent-kafka reads itself
        raise OptionError(f"invalid kafka.* option: {error}") from None
