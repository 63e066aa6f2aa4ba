"""Validated produce: Confluent Server's ``confluent.value.schema.validation`` /
``confluent.key.schema.validation`` topic configs against the broker's own schema registry,
driven by confluent-kafka's producer and serializers, kafka-python's protocol classes (raw
Produce v11 for ``record_errors``) and the ``sparklog`` tools."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import kafka.errors
import pytest
from broker_fixtures import (
    TIMEOUT,
    RawConnection,
    admin,
    confluent_producer,
    consume_confluent,
    create_topic,
    embedded,
    embedded_module,
    module_broker,
    produce_request,
    registry_serves,
    running_cluster,
    topic,
    wait_until,
    watermarks,
    zookeeper,
)
from confluent_kafka import KafkaError as CkKafkaError
from confluent_kafka import KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.schema_registry import (
    Schema,
    SchemaRegistryClient,
    record_subject_name_strategy,
    topic_record_subject_name_strategy,
)
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from kafka import KafkaProducer
from kafka.protocol.producer import ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder
from security_support import certificates, inter_broker_config

from sparklog.broker import schema_validation
from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.process import BrokerProcess
from sparklog.broker.schema_registry.ids import record_name
from sparklog.broker.schema_registry.store import SchemaStore
from sparklog.broker.schema_validation import SchemaValidation
from sparklog.cli import main
from sparklog.cluster.zookeeper_server import ZooKeeperServer
from sparklog.errors import ErrorCode, KafkaError
from sparklog.record.records import build_batch
from sparklog.storage.config import LogConfig

__all__ = ["certificates", "embedded", "embedded_module", "topic", "zookeeper"]

REGISTRY = {"schema.registry.listeners": "http://127.0.0.1:0"}
broker = module_broker(REGISTRY)
VALUE_VALIDATION = {"confluent.value.schema.validation": "true"}
KEY_VALIDATION = {"confluent.key.schema.validation": "true"}
STRATEGY = "io.confluent.kafka.serializers.subject.{}"

USER = json.dumps({"type": "record", "name": "User", "namespace": "com.example", "fields": [
    {"name": "name", "type": "string"}]})
USER_V2 = json.dumps({"type": "record", "name": "User", "namespace": "com.example",
                      "fields": [{"name": "name", "type": "string"},
                                 {"name": "age", "type": "int", "default": 0}]})
ORDER = json.dumps({"type": "record", "name": "Order", "fields": [
    {"name": "amount", "type": "int"}]})
ORDER_V2 = json.dumps({"type": "record", "name": "Order", "fields": [
    {"name": "amount", "type": "int"}, {"name": "note", "type": "string", "default": ""}]})


def registry(broker: BrokerProcess) -> SchemaRegistryClient:
    assert broker.schema_registry_url is not None
    return SchemaRegistryClient({"url": broker.schema_registry_url})


def wire(schema_id: int, body: bytes = b"\x02a") -> bytes:
    """Confluent's wire format: magic byte 0, the id, the body."""
    return b"\x00" + struct.pack(">I", schema_id) + body


def avro_user(broker: BrokerProcess, topic: str, field: MessageField = MessageField.VALUE,
              **conf: Any) -> bytes:
    serializer = AvroSerializer(registry(broker), USER, conf=conf or None)
    encoded = serializer({"name": "ada"}, SerializationContext(topic, field))
    assert encoded is not None
    return encoded


def deliver(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]],
            **conf: Any) -> list[CkKafkaError | None]:
    """Produce each record with confluent-kafka: its delivery report's error (None: stored)."""
    producer = confluent_producer(bootstrap, **{"message.timeout.ms": 10000, **conf})
    reports: list[CkKafkaError | None] = [None] * len(records)

    def report(index: int) -> Any:
        return lambda error, _msg: reports.__setitem__(index, error)

    for index, (key, value) in enumerate(records):
        producer.produce(topic, key=key, value=value, on_delivery=report(index))
        producer.flush(TIMEOUT)  # one batch per record: each is refused on its own
    assert producer.flush(TIMEOUT) == 0
    return reports


