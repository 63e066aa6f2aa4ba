"""Schema references (Confluent's ``references``) read by typed columns and the sink.

A model test of the Avro inlining (a schema split into references in every way and written
back reads as the same types), the JSON Schema and walk rules, and confluent-kafka's own
serializers against the broker's registry: records written with a schema that references
others decode in sparklog as confluent-kafka's deserializers decode them, and the sink's
``useLatestVersion`` encodes with such a schema.
"""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from broker_fixtures import start_broker
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import LongType, StringType, StructField, StructType

from sparklog.broker.process import BrokerProcess
from sparklog.datasource.write.encodings import batch_encoder, column_encoding
from sparklog.schemas import avro_types, json_types, protobuf_types
from sparklog.schemas import references as refs
from sparklog.schemas.avro_decode import AvroDecoder
from sparklog.schemas.avro_types import UnsupportedSchemaError
from sparklog.schemas.json_decode import JsonDecoder
from sparklog.schemas.protobuf_decode import ProtobufDecoder
from sparklog.schemas.registry import RegistryConfig, WriterSchemas, choose
from sparklog.schemas.registry_client import RegisteredSchema, RegistryError, SchemaRegistry

# -- Avro: split a schema into references, write them back ------------------------------------

PRIMITIVES = ["int", "long", "string", "bytes", "boolean", "double"]


def _full(schema: dict, namespace: str | None) -> str:
    space = schema.get("namespace", namespace)
    return f"{space}.{schema['name']}" if space else schema["name"]


@st.composite
def avro_schemas(draw: st.DrawFn) -> dict:
    """A record schema with nested named types in assorted namespaces (explicit, inherited,
    the null one) and later uses of those types by full or short name."""
    defined: list[str] = []
    counter = itertools.count()

    def by_name(namespace: str | None) -> str | None:
        usable = [n for n in defined if "." in n or not namespace]
        if not usable:
            return None
        full = draw(st.sampled_from(usable))
        space, _, short = full.rpartition(".")
        return short if space == (namespace or "") and draw(st.booleans()) else full

    def kind(depth: int, namespace: str | None) -> Any:
        choices = ["primitive", "name", "array", "map", "union"] + (
            ["record", "enum", "fixed"] if depth < 3 else [])
        chosen = draw(st.sampled_from(choices))
        if chosen == "name" and (named := by_name(namespace)) is not None:
            return named
        if chosen in ("record", "enum", "fixed"):
            schema: dict[str, Any] = {"type": chosen, "name": f"N{next(counter)}"}
            space = draw(st.sampled_from([None, None, "", "a", "a.b", "c"]))
            if space is not None:
                schema["namespace"] = space
            full = _full(schema, namespace)
            inner = full.rpartition(".")[0] or None
            if chosen == "record":
                schema["fields"] = [{"name": f"f{i}", "type": kind(depth + 1, inner)}
                                    for i in range(draw(st.integers(1, 3)))]
            elif chosen == "enum":
                schema["symbols"] = ["S0", "S1"]
            else:
                schema["size"] = 4
            defined.append(full)
            return schema
        if chosen == "array":
            return {"type": "array", "items": kind(depth + 1, namespace)}
        if chosen == "map":
            return {"type": "map", "values": kind(depth + 1, namespace)}
        if chosen == "union":
            branch = kind(depth + 1, namespace)
            return branch if isinstance(branch, list) else ["null", branch]
        return draw(st.sampled_from(PRIMITIVES))

    top_space = draw(st.sampled_from([None, "top", "a"]))
    top: dict[str, Any] = {"type": "record", "name": "Top"}
    if top_space:
        top["namespace"] = top_space
    top["fields"] = [{"name": f"f{i}", "type": kind(0, top_space)}
                     for i in range(draw(st.integers(1, 4)))]
    return top


