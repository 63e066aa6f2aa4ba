"""KIP-714 client telemetry: GetTelemetrySubscriptions (71) and PushTelemetry (72).

- A real client that pushes (confluent-kafka 2.16, librdkafka 2.16: ``enable.metrics.push``
  is on by default) against a broker whose preset subscription matches it: its metrics show
  in ``/status.json`` and ``/metrics``, and its terminating push on close is accepted; a
  client the subscription's ``match`` leaves out is told to push nothing. kafka-python
  3.0.12 implements no telemetry (it has no class for either API): a producer the
  subscription matches never asks.
- Raw requests (kafka-python's encoder over Kafka's message definitions, ``kp_messages``)
  for each of Kafka's answers: a new instance id, the subscription, throttling within the
  interval, a first push after a Get, UNKNOWN_SUBSCRIPTION_ID (and the Get it allows at
  once), UNSUPPORTED_COMPRESSION_TYPE, TELEMETRY_TOO_LARGE, INVALID_RECORD (garbage, and a
  payload decompressing past ``telemetry.max.bytes``), INVALID_REQUEST (the zero id, a push
  after the terminating one), a changed subscription, delta sums added up.
- The store's bounds on a clock of the test's own: expiry after three intervals (at least
  a minute), the instance cap, the series cap; Kafka's validation of subscriptions.
"""

from __future__ import annotations

import json
import math
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import pytest
from broker_fixtures import (
    TIMEOUT,
    RawConnection,
    confluent_consumer,
    confluent_producer,
    module_broker,
    unique_topic,
    wait_until,
)
from kafka import KafkaProducer
from kp_messages import (
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
)
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AGGREGATION_TEMPORALITY_DELTA,
    MetricsData,
)
from test_metrics import scrape

from sparklog.broker import client_metrics
from sparklog.broker.client_metrics import ClientMetricsManager, Subscription
from sparklog.broker.config import BrokerConfig
from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.process import BrokerProcess
from sparklog.errors import ErrorCode, InvalidConfigError, KafkaError
from sparklog.record.compression import GZIP, NONE, ZSTD, compress

__all__ = ["broker"]

INTERVAL_MS = 1000
PRODUCER_METRICS = "org.apache.kafka.producer."
broker = module_broker({
    "metrics.listener": "http://127.0.0.1:0",
    "client.telemetry.default.metrics": PRODUCER_METRICS,
    "client.telemetry.default.interval.ms": str(INTERVAL_MS),
    "client.telemetry.default.match": "client_id=pushing-.*",
})


def status(proc: BrokerProcess) -> dict[str, Any]:
    assert proc.metrics_url is not None
    with urllib.request.urlopen(proc.metrics_url + "status.json", timeout=TIMEOUT) as answer:
        return json.loads(answer.read())["status"]  # type: ignore[no-any-return]


def telemetry_of(proc: BrokerProcess, client_id: str) -> dict[str, Any] | None:
    found = [c for c in status(proc)["telemetry"] if c["client_id"] == client_id]
    return found[0] if found else None