def produce_v11(bootstrap: str, topic: str, values: list[bytes | None],
                keys: list[bytes | None] | None = None, compression: int = 0) -> Any:
    """One batch of ``values`` produced with Produce v11 (kafka-python's classes)."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=compression,
                                        is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for offset, value in enumerate(values):
        builder.append(offset, timestamp=None, key=keys[offset] if keys else None, value=value,
                       headers=[])
    with RawConnection(bootstrap) as conn:
        response = conn.call(produce_request(topic, 0, bytes(builder.build()), version=11),
                             ProduceResponse)
    ((answer,),) = [t.partition_responses for t in response.responses]
    return answer


def test_avro_serializer_accepted_and_records_without_a_valid_id_refused(
        broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, config=VALUE_VALIDATION)
    good = avro_user(broker, topic)  # auto-registers <topic>-value
    other_id = registry(broker).register_schema(f"{topic}-other-value", Schema(ORDER, "AVRO"))
    assert deliver(broker.bootstrap, topic, [(None, good), (b"k", None)]) == [None, None]
    assert watermarks(broker.bootstrap, topic) == (0, 2)
    refused = deliver(broker.bootstrap, topic, [
        (None, b"plain bytes"), (None, wire(999_999)), (None, wire(other_id)), (None, b"")])
    assert [e.code() if e else None for e in refused] == [CkKafkaError.INVALID_RECORD] * 4
    assert watermarks(broker.bootstrap, topic) == (0, 2)  # nothing of them appended
    assert [m.value for m in consume_confluent(broker.bootstrap, topic, 2)] == [good, None]


def test_a_batch_with_one_bad_record_is_refused_whole_naming_it(
        broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, config=VALUE_VALIDATION)
    good = avro_user(broker, topic)
    user_id = struct.unpack(">I", good[1:5])[0]
    order_id = registry(broker).register_schema(f"{topic}-x-value", Schema(ORDER, "AVRO"))
    for codec in (0, 1):  # uncompressed, gzip: the records are read decompressed
        answer = produce_v11(broker.bootstrap, topic,
                             [good, None, b"not avro", good, wire(order_id)],
                             compression=codec)
        assert answer.error_code == ErrorCode.INVALID_RECORD
        assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] \
            == [(2, f"Record 2 of topic {topic}: value has no schema id (magic byte 0 and a "
                    "4-byte id expected)"),
                (4, f"Record 4 of topic {topic}: value: schema id {order_id} is not "
                    f"registered under subject {topic}-value")]
        assert answer.error_message == answer.record_errors[0].batch_index_error_message \
            + " (and 1 more)"
        assert watermarks(broker.bootstrap, topic) == (0, 0)
    answer = produce_v11(broker.bootstrap, topic, [good, None, wire(user_id, b"\x04bob")])
    assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, 0)
    assert watermarks(broker.bootstrap, topic) == (0, 3)


def test_a_schema_registered_after_a_refusal_validates_at_once(
        broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, config=VALUE_VALIDATION)
    # the same schema registered elsewhere first: its id exists, not under <topic>-value
    elsewhere = registry(broker).register_schema(f"{topic}-elsewhere", Schema(ORDER, "AVRO"))
    assert produce_v11(broker.bootstrap, topic, [wire(elsewhere)]).error_code \
        == ErrorCode.INVALID_RECORD
    assert registry(broker).register_schema(f"{topic}-value", Schema(ORDER, "AVRO")) \
        == elsewhere
    assert produce_v11(broker.bootstrap, topic, [wire(elsewhere)]).error_code == ErrorCode.NONE
    # a new id, registered just now (a compatible next version)
    new_id = registry(broker).register_schema(f"{topic}-value", Schema(ORDER_V2, "AVRO"))
    assert new_id != elsewhere
    assert produce_v11(broker.bootstrap, topic, [wire(new_id)]).error_code == ErrorCode.NONE


def test_key_validation_and_record_name_strategies(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, config={
        **KEY_VALIDATION, **VALUE_VALIDATION,
        "confluent.value.subject.name.strategy": STRATEGY.format("RecordNameStrategy"),
        "confluent.key.subject.name.strategy": STRATEGY.format("TopicRecordNameStrategy")})
    key = avro_user(broker, topic, MessageField.KEY, **{
        "subject.name.strategy": topic_record_subject_name_strategy})
    value = avro_user(broker, topic, **{"subject.name.strategy": record_subject_name_strategy})
    assert {f"{topic}-com.example.User", "com.example.User"} <= set(
        registry(broker).get_subjects())
    assert produce_v11(broker.bootstrap, topic, [value], keys=[key]).error_code \
        == ErrorCode.NONE
    assert produce_v11(broker.bootstrap, topic, [value], keys=[None]).error_code \
        == ErrorCode.NONE  # a null key passes
    answer = produce_v11(broker.bootstrap, topic, [value, value], keys=[key, b"plain"])
    assert answer.error_code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in answer.record_errors] == [1]
    assert "key has no schema id" in answer.error_message
    # a second version of com.example.User: a valid value, but not under <topic>-com.example.User
    v2 = registry(broker).register_schema("com.example.User", Schema(USER_V2, "AVRO"))
    assert produce_v11(broker.bootstrap, topic, [wire(v2)], keys=[key]).error_code \
        == ErrorCode.NONE
    answer = produce_v11(broker.bootstrap, topic, [value], keys=[wire(v2)])
    assert answer.error_code == ErrorCode.INVALID_RECORD
    assert answer.error_message == (f"Record 0 of topic {topic}: key: schema id {v2} is not "
                                    f"registered under subject {topic}-com.example.User")
    assert watermarks(broker.bootstrap, topic) == (0, 3)


def test_json_schema_serializer_with_record_name_strategy(broker: BrokerProcess,
                                                          topic: str) -> None:
    create_topic(broker.bootstrap, topic, config={
        **VALUE_VALIDATION,
        "confluent.value.subject.name.strategy": STRATEGY.format("RecordNameStrategy")})
    person = json.dumps({"title": f"Person{topic}", "type": "object",
                         "properties": {"name": {"type": "string"}}})
    serializer = JSONSerializer(person, registry(broker), conf={
        "subject.name.strategy": record_subject_name_strategy})
    value = serializer({"name": "ada"}, SerializationContext(topic, MessageField.VALUE))
    assert deliver(broker.bootstrap, topic, [(None, value)]) == [None]
    assert f"Person{topic}" in registry(broker).get_subjects()


def test_configs_round_trip_and_are_checked(broker: BrokerProcess, topic: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    create_topic(broker.bootstrap, topic, config=VALUE_VALIDATION)
    client = admin(broker.bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)

    def described() -> dict[str, str]:
        found = client.describe_configs([resource])[resource].result(TIMEOUT)
        return {k: v.value for k, v in found.items() if k.startswith("confluent.")}

    assert described() == {
        "confluent.value.schema.validation": "true", "confluent.key.schema.validation": "false",
        "confluent.value.subject.name.strategy": STRATEGY.format("TopicNameStrategy"),
        "confluent.key.subject.name.strategy": STRATEGY.format("TopicNameStrategy")}
    entity = ["configs", "--bootstrap-server", broker.bootstrap, "--entity-type", "topics",
              "--entity-name", topic]
    assert main([*entity, "--alter", "--add-config",
                 "confluent.key.schema.validation=true,confluent.value.subject.name.strategy="
                 + STRATEGY.format("TopicRecordNameStrategy")]) == 0
    capsys.readouterr()
    assert main([*entity, "--describe"]) == 0
    assert "confluent.key.schema.validation=true" in capsys.readouterr().out
    assert described()["confluent.value.subject.name.strategy"] \
        == STRATEGY.format("TopicRecordNameStrategy")
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("confluent.value.subject.name.strategy", "MyStrategy",
                    incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as refused:
        client.incremental_alter_configs([resource])[resource].result(TIMEOUT)
    assert refused.value.args[0].code() == CkKafkaError.INVALID_CONFIG
    assert "TopicNameStrategy" in refused.value.args[0].str()
    assert main(["topics", "create", "--bootstrap-server", broker.bootstrap, "--topic",
                 topic + "-cli", "--config", "confluent.value.schema.validation=true"]) == 0
    assert produce_v11(broker.bootstrap, topic + "-cli", [b"plain"]).error_code \
        == ErrorCode.INVALID_RECORD


def test_a_broker_without_a_registry_refuses_to_enable_validation(
        embedded: EmbeddedBroker, topic: str) -> None:
    with pytest.raises(KafkaException) as refused:
        create_topic(embedded.bootstrap, topic, config=VALUE_VALIDATION)
    error = refused.value.args[0]
    assert error.code() == CkKafkaError.INVALID_CONFIG
    assert "schema.registry.listeners" in error.str()
    create_topic(embedded.bootstrap, topic)
    client = admin(embedded.bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic,
                              set_config={"confluent.key.schema.validation": "true"})
    with pytest.warns(DeprecationWarning), pytest.raises(KafkaException) as refused:
        client.alter_configs([resource])[resource].result(TIMEOUT)  # AlterConfigs too
    assert "schema.registry.listeners" in refused.value.args[0].str()
    # unvalidated topics are untouched
    assert produce_v11(embedded.bootstrap, topic, [b"plain"]).error_code == ErrorCode.NONE


@pytest.mark.parametrize("listeners", ["plaintext", "sasl"])
def test_a_partition_led_away_from_the_registry_leader_validates(
        zookeeper: ZooKeeperServer, tmp_path: Path, listeners: str,
        request: pytest.FixtureRequest) -> None:
    """With a SASL listener the registry wants a login: the partition's leader asks the
    registry's leader as its inter-broker user."""
    config, login = dict(REGISTRY), {}
    if listeners == "sasl":
        config |= inter_broker_config(request.getfixturevalue("certificates"), "broker")
        login = {"basic.auth.user.info": "broker:broker-secret"}
    with running_cluster(zookeeper, tmp_path, f"validation-{listeners}", config) as cluster:
        sr = SchemaRegistryClient({"url": cluster.brokers[0].schema_registry_url, **login})
        wait_until(lambda: registry_serves(sr), message="_schemas to have a leader")
        leader = cluster.leader("_schemas")
        away = next(i for i in range(3) if i != leader)
        name = "validated-away"
        create_topic(cluster.brokers[0].bootstrap, name, config=VALUE_VALIDATION,
                     replicas=[[away]])  # broker ids are 0..2
        bootstrap = ",".join(b.bootstrap for b in cluster.brokers)
        serializer = AvroSerializer(sr, USER)
        good = serializer({"name": "ada"}, SerializationContext(name, MessageField.VALUE))
        assert good is not None
        assert deliver(bootstrap, name, [(None, good)]) == [None]
        assert [e.code() if e else None for e in deliver(bootstrap, name, [
            (None, b"plain"), (None, wire(12345))])] == [CkKafkaError.INVALID_RECORD] * 2
        # an id the partition's leader saw refused validates as soon as it is registered
        # under the subject
        v2 = sr.register_schema(f"{name}-elsewhere", Schema(USER_V2, "AVRO"))
        assert [e.code() if e else None for e in deliver(bootstrap, name, [
            (None, wire(v2))])] == [CkKafkaError.INVALID_RECORD]
        assert sr.register_schema(f"{name}-value", Schema(USER_V2, "AVRO")) == v2
        assert deliver(bootstrap, name, [(None, wire(v2))]) == [None]
        assert watermarks(bootstrap, name) == (0, 2)