def split(schema: dict, extract: Callable[[str], bool]) -> tuple[dict, list[str]]:
    """``schema`` with the named types ``extract`` picks moved into referenced schemas
    (each named by its full name, used by it), dependencies first. A type is
    moved only when what it uses is its own or moved too: a registered schema parses with
    its references alone, never with its referrer's types."""
    found: list[str] = []
    moved: set[str] = set()

    def walk(node: Any, namespace: str | None) -> tuple[Any, set[str], set[str]]:
        """The node rewritten, the names it uses and the names it defines."""
        if isinstance(node, str):
            if node in PRIMITIVES:
                return node, set(), set()
            return node, {node if "." in node or not namespace else f"{namespace}.{node}"}, set()
        if isinstance(node, list):
            parts = [walk(branch, namespace) for branch in node]
            return ([p[0] for p in parts], set().union(*(p[1] for p in parts)),
                    set().union(*(p[2] for p in parts)))
        key = {"array": "items", "map": "values"}.get(node["type"])
        if key is not None:
            inner, uses, defines = walk(node[key], namespace)
            return {**node, key: inner}, uses, defines
        full = _full(node, namespace)
        space = full.rpartition(".")[0]
        body, uses, defines = node, set(), {full}
        if node["type"] == "record":
            fields = []
            for f in node["fields"]:
                kind, used, defined = walk(f["type"], space or None)
                fields.append({**f, "type": kind})
                uses |= used
                defines |= defined
            body = {**node, "fields": fields}
        if (node["name"] != "Top" and (space or not namespace) and uses - defines <= moved
                and extract(full)):
            # as a user writes it alone: a dotted full name, or no namespace for the null one
            found.append(json.dumps({**{k: v for k, v in body.items() if k != "namespace"},
                                     "name": full}))
            moved.update(defines)
            return full, {full}, set()
        return body, uses, defines

    return walk(schema, None)[0], found


def canonical(schema: Any) -> str:
    return fastavro.schema.to_parsing_canonical_form(fastavro.parse_schema(schema))


@settings(max_examples=300, deadline=None)
@given(avro_schemas(), st.data())
def test_a_schema_split_into_references_and_written_back_is_the_same_schema(
        schema: dict, data: st.DataObject) -> None:
    picks = data.draw(st.lists(st.booleans(), min_size=20, max_size=20))
    chosen = iter(picks)
    main, referenced = split(schema, lambda _: next(chosen, False))
    named: dict = {}
    for text in [*referenced, json.dumps(main)]:  # what a registry would hold: it parses
        fastavro.parse_schema(json.loads(text), named_schemas=named)
    shuffled = data.draw(st.permutations(referenced))  # the pool is by name, not by order
    alone = json.loads(refs.inline_avro(json.dumps(main), shuffled))
    assert canonical(alone) == canonical(schema)
    assert avro_types.arrow_type(alone) == avro_types.arrow_type(schema)


ADDRESS = {"type": "record", "name": "Address", "namespace": "com.acme", "fields": [
    {"name": "street", "type": "string"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["HOME", "WORK"]}}]}
MONEY = {"type": "record", "name": "Money", "fields": [{"name": "cents", "type": "long"}]}
CUSTOMER = {"type": "record", "name": "Customer", "fields": [
    {"name": "id", "type": "long"},
    {"name": "home", "type": "com.acme.Address"},
    {"name": "work", "type": ["null", "com.acme.Address"], "default": None},
    {"name": "kind", "type": "com.acme.Kind"},
    {"name": "balance", "type": "Money"}]}


def test_records_written_with_references_decode_through_the_standalone_schema() -> None:
    named: dict = {}
    for schema in (ADDRESS, MONEY):
        fastavro.parse_schema(schema, named_schemas=named)
    writer = fastavro.parse_schema(CUSTOMER, named_schemas=named)
    rows = [{"id": 1, "home": {"street": "a", "kind": "HOME"}, "work": None, "kind": "WORK",
             "balance": {"cents": 5}},
            {"id": 2, "home": {"street": "b", "kind": "WORK"},
             "work": {"street": "c", "kind": "HOME"}, "kind": "HOME", "balance": {"cents": -1}}]
    values = []
    for row in rows:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, writer, row)
        values.append(out.getvalue())
    alone = refs.inline_avro(json.dumps(CUSTOMER), [json.dumps(ADDRESS), json.dumps(MONEY)])
    decoded = AvroDecoder(alone, avro_types.arrow_type(alone), framed=False).decode(values)
    assert decoded.array.to_pylist() == rows


