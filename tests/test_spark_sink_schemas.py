"""The sparklog sink's ``valueFormat=avro`` / ``json`` / ``protobuf`` through Spark, against a
broker process with its schema registry on, read back with confluent-kafka's own
deserializers (unchanged).
"""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_fixtures import TIMEOUT, Rec, consume_confluent, produce_confluent, unique_topic
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import RegisteredSchema, Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from sparklog.broker.process import BrokerProcess
from sparklog.schemas.spark_to_avro import avro_schema
from sparklog.schemas.spark_to_json_schema import json_schema

pytestmark = pytest.mark.spark

ORDER = ("struct<id: bigint not null, name: string, price: decimal(9,2), tags: array<string>, "
         "attrs: map<string, int>, day: date, at: timestamp, "
         "address: struct<city: string not null>>")
UTC = datetime.UTC


def order(i: int) -> dict[str, Any]:
    return {"id": i, "name": None if i % 4 == 0 else f"n{i}",
            "price": decimal.Decimal(i).scaleb(-2), "tags": ["a", None] if i % 2 else [],
            "attrs": {"k": i}, "day": datetime.date(2024, 1, 1 + i % 28),
            "at": datetime.datetime(2024, 5, 6, 7, 8, 9, i, tzinfo=UTC),
            "address": None if i % 3 == 0 else {"city": f"c{i}"}}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("sink-schemas") / "data"
    config = {"schema.registry.listeners": "http://127.0.0.1:0"}
    with BrokerProcess(data, config=config) as running:
        yield running


def new_topic(broker: BrokerProcess, prefix: str = "sink-schemas") -> str:
    name = unique_topic(prefix)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1)])[name].result(TIMEOUT)
    return name


@pytest.fixture
def topic(broker: BrokerProcess) -> str:
    return new_topic(broker)


def registry(broker: BrokerProcess) -> SchemaRegistryClient:
    assert broker.schema_registry_url is not None
    return SchemaRegistryClient({"url": broker.schema_registry_url})


def frame(spark: Any, rows: list[dict[str, Any]], value_type: str = ORDER) -> Any:
    return spark.createDataFrame([(r["id"], r) for r in rows],
                                 f"key bigint, value {value_type}").selectExpr(
        "cast(key as string) as key", "value").coalesce(1)


def write(df: Any, broker: BrokerProcess, topic: str, **options: str) -> None:
    (df.write.format("sparklog").option("kafka.bootstrap.servers", broker.bootstrap)
     .option("topic", topic).option("schemaRegistry.url", broker.schema_registry_url)
     .options(**options).mode("append").save())


def read_back(broker: BrokerProcess, topic: str, count: int, deserializer: Any,
              **conf: Any) -> list[Any]:
    ctx = SerializationContext(topic, MessageField.VALUE)
    return [deserializer(rec.value, ctx)
            for rec in consume_confluent(broker.bootstrap, topic, count, **conf)]


def records_in(broker: BrokerProcess, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "count"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT)[1]
    finally:
        consumer.close()


def write_orders(spark: Any, broker: BrokerProcess, topic: str, count: int, fmt: str,
                 derive: Callable[[Any], Any]) -> tuple[list[dict[str, Any]], Any,
                                                        SchemaRegistryClient, RegisteredSchema]:
    """Write ``count`` orders with ``valueFormat=fmt``; the subject got the derived schema."""
    rows = [order(i) for i in range(count)]
    df = frame(spark, rows)
    write(df, broker, topic, valueFormat=fmt)
    sr = registry(broker)
    latest = sr.get_latest_version(f"{topic}-value")
    assert latest.schema.schema_type == fmt.upper()
    assert json.loads(latest.schema.schema_str) == derive(
        df.schema["value"].dataType.jsonValue())
    assert latest.version == 1
    return rows, df, sr, latest