def test_an_idempotent_producer_carries_on_after_a_refused_batch(
        broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, config=VALUE_VALIDATION)
    good = avro_user(broker, topic)
    reports = deliver(broker.bootstrap, topic, [(None, good), (None, b"bad"), (None, good)],
                      **{"enable.idempotence": True})
    assert [e.code() if e else None for e in reports] == [None, CkKafkaError.INVALID_RECORD,
                                                         None]
    assert watermarks(broker.bootstrap, topic) == (0, 2)


def test_kafka_python_shows_the_brokers_reason(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, config=VALUE_VALIDATION)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        with pytest.raises(kafka.errors.InvalidRecordError) as refused:
            producer.send(topic, b"plain").get(TIMEOUT)
    finally:
        producer.close()
    assert str(refused.value) == (f"[Error 87] InvalidRecordError: Record 0 of topic {topic}: "
                                  "value has no schema id (magic byte 0 and a 4-byte id "
                                  "expected)")
    assert watermarks(broker.bootstrap, topic) == (0, 0)


# -- fails closed, without blocking the loop (the check on its own, with stand-in registries)

VALIDATED = LogConfig.of(VALUE_VALIDATION)


class _Remote:
    """A registry led by another broker, at ``url``."""

    def __init__(self, url: str | None) -> None:
        self.url = url

    def leader_store(self) -> None:
        return None

    async def leader_url(self) -> str | None:
        return self.url


