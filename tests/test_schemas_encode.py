"""``sparklog.schemas`` without Spark: Spark types (their JSON form) to Avro, JSON Schema and
Protobuf, and Arrow columns encoded in Confluent's wire format, decoded back by fastavro,
checked by jsonschema, read back by sparklog's Protobuf reader and confluent-kafka's
deserializer."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import string
from typing import Any

import fastavro
import jsonschema
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sparklog.schemas import json_columnar, protobuf_types
from sparklog.schemas.avro_columnar import Unsupported, encode_column, varints
from sparklog.schemas.column_encoding import PROTOBUF
from sparklog.schemas.encode import (
    AVRO,
    JSON,
    ColumnEncoding,
    EncodeError,
    _json_ready,
    chunks,
    encoder,
)
from sparklog.schemas.proto_files import message_descriptor
from sparklog.schemas.protobuf_decode import ProtobufDecoder
from sparklog.schemas.spark_to_avro import SchemaMappingError, avro_schema
from sparklog.schemas.spark_to_avro import fit_error as avro_fit
from sparklog.schemas.spark_to_json_schema import fit_error as json_fit
from sparklog.schemas.spark_to_json_schema import json_schema
from sparklog.schemas.spark_to_protobuf import fit_error as protobuf_fit
from sparklog.schemas.spark_to_protobuf import protobuf_schema
from sparklog.schemas.wire import prefix

UTC = datetime.UTC
# A Spark type's JSON form, its Arrow type (as Spark hands it to an Arrow writer) and values.
Typed = tuple[Any, pa.DataType, st.SearchStrategy[Any]]


def _ints(bits: int) -> st.SearchStrategy[int]:
    return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


_TIMES = {"min_value": datetime.datetime(1900, 1, 1), "max_value": datetime.datetime(2200, 1, 1)}
PRIMITIVES: list[Typed] = [
    ("boolean", pa.bool_(), st.booleans()),
    ("byte", pa.int8(), _ints(8)), ("short", pa.int16(), _ints(16)),
    ("integer", pa.int32(), _ints(32)), ("long", pa.int64(), _ints(64)),
    ("float", pa.float32(), st.floats(width=32, allow_nan=False, allow_infinity=False)),
    ("double", pa.float64(), st.floats(allow_nan=False, allow_infinity=False)),
    ("string", pa.string(), st.text(max_size=8)), ("binary", pa.binary(), st.binary(max_size=8)),
    ("date", pa.date32(), st.dates(datetime.date(1900, 1, 1), datetime.date(2200, 1, 1))),
    ("timestamp", pa.timestamp("us", tz="UTC"),
     st.datetimes(**_TIMES, timezones=st.just(UTC))),
    ("timestamp_ntz", pa.timestamp("us"), st.datetimes(**_TIMES)),
]


@st.composite
def decimals(draw: st.DrawFn) -> Typed:
    precision = draw(st.integers(1, 18))
    scale = draw(st.integers(0, min(precision, 6)))
    bound = decimal.Decimal(10) ** (precision - scale) - decimal.Decimal(1).scaleb(-scale)
    values = st.decimals(-bound, bound, places=scale, allow_nan=False, allow_infinity=False)
    return (f"decimal({precision},{scale})", pa.decimal128(precision, scale),
            values.map(lambda d: d.quantize(decimal.Decimal(1).scaleb(-scale))))


def _nullable(values: st.SearchStrategy[Any], nullable: bool) -> st.SearchStrategy[Any]:
    return st.none() | values if nullable else values


def _structs(children: st.SearchStrategy[Typed], letters: str) -> st.SearchStrategy[Typed]:
    """Struct types of fields of ``children``'s types, named with ``letters``."""
    @st.composite
    def struct(draw: st.DrawFn) -> Typed:
        names = draw(st.lists(st.text(letters, min_size=1, max_size=5), min_size=1,
                              max_size=4, unique=True))
        fields = [(name, draw(children), draw(st.booleans())) for name in names]
        spark = {"type": "struct", "fields": [
            {"name": n, "type": t[0], "nullable": null, "metadata": {}} for n, t, null in fields]}
        arrow = pa.struct([pa.field(n, t[1], null) for n, t, null in fields])
        values = st.fixed_dictionaries({n: _nullable(t[2], null) for n, t, null in fields})
        return spark, arrow, values

    return struct()