def test_librdkafka_pushes_its_metrics_to_the_status_page_and_metrics(
        broker: BrokerProcess) -> None:
    topic = unique_topic("telemetry")
    producer = confluent_producer(broker.bootstrap, client_id="pushing-producer")
    consumer = confluent_consumer(broker.bootstrap, **{"client.id": "quiet-consumer",
                                                       "group.id": topic,
                                                       "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 3 * INTERVAL_MS / 1000 + TIMEOUT

    def pushed_twice() -> bool:
        producer.produce(topic, b"x" * 100)
        producer.poll(0.05)
        consumer.poll(0.05)
        found = telemetry_of(broker, "pushing-producer")
        return found is not None and found["pushes"] >= 2

    wait_until(pushed_twice, timeout=deadline - time.monotonic())
    client = telemetry_of(broker, "pushing-producer")
    assert client is not None
    assert client["software_name"] == "confluent-kafka-python"
    assert client["software_version"].endswith("rdkafka-2.16.0")
    assert client["source_address"] == "127.0.0.1"
    assert (client["subscribed"], client["push_interval_ms"]) == ([PRODUCER_METRICS], INTERVAL_MS)
    assert client["last_error"] == "NONE" and not client["terminating"]
    names = {m["name"] for m in client["metrics"]}
    assert {"org.apache.kafka.producer.request.latency.avg",
            "org.apache.kafka.producer.record.queue.time.avg"} <= names
    assert all(name.startswith(PRODUCER_METRICS) for name in names)
    per_node = [m for m in client["metrics"]
                if m["name"] == "org.apache.kafka.producer.node.request.latency.avg"]
    assert per_node and per_node[0]["attributes"] == {"node.id": "0"}
    assert per_node[0]["value"] > 0  # it did send requests
    assert per_node[0]["time_ms"] > time.time() * 1000 - 60_000

    quiet = telemetry_of(broker, "quiet-consumer")  # asked, matched by no subscription
    assert quiet is not None
    assert (quiet["subscribed"], quiet["pushes"], quiet["metrics"]) == ([], 0, [])

    samples = [s for s in scrape(broker).labelled("kafka_client_telemetry_metric",
                                                  client_id="pushing-producer")
               if s.labels["name"] == "org.apache.kafka.producer.node.request.latency.avg"]
    assert [s.labels["attributes"] for s in samples] == ["node.id=0"]
    assert samples[0].labels["client_software_name"] == "confluent-kafka-python"
    assert samples[0].labels["client_instance_id"] == client["client_instance_id"]
    pushes = scrape(broker).labelled("kafka_client_telemetry_pushes_total",
                                     client_id="pushing-producer")
    assert len(pushes) == 1 and pushes[0].value >= 2

    consumer.close()
    producer.flush(TIMEOUT)
    producer.close()  # librdkafka pushes once more, terminating, as it closes
    wait_until(lambda: (telemetry_of(broker, "pushing-producer") or {})["terminating"])
    assert telemetry_of(broker, "pushing-producer")["last_error"] == "NONE"  # type: ignore[index]


def test_kafka_python_3_pushes_no_telemetry(broker: BrokerProcess) -> None:
    """kafka-python 3.0.12 knows the two APIs' keys, not their messages: a producer the
    subscription matches never asks for it, over intervals of producing."""
    topic = unique_topic("telemetry-kp")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, client_id="pushing-kp")
    try:
        deadline = time.monotonic() + 3 * INTERVAL_MS / 1000
        while time.monotonic() < deadline:
            producer.send(topic, b"x").get(TIMEOUT)
            time.sleep(0.1)
    finally:
        producer.close(TIMEOUT)
    assert telemetry_of(broker, "pushing-kp") is None


# -- raw requests ---------------------------------------------------------------------------

RAW_INTERVAL_MS = 60_000
MAX_BYTES = 4096


@pytest.fixture(scope="module")
def telemetry_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path_factory.mktemp("telemetry"), {
            "client.telemetry.default.metrics": PRODUCER_METRICS,
            "client.telemetry.default.interval.ms": str(RAW_INTERVAL_MS),
            "telemetry.max.bytes": str(MAX_BYTES)}) as embedded:
        yield embedded


def metrics_data(*points: tuple[str, float], delta: bool = False) -> bytes:
    """An OTLP MetricsData of one sum (``delta``) or gauge point per (name, value)."""
    data = MetricsData()
    scope = data.resource_metrics.add().scope_metrics.add()
    for name, value in points:
        metric = scope.metrics.add(name=name, unit="ms")
        body = metric.sum if delta else metric.gauge
        if delta:
            metric.sum.aggregation_temporality = AGGREGATION_TEMPORALITY_DELTA
        point = body.data_points.add(as_double=value, time_unix_nano=time.time_ns())
        point.attributes.add(key="node.id").value.string_value = "0"
    return data.SerializeToString()