def _refusal(validation: SchemaValidation, value: bytes) -> KafkaError | None:
    batch = build_batch([(None, value, (), 0)])

    async def check() -> KafkaError | None:
        return (await validation.refusals({("t", 0): (VALIDATED, batch)})).get(("t", 0))
    return asyncio.run(check())


def test_the_check_fails_closed_with_a_retriable_error() -> None:
    validation = SchemaValidation(registry_configured=True)
    refused = _refusal(validation, wire(1))
    assert refused is not None and refused.code == ErrorCode.REQUEST_TIMED_OUT
    assert "not started yet" in str(refused)
    validation.attach(_Remote(None))
    refused = _refusal(validation, wire(1))
    assert refused is not None and refused.code == ErrorCode.REQUEST_TIMED_OUT
    assert "no leader" in str(refused)
    with socket.socket() as unused:  # a port nobody listens on
        unused.bind(("127.0.0.1", 0))
        validation.attach(_Remote(f"http://127.0.0.1:{unused.getsockname()[1]}"))
        refused = _refusal(validation, wire(1))
    assert refused is not None and refused.code == ErrorCode.REQUEST_TIMED_OUT
    assert "did not answer" in str(refused)
    # a record without an id is refused without asking anyone
    refused = _refusal(validation, b"plain")
    assert refused is not None and refused.code == ErrorCode.INVALID_RECORD
    validation.close()