def test_avro_rows_read_back_unchanged_and_the_schema_evolves(
        spark: Any, broker: BrokerProcess, topic: str) -> None:
    rows, df, sr, _ = write_orders(spark, broker, topic, 40, "avro", avro_schema)
    assert read_back(broker, topic, 40, AvroDeserializer(sr)) == rows
    write(df, broker, topic, valueFormat="avro")  # the same schema: found, not registered
    assert sr.get_versions(f"{topic}-value") == [1]

    # an added nullable column: version 2 under the registry's default BACKWARD
    evolved = frame(spark, [{**order(i), "note": f"x{i}"} for i in range(40, 45)],
                    ORDER[:-1] + ", note: string>")
    write(evolved, broker, topic, valueFormat="avro")
    assert sr.get_versions(f"{topic}-value") == [1, 2]
    got = read_back(broker, topic, 85, AvroDeserializer(sr))
    assert got[80:] == [{**order(i), "note": f"x{i}"} for i in range(40, 45)]

    # an added column that is not nullable is refused on the driver: nothing is written
    refused = frame(spark, [{**order(50), "code": 1}], ORDER[:-1] + ", code: int not null>")
    with pytest.raises(Exception, match=rf"schema registry .*subject '{topic}-value': "
                                        r"Schema being registered is incompatible"):
        write(refused, broker, topic, valueFormat="avro")
    assert records_in(broker, topic) == 85
    assert sr.get_versions(f"{topic}-value") == [1, 2]


def test_use_latest_version_encodes_with_the_subjects_schema(
        spark: Any, broker: BrokerProcess, topic: str) -> None:
    sr = registry(broker)
    value_type = "struct<id: bigint not null, name: string>"
    df = frame(spark, [{"id": i, "name": f"n{i}"} for i in range(5)], value_type)
    latest = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"]},
        {"name": "note", "type": ["null", "string"], "default": None}]}
    schema_id = sr.register_schema(f"{topic}-value", Schema(json.dumps(latest), "AVRO"))
    write(df, broker, topic, valueFormat="avro", useLatestVersion="true")
    records = consume_confluent(broker.bootstrap, topic, 5)
    assert {r.value[:5] for r in records} == {b"\0" + schema_id.to_bytes(4, "big")}
    assert read_back(broker, topic, 5, AvroDeserializer(sr)) == [
        {"id": i, "name": f"n{i}", "note": None} for i in range(5)]
    assert sr.get_versions(f"{topic}-value") == [1]  # nothing registered

    misfit = frame(spark, [{"id": 1, "name": "a", "extra": 2}],
                   "struct<id: bigint not null, name: string, extra: int>")
    with pytest.raises(Exception, match=r"the rows do not fit the latest schema \(version 1\) "
                                        rf"of subject '{topic}-value': column value.extra is "
                                        "not a field of the schema"):
        write(misfit, broker, topic, valueFormat="avro", useLatestVersion="true")
    with pytest.raises(Exception, match=rf"not registered under subject '{topic}-value' and "
                                        "autoRegisterSchemas=false"):
        write(df, broker, topic, valueFormat="avro", autoRegisterSchemas="false")
    assert records_in(broker, topic) == 5


def _as_json(row: dict[str, Any]) -> dict[str, Any]:
    """What the JSON encoding promises for ``order``'s rows (Spark's to_json shapes)."""
    return {**row, "price": float(row["price"]), "day": row["day"].isoformat(),
            "at": row["at"].isoformat()}


def test_json_schema_rows_read_back_by_the_json_deserializer(
        spark: Any, broker: BrokerProcess, topic: str) -> None:
    rows, _, sr, latest = write_orders(spark, broker, topic, 20, "json", json_schema)
    deserializer = JSONDeserializer(latest.schema.schema_str, schema_registry_client=sr)
    got = read_back(broker, topic, 20, deserializer)
    # the session's time zone may differ from UTC: compare instants
    for row in got:
        row["at"] = datetime.datetime.fromisoformat(row["at"]).astimezone(UTC).isoformat()
    assert got == [_as_json(r) for r in rows]

    evolved = frame(spark, [{**order(30), "note": "x"}], ORDER[:-1] + ", note: string>")
    write(evolved, broker, topic, valueFormat="json")
    assert sr.get_versions(f"{topic}-value") == [1, 2]


