"""The schema registry in the broker, driven by confluent-kafka's own registry client and
serializers (unchanged: Avro, JSON Schema, Protobuf) against a broker process with
``schema.registry.listeners`` on."""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import fastavro
import pytest
from broker_fixtures import (
    TIMEOUT,
    confluent_producer,
    consume_confluent,
    private_broker,
    unique_topic,
)
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from sparklog.broker.config import BrokerConfig
from sparklog.broker.process import BrokerProcess
from sparklog.errors import InvalidConfigError

REGISTRY = {"schema.registry.listeners": "http://127.0.0.1:0"}
fresh_broker = private_broker(REGISTRY)

USER_V1 = json.dumps({"type": "record", "name": "User", "fields": [
    {"name": "name", "type": "string"}]})
USER_V2 = json.dumps({"type": "record", "name": "User", "fields": [
    {"name": "name", "type": "string"},
    {"name": "age", "type": ["null", "int"], "default": None}]})
USER_BAD = json.dumps({"type": "record", "name": "User", "fields": [
    {"name": "name", "type": "string"}, {"name": "email", "type": "string"}]})


def client(broker: BrokerProcess) -> SchemaRegistryClient:
    assert broker.schema_registry_url is not None
    return SchemaRegistryClient({"url": broker.schema_registry_url})


def http(broker: BrokerProcess, method: str, path: str, body: Any = None
         ) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{broker.schema_registry_url}{path}", data=data, method=method,
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_register_evolve_and_refuse(fresh_broker: BrokerProcess) -> None:
    sr = client(fresh_broker)
    first = sr.register_schema("users-value", Schema(USER_V1, "AVRO"))
    assert sr.register_schema("users-value", Schema(USER_V1, "AVRO")) == first
    # the same schema under another subject shares the id (ids are global)
    assert client(fresh_broker).register_schema("people-value", Schema(USER_V1, "AVRO")) == first
    second = sr.register_schema("users-value", Schema(USER_V2, "AVRO"))
    assert second != first
    assert sr.get_versions("users-value") == [1, 2]
    latest = sr.get_latest_version("users-value")
    assert (latest.version, latest.schema_id) == (2, second)
    with pytest.raises(SchemaRegistryError) as refused:
        sr.register_schema("users-value", Schema(USER_BAD, "AVRO"))
    assert refused.value.http_status_code == 409
    assert refused.value.error_code == 409
    assert "incompatible with an earlier schema for subject \"users-value\"" \
        in refused.value.error_message
    assert sr.test_compatibility("users-value", Schema(USER_BAD, "AVRO")) is False
    assert sr.test_compatibility("users-value", Schema(USER_V2, "AVRO")) is True
    status, verbose = http(fresh_broker, "POST",
                           "/compatibility/subjects/users-value/versions/latest?verbose=true",
                           {"schema": USER_BAD})
    assert status == 200 and verbose["is_compatible"] is False and verbose["messages"]
    assert sorted(sr.get_subjects()) == ["people-value", "users-value"]
    assert sr.get_schema(first).schema_str == json.dumps(json.loads(USER_V1),
                                                         separators=(",", ":"))
    assert http(fresh_broker, "GET", f"/schemas/ids/{first}/subjects") == \
        (200, ["people-value", "users-value"])
    assert http(fresh_broker, "GET", "/schemas/types")[1] == ["JSON", "PROTOBUF", "AVRO"]
    found = sr.lookup_schema("users-value", Schema(USER_V2, "AVRO"))
    assert (found.version, found.schema_id) == (2, second)
    # NONE lets the incompatible one in, as a new id
    sr.set_compatibility("users-value", "NONE")
    assert sr.get_compatibility("users-value") == "NONE"
    assert sr.register_schema("users-value", Schema(USER_BAD, "AVRO")) not in (first, second)