def test_a_type_nested_in_a_reference_is_written_where_it_is_first_used() -> None:
    """The schema uses only Kind, which Address (a reference of its reference) defines
    inside itself; Address itself, used later, keeps Kind a name."""
    badge = {"type": "record", "name": "Badge", "namespace": "com.hr", "fields": [
        {"name": "kind", "type": "com.acme.Kind"}]}
    person = {"type": "record", "name": "Person", "fields": [
        {"name": "badge", "type": "com.hr.Badge"}, {"name": "home", "type": "com.acme.Address"},
        {"name": "kind", "type": "com.acme.Kind"}]}
    alone = json.loads(refs.inline_avro(json.dumps(person),
                                        [json.dumps(ADDRESS), json.dumps(badge)]))
    fastavro.parse_schema(alone)
    assert alone["fields"][0]["type"]["fields"][0]["type"] == {
        "type": "enum", "name": "Kind", "namespace": "com.acme", "symbols": ["HOME", "WORK"]}
    assert alone["fields"][1]["type"]["fields"][1]["type"] == "com.acme.Kind"
    assert alone["fields"][2]["type"] == "com.acme.Kind"
    assert avro_types.arrow_type(alone) == pa.struct([
        pa.field("badge", pa.struct([pa.field("kind", pa.string(), False)]), False),
        pa.field("home", pa.struct([pa.field("street", pa.string(), False),
                                    pa.field("kind", pa.string(), False)]), False),
        pa.field("kind", pa.string(), False)])


def test_a_name_no_reference_defines_is_left_for_the_parser() -> None:
    alone = refs.inline_avro(json.dumps(CUSTOMER), [json.dumps(ADDRESS)])
    with pytest.raises(avro_types.UnsupportedSchemaError,
                       match="unknown type 'Money': neither defined before its use nor by a "
                             "schema reference"):
        avro_types.arrow_type(alone)


# -- JSON Schema ------------------------------------------------------------------------------

STREET = {"type": "object", "properties": {"line": {"type": "string"},
                                           "zip": {"$ref": "#/definitions/Zip"}},
          "definitions": {"Zip": {"type": "string"}}}
POSTAL = {"type": "object", "properties": {"street": {"$ref": "schemas/street.json"},
                                           "zip": {"$ref": "schemas/street.json#/definitions/Zip"},
                                           "note": {"$ref": "#/$defs/Note"}},
          "$defs": {"Note": {"type": "string"}}}
ORDER = {"type": "object", "properties": {"id": {"type": "integer"},
                                          "to": {"$ref": "postal.json"},
                                          "at": {"$ref": "#/definitions/At"}},
         "definitions": {"At": {"type": "string", "format": "date-time"}}}


def test_json_references_go_under_defs_and_keep_their_pointers() -> None:
    alone = refs.inline_json(json.dumps(ORDER), {"postal.json": json.dumps(POSTAL),
                                                 "schemas/street.json": json.dumps(STREET)})
    street = pa.struct([pa.field("line", pa.string()), pa.field("zip", pa.string())])
    assert json_types.arrow_type(alone) == pa.struct([
        pa.field("id", pa.int64()),
        pa.field("to", pa.struct([pa.field("street", street), pa.field("zip", pa.string()),
                                  pa.field("note", pa.string())])),
        pa.field("at", pa.timestamp("us", tz="UTC"))])
    with pytest.raises(refs.SchemaReferenceError, match=r"already hold .postal\.json."):
        refs.inline_json(json.dumps({**ORDER, "$defs": {"postal.json": {}}}),
                         {"postal.json": json.dumps(POSTAL)})


# -- walking references -----------------------------------------------------------------------


def registry_of(schemas: dict[str, tuple[str, list[refs.SchemaReference]]]) -> refs.Fetch:
    def fetch(ref: refs.SchemaReference) -> tuple[str, str, list[refs.SchemaReference]]:
        text, own = schemas[ref.subject]
        return "AVRO", text, own
    return fetch


def ref(subject: str) -> refs.SchemaReference:
    return refs.SchemaReference(subject, subject, 1)


def test_references_walk_depth_first_each_once_and_refuse_cycles() -> None:
    fetch = registry_of({"a": ("A", [ref("c")]), "b": ("B", [ref("c")]), "c": ("C", []),
                         "x": ("X", [ref("y")]), "y": ("Y", [ref("x")])})
    assert [r.schema for r in refs.referenced([ref("a"), ref("b")], fetch)] == ["C", "A", "B"]
    with pytest.raises(refs.SchemaReferenceError, match="nested more than 32 deep"):
        refs.referenced([ref("x")], fetch)


