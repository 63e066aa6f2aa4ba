"""sparklog.schemas without Spark: the type mappings, the wire format, the decoders, and the
typed columns' options and task decoding (``read_typed`` over hand-made Arrow batches).

Avro round trips are property-based: random schemas (records, arrays, maps, nullable
unions, enums, fixed, logical types) and random records of them, written by fastavro and
decoded into Arrow, equal fastavro's own decoding.
"""

from __future__ import annotations

import datetime
import decimal
import io
import itertools
import json
from collections.abc import Iterator
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from broker_fixtures import start_broker
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from hypothesis import given
from hypothesis import strategies as st
from protobuf_support import (
    ORDER_PROTO,
    context,
    expected,
    message_classes,
    order_schema,
    orders,
    serializer,
    sorted_maps,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)
from security_support import USERS, plain_jaas

from sparklog.broker.process import BrokerProcess
from sparklog.client.settings import ClientConfig, RetryPolicy, parse_bootstrap
from sparklog.datasource.options import OptionError
from sparklog.datasource.read.planning import KafkaInputPartition
from sparklog.datasource.read.read_options import TaskSettings, parse_read_options
from sparklog.datasource.read.typed_columns import UndecodableRecordError, read_typed, resolve
from sparklog.datasource.schema import arrow_source_schema, source_schema
from sparklog.schemas import avro_types, json_types, protobuf_types
from sparklog.schemas.avro_decode import AvroDecoder
from sparklog.schemas.avro_types import UnsupportedSchemaError
from sparklog.schemas.json_decode import JsonDecoder
from sparklog.schemas.protobuf_decode import ProtobufDecoder
from sparklog.schemas.registry import WriterSchemas
from sparklog.schemas.wire import DecodeError, frame, split

BASE = {"kafka.bootstrap.servers": "localhost:9092", "subscribe": "t"}
SECURED = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
           "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT",
           "sasl.enabled.mechanisms": "PLAIN",
           "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(USERS),
           "schema.registry.listeners": "http://127.0.0.1:0"}
"""A broker whose registry asks for HTTP basic auth of its SASL users."""


# -- Avro -> Spark types -------------------------------------------------------------------


def spark_type(schema: Any) -> Any:
    return source_schema(False, None, avro_types.arrow_type(schema))["value"].dataType


def test_avro_types_map_as_sparks_schema_converters() -> None:
    schema = {"type": "record", "name": "R", "namespace": "n", "fields": [
        {"name": "i", "type": "int"},
        {"name": "o", "type": ["null", "long"]},
        {"name": "d", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "lts", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "dec", "type": {"type": "fixed", "name": "F", "size": 8,
                                 "logicalType": "decimal", "precision": 10, "scale": 3}},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["X"]}},
        {"name": "again", "type": "E"},
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "a", "type": {"type": "array", "items": ["null", "string"]}},
        {"name": "m", "type": {"type": "map", "values": "int"}},
        {"name": "w", "type": ["int", "long"]},
        {"name": "inner", "type": ["null", {"type": "record", "name": "I", "fields": [
            {"name": "x", "type": "string"}]}]},
    ]}
    assert spark_type(json.dumps(schema)) == StructType([
        StructField("i", IntegerType(), False),
        StructField("o", LongType(), True),
        StructField("d", DateType(), False),
        StructField("ts", TimestampType(), False),
        StructField("lts", TimestampNTZType(), False),
        StructField("dec", DecimalType(10, 3), False),
        StructField("e", StringType(), False),
        StructField("again", StringType(), False),
        StructField("u", StringType(), False),
        StructField("a", ArrayType(StringType(), True), False),
        StructField("m", MapType(StringType(), IntegerType(), False), False),
        StructField("w", LongType(), False),
        StructField("inner", StructType([StructField("x", StringType(), False)]), True),
    ])


@pytest.mark.parametrize(("schema", "message"), [
    ({"type": "record", "name": "L", "fields": [{"name": "next", "type": ["null", "L"]}]},
     "field next: the record L is recursive"),
    ({"type": "record", "name": "U", "fields": [{"name": "u", "type": ["string", "int"]}]},
     "field u: the union"),
    ({"type": "int", "logicalType": "time-millis"}, "logical type time-millis"),
    ({"type": "record", "name": "R", "fields": [{"name": "x", "type": "Other"}]},
     "field x: unknown type 'Other'"),
])
def test_avro_types_refused(schema: Any, message: str) -> None:
    with pytest.raises(UnsupportedSchemaError, match=message):
        avro_types.arrow_type(schema)