def test_protobuf_rows_read_back_by_confluent_and_by_the_source(
        spark: Any, broker: BrokerProcess, topic: str) -> None:
    """valueFormat=protobuf: the message derived from the column's type is registered (a
    .proto file), and the records read back as ProtobufDeserializer and the sparklog source
    read them; null scalars read as proto3's defaults, null structs as null."""
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from google.protobuf import message_factory
    from google.protobuf.json_format import MessageToDict

    from sparklog.schemas.proto_files import message_descriptor

    kind = ("struct<id: bigint not null, name: string, tags: array<string>, "
            "attrs: map<string, int>, at: timestamp, address: struct<city: string>>")
    rows = [{"id": i, "name": None if i % 4 == 0 else f"n{i}", "tags": ["a"] * (i % 2),
             "attrs": {"k": i}, "at": datetime.datetime(2024, 5, 6, 7, 8, 9, i, tzinfo=UTC),
             "address": None if i % 3 == 0 else {"city": f"c{i}"}} for i in range(12)]
    write(frame(spark, rows, kind), broker, topic, valueFormat="protobuf",
          valueProtobufMessage="Order")
    latest = registry(broker).get_latest_version(f"{topic}-value")
    assert latest.schema.schema_type == "PROTOBUF"
    assert "message Order {" in latest.schema.schema_str
    order_class = message_factory.GetMessageClass(
        message_descriptor(latest.schema.schema_str, "Order"))
    read = read_back(broker, topic, 12, ProtobufDeserializer(
        order_class, {"use.deprecated.format": False}))
    assert [MessageToDict(m, preserving_proto_field_name=True) for m in read][1] == {
        "id": "1", "name": "n1", "tags": ["a"], "attrs": {"k": 1},
        "at": "2024-05-06T07:08:09.000001Z", "address": {"city": "c1"}}
    typed = (spark.read.format("sparklog").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", topic).option("valueFormat", "protobuf")
             .option("schemaRegistry.url", broker.schema_registry_url).load()
             .orderBy("offset").collect())
    assert [r.value.asDict(recursive=True) for r in typed] == [
        {**r, "name": r["name"] or "", "at": r["at"].replace(tzinfo=None)} for r in rows]


def test_exactly_once_writes_avro(spark: Any, broker: BrokerProcess, topic: str) -> None:
    rows = [order(i) for i in range(30)]
    write(frame(spark, rows).repartition(2), broker, topic, valueFormat="avro",
          deliveryGuarantee="exactly-once")
    got = read_back(broker, topic, 30, AvroDeserializer(registry(broker)),
                    **{"isolation.level": "read_committed"})
    assert sorted(got, key=lambda r: r["id"]) == rows


def test_key_format_and_wrong_options(spark: Any, broker: BrokerProcess, topic: str) -> None:
    df = spark.createDataFrame([((1,), "v")], "key struct<id: int not null>, value string")
    write(df, broker, topic, keyFormat="avro", keySubject="ids")
    record = consume_confluent(broker.bootstrap, topic, 1)[0]
    ctx = SerializationContext(topic, MessageField.KEY)
    assert AvroDeserializer(registry(broker))(record.key, ctx) == {"id": 1}
    assert record.value == b"v"
    with pytest.raises(Exception, match=r"option valueFormat must be one of binary, avro, "
                                        r"json, protobuf, got 'avor' \(did you mean "
                                        r"'avro'\?\)"):
        write(df, broker, topic, valueFormat="avor")
    with pytest.raises(Exception, match=r"option keyFormat=json needs option "
                                        r"schemaRegistry\.url"):
        (df.write.format("sparklog").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", topic).option("keyFormat", "json").mode("append").save())
    assert records_in(broker, topic) == 1


def test_a_stream_writes_avro(spark: Any, broker: BrokerProcess, topic: str,
                              tmp_path: Path) -> None:
    """writeStream: the writer (and its schema lookup) is made again for every micro-batch."""
    from pyspark.sql import functions as F

    source = new_topic(broker, "sink-schemas-source")
    produce_confluent(broker.bootstrap, source, [
        Rec(None, json.dumps({"id": i, "name": f"n{i}"}).encode()) for i in range(10)])
    query = (spark.readStream.format("sparklog")
             .option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", source)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "4").load()
             .select(F.from_json(F.col("value").cast("string"), "id bigint, name string")
                     .alias("value"))
             .writeStream.format("sparklog")
             .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic)
             .option("schemaRegistry.url", broker.schema_registry_url)
             .option("valueFormat", "avro").option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert query.exception() is None
    assert read_back(broker, topic, 10, AvroDeserializer(registry(broker))) == [
        {"id": i, "name": f"n{i}"} for i in range(10)]
    assert registry(broker).get_versions(f"{topic}-value") == [1]