def test_errors_are_confluents(fresh_broker: BrokerProcess) -> None:
    assert http(fresh_broker, "GET", "/subjects/nope/versions") == (
        404, {"error_code": 40401, "message": "Subject 'nope' not found."})
    assert http(fresh_broker, "GET", "/schemas/ids/999")[1]["error_code"] == 40403
    assert http(fresh_broker, "POST", "/subjects/x/versions", {"schema": "{not json"}
                )[1]["error_code"] == 42201
    assert http(fresh_broker, "GET", "/subjects/x/versions/zero")[1]["error_code"] == 42202
    assert http(fresh_broker, "PUT", "/config", {"compatibility": "SIDEWAYS"}
                )[1]["error_code"] == 42203
    assert http(fresh_broker, "GET", "/config/x")[1]["error_code"] == 40408
    assert http(fresh_broker, "GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    http(fresh_broker, "POST", "/subjects/x/versions", {"schema": USER_V1})
    assert http(fresh_broker, "GET", "/subjects/x/versions/2")[1]["error_code"] == 40402


def test_soft_then_hard_delete(fresh_broker: BrokerProcess) -> None:
    sr = client(fresh_broker)
    sr.register_schema("d-value", Schema(USER_V1, "AVRO"))
    schema_id = sr.register_schema("d-value", Schema(USER_V2, "AVRO"))
    status, body = http(fresh_broker, "DELETE", "/subjects/d-value?permanent=true")
    assert (status, body["error_code"]) == (404, 40405)
    assert sr.delete_version("d-value", 2) == 2
    assert sr.get_versions("d-value") == [1]
    assert http(fresh_broker, "GET", "/subjects/d-value/versions?deleted=true")[1] == [1, 2]
    assert http(fresh_broker, "GET", f"/schemas/ids/{schema_id}")[0] == 200  # soft: by id
    assert sr.delete_subject("d-value") == [1]
    assert "d-value" not in sr.get_subjects()
    assert http(fresh_broker, "GET", "/subjects?deleted=true")[1] == ["d-value"]
    assert http(fresh_broker, "DELETE", "/subjects/d-value")[1]["error_code"] == 40404
    assert sr.delete_subject("d-value", permanent=True) == [1, 2]
    assert http(fresh_broker, "GET", "/subjects?deleted=true")[1] == []
    assert http(fresh_broker, "GET", f"/schemas/ids/{schema_id}")[1]["error_code"] == 40403
    # an id is never handed out again
    assert sr.register_schema("d2-value", Schema(json.dumps("string"), "AVRO")) > schema_id


def test_transitive_levels(fresh_broker: BrokerProcess) -> None:
    sr = client(fresh_broker)
    a = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    b = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}]}
    c = {"type": "record", "name": "R", "fields": [{"name": "b", "type": "int", "default": 0}]}
    assert http(fresh_broker, "PUT", "/config/t", {"compatibility": "BACKWARD_TRANSITIVE"}) == (
        200, {"compatibility": "BACKWARD_TRANSITIVE"})
    sr.register_schema("t", Schema(json.dumps(a), "AVRO"))
    sr.register_schema("t", Schema(json.dumps(b), "AVRO"))
    # c reads b's data (b has a default) but not a's without 'b'? it has a default: fine;
    # FULL_TRANSITIVE refuses c: a reader of a needs 'a', which c does not write
    assert sr.test_compatibility("t", Schema(json.dumps(c), "AVRO"))
    http(fresh_broker, "PUT", "/config/t", {"compatibility": "FULL_TRANSITIVE"})
    with pytest.raises(SchemaRegistryError) as refused:
        sr.register_schema("t", Schema(json.dumps(c), "AVRO"))
    assert refused.value.http_status_code == 409
    assert http(fresh_broker, "DELETE", "/config/t")[1] == {"compatibilityLevel": "FULL_TRANSITIVE"}
    assert http(fresh_broker, "GET", "/config/t?defaultToGlobal=true")[1] == {
        "compatibilityLevel": "BACKWARD"}


def test_mode_readonly(fresh_broker: BrokerProcess) -> None:
    sr = client(fresh_broker)
    assert http(fresh_broker, "GET", "/mode") == (200, {"mode": "READWRITE"})
    assert http(fresh_broker, "PUT", "/mode", {"mode": "READONLY"}) == (200, {"mode": "READONLY"})
    with pytest.raises(SchemaRegistryError) as refused:
        sr.register_schema("ro", Schema(USER_V1, "AVRO"))
    assert refused.value.error_code == 42205
    assert http(fresh_broker, "PUT", "/mode", {"mode": "READWRITE"})[0] == 200
    assert sr.register_schema("ro", Schema(USER_V1, "AVRO")) > 0


def test_references(fresh_broker: BrokerProcess) -> None:
    sr = client(fresh_broker)
    address = {"type": "record", "name": "Address", "namespace": "x",
               "fields": [{"name": "city", "type": "string"}]}
    sr.register_schema("address", Schema(json.dumps(address), "AVRO"))
    person = {"type": "record", "name": "Person", "namespace": "x",
              "fields": [{"name": "home", "type": "x.Address"}]}
    refs = [SchemaReference("x.Address", "address", 1)]
    person_id = sr.register_schema("person-value", Schema(json.dumps(person), "AVRO", refs))
    got = sr.get_schema(person_id)
    assert [(r.name, r.subject, r.version) for r in got.references] == [
        ("x.Address", "address", 1)]
    assert http(fresh_broker, "GET", "/subjects/address/versions/1/referencedby") == (
        200, [person_id])
    # a referenced version cannot go while a live schema uses it
    status, body = http(fresh_broker, "DELETE", "/subjects/address/versions/1")
    assert (status, body["error_code"]) == (422, 42206)
    # a reference to nothing is an invalid schema
    status, body = http(fresh_broker, "POST", "/subjects/p2/versions", {
        "schema": json.dumps(person),
        "references": [{"name": "x.Address", "subject": "nothing", "version": 1}]})
    assert status == 404 or body["error_code"] == 42201
    # a deserializer resolves the references of the writer's schema through the registry
    expanded = {**person, "fields": [{"name": "home", "type": address}]}
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(expanded), {"home": {"city": "Oslo"}})
    data = b"\0" + person_id.to_bytes(4, "big") + body.getvalue()
    ctx = SerializationContext("person", MessageField.VALUE)
    assert AvroDeserializer(sr)(data, ctx) == {"home": {"city": "Oslo"}}