def test_json_schema_types() -> None:
    schema = {"type": "object", "$defs": {"P": {"type": "object", "properties": {
        "x": {"type": "number"}}}}, "properties": {
        "id": {"type": "integer"}, "name": {"type": ["string", "null"]},
        "at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "p": {"$ref": "#/$defs/P"}, "maybe": {"oneOf": [{"type": "null"}, {"type": "boolean"}]},
        "tags": {"type": "array", "items": {"type": "string"}}, "e": {"enum": ["a", "b"]}}}
    assert source_schema(False, None, json_types.arrow_type(schema))["value"].dataType == \
        StructType([
            StructField("id", LongType()), StructField("name", StringType()),
            StructField("at", TimestampType()), StructField("day", DateType()),
            StructField("p", StructType([StructField("x", DoubleType())])),
            StructField("maybe", BooleanType()),
            StructField("tags", ArrayType(StringType())), StructField("e", StringType())])
    for bad, message in [({"type": "object"}, "the schema: an object without properties"),
                         ({"type": "string"}, "top level must be an object"),
                         ({"type": "object", "properties": {"r": {"$ref": "other.json"}}},
                          "field r: \\$ref 'other.json' names another document")]:
        with pytest.raises(UnsupportedSchemaError, match=message):
            json_types.arrow_type(bad)


# -- the wire format and the decoders --------------------------------------------------------


def test_wire_format() -> None:
    assert split(frame(258, b"body")) == (258, memoryview(b"body"))
    with pytest.raises(DecodeError, match="unknown magic byte 1"):
        split(b"\x01\x00\x00\x00\x01x")
    with pytest.raises(DecodeError, match="too short"):
        split(b"\x00\x00")


TYPE_NUMBERS = itertools.count()
NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)


@st.composite
def avro_schemas(draw: st.DrawFn, depth: int = 0) -> Any:
    """A random Avro schema: primitives, logical types, enums, fixed, and (not too deep)
    records, arrays, maps and nullable unions."""
    leaves = ["boolean", "int", "long", "float", "double", "string", "bytes",
              {"type": "int", "logicalType": "date"},
              {"type": "long", "logicalType": "timestamp-millis"},
              {"type": "long", "logicalType": "timestamp-micros"},
              {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}]
    choices = ["leaf", "enum", "fixed"] + (["record", "array", "map", "nullable"]
                                           if depth < 3 else [])
    kind = draw(st.sampled_from(choices))
    name = f"T{next(TYPE_NUMBERS)}"  # named types are unique within a schema
    if kind == "leaf":
        return draw(st.sampled_from(leaves))
    if kind == "enum":
        return {"type": "enum", "name": name, "symbols": ["A", "B", "C"]}
    if kind == "fixed":
        return {"type": "fixed", "name": name, "size": 3}
    if kind == "array":
        return {"type": "array", "items": draw(avro_schemas(depth + 1))}
    if kind == "map":
        return {"type": "map", "values": draw(avro_schemas(depth + 1))}
    if kind == "nullable":
        inner = draw(avro_schemas(depth + 1))
        return ["null", inner] if not isinstance(inner, list) else inner
    names = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
    return {"type": "record", "name": name,
            "fields": [{"name": n, "type": draw(avro_schemas(depth + 1))} for n in names]}