class Client:
    """One client instance over one connection, speaking KIP-714 raw."""

    def __init__(self, conn: RawConnection) -> None:
        self.conn = conn
        self.instance_id = uuid.UUID(int=0)
        self.subscription_id = 0

    def get(self) -> Any:
        answer = self.conn.call(
            GetTelemetrySubscriptionsRequest(version=0, client_instance_id=self.instance_id),
            GetTelemetrySubscriptionsResponse)
        if answer.error_code == ErrorCode.NONE:
            self.instance_id, self.subscription_id = (answer.client_instance_id,
                                                      answer.subscription_id)
        return answer

    def push(self, payload: bytes, *, compression: int = NONE, terminating: bool = False,
             subscription_id: int | None = None) -> int:
        answer = self.conn.call(PushTelemetryRequest(
            version=0, client_instance_id=self.instance_id, terminating=terminating,
            subscription_id=self.subscription_id if subscription_id is None
            else subscription_id, compression_type=compression, metrics=payload),
            PushTelemetryResponse)
        return answer.error_code  # type: ignore[no-any-return]


@pytest.fixture
def client(telemetry_broker: EmbeddedBroker) -> Iterator[Client]:
    with RawConnection(telemetry_broker.bootstrap) as conn:
        yield Client(conn)


def kept(embedded: EmbeddedBroker, instance_id: uuid.UUID) -> dict[str, float]:
    """The latest value of each metric the broker keeps for the instance."""
    clients = embedded.call(lambda b: b.client_metrics.snapshot())
    found = [c for c in clients if c.client_instance_id == str(instance_id)]
    return {m.name: m.value for m in found[0].metrics} if found else {}


def test_a_new_client_gets_an_id_and_its_subscription_then_is_throttled(
        telemetry_broker: EmbeddedBroker, client: Client) -> None:
    answer = client.get()
    assert answer.error_code == ErrorCode.NONE
    assert answer.client_instance_id not in (None, uuid.UUID(int=0))
    assert answer.subscription_id != 0
    assert list(answer.accepted_compression_types) == [ZSTD, 3, GZIP, 2]  # zstd lz4 gzip snappy
    assert (answer.push_interval_ms, answer.telemetry_max_bytes) == (RAW_INTERVAL_MS, MAX_BYTES)
    assert answer.delta_temporality is True
    assert list(answer.requested_metrics) == [PRODUCER_METRICS]
    again = client.get()  # within the push interval
    assert again.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    with RawConnection(telemetry_broker.bootstrap) as conn:  # another instance
        assert Client(conn).get().client_instance_id != answer.client_instance_id


def test_pushes_follow_the_interval_and_a_terminating_push_is_accepted_once(
        telemetry_broker: EmbeddedBroker, client: Client) -> None:
    client.get()
    latency = "org.apache.kafka.producer.request.latency.avg"
    assert client.push(compress(GZIP, metrics_data((latency, 2.5))),
                       compression=GZIP) == ErrorCode.NONE
    assert kept(telemetry_broker, client.instance_id) == {latency: 2.5}
    assert client.push(metrics_data((latency, 9.0))) == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert kept(telemetry_broker, client.instance_id) == {latency: 2.5}
    assert client.push(compress(ZSTD, metrics_data((latency, 4.0))), compression=ZSTD,
                       terminating=True) == ErrorCode.NONE
    assert kept(telemetry_broker, client.instance_id) == {latency: 4.0}
    assert client.push(b"", terminating=True) == ErrorCode.INVALID_REQUEST


def test_delta_sums_are_added_up(telemetry_broker: EmbeddedBroker, client: Client) -> None:
    client.get()
    total = "org.apache.kafka.producer.connection.creation.total"
    assert client.push(metrics_data((total, 3), delta=True)) == ErrorCode.NONE
    assert client.push(metrics_data((total, 4), delta=True), terminating=True) == ErrorCode.NONE
    assert kept(telemetry_broker, client.instance_id) == {total: 7}


def test_a_wrong_subscription_id_is_refused_and_the_client_may_ask_again_at_once(
        client: Client) -> None:
    client.get()
    assert client.push(b"", subscription_id=client.subscription_id + 1) == \
        ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    assert client.get().error_code == ErrorCode.NONE  # not throttled after that error


