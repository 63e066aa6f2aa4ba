"""Typed columns in the Spark source (``valueFormat`` / ``keyFormat``), end to end.

A real local SparkSession (the session ``spark`` fixture) reads topics written by
confluent-kafka's own serializers against a real broker child process with its schema
registry on: two Avro schema versions read into the newest, JSON Schema, Protobuf, and each
``onDecodeError`` mode. The expected rows are decoded by hand (fastavro, ``json``,
confluent-kafka's ``ProtobufDeserializer``).
"""

from __future__ import annotations

import datetime
import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest
from broker_fixtures import (
    TIMEOUT,
    confluent_producer,
    consume_confluent,
    create_topic,
    module_broker,
    unique_topic,
)
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from protobuf_support import context, expected, message_classes, orders, serializer

from sparklog.broker.process import BrokerProcess
from sparklog.dlq.headers import ERROR_MESSAGE, ORIGINAL_OFFSET, ORIGINAL_TOPIC
from sparklog.schemas.wire import split

pytestmark = pytest.mark.spark

broker = module_broker({"schema.registry.listeners": "http://127.0.0.1:0"})

EVENT_V1 = {"type": "record", "name": "Event", "namespace": "test", "fields": [
    {"name": "id", "type": "long"},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                                "scale": 2}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": ["null", "long"]}},
    {"name": "where", "type": ["null", {"type": "record", "name": "Place", "fields": [
        {"name": "city", "type": "string"}]}]},
]}
EVENT_V2 = {**EVENT_V1, "fields": [*EVENT_V1["fields"],
                                   {"name": "note", "type": ["null", "string"], "default": None}]}
ORDER = {"type": "object", "properties": {
    "id": {"type": "integer"}, "item": {"type": "string"}, "price": {"type": "number"},
    "at": {"type": "string", "format": "date-time"},
    "lines": {"type": "array", "items": {"type": "object", "properties": {
        "sku": {"type": "string"}, "qty": {"type": "integer"}}}}}}

REGION = {"type": "object", "properties": {"region": {"type": "string"}}}


def registry(broker: BrokerProcess) -> SchemaRegistryClient:
    assert broker.schema_registry_url is not None
    return SchemaRegistryClient({"url": broker.schema_registry_url})


def typed(spark: Any, broker: BrokerProcess, topic: str, **extra: str) -> Any:
    return (spark.read.format("sparklog")
            .option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", topic)
            .option("schemaRegistry.url", broker.schema_registry_url).options(**extra).load())


def event(i: int, v2: bool) -> dict[str, Any]:
    record = {"id": i, "kind": "AB"[i % 2],
              "at": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
              + datetime.timedelta(milliseconds=i),
              "amount": fastavro_decimal(i), "tags": [f"t{i}"] * (i % 3),
              "attrs": {"n": i, "none": None}, "where": {"city": f"c{i}"} if i % 2 else None}
    return {**record, "note": f"n{i}"} if v2 else record


def fastavro_decimal(i: int) -> Any:
    from decimal import Decimal

    return Decimal(i * 101) / 100


def produce_avro(broker: BrokerProcess, topic: str) -> list[bytes | None]:
    """Three records of v1, three of v2 (adds ``note`` with a default), one tombstone."""
    sr = registry(broker)
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1 = AvroSerializer(sr, json.dumps(EVENT_V1))
    v2 = AvroSerializer(sr, json.dumps(EVENT_V2))
    values = [v1(event(i, False), ctx) for i in range(3)]
    values += [v2(event(i, True), ctx) for i in range(3, 6)]
    values.append(None)
    producer = confluent_producer(broker.bootstrap)
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(TIMEOUT) == 0
    return values


def by_hand(broker: BrokerProcess, value: bytes | None) -> dict[str, Any] | None:
    """A value decoded with fastavro into the newest schema, as Spark shows it."""
    if value is None:
        return None
    schema_id, body = split(value)
    writer = fastavro.parse_schema(json.loads(registry(broker).get_schema(schema_id).schema_str))
    record = fastavro.schemaless_reader(io.BytesIO(body), writer,
                                        fastavro.parse_schema(EVENT_V2))
    record["attrs"] = dict(record["attrs"])
    return record