def test_a_slow_registry_does_not_hold_the_loop() -> None:
    answered, held = threading.Event(), threading.Event()

    class Slow(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if not answered.wait(2):
                held.set()  # the loop did not tick meanwhile: the lookup held it
            body = json.dumps([{"subject": "t-value", "version": 1}] if "versions" in self.path
                              else {"schema": USER}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    validation = SchemaValidation(registry_configured=True)
    validation.attach(_Remote(f"http://127.0.0.1:{server.server_port}"))
    batch = build_batch([(None, wire(7), (), 0)] * 3)

    async def check() -> tuple[int, KafkaError | None]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while not answered.is_set():
                ticks += 1
                await asyncio.sleep(0.01)
                if ticks == 20:
                    answered.set()  # the loop ran while the lookup waited: let it answer
        ticker = asyncio.create_task(tick())
        found = await validation.refusals({("t", 0): (VALIDATED, batch)})
        await ticker
        return ticks, found.get(("t", 0))

    try:
        ticks, refused = asyncio.run(check())
    finally:
        server.shutdown()
        validation.close()
    assert not held.is_set()
    assert ticks >= 20 and refused is None


class _Leader:
    """This broker leads ``_schemas``: the store itself answers."""

    def __init__(self, store: SchemaStore) -> None:
        self.store = store

    def leader_store(self) -> SchemaStore:
        return self.store

    async def leader_url(self) -> str | None:
        raise AssertionError("the leader asks no one")


@pytest.mark.parametrize("decoder", ["compiled", "python"])
@pytest.mark.parametrize("codec", [0, 1, 3])
def test_the_compiled_and_python_decoders_refuse_the_same_records(
        decoder: str, codec: int, monkeypatch: pytest.MonkeyPatch) -> None:
    if decoder == "python":
        monkeypatch.setattr(schema_validation, "RecordColumns", None)
    else:
        assert schema_validation.RecordColumns is not None, "the compiled decoder is not built"
    store = SchemaStore(lambda records: None)
    store.set_level("t-value", "NONE")
    user = store.register("t-value", store.parse("AVRO", USER, ())).id
    order = store.register("t-other", store.parse("AVRO", ORDER, ())).id
    validation = SchemaValidation(registry_configured=True)
    validation.attach(_Leader(store))
    values = [wire(user), None, b"plain", wire(user, b""), wire(order), b"", b"\x00\x00",
              wire(user + 100)]
    batch = build_batch([(None, v, (), 0) for v in values], codec=codec)

    async def check() -> KafkaError | None:
        return (await validation.refusals({("t", 0): (VALIDATED, batch)})).get(("t", 0))
    refused = asyncio.run(check())
    assert refused is not None and refused.code == ErrorCode.INVALID_RECORD
    no_id = "has no schema id (magic byte 0 and a 4-byte id expected)"
    assert refused.record_errors == (
        (2, f"Record 2 of topic t: value {no_id}"),
        (4, f"Record 4 of topic t: value: schema id {order} is not registered under subject "
            "t-value"),
        (5, f"Record 5 of topic t: value {no_id}"),
        (6, f"Record 6 of topic t: value {no_id}"),
        (7, f"Record 7 of topic t: value has schema id {user + 100}, which is not registered"))
    # the same records but the bad ones pass; the store's change is seen at once
    store.register("t-value", store.parse("AVRO", ORDER, ()))
    good = build_batch([(None, v, (), 0) for v in (wire(user), None, wire(order))], codec=codec)

    async def check_good() -> dict[tuple[str, int], KafkaError]:
        return await validation.refusals({("t", 0): (VALIDATED, good)})
    assert asyncio.run(check_good()) == {}


@pytest.mark.parametrize(("schema_type", "text", "name"), [
    ("AVRO", USER, "com.example.User"),
    ("AVRO", ORDER, "Order"),
    ("AVRO", json.dumps({"type": "enum", "name": "a.b.Suit", "namespace": "ignored",
                         "symbols": ["S"]}), "a.b.Suit"),
    ("AVRO", '"string"', "string"),
    ("AVRO", json.dumps({"type": "array", "items": "int"}), "array"),
    ("AVRO", json.dumps(["null", "int"]), None),
    ("JSON", json.dumps({"title": "Person", "type": "object"}), "Person"),
    ("JSON", json.dumps({"type": "object"}), None),
    ("PROTOBUF", 'syntax = "proto3";\npackage shop.v1;\n\nmessage Order {\n  int32 id = 1;\n}\n'
                 "message Line {}\n", "shop.v1.Order"),
    ("PROTOBUF", 'syntax = "proto3";\nmessage Bare {}\n', "Bare"),
])
def test_record_names_are_what_confluents_serializers_name_subjects_by(
        schema_type: str, text: str, name: str | None) -> None:
    """confluent-kafka's record_subject_name_strategy gets an AVRO schema's full name, a JSON
    schema's title and a Protobuf message's full name."""
    assert record_name(schema_type, text) == name