@pytest.mark.parametrize(("compression", "payload", "error"), [
    (7, b"", ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    (NONE, b"\x00" * (MAX_BYTES + 1), ErrorCode.TELEMETRY_TOO_LARGE),
    (NONE, b"\xff\xff\xff\xff not protobuf", ErrorCode.INVALID_RECORD),
    (GZIP, b"not gzip", ErrorCode.INVALID_RECORD),
    (GZIP, compress(GZIP, b"\x0a\x00" * MAX_BYTES), ErrorCode.INVALID_RECORD),  # 8 KiB inside
], ids=["compression", "too-large", "not-otlp", "not-gzip", "decompresses-too-large"])
def test_a_bad_push_is_answered_with_kafkas_error(client: Client, compression: int,
                                                  payload: bytes, error: int) -> None:
    client.get()
    assert client.push(payload, compression=compression) == error


def test_the_zero_instance_id_cannot_push(client: Client) -> None:
    assert client.push(b"") == ErrorCode.INVALID_REQUEST


def test_a_changed_subscription_gives_a_new_subscription_id_at_once(
        telemetry_broker: EmbeddedBroker, client: Client) -> None:
    first = client.get()
    consumer = {"metrics": "org.apache.kafka.consumer.", "interval.ms": "30000"}
    telemetry_broker.call(lambda b: b.client_metrics.update_subscription("consumers", consumer))
    try:
        assert client.push(b"", subscription_id=first.subscription_id) == \
            ErrorCode.UNKNOWN_SUBSCRIPTION_ID
        second = client.get()
        assert second.error_code == ErrorCode.NONE
        assert second.client_instance_id == first.client_instance_id
        assert second.subscription_id != first.subscription_id
        assert sorted(second.requested_metrics) == ["org.apache.kafka.consumer.",
                                                    PRODUCER_METRICS]
        assert second.push_interval_ms == 30000  # the smallest interval of the two
    finally:
        telemetry_broker.call(lambda b: b.client_metrics.update_subscription("consumers", {}))


def test_a_subscription_matches_clients_by_kafkas_rules(
        telemetry_broker: EmbeddedBroker, client: Client) -> None:
    everything = {"metrics": "*", "match": "client_id=sparklog-.*,client_software_name=x"}
    telemetry_broker.call(lambda b: b.client_metrics.update_subscription("all", everything))
    try:
        assert list(client.get().requested_metrics) == [PRODUCER_METRICS]  # not all matched
        telemetry_broker.call(lambda b: b.client_metrics.update_subscription(
            "all", {"metrics": "*", "match": "client_id=sparklog-.*"}))
        answer = client.get()
        assert list(answer.requested_metrics) == ["*"]  # Kafka's "every metric"
        telemetry_broker.call(lambda b: b.client_metrics.update_subscription(
            "all", {"metrics": "*", "match": "client_id=sparklog"}))  # the whole id
        assert list(client.get().requested_metrics) == [PRODUCER_METRICS]
    finally:
        telemetry_broker.call(lambda b: b.client_metrics.update_subscription("all", {}))


def test_a_subscription_matches_a_clients_source_port(
        telemetry_broker: EmbeddedBroker, client: Client) -> None:
    """``client_source_port`` matches the port the client's connection comes from."""
    port = client.conn.sock.getsockname()[1]
    telemetry_broker.call(lambda b: b.client_metrics.update_subscription(
        "this-port", {"metrics": "*", "match": f"client_source_port={port}"}))
    try:
        assert list(client.get().requested_metrics) == ["*"]
        with RawConnection(telemetry_broker.bootstrap) as conn:  # another port
            assert list(Client(conn).get().requested_metrics) == [PRODUCER_METRICS]
    finally:
        telemetry_broker.call(lambda b: b.client_metrics.update_subscription("this-port", {}))


# -- the store, on a clock of the test's own --------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def _manager(clock: Clock, interval_ms: int = 1000) -> ClientMetricsManager:
    preset = {"default": Subscription.parse("default", {"metrics": "*",
                                                        "interval.ms": str(interval_ms)})}
    return ClientMetricsManager(1 << 20, clock, preset)


CLIENT = {"client_id": "c", "client_software_name": "librdkafka",
          "client_software_version": "2.16.0", "client_source_address": "127.0.0.1",
          "client_source_port": None}


def test_an_instance_is_forgotten_after_three_intervals_or_a_minute() -> None:
    clock = Clock()
    manager = _manager(clock, interval_ms=30_000)
    manager.get_subscriptions(None, CLIENT)
    clock.ms += 90_000
    assert len(manager.snapshot()) == 1
    clock.ms += 1
    assert manager.snapshot() == []
    short = _manager(clock, interval_ms=1000)  # three intervals are less than a minute
    short.get_subscriptions(None, CLIENT)
    clock.ms += 60_001
    assert short.snapshot() == []


def test_instances_and_series_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_metrics, "MAX_INSTANCES", 3)
    monkeypatch.setattr(client_metrics, "MAX_SERIES", 5)
    clock = Clock()
    manager = _manager(clock)
    ids = []
    for _ in range(5):
        clock.ms += 1
        ids.append(manager.get_subscriptions(None, CLIENT)[1].instance_id)
    kept_ids = {c.client_instance_id for c in manager.snapshot()}
    assert kept_ids == {str(i) for i in ids[2:]}  # the least recently heard from went
    _, instance = manager.get_subscriptions(None, CLIENT)
    payload = metrics_data(*((f"m{i}", i) for i in range(8)))
    assert manager.push(instance.instance_id, instance.subscription_id, False, NONE, payload,
                        CLIENT) == ErrorCode.NONE
    [pushed] = [c for c in manager.snapshot() if c.client_instance_id == str(instance.instance_id)]
    assert [m.name for m in pushed.metrics] == ["m0", "m1", "m2", "m3", "m4"]