def values_of(schema: Any) -> st.SearchStrategy[Any]:
    if isinstance(schema, list):
        return st.none() | values_of(schema[1])
    if isinstance(schema, str):
        return {
            "boolean": st.booleans(), "int": st.integers(-2**31, 2**31 - 1),
            "long": st.integers(-2**63, 2**63 - 1), "float": st.floats(width=32,
                                                                        allow_nan=False),
            "double": st.floats(allow_nan=False), "string": st.text(max_size=8),
            "bytes": st.binary(max_size=8)}[schema]
    logical = schema.get("logicalType")
    if logical == "date":
        return st.dates()
    if logical and logical.startswith("timestamp"):
        return st.datetimes(min_value=datetime.datetime(1900, 1, 1),
                            max_value=datetime.datetime(2200, 1, 1),
                            timezones=st.just(datetime.UTC)).map(
            lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000))
    if logical == "decimal":
        return st.decimals(min_value=-10**8, max_value=10**8, places=3)
    kind = schema["type"]
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "fixed":
        return st.binary(min_size=3, max_size=3)
    if kind == "array":
        return st.lists(values_of(schema["items"]), max_size=3)
    if kind == "map":
        return st.dictionaries(st.text(max_size=4), values_of(schema["values"]), max_size=3)
    return st.fixed_dictionaries({f["name"]: values_of(f["type"]) for f in schema["fields"]})


def as_arrow_python(value: Any, schema: Any) -> Any:
    """fastavro's Python value as Arrow's ``to_pylist`` gives it back (maps as pairs)."""
    if value is None:
        return None
    if isinstance(schema, list):
        return as_arrow_python(value, schema[1])
    if isinstance(schema, dict):
        if schema["type"] == "array":
            return [as_arrow_python(v, schema["items"]) for v in value]
        if schema["type"] == "map":
            return [(k, as_arrow_python(v, schema["values"])) for k, v in value.items()]
        if schema["type"] == "record":
            return {f["name"]: as_arrow_python(value[f["name"]], f["type"])
                    for f in schema["fields"]}
    return value


@st.composite
def schema_and_records(draw: st.DrawFn) -> tuple[dict, list[dict]]:
    schema = draw(avro_schemas(depth=1).filter(lambda s: isinstance(s, dict)
                                               and s["type"] == "record"))
    return schema, draw(st.lists(values_of(schema), min_size=1, max_size=5))


@given(schema_and_records())
def test_random_avro_records_decode_into_arrow_as_fastavro_reads_them(
        case: tuple[dict, list[dict]]) -> None:
    schema, records = case
    parsed = fastavro.parse_schema(json.loads(json.dumps(schema)))
    values = []
    for record in records:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
        values.append(frame(7, out.getvalue()))
    kind = avro_types.arrow_type(json.dumps(schema))
    decoded = AvroDecoder(json.dumps(schema), kind, framed=True, reader_id=7).decode(values)
    assert decoded.errors == {}
    expected = [fastavro.schemaless_reader(io.BytesIO(split(v)[1]), parsed) for v in values]
    assert decoded.array.to_pylist() == [as_arrow_python(e, schema) for e in expected]


V1 = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]}
V2 = {"type": "record", "name": "R", "fields": [
    {"name": "a", "type": "long"}, {"name": "b", "type": "string", "default": "z"}]}