MONEY_PROTO = """
syntax = "proto3";
package shop.common;
message Money { int64 cents = 1; string currency = 2; }
"""
LINE_PROTO = """
syntax = "proto3";
package shop;
import "shop/common/money.proto";
message Line { string sku = 1; common.Money price = 2; }
"""
INVOICE_PROTO = """
syntax = "proto3";
package shop;
import "shop/line.proto";
import "shop/common/money.proto";
import "google/protobuf/timestamp.proto";
message Invoice {
  repeated Line lines = 1;
  shop.common.Money total = 2;
  google.protobuf.Timestamp at = 3;
}
"""
MONEY_TYPE = pa.struct([pa.field("cents", pa.int64()), pa.field("currency", pa.string())])


def test_protobuf_imports_travel_with_the_file() -> None:
    """The file and what its references give, read as one: a type of an import of an
    import; a well-known type's reference is left to the pool; a missing import or a cycle
    is named."""
    fetch = registry_of({"line": (LINE_PROTO, [refs.SchemaReference(
                             "shop/common/money.proto", "money", 1)]),
                         "money": (MONEY_PROTO, []), "ts": ("unused", [])})
    invoice = refs.standalone("PROTOBUF", INVOICE_PROTO, [
        refs.SchemaReference("shop/line.proto", "line", 1),
        refs.SchemaReference("shop/common/money.proto", "money", 1),
        refs.SchemaReference("google/protobuf/timestamp.proto", "ts", 1)], fetch)
    assert [name for name, _ in refs.protobuf_unbundle(invoice)[1]] == [
        "shop/common/money.proto", "shop/line.proto"]
    assert protobuf_types.arrow_type(invoice) == pa.struct([
        pa.field("lines", pa.list_(pa.field("element", pa.struct([
            pa.field("sku", pa.string()), pa.field("price", MONEY_TYPE)])))),
        pa.field("total", MONEY_TYPE), pa.field("at", pa.timestamp("us", tz="UTC"))])
    with pytest.raises(UnsupportedSchemaError, match=r"no message 'Money'"):
        protobuf_types.arrow_type(invoice, "Money")  # the reader's message is the file's
    lacking = refs.protobuf_bundle(INVOICE_PROTO, [("shop/line.proto", LINE_PROTO)])
    with pytest.raises(UnsupportedSchemaError, match=r"shop/line\.proto imports "
                                                     r"shop/common/money\.proto, which none"):
        protobuf_types.arrow_type(lacking)
    assert refs.standalone("PROTOBUF", MONEY_PROTO, [refs.SchemaReference(
        "google/protobuf/timestamp.proto", "ts", 1)], fetch) == MONEY_PROTO


# -- confluent-kafka's serializers against the broker's registry ------------------------------


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    proc: BrokerProcess = start_broker(tmp_path_factory.mktemp("references"),
                                       {"schema.registry.listeners": "http://127.0.0.1:0"})
    assert proc.schema_registry_url is not None
    yield proc.schema_registry_url, SchemaRegistryClient({"url": proc.schema_registry_url})
    assert proc.stop() == 0