def _extend(children: st.SearchStrategy[Typed]) -> st.SearchStrategy[Typed]:

    @st.composite
    def array(draw: st.DrawFn) -> Typed:
        (spark, arrow, values), null = draw(children), draw(st.booleans())
        return ({"type": "array", "elementType": spark, "containsNull": null},
                pa.list_(arrow), st.lists(_nullable(values, null), max_size=3))

    @st.composite
    def mapping(draw: st.DrawFn) -> Typed:
        (spark, arrow, values), null = draw(children), draw(st.booleans())
        return ({"type": "map", "keyType": "string", "valueType": spark,
                 "valueContainsNull": null}, pa.map_(pa.string(), arrow),
                st.dictionaries(st.text(max_size=4), _nullable(values, null), max_size=3))

    return _structs(children, string.ascii_lowercase + "_") | array() | mapping()


TYPES = st.recursive(st.sampled_from(PRIMITIVES) | decimals(), _extend, max_leaves=8)


@st.composite
def struct_columns(draw: st.DrawFn) -> tuple[Any, pa.Array]:
    """A Spark struct type and an Arrow column of it (some rows null)."""
    spark, arrow, values = draw(_extend(TYPES).filter(lambda t: t[0]["type"] == "struct"))
    rows = draw(st.lists(st.none() | values, min_size=1, max_size=5))
    return spark, pa.array(rows, arrow)


SLOW = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]


def _encode(fmt: str, schema: Any, column: pa.Array, schema_id: int = 7) -> list[bytes | None]:
    encode = encoder(ColumnEncoding(fmt, "s-value", schema_id, json.dumps(schema)))
    return encode(column).to_pylist()


@settings(max_examples=150, suppress_health_check=SLOW)
@given(struct_columns())
def test_random_rows_round_trip_through_avro(case: tuple[Any, pa.Array]) -> None:
    spark, column = case
    schema = avro_schema(spark)
    parsed = fastavro.parse_schema(schema)  # a valid Avro schema, its names unique
    assert avro_fit(spark, schema) is None
    expected = column.to_pylist(maps_as_pydicts="strict")
    # the derived schemas take the columnar path, byte for byte as fastavro writes each row
    columnar = encode_column(column, schema).to_pylist()
    for body, row, alone in zip(_encode(AVRO, schema, column), expected, columnar,
                                strict=True):
        if row is None:
            assert body is None
            continue
        assert body is not None and body[:5] == prefix(7)
        assert fastavro.schemaless_reader(io.BytesIO(body[5:]), parsed, None) == row
        by_fastavro = io.BytesIO()
        fastavro.schemaless_writer(by_fastavro, parsed, row)
        assert alone == by_fastavro.getvalue() == body[5:]


def _as_json(value: Any) -> Any:
    """What the JSON encoding promises for a Python value of a row."""
    if isinstance(value, dict):
        return {k: _as_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_json(v) for v in value]
    if isinstance(value, datetime.datetime):  # UTC with Z, or no zone; always microseconds
        zone = "Z" if value.tzinfo is not None else ""
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + zone if zone else (
            value.strftime("%Y-%m-%dT%H:%M:%S.%f"))
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, bytes):
        import base64

        return base64.b64encode(value).decode()
    return value  # a Decimal stays one: see _matches