def test_serializers_through_a_topic_and_restart(fresh_broker: BrokerProcess) -> None:
    topic = unique_topic("avro")
    sr = client(fresh_broker)
    v1 = AvroSerializer(sr, USER_V1)
    v2 = AvroSerializer(sr, USER_V2)
    json_schema = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}},
                              "additionalProperties": False})
    js = JSONSerializer(json_schema, sr)
    producer = confluent_producer(fresh_broker.bootstrap)
    ctx = SerializationContext(topic, MessageField.VALUE)
    jctx = SerializationContext(topic + "-json", MessageField.VALUE)
    producer.produce(topic, v1({"name": "ada"}, ctx))
    producer.produce(topic, v2({"name": "bob", "age": 7}, ctx))
    producer.produce(topic + "-json", js({"n": 3}, jctx))
    assert producer.flush(TIMEOUT) == 0
    values = [rec.value for rec in consume_confluent(fresh_broker.bootstrap, topic, 2)]
    reader = AvroDeserializer(sr, USER_V2)  # evolution: v1 records read into v2
    assert [reader(v, ctx) for v in values] == [{"name": "ada", "age": None},
                                                {"name": "bob", "age": 7}]
    before = {s: sr.get_versions(s) for s in sr.get_subjects()}
    ids = {s: [sr.get_version(s, v).schema_id for v in vs] for s, vs in before.items()}
    http(fresh_broker, "PUT", "/config", {"compatibility": "FULL"})
    assert fresh_broker.stop() == 0  # SIGTERM: a clean shutdown with the registry on
    fresh_broker.start()
    sr = client(fresh_broker)
    assert {s: sr.get_versions(s) for s in sr.get_subjects()} == before
    assert {s: [sr.get_version(s, v).schema_id for v in vs] for s, vs in before.items()} == ids
    assert sr.get_compatibility() == "FULL"
    assert AvroDeserializer(sr)(values[0], ctx) == {"name": "ada"}
    assert JSONDeserializer(json_schema, schema_registry_client=sr)(
        js({"n": 4}, jctx), jctx) == {"n": 4}