def as_python(row: Any) -> dict[str, Any] | None:
    if row is None:
        return None
    record = row.asDict(recursive=True)
    record["at"] = record["at"].astimezone(datetime.UTC)
    return record


def test_avro_two_versions_read_into_the_newest(spark: Any, broker: BrokerProcess,
                                                tmp_path: Path) -> None:
    topic = unique_topic("avro")
    create_topic(broker.bootstrap, topic)
    values = produce_avro(broker, topic)
    df = typed(spark, broker, topic, valueFormat="avro")
    assert [f.name for f in df.schema["value"].dataType.fields] == [
        "id", "kind", "at", "amount", "tags", "attrs", "where", "note"]
    assert df.schema["value"].dataType["where"].nullable
    assert not df.schema["value"].dataType["id"].nullable
    rows = df.orderBy("offset").collect()
    assert [as_python(r.value) for r in rows] == [by_hand(broker, v) for v in values]
    assert [r.value.note for r in rows[:6]] == [None] * 3 + ["n3", "n4", "n5"]

    # the stream gives the same rows, with the schema chosen at load: version 1 on request
    query = (spark.readStream.format("sparklog")
             .option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", topic)
             .option("startingOffsets", "earliest").option("valueFormat", "avro")
             .option("schemaRegistry.url", broker.schema_registry_url)
             .option("valueSchemaVersion", "1").load()
             .writeStream.format("memory").queryName("typed_avro_v1")
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True)
             .start())
    query.awaitTermination(120)
    assert query.exception() is None
    streamed = spark.table("typed_avro_v1").orderBy("offset").collect()
    assert [r.value.id if r.value else None for r in streamed] == [0, 1, 2, 3, 4, 5, None]
    assert "note" not in streamed[0].value.asDict()


def test_avro_with_schema_references(spark: Any, broker: BrokerProcess) -> None:
    """A schema whose record types live in other subjects (Confluent's references), written
    by AvroSerializer: the driver writes the referenced types into the reader schema, the
    tasks do the same with each writer's, and the rows read as AvroDeserializer reads them."""
    topic = unique_topic("avro-refs")
    create_topic(broker.bootstrap, topic)
    sr = registry(broker)
    place = {"type": "record", "name": "Place", "namespace": "geo", "fields": [
        {"name": "city", "type": "string"}]}
    trip = {"type": "record", "name": "Trip", "namespace": "travel", "fields": [
        {"name": "id", "type": "long"}, {"name": "start", "type": "geo.Place"},
        {"name": "stops", "type": {"type": "array", "items": "geo.Place"}}]}
    sr.register_schema(f"{topic}-place", Schema(json.dumps(place), "AVRO"))
    serialize = AvroSerializer(sr, Schema(json.dumps(trip), "AVRO", [
        SchemaReference("geo.Place", f"{topic}-place", 1)]))
    ctx = SerializationContext(topic, MessageField.VALUE)
    trips = [{"id": i, "start": {"city": f"c{i}"}, "stops": [{"city": "x"}] * i}
             for i in range(3)]
    producer = confluent_producer(broker.bootstrap)
    for value in trips:
        producer.produce(topic, serialize(value, ctx))
    assert producer.flush(TIMEOUT) == 0
    rows = typed(spark, broker, topic, valueFormat="avro").orderBy("offset").collect()
    assert [r.value.asDict(recursive=True) for r in rows] == trips


def test_json_schema_values(spark: Any, broker: BrokerProcess) -> None:
    topic = unique_topic("json")
    create_topic(broker.bootstrap, topic)
    ctx = SerializationContext(topic, MessageField.VALUE)
    serializer = JSONSerializer(json.dumps(ORDER), registry(broker))
    key_serializer = JSONSerializer(json.dumps(REGION), registry(broker))  # <topic>-key
    key_ctx = SerializationContext(topic, MessageField.KEY)
    orders = [{"id": i, "item": f"i{i}", "price": i / 4, "at": f"2026-01-0{i + 1}T10:00:00Z",
               "lines": [{"sku": f"s{i}", "qty": i}]} for i in range(4)]
    orders[2] = {"id": 2}  # properties left out read as null
    producer = confluent_producer(broker.bootstrap)
    for i, order in enumerate(orders):
        producer.produce(topic, serializer(order, ctx),
                         key_serializer({"region": f"r{i}"}, key_ctx))
    assert producer.flush(TIMEOUT) == 0
    rows = typed(spark, broker, topic, valueFormat="json",
                 keyFormat="json").orderBy("offset").collect()
    assert [r.key.region for r in rows] == ["r0", "r1", "r2", "r3"]
    got = [r.value.asDict(recursive=True) for r in rows]
    for order in orders:
        order["at"] = (datetime.datetime.fromisoformat(order["at"]) if "at" in order
                       else None)
    expected = [{name: order.get(name) for name in ORDER["properties"]} for order in orders]
    assert [{**g, "at": g["at"] and g["at"].astimezone(datetime.UTC)} for g in got] == expected