def value_context(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


def test_avro_written_by_confluents_serializer_with_references(registry: tuple[str, Any]
                                                               ) -> None:
    url, client = registry
    client.register_schema("address", Schema(json.dumps(ADDRESS), "AVRO"))
    client.register_schema("money", Schema(json.dumps(MONEY), "AVRO"))
    customer = Schema(json.dumps(CUSTOMER), "AVRO", [
        SchemaReference("com.acme.Address", "address", 1), SchemaReference("Money", "money", 1)])
    serialize = AvroSerializer(client, customer)
    rows = [{"id": i, "home": {"street": f"s{i}", "kind": "HOME"}, "work": None,
             "kind": "WORK", "balance": {"cents": i * 100}} for i in range(3)]
    values = [serialize(row, value_context("customers")) for row in rows]
    config = RegistryConfig((("url", url),))
    chosen = choose(config, "customers-value")
    decoder = AvroDecoder(chosen.schema_str, avro_types.arrow_type(chosen.schema_str),
                          framed=True, reader_id=chosen.schema_id,
                          writer_schema=WriterSchemas(config))
    deserialize = AvroDeserializer(client)
    assert decoder.decode(values).array.to_pylist() == \
        [deserialize(v, value_context("customers")) for v in values] == rows
    # the sink's useLatestVersion encodes with the subject's latest schema, references in
    spark_type = StructType([
        StructField("id", LongType(), False),
        StructField("home", StructType([StructField("street", StringType(), False),
                                        StructField("kind", StringType(), False)]), False),
        StructField("work", StructType([StructField("street", StringType(), False),
                                        StructField("kind", StringType(), False)])),
        StructField("kind", StringType(), False),
        StructField("balance", StructType([StructField("cents", LongType(), False)]), False)])
    schema = StructType([StructField("value", spark_type)])
    encoding = column_encoding({"valueFormat": "avro", "schemaRegistry.url": url,
                                "useLatestVersion": "true"}, schema, "value", "customers")
    assert encoding is not None and encoding.schema_id == chosen.schema_id
    encode = batch_encoder({"value": encoding})
    assert encode is not None
    batch = pa.RecordBatch.from_arrays([pa.array(rows, avro_types.arrow_type(chosen.schema_str))],
                                       ["value"])
    (encoded,) = encode(batch)
    assert [deserialize(v, value_context("customers"))
            for v in encoded.column("value").to_pylist()] == rows


def test_json_written_by_confluents_serializer_with_references(registry: tuple[str, Any]
                                                               ) -> None:
    url, client = registry
    client.register_schema("street", Schema(json.dumps(STREET), "JSON"))
    client.register_schema("postal", Schema(json.dumps(POSTAL), "JSON", [
        SchemaReference("schemas/street.json", "street", 1)]))
    order = Schema(json.dumps(ORDER), "JSON", [SchemaReference("postal.json", "postal", 1)])
    serialize = JSONSerializer(order, client)
    rows = [{"id": i, "to": {"street": {"line": f"l{i}", "zip": "z"}, "zip": "z", "note": "n"},
             "at": None} for i in range(2)]
    values = [serialize({k: v for k, v in row.items() if v is not None},
                        value_context("orders")) for row in rows]
    chosen = choose(RegistryConfig((("url", url),)), "orders-value")
    decoded = JsonDecoder(json_types.arrow_type(chosen.schema_str), framed=True).decode(values)
    assert decoded.array.to_pylist() == rows
    deserialize = JSONDeserializer(None, schema_registry_client=client)
    assert [deserialize(v, value_context("orders")) for v in values] == \
        [{k: v for k, v in row.items() if v is not None} for row in rows]


def test_a_reference_the_registry_cannot_give_is_named(registry: tuple[str, Any]) -> None:
    url, _ = registry
    holder = RegisteredSchema(1, json.dumps({"type": "record", "name": "H", "fields": [
        {"name": "g", "type": "Gone"}]}), "AVRO", 1, (refs.SchemaReference("Gone", "gone", 7),))
    with pytest.raises(RegistryError, match=r"its reference Gone \(version 7 of subject "
                                            r"'gone'\): Subject 'gone' not found"):
        SchemaRegistry(url).standalone(holder)


def test_protobuf_written_by_confluents_serializer_with_imports(registry: tuple[str, Any]
                                                                ) -> None:
    """ProtobufSerializer registers the imported file as a reference of its own subject;
    the records read through the bundle as the deserializer reads them."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    money = descriptor_pb2.FileDescriptorProto(name="pay/money.proto", package="pay",
                                               syntax="proto3")
    money.message_type.add(name="Money").field.add(name="cents", number=1,
                                                   type=field.TYPE_INT64,
                                                   label=field.LABEL_OPTIONAL)
    bill = descriptor_pb2.FileDescriptorProto(name="pay/bill.proto", package="pay",
                                              syntax="proto3", dependency=["pay/money.proto"])
    message = bill.message_type.add(name="Bill")
    message.field.add(name="id", number=1, type=field.TYPE_INT64, label=field.LABEL_OPTIONAL)
    message.field.add(name="due", number=2, type=field.TYPE_MESSAGE, type_name=".pay.Money",
                      label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(money)
    pool.Add(bill)
    bill_class = message_factory.GetMessageClass(pool.FindMessageTypeByName("pay.Bill"))
    url, client = registry
    serialize = ProtobufSerializer(bill_class, client, {"use.deprecated.format": False})
    values = [serialize(bill_class(id=i, due={"cents": i * 7}), value_context("bills"))
              for i in range(1, 3)]
    assert [r.name for r in client.get_latest_version("bills-value").schema.references] == \
        ["pay/money.proto"]
    config = RegistryConfig((("url", url),))
    chosen = choose(config, "bills-value")
    decoder = ProtobufDecoder(chosen.schema_str, protobuf_types.arrow_type(chosen.schema_str),
                              framed=True, reader_id=chosen.schema_id,
                              writer_schema=WriterSchemas(config))
    assert decoder.decode(values).array.to_pylist() == [
        {"id": i, "due": {"cents": i * 7}} for i in range(1, 3)]