def test_off_by_default(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        assert proc.schema_registry_url is None
    finally:
        proc.stop()


def sparklog_schemas(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    assert broker.schema_registry_url is not None
    return subprocess.run([sys.executable, "-m", "sparklog.cli", "schemas", *args,
                           "--schema-registry-url", broker.schema_registry_url],
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)


def test_cli(fresh_broker: BrokerProcess, tmp_path: Path) -> None:
    v1, v2, bad = (tmp_path / name for name in ("v1.avsc", "v2.avsc", "bad.avsc"))
    v1.write_text(USER_V1)
    v2.write_text(USER_V2)
    bad.write_text(USER_BAD)
    first = sparklog_schemas(fresh_broker, "register", "--subject", "cli-value",
                             "--schema-file", str(v1))
    assert first.returncode == 0, first.stderr
    assert sparklog_schemas(fresh_broker, "register", "--subject", "cli-value",
                            "--schema-file", str(v1)).stdout == first.stdout
    assert sparklog_schemas(fresh_broker, "register", "--subject", "cli-value",
                            "--schema-file", str(v2)).returncode == 0
    assert sparklog_schemas(fresh_broker, "list").stdout.split() == ["cli-value"]
    assert sparklog_schemas(fresh_broker, "list", "--subject", "cli-value").stdout.split() == [
        "1", "2"]
    got = json.loads(sparklog_schemas(fresh_broker, "get", "--subject", "cli-value",
                                      "--version", "1").stdout)
    assert (got["version"], got["id"]) == (1, int(first.stdout))
    assert json.loads(sparklog_schemas(fresh_broker, "get", "--id", first.stdout.strip()
                                       ).stdout)["schema"] == got["schema"]
    refused = sparklog_schemas(fresh_broker, "check", "--subject", "cli-value",
                               "--schema-file", str(bad))
    assert refused.returncode == 1 and refused.stdout.startswith("incompatible\n")
    registered = sparklog_schemas(fresh_broker, "register", "--subject", "cli-value",
                                  "--schema-file", str(bad))
    assert registered.returncode == 1 and "error 409:" in registered.stderr
    assert sparklog_schemas(fresh_broker, "config").stdout == "BACKWARD\n"
    assert sparklog_schemas(fresh_broker, "config", "--subject", "cli-value", "--level",
                            "none").stdout == "NONE\n"
    assert sparklog_schemas(fresh_broker, "check", "--subject", "cli-value", "--schema-file",
                            str(bad)).stdout == "compatible\n"
    assert sparklog_schemas(fresh_broker, "delete", "--subject", "cli-value").stdout.split() == [
        "1", "2"]
    assert sparklog_schemas(fresh_broker, "delete", "--subject", "cli-value",
                            "--permanent").stdout.split() == ["1", "2"]
    missing = sparklog_schemas(fresh_broker, "get", "--subject", "cli-value")
    assert missing.returncode == 1
    assert "error 40401: Subject 'cli-value' not found." in missing.stderr
    unreadable = sparklog_schemas(fresh_broker, "register", "--subject", "x",
                                  "--schema-file", str(tmp_path / "none.avsc"))
    assert unreadable.returncode == 2


def test_import_mode_keeps_given_ids(fresh_broker: BrokerProcess) -> None:
    assert http(fresh_broker, "PUT", "/mode", {"mode": "IMPORT"}) == (200, {"mode": "IMPORT"})
    assert http(fresh_broker, "POST", "/subjects/imported/versions",
                {"schema": USER_V1, "id": 100, "version": 3}) == (200, {"id": 100})
    assert http(fresh_broker, "PUT", "/mode", {"mode": "READWRITE"})[0] == 200
    assert http(fresh_broker, "GET", "/subjects/imported/versions") == (200, [3])
    status, body = http(fresh_broker, "POST", "/subjects/imported/versions",
                        {"schema": USER_V2, "id": 7})
    assert (status, body["error_code"]) == (422, 42205)  # ids are given in IMPORT mode only
    assert client(fresh_broker).register_schema("imported", Schema(USER_V2, "AVRO")) == 101
    # IMPORT into a registry that has subjects needs force
    assert http(fresh_broker, "PUT", "/mode", {"mode": "IMPORT"})[1]["error_code"] == 42205
    assert http(fresh_broker, "PUT", "/mode?force=true", {"mode": "IMPORT"})[0] == 200


def test_protobuf_serializer(fresh_broker: BrokerProcess) -> None:
    """PROTOBUF schemas are stored as given and served back (as sent: Confluent's registry
    would turn a base64 descriptor into .proto text), and checked under the subject's
    level: a field changed out of its wire type's group is refused, one widened is not."""
    proto = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop",
                                               syntax="proto3")
    message = proto.message_type.add(name="Order")
    message.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    order = message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))
    sr = client(fresh_broker)
    ctx = SerializationContext("orders", MessageField.VALUE)
    data = ProtobufSerializer(order, sr, {"use.deprecated.format": False})(order(id=5), ctx)
    registered = sr.get_latest_version("orders-value")
    assert registered.schema.schema_type == "PROTOBUF"
    # confluent-kafka sends the file descriptor, base64: stored and served as sent
    assert descriptor_pb2.FileDescriptorProto.FromString(
        base64.b64decode(registered.schema.schema_str)) == proto
    assert int.from_bytes(data[1:5], "big") == registered.schema_id
    decoded = ProtobufDeserializer(order, {"use.deprecated.format": False})(data, ctx)
    assert decoded.id == 5
    text = 'syntax = "proto3"; package shop; message Order { %s id = 1; }'
    with pytest.raises(SchemaRegistryError) as refused:
        sr.register_schema("orders-value", Schema(text % "string", "PROTOBUF"))
    assert refused.value.http_status_code == 409
    assert "FIELD_SCALAR_KIND_CHANGED" in refused.value.error_message
    assert sr.test_compatibility("orders-value", Schema(text % "uint64", "PROTOBUF"))
    assert sr.register_schema("orders-value", Schema(text % "uint64", "PROTOBUF")) != \
        registered.schema_id


def test_a_bad_listener_setting_is_refused() -> None:
    with pytest.raises(InvalidConfigError, match=re.escape(
            "schema.registry.listeners: expected http://HOST:PORT")):
        BrokerConfig({"schema.registry.listeners": "tcp://127.0.0.1:8081"})
    assert BrokerConfig({"schema.registry.listeners": "http://[::1]:0"}
                        ).schema_registry_listener() == ("::1", 0)