def test_on_decode_error(spark: Any, broker: BrokerProcess) -> None:
    topic = unique_topic("undecodable")
    create_topic(broker.bootstrap, topic)
    values = produce_avro(broker, topic)
    producer = confluent_producer(broker.bootstrap)
    producer.produce(topic, b"not avro", headers=[("h", b"1")])  # offset 7
    producer.produce(topic, b"\x00\x00\x00\x7f\xffxx")  # offset 8: an unknown schema id
    producer.produce(topic, values[0])
    assert producer.flush(TIMEOUT) == 0

    with pytest.raises(Exception, match=rf"topic {topic} partition 0 offset 7: the value does "
                                        r"not decode as avro: unknown magic byte"):
        typed(spark, broker, topic, valueFormat="avro").collect()

    skipped = typed(spark, broker, topic, valueFormat="avro", onDecodeError="skip")
    assert [r.offset for r in skipped.orderBy("offset").collect()] == [0, 1, 2, 3, 4, 5, 6, 9]

    dlq = unique_topic("dlq")
    create_topic(broker.bootstrap, dlq)
    kept = typed(spark, broker, topic, valueFormat="avro", onDecodeError="deadLetter",
                 deadLetterTopic=dlq)
    assert kept.count() == 8
    letters = consume_confluent(broker.bootstrap, dlq, 2)
    assert [rec.value for rec in letters] == [b"not avro", b"\x00\x00\x00\x7f\xffxx"]
    headers = [dict(rec.headers) for rec in letters]
    assert [h[ORIGINAL_OFFSET] for h in headers] == [b"7", b"8"]
    assert {h[ORIGINAL_TOPIC] for h in headers} == {topic.encode()}
    assert headers[0]["h"] == b"1"
    assert b"unknown magic byte" in headers[0][ERROR_MESSAGE]
    assert b"schema id 32767 is unknown" in headers[1][ERROR_MESSAGE]
    kept.count()  # a replay of the same ranges sends nothing twice
    with pytest.raises(AssertionError, match="consumed 2 of 3"):
        consume_confluent(broker.bootstrap, dlq, 3, timeout=3)


def test_protobuf_values(spark: Any, broker: BrokerProcess) -> None:
    """Records of ProtobufSerializer read as the file's first message (``shop.Order``); a
    record of the file's other message (``shop.Refund``) is skipped."""
    topic = unique_topic("protobuf")
    create_topic(broker.bootstrap, topic)
    order, refund = message_classes()
    sr = registry(broker)
    values = [serializer(order, sr)(record, context(topic)) for record in orders(order)]
    values.insert(1, serializer(refund, sr)(refund(order_id=7), context(topic)))
    producer = confluent_producer(broker.bootstrap)
    for value in values:
        producer.produce(topic, value)
    assert producer.flush(TIMEOUT) == 0
    rows = typed(spark, broker, topic, valueFormat="protobuf",
                 onDecodeError="skip").orderBy("offset").collect()
    assert [r.offset for r in rows] == [0, 2, 3]
    deserializer = ProtobufDeserializer(order, {"use.deprecated.format": False})
    by_hand = [expected(deserializer(values[offset], context(topic))) for offset in (0, 2, 3)]
    got = [r.value.asDict(recursive=True) for r in rows]
    for row in got:
        row["at"] = row["at"] and row["at"].astimezone(datetime.UTC)
    assert got == [{**row, "totals": dict(row["totals"])} for row in by_hand]