def _matches(document: Any, expected: Any) -> bool:
    """``document`` (parsed JSON) is ``expected`` (``_as_json`` of a row), a decimal being a
    JSON number of its exact digits (the columnar encoder) or of its nearest double (the
    row-by-row fallback, through ``json.dumps``)."""
    if isinstance(expected, decimal.Decimal):
        return isinstance(document, int | float) and float(document) == float(expected)
    if isinstance(expected, dict):
        return isinstance(document, dict) and document.keys() == expected.keys() and all(
            _matches(document[k], v) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(document, list) and len(document) == len(expected) and all(
            _matches(d, e) for d, e in zip(document, expected, strict=True))
    return document == expected


@settings(max_examples=150, suppress_health_check=SLOW)
@given(struct_columns())
def test_random_rows_round_trip_through_json(case: tuple[Any, pa.Array]) -> None:
    spark, column = case
    schema = json_schema(spark)
    assert json_fit(spark, schema) is None
    validator = jsonschema.Draft7Validator(schema)
    for body, row in zip(_encode(JSON, schema, column, 2 ** 31 - 1), column.to_pylist(
            maps_as_pydicts="strict"), strict=True):
        if row is None:
            assert body is None
            continue
        assert body is not None and body[:5] == b"\x00\x7f\xff\xff\xff"
        document = json.loads(body[5:])
        validator.validate(document)
        assert _matches(document, _as_json(row)), (document, row)


@settings(max_examples=150, suppress_health_check=SLOW)
@given(struct_columns())
def test_whole_columns_of_json_parse_as_the_rows(case: tuple[Any, pa.Array]) -> None:
    """The columnar JSON documents (where the column allows them) read as the rows."""
    _, column = case
    try:
        documents = json_columnar.encode_column(_json_ready(column)).to_pylist()
    except json_columnar.Unsupported:
        assume(False)
    rows = column.to_pylist(maps_as_pydicts="strict")
    for document, row in zip(documents, rows, strict=True):
        if row is not None:
            assert _matches(json.loads(document), _as_json(row)), (document, row)


def test_json_strings_are_escaped() -> None:
    column = pa.array([{"s": 'a "quoted" \\ path é 😀', "m": {'k"': [1.5, None]}}])
    document = json_columnar.encode_column(column).to_pylist()[0]
    assert json.loads(document) == column.to_pylist(maps_as_pydicts="strict")[0]
    assert json.loads(document)["s"] == 'a "quoted" \\ path é 😀'


NESTED = {"type": "struct", "fields": [
    {"name": "id", "type": "long", "nullable": False, "metadata": {}},
    {"name": "price", "type": "decimal(9,2)", "nullable": True, "metadata": {}},
    {"name": "address", "type": {"type": "struct", "fields": [
        {"name": "city", "type": "string", "nullable": True, "metadata": {}}]},
     "nullable": True, "metadata": {}},
]}


def test_the_avro_mapping_is_sparks_with_null_first_unions() -> None:
    assert avro_schema(NESTED, "Order", "shop") == {
        "type": "record", "name": "Order", "namespace": "shop", "fields": [
            {"name": "id", "type": "long"},
            {"name": "price", "type": ["null", {
                "type": "fixed", "name": "shop.Order.price.fixed", "size": 4,
                "logicalType": "decimal", "precision": 9, "scale": 2}], "default": None},
            {"name": "address", "type": ["null", {
                "type": "record", "name": "address", "namespace": "shop.Order",
                "fields": [{"name": "city", "type": ["null", "string"], "default": None}]}],
             "default": None}]}
    assert avro_schema(NESTED)["name"] == "topLevelRecord"


@pytest.mark.parametrize(("spark", "message"), [
    ({"type": "map", "keyType": "integer", "valueType": "string", "valueContainsNull": True},
     "column value is a map with keys of type integer"),
    ({"type": "struct", "fields": [{"name": "a-b", "type": "long", "nullable": True,
                                    "metadata": {}}]},
     "column value.a-b: 'a-b' is not a valid Avro field name"),
    ("interval day to second", "column value has type interval day to second"),
])
def test_types_without_an_avro_form_are_refused_naming_the_column(spark: Any,
                                                                  message: str) -> None:
    with pytest.raises(SchemaMappingError, match=message):
        avro_schema(spark)


def test_fit_errors_name_the_column() -> None:
    schema = avro_schema(NESTED)
    wider = {**NESTED, "fields": [*NESTED["fields"], {
        "name": "extra", "type": "string", "nullable": True, "metadata": {}}]}
    assert avro_fit(wider, schema) == "column value.extra is not a field of the schema"
    assert avro_fit({**NESTED, "fields": NESTED["fields"][1:]}, schema) == (
        "column value.id is missing: the schema's field has no default")
    nullable_id = {**NESTED, "fields": [{**NESTED["fields"][0], "nullable": True},
                                        *NESTED["fields"][1:]]}
    assert avro_fit(nullable_id, schema) == (
        "column value.id is nullable but the schema's type is not a union with null")
    as_int = {**NESTED, "fields": [{**NESTED["fields"][0], "type": "integer"},
                                   *NESTED["fields"][1:]]}
    assert avro_fit(as_int, schema) is None  # int promotes to long
    as_string = {**NESTED, "fields": [{**NESTED["fields"][0], "type": "string"},
                                      *NESTED["fields"][1:]]}
    assert avro_fit(as_string, schema) == (
        "column value.id of type string does not fit the schema's long")
    assert json_fit(wider, json_schema(NESTED)) == (
        "column value.extra is not a property of the schema")
    assert json_fit(as_string, json_schema(NESTED)) == (
        "column value.id of type string (string) does not fit the schema's type integer")


def test_a_null_struct_with_required_fields_encodes() -> None:
    """Spark sends a null struct whose non-nullable children hold nulls too (which Arrow's
    cast of the dates beside it refused)."""
    inner = pa.struct([pa.field("city", pa.string(), False)])
    address = pa.StructArray.from_arrays([pa.array([None, "Oslo"])], fields=list(inner),
                                         mask=pa.array([True, False]))
    column = pa.StructArray.from_arrays(
        [address, pa.array([datetime.date(2024, 1, 2)] * 2)],
        fields=[pa.field("address", inner), pa.field("day", pa.date32())])
    spark = {"type": "struct", "fields": [
        NESTED["fields"][2], {"name": "day", "type": "date", "nullable": True, "metadata": {}}]}
    schema = avro_schema(spark)
    assert [fastavro.schemaless_reader(io.BytesIO(body[5:]), schema, None)
            for body in _encode(AVRO, schema, column)] == [
        {"address": None, "day": datetime.date(2024, 1, 2)},
        {"address": {"city": "Oslo"}, "day": datetime.date(2024, 1, 2)}]


def test_chunks_bound_the_rows_converted_at_a_time() -> None:
    batch = pa.record_batch({"value": pa.array(range(10))})
    assert [len(c) for c in chunks(batch, 4)] == [4, 4, 2]


@given(st.lists(st.integers(-(2 ** 63), 2 ** 63 - 1), max_size=20))
def test_varints_are_avros_zig_zag_longs(values: list[int]) -> None:
    expected = []
    for value in values:
        body = io.BytesIO()
        fastavro.schemaless_writer(body, "long", value)
        expected.append(body.getvalue())
    assert varints(pa.array(values, pa.int64())).to_pylist() == expected


def test_schemas_the_columns_cannot_take_go_row_by_row() -> None:
    column = pa.array([{"kind": "b", "at": datetime.datetime(2024, 1, 1, tzinfo=UTC)}],
                      pa.struct([("kind", pa.string()), ("at", pa.timestamp("us", "UTC"))]))
    schema = {"type": "record", "name": "r", "fields": [
        {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": ["a", "b"]}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
    with pytest.raises(Unsupported):
        encode_column(column, schema)
    body = _encode(AVRO, schema, column)[0]
    assert body is not None
    assert fastavro.schemaless_reader(io.BytesIO(body[5:]), schema, None) == {
        "kind": "b", "at": datetime.datetime(2024, 1, 1, tzinfo=UTC)}


# -- Protobuf --------------------------------------------------------------------------------

_PROTO_PRIMITIVES = [t for t in PRIMITIVES if t[0] not in ("date", "timestamp_ntz")]
_DEFAULTS = {"boolean": False, "byte": 0, "short": 0, "integer": 0, "long": 0, "float": 0.0,
             "double": 0.0, "string": "", "binary": b""}


def _proto_extend(children: st.SearchStrategy[Typed]) -> st.SearchStrategy[Typed]:
    """Structs of any fields; arrays and maps (string keys) of scalars or structs, without
    nulls inside (a repeated field or a map holds none)."""
    scalar_or_struct = children.filter(lambda t: not isinstance(t[0], dict)
                                       or t[0]["type"] == "struct")

    @st.composite
    def array(draw: st.DrawFn) -> Typed:
        spark, arrow, values = draw(scalar_or_struct)
        return ({"type": "array", "elementType": spark, "containsNull": False},
                pa.list_(pa.field("element", arrow, False)), st.lists(values, max_size=3))

    @st.composite
    def mapping(draw: st.DrawFn) -> Typed:
        spark, arrow, values = draw(scalar_or_struct)
        return ({"type": "map", "keyType": "string", "valueType": spark,
                 "valueContainsNull": False}, pa.map_(pa.string(), pa.field("value", arrow,
                                                                               False)),
                st.dictionaries(st.text(max_size=4), values, max_size=3))

    return _structs(children, string.ascii_lowercase) | array() | mapping()


PROTO_TYPES = st.recursive(st.sampled_from(_PROTO_PRIMITIVES), _proto_extend, max_leaves=8)


def _as_read(value: Any, spark: Any) -> Any:
    """What the reader gives back for a written ``value`` of Spark type ``spark``: proto3's
    defaults for null scalars, arrays and maps (maps in key order), null structs null."""
    if isinstance(spark, str):
        return _DEFAULTS.get(spark) if value is None else value
    if spark["type"] == "struct":
        if value is None:
            return None
        return {f["name"]: _as_read(value.get(f["name"]), f["type"]) for f in spark["fields"]}
    if spark["type"] == "array":
        return [_as_read(v, spark["elementType"]) for v in value or []]
    items = value.items() if isinstance(value, dict) else value or []
    return sorted((k, _as_read(v, spark["valueType"])) for k, v in items)


@settings(max_examples=150, suppress_health_check=SLOW)
@given(st.data())
def test_random_rows_round_trip_through_protobuf(data: st.DataObject) -> None:
    """The derived file holds the rows; what the sink writes reads back (with sparklog's
    reader) as the rows with proto3's defaults for their nulls."""
    spark, arrow, values = data.draw(_proto_extend(PROTO_TYPES).filter(
        lambda t: t[0]["type"] == "struct"))
    rows = data.draw(st.lists(st.none() | values, min_size=1, max_size=5))
    column = pa.array(rows, arrow)
    text = protobuf_schema(spark)
    assert protobuf_fit(spark, message_descriptor(text)) is None
    kind = protobuf_types.arrow_type(text)
    encoded = encoder(ColumnEncoding(PROTOBUF, "s-value", 7, text))(column).to_pylist()
    assert [v is None for v in encoded] == [r is None for r in rows]
    assert all(v[:6] == prefix(7) + b"\x00" for v in encoded if v is not None)
    decoded = ProtobufDecoder(text, kind, framed=True, reader_id=7).decode(encoded)
    assert decoded.errors == {}
    assert [_as_read(r, spark) for r in decoded.array.to_pylist()] == \
        [_as_read(r, spark) for r in column.to_pylist()]


def test_protobuf_rows_read_by_confluents_deserializer() -> None:
    """The sink's bytes as confluent-kafka's ProtobufDeserializer reads them, a message
    that is not the file's first included (its indexes)."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import message_factory

    text = ('syntax = "proto3"; package shop; import "google/protobuf/timestamp.proto";\n'
            "message Other { int32 x = 1; }\n"
            "message Order { int64 id = 1; repeated Line lines = 2; map<string, int64> t = 3;\n"
            "  google.protobuf.Timestamp at = 4; Status status = 5;\n"
            "  message Line { string sku = 1; sint32 qty = 2; }\n"
            "  enum Status { NEW = 0; PAID = 1; } }")
    spark = {"type": "struct", "fields": [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "lines", "type": {"type": "array", "containsNull": False, "elementType": {
            "type": "struct", "fields": [
                {"name": "sku", "type": "string", "nullable": True, "metadata": {}},
                {"name": "qty", "type": "integer", "nullable": True, "metadata": {}}]}},
         "nullable": True, "metadata": {}},
        {"name": "t", "type": {"type": "map", "keyType": "string", "valueType": "long",
                               "valueContainsNull": False}, "nullable": True, "metadata": {}},
        {"name": "at", "type": "timestamp", "nullable": True, "metadata": {}},
        {"name": "status", "type": "string", "nullable": True, "metadata": {}}]}
    descriptor = message_descriptor(text, "Order")
    assert protobuf_fit(spark, descriptor) is None
    at = datetime.datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
    rows = [{"id": 5, "lines": [{"sku": "a", "qty": -3}], "t": [("eur", 12)], "at": at,
             "status": "PAID"}]
    column = pa.array(rows, protobuf_types.arrow_type(text, "Order"))
    (value,) = encoder(ColumnEncoding(PROTOBUF, "s", 9, text, "Order"))(column).to_pylist()
    assert value[:7] == prefix(9) + b"\x02\x02"  # indexes [1]: count 1, index 1 (zigzag)
    order = message_factory.GetMessageClass(descriptor)
    read = ProtobufDeserializer(order, {"use.deprecated.format": False})(
        value, SerializationContext("t", MessageField.VALUE))
    assert (read.id, read.lines[0].sku, read.lines[0].qty, dict(read.t), read.status) == \
        (5, "a", -3, {"eur": 12}, 1)
    assert read.at.ToDatetime(tzinfo=UTC) == at
    with pytest.raises(EncodeError, match=r"row 0 does not fit the Protobuf message shop\.Order"):
        encoder(ColumnEncoding(PROTOBUF, "s", 9, text, "Order"))(
            pa.array([{"status": "GONE"}], pa.struct([pa.field("status", pa.string())])))


@pytest.mark.parametrize(("spark", "message"), [
    ({"type": "struct", "fields": [{"name": "d", "type": "date", "nullable": True,
                                    "metadata": {}}]}, "Spark type date has no Protobuf type"),
    ({"type": "struct", "fields": [{"name": "a-b", "type": "long", "nullable": True,
                                    "metadata": {}}]}, "is not a Protobuf identifier"),
    ({"type": "struct", "fields": [{"name": "x", "nullable": True, "metadata": {}, "type": {
        "type": "array", "containsNull": False, "elementType": {
            "type": "array", "containsNull": False, "elementType": "long"}}}]},
     "an array of arrays has no Protobuf type"),
    ({"type": "struct", "fields": [{"name": "m", "nullable": True, "metadata": {}, "type": {
        "type": "map", "keyType": "double", "valueType": "long", "valueContainsNull": False}}]},
     "a map key of type double"),
])
def test_spark_types_protobuf_cannot_hold(spark: Any, message: str) -> None:
    with pytest.raises(SchemaMappingError, match=message):
        protobuf_schema(spark)


def test_protobuf_fit_names_the_first_field_that_does_not_fit() -> None:
    message = message_descriptor('syntax = "proto3"; message M { int32 a = 1; '
                                 'repeated string b = 2; map<string, int32> c = 3; }')

    def spark(**fields: Any) -> Any:
        return {"type": "struct", "fields": [{"name": n, "type": t, "nullable": True,
                                              "metadata": {}} for n, t in fields.items()]}

    assert protobuf_fit(spark(a="integer"), message) is None
    assert protobuf_fit(spark(a="long"), message) == \
        "a is long in the rows, which a int32 field does not hold"
    assert protobuf_fit(spark(z="long"), message) == "the message M has no field z"
    assert protobuf_fit(spark(b="string"), message) == \
        "b is repeated in the message, not an array in the rows"
    assert protobuf_fit(spark(c={"type": "array", "elementType": "string",
                                 "containsNull": False}), message) == \
        "c is a map in the message, not in the rows"