INVALID_REQUEST, INVALID_CONFIG = ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_CONFIG


@pytest.mark.parametrize(("settings", "code", "message"), [
    ({"metrics": "*", "interval.ms": "99"}, INVALID_REQUEST, "interval.ms"),
    ({"metrics": "*", "interval.ms": "3600001"}, INVALID_REQUEST, "interval.ms"),
    ({"metrics": "*", "interval.ms": "--5"}, INVALID_CONFIG, "interval.ms"),
    ({"metrics": "*", "interval.ms": "a minute"}, INVALID_CONFIG, "interval.ms"),
    ({"metrics": "*", "match": "client_rack=a"}, INVALID_CONFIG,
     "illegal client matching pattern"),
    ({"metrics": "*", "match": "client_id=a=b"}, INVALID_CONFIG,
     "illegal client matching pattern"),
    ({"metrics": "*", "match": "client_id="}, INVALID_CONFIG,
     "illegal client matching pattern"),
    ({"metrics": "*", "match": "client_id=(unclosed"}, INVALID_CONFIG,
     "illegal client matching pattern"),
    ({"metrics": "*", "metrics.extra": "1"}, INVALID_REQUEST,
     "unknown client metrics configuration"),
])
def test_subscriptions_are_validated_as_kafka_does(settings: dict[str, str], code: ErrorCode,
                                                   message: str) -> None:
    """Kafka's ClientMetricsConfigs.validate: InvalidRequestException for an unknown setting
    and an interval out of range, InvalidConfigurationException (or ConfigException) for an
    interval that is not an integer and a bad pattern."""
    with pytest.raises(KafkaError, match=message) as raised:
        Subscription.parse("s", settings)
    assert raised.value.code == code


def test_a_bad_preset_stops_the_broker_naming_the_key() -> None:
    with pytest.raises(InvalidConfigError, match=r"interval\.ms"):
        BrokerConfig({"client.telemetry.default.metrics": "*",
                      "client.telemetry.default.interval.ms": "5"})
    with pytest.raises(InvalidConfigError, match=r"telemetry\.max\.bytes"):
        BrokerConfig({"telemetry.max.bytes": "0"})
    assert BrokerConfig({"client.telemetry.default.interval.ms": "5"})  # no metrics: off


def test_a_value_that_is_not_a_number_is_kept_as_none() -> None:
    """The status JSON has no NaN: a client's NaN or infinity shows as no value."""
    clock = Clock()
    manager = _manager(clock)
    _, instance = manager.get_subscriptions(None, CLIENT)
    payload = metrics_data(("nan", math.nan), ("inf", math.inf), ("one", 1.0))
    assert manager.push(instance.instance_id, instance.subscription_id, False, NONE, payload,
                        CLIENT) == ErrorCode.NONE
    [client] = manager.snapshot()
    assert {m.name: m.value for m in client.metrics} == {"inf": None, "nan": None, "one": 1.0}
    json.dumps(asdict(client), allow_nan=False)