def avro(schema: dict, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def test_avro_decoder_reads_older_writers_into_the_reader_schema() -> None:
    asked: list[int] = []

    def writer_schema(schema_id: int) -> str:
        asked.append(schema_id)
        if schema_id == 1:
            return json.dumps(V1)
        raise DecodeError(f"schema id {schema_id} is unknown")

    decoder = AvroDecoder(json.dumps(V2), avro_types.arrow_type(V2), framed=True, reader_id=2,
                          writer_schema=writer_schema)
    decoded = decoder.decode([frame(1, avro(V1, {"a": 1})), frame(2, avro(V2, {"a": 2, "b": "q"})),
                              None, frame(1, avro(V1, {"a": 3})), frame(9, b"\x02"), b"\x05",
                              frame(2, b"")])
    assert decoded.array.to_pylist() == [{"a": 1, "b": "z"}, {"a": 2, "b": "q"}, None,
                                         {"a": 3, "b": "z"}, None, None, None]
    assert sorted(decoded.errors) == [4, 5, 6]
    assert "schema id 9 is unknown" in decoded.errors[4]
    assert "too short" in decoded.errors[5]
    assert asked == [1, 9]  # once per id; the reader's own id is never asked


def test_json_decoder() -> None:
    kind = json_types.arrow_type({"type": "object", "properties": {
        "n": {"type": "integer"}, "d": {"type": "string", "format": "date"},
        "t": {"type": "string", "format": "date-time"}}})
    decoder = JsonDecoder(kind, framed=True)
    good = [frame(1, b'{"n": 1, "d": "2026-01-02", "t": "2026-01-02T03:04:05.5+01:00", "x": 0}'),
            frame(5, b'{\n  "n": 2\n}'), None]
    decoded = decoder.decode(good)
    assert decoded.errors == {}
    assert decoded.array.to_pylist() == [
        {"n": 1, "d": datetime.date(2026, 1, 2),
         "t": datetime.datetime(2026, 1, 2, 2, 4, 5, 500000, tzinfo=datetime.UTC)},
        {"n": 2, "d": None, "t": None}, None]
    decoded = decoder.decode([*good, frame(1, b'{"n": "x"}'), frame(1, b"[1]"), b"{}",
                              frame(1, b""), frame(1, b'{"d": "not a date"}')])
    assert decoded.array.to_pylist()[:3] == [{**r, "t": r["t"]} if r else r for r in
                                             decoder.decode(good).array.to_pylist()]
    assert decoded.array.to_pylist()[3:] == [None] * 5
    assert sorted(decoded.errors) == [3, 4, 5, 6, 7]
    assert "too short" in decoded.errors[5]


def test_bare_values_with_an_inline_schema() -> None:
    decoder = AvroDecoder(json.dumps(V1), avro_types.arrow_type(V1), framed=False)
    assert decoder.decode([avro(V1, {"a": 5})]).array.to_pylist() == [{"a": 5}]
    kind = json_types.arrow_type({"properties": {"a": {"type": "integer"}}})
    assert JsonDecoder(kind, framed=False).decode([b'{"a": 5}']).array.to_pylist() == [{"a": 5}]


# -- options ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("extra", "message"), [
    ({"valueFormat": "avor", "valueSchema": "{}"},
     "option valueFormat must be one of binary, avro, json, protobuf, got 'avor' "
     "\\(did you mean 'avro'\\?\\)"),
    ({"valueFormat": "avro", "valueSchema": "{}", "valueProtobufMessage": "M"},
     "option valueProtobufMessage needs valueFormat=protobuf"),
    ({"valueFormat": "avro"}, "valueFormat=avro needs a schema"),
    ({"valueFormat": "avro", "valueSchema": "{}", "onDecodeError": "skipp"},
     "option onDecodeError must be one of fail, skip, deadLetter, got 'skipp' "
     "\\(did you mean 'skip'\\?\\)"),
    ({"valueFormat": "avro", "valueSchema": "{}", "onDecodeError": "deadLetter"},
     "deadLetterTopic"),
    ({"valueSchema": "{}"}, "option valueSchema needs valueFormat avro, json or protobuf"),
    ({"valueFormat": "json", "schemaRegistry.url": "http://r", "valueSchemaVersion": "2",
      "valueSchemaId": "3"}, "give one"),
    ({"schemaRegistry.url": "http://r"}, "set valueFormat"),
    ({"valueFormat": "avro", "valueSchemaa": "{}"}, "did you mean 'valueSchema'"),
])
def test_bad_options(extra: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_read_options({**BASE, **extra}, streaming=None)


def test_the_subject_defaults_to_the_one_topic() -> None:
    options = parse_read_options({"kafka.bootstrap.servers": "localhost:9092",
                                  "subscribePattern": "t.*", "valueFormat": "avro",
                                  "schemaRegistry.url": "http://r"}, streaming=False)
    assert options.typed is not None
    with pytest.raises(OptionError, match="with subscribePattern name it with option "
                                          "valueSubject"):
        resolve(options.typed, options.subscription)


def test_without_formats_nothing_changes() -> None:
    options = parse_read_options(BASE, streaming=False)
    assert options.typed is None and options.task_settings.decoding is None


# -- the task's decoding ---------------------------------------------------------------------


def task(**extra: str) -> KafkaInputPartition:
    options = parse_read_options({**BASE, **extra}, streaming=False)
    assert options.typed is not None
    settings = TaskSettings(ClientConfig(parse_bootstrap("localhost:9092")),
                            RetryPolicy(1.0, 0.1), True, False,
                            decoding=resolve(options.typed, options.subscription))
    return KafkaInputPartition("t", 0, 0, 4, None, settings)


def raw_batches(values: list[bytes | None], keys: list[bytes | None]) -> Any:
    def read(task: KafkaInputPartition) -> Iterator[pa.RecordBatch]:
        n = len(values)
        schema = arrow_source_schema(task.settings.include_headers)
        columns = [pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
                   pa.array(["t"] * n), pa.array([0] * n, pa.int32()),
                   pa.array(range(n), pa.int64()),
                   pa.array([0] * n, pa.timestamp("us", tz="UTC")),
                   pa.array([0] * n, pa.int32())]
        if task.settings.include_headers:
            columns.append(pa.array([[]] * n, schema.field("headers").type))
        yield pa.RecordBatch.from_arrays(columns, schema=schema)
    return read


def test_read_typed_decodes_key_and_value_into_the_source_schema() -> None:
    key_schema = {"type": "object", "properties": {"k": {"type": "string"}}}
    partition = task(valueFormat="avro", valueSchema=json.dumps(V1), keyFormat="json",
                     keySchema=json.dumps(key_schema), onDecodeError="skip")
    values = [avro(V1, {"a": 1}), None, b"\x80", avro(V1, {"a": 4})]
    keys = [b'{"k": "x"}', b'{"k": "y"}', b'{"k": "z"}', b"nope"]
    (batch,) = read_typed(partition, raw_batches(values, keys))
    assert batch.schema == arrow_source_schema(False, json_types.arrow_type(key_schema),
                                               avro_types.arrow_type(V1))
    assert batch.column("key").to_pylist() == [{"k": "x"}, {"k": "y"}]
    assert batch.column("value").to_pylist() == [{"a": 1}, None]
    assert batch.column("offset").to_pylist() == [0, 1]


def test_read_typed_fails_naming_the_record() -> None:
    partition = task(valueFormat="avro", valueSchema=json.dumps(V1))
    with pytest.raises(UndecodableRecordError, match="topic t partition 0 offset 1: the value "
                                                     "does not decode as avro"):
        list(read_typed(partition, raw_batches([avro(V1, {"a": 1}), b"\x80"], [None, None])))


def test_decimals_out_of_range_are_decode_errors() -> None:
    schema = {"type": "record", "name": "D", "fields": [{"name": "d", "type": {
        "type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}}]}
    wide = dict(schema, fields=[{"name": "d", "type": {
        "type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 2}}])
    decoder = AvroDecoder(json.dumps(schema), avro_types.arrow_type(schema), framed=False)
    decoded = decoder.decode([avro(wide, {"d": decimal.Decimal("1.25")}),
                              avro(wide, {"d": decimal.Decimal("123456.25")})])
    assert decoded.array.to_pylist() == [{"d": decimal.Decimal("1.25")}, None]
    assert "does not fit its column type" in decoded.errors[1]


# -- a registry that asks for basic auth ------------------------------------------------------


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("secured"), SECURED)
    yield proc
    assert proc.stop() == 0


def test_registry_credentials_reach_the_registry(secured: BrokerProcess) -> None:
    url = secured.schema_registry_url
    assert url is not None
    admin = SchemaRegistryClient({"url": url, "basic.auth.user.info": "admin:admin-secret"})
    schema_id = admin.register_schema("orders-value", Schema(json.dumps(V1), "AVRO"))
    options = {**BASE, "subscribe": "orders", "valueFormat": "avro", "schemaRegistry.url": url}
    anonymous = parse_read_options(options, streaming=False)
    assert anonymous.typed is not None
    with pytest.raises(OptionError, match=f"option valueFormat=avro: schema registry {url}: "
                                          "the latest version of subject 'orders-value': "):
        resolve(anonymous.typed, anonymous.subscription)
    logged_in = parse_read_options(
        {**options, "schemaRegistry.basic.auth.user.info": "admin:admin-secret"},
        streaming=False)
    assert logged_in.typed is not None and logged_in.typed.registry is not None
    decoding = resolve(logged_in.typed, logged_in.subscription)
    (column,) = decoding.columns
    assert (column.schema_id, column.framed, column.arrow_type) == (
        schema_id, True, avro_types.arrow_type(V1))
    assert json.loads(WriterSchemas(logged_in.typed.registry)(schema_id)) == V1
    with pytest.raises(DecodeError, match="schema id 4242 is unknown"):
        WriterSchemas(logged_in.typed.registry)(4242)


# -- Protobuf --------------------------------------------------------------------------------


def test_protobuf_types_map_as_sparks_schema_converters() -> None:
    kind = source_schema(False, None, protobuf_types.arrow_type(order_schema()))["value"]
    line = StructType([StructField("sku", StringType()), StructField("qty", IntegerType())])
    assert kind.dataType == StructType([
        StructField("id", LongType()), StructField("status", StringType()),
        StructField("lines", ArrayType(line)), StructField("totals",
                                                           MapType(StringType(), LongType())),
        StructField("at", TimestampType()), StructField("first", line),
        StructField("big", LongType()), StructField("raw", BinaryType()),
        StructField("price", DoubleType()), StructField("tags", ArrayType(StringType()))])
    refund = protobuf_types.arrow_type(order_schema(), "Refund")
    assert refund == pa.struct([pa.field("order_id", pa.int64())])
    assert protobuf_types.arrow_type(order_schema(), "shop.Order.Line") == pa.struct(
        [pa.field("sku", pa.string()), pa.field("qty", pa.int32())])
    with pytest.raises(UnsupportedSchemaError, match="no message 'Nope'"):
        protobuf_types.arrow_type(order_schema(), "Nope")
    # the same file as .proto text (as Confluent's registry stores it) maps alike
    assert protobuf_types.arrow_type(ORDER_PROTO) == protobuf_types.arrow_type(order_schema())
    with pytest.raises(UnsupportedSchemaError, match=r"does not parse as \.proto text"):
        protobuf_types.arrow_type("message M { int32 a = ; }")


def test_protobuf_serializer_records_decode_into_arrow() -> None:
    from confluent_kafka.schema_registry._sync.mock_schema_registry_client import (
        MockSchemaRegistryClient,  # the library's own in-memory registry, for unit tests
    )

    order, refund = message_classes()
    sr = MockSchemaRegistryClient({"url": "mock://protobuf-decode"})
    records = orders(order)
    values = [serializer(order, sr)(record, context("orders")) for record in records]
    other = serializer(refund, sr)(refund(order_id=3), context("orders"))
    assert other[5] == 2 and values[0][5] == 0  # message indexes [1]; [0] as one 0 byte
    schema_id = sr.get_latest_version("orders-value").schema_id
    decoder = ProtobufDecoder(order_schema(), protobuf_types.arrow_type(order_schema()),
                              framed=True, reader_id=schema_id,
                              writer_schema=lambda i: sr.get_schema(i).schema_str)
    decoded = decoder.decode([*values, None, other, values[0][:5] + b"\x02\x08", b"\x01"])
    rows = sorted_maps(decoded.array.to_pylist())
    assert rows[:4] == [*map(expected, records), None]
    assert rows[4:] == [None, None, None]
    assert decoded.errors[4] == f"the record is message shop.Refund (schema id {schema_id}), " \
        "not shop.Order"
    assert decoded.errors[5].startswith("message indexes [4] are not in schema id")
    assert "magic byte" in decoded.errors[6]
    # the same bodies bare, as from_protobuf reads them with an inline schema
    bare = [record.SerializeToString() for record in records]
    assert sorted_maps(ProtobufDecoder(order_schema(), decoder.arrow_type, framed=False).decode(
        bare).array.to_pylist()) == [*map(expected, records)]
    # a .proto text reader schema reads them too (the writer's message named by its indexes)
    text = ProtobufDecoder(ORDER_PROTO, decoder.arrow_type, framed=True,
                           writer_schema=lambda i: sr.get_schema(i).schema_str)
    assert sorted_maps(text.decode(values).array.to_pylist()) == [*map(expected, records)]


def test_read_typed_protobuf_with_an_inline_schema() -> None:
    order, _ = message_classes()
    records = orders(order)
    partition = task(valueFormat="protobuf", valueSchema=order_schema(), onDecodeError="skip")
    values = [records[0].SerializeToString(), b"\xff\xff"]
    (batch,) = read_typed(partition, raw_batches(values, [None, None]))
    assert sorted_maps(batch.column("value").to_pylist()) == [expected(records[0])]
