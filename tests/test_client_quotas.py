"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-219, KIP-546): DescribeClientQuotas and
AlterClientQuotas with kafka-python's encoder, ``sparklog configs --entity-type users|
clients``, and the quotas enforced on real clients: a throttled producer or consumer is held
near its quota (the answers carry a throttle time, its connection is muted for it) while
another client id on the same broker keeps its rate; on a cluster one AlterClientQuotas
reaches every broker through ZooKeeper's change notification.

Rates are compared as ratios, never against absolute timings; the brokers here measure over
``quota.window.num=2`` windows of one second, so a test needs seconds, not Kafka's 11.
"""

from __future__ import annotations

import contextlib
import io
import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_fixtures import (
    TIMEOUT,
    Cluster,
    RawConnection,
    create_topic,
    module_broker,
    one_batch,
    produce_request,
    topic,
    wait_until,
    zookeeper,
)
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer import ProduceResponse
from prometheus_client.parser import text_string_to_metric_families
from security_support import certificates, listeners_config, sasl_raw, security

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.process import BrokerProcess
from sparklog.broker.quotas import QuotaManager, Rate
from sparklog.broker.request_context import REQUEST, RequestContext
from sparklog.broker.security.broker_security import BrokerSecurity
from sparklog.broker.security.client_quotas import ClientQuotas, entity
from sparklog.broker.security.listener import ListenerSecurity
from sparklog.broker.security.session import Session
from sparklog.cli import main as sparklog_main
from sparklog.cluster.zookeeper_server import ZooKeeperServer
from sparklog.errors import ErrorCode

broker = module_broker({"quota.window.num": "2", "metrics.listener": "http://127.0.0.1:0"})
__all__ = ["broker", "certificates", "topic", "zookeeper"]  # fixtures, imported for pytest

QUOTA = 100_000
"""The byte rate quota of the throttled clients (bytes per second)."""
RUN_S = 3.0


def configs(broker: BrokerProcess, *argv: str) -> tuple[int, str]:
    """``sparklog configs ARGV`` against ``broker``: exit code, stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = sparklog_main(["configs", "--bootstrap-server", broker.bootstrap, *argv])
    return code, out.getvalue()


def describe(bootstrap: str, *components: tuple[str, int, str | None], strict: bool = False
             ) -> Any:
    """DescribeClientQuotas v1 with kafka-python's encoder."""
    request = DescribeClientQuotasRequest(version=1, strict=strict, components=[
        DescribeClientQuotasRequest.ComponentData(entity_type=t, match_type=m, match=n)
        for t, m, n in components])
    with RawConnection(bootstrap) as conn:
        return conn.call(request, DescribeClientQuotasResponse)


def described(answer: Any) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    assert answer.error_code == ErrorCode.NONE, answer.error_message
    return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
            {v.key: v.value for v in entry.values} for entry in answer.entries}


def alter(bootstrap: str, components: dict[str, str | None], ops: dict[str, float | None],
          validate_only: bool = False, version: int = 1) -> Any:
    """AlterClientQuotas (one entry) with kafka-python's encoder: its entry's answer."""
    entry = AlterClientQuotasRequest.EntryData
    request = AlterClientQuotasRequest(version=version, validate_only=validate_only, entries=[
        entry(entity=[entry.EntityData(entity_type=t, entity_name=n)
                      for t, n in components.items()],
              ops=[entry.OpData(key=k, value=0.0 if v is None else v, remove=v is None)
                   for k, v in ops.items()])])
    with RawConnection(bootstrap) as conn:
        (answer,) = conn.call(request, AlterClientQuotasResponse).entries
    return answer


@pytest.fixture
def quotas_cleared(broker: BrokerProcess) -> Iterator[None]:
    """Every quota the test set on the module's broker is removed after it."""
    yield
    for found in describe(broker.bootstrap).entries:
        answer = alter(broker.bootstrap, {e.entity_type: e.entity_name for e in found.entity},
                       {v.key: None for v in found.values})
        assert answer.error_code == ErrorCode.NONE
    assert describe(broker.bootstrap).entries == []


# -- the APIs ---------------------------------------------------------------------------------


def test_alter_and_describe_with_filters_as_kafka(broker: BrokerProcess,
                                                  quotas_cleared: None) -> None:
    at = broker.bootstrap
    for components, ops in (({"user": "alice"}, {"producer_byte_rate": 1024}),
                            ({"user": None}, {"request_percentage": 50.5}),
                            ({"user": "alice", "client-id": "c1"}, {"consumer_byte_rate": 2048}),
                            ({"user": "alice", "client-id": None}, {"producer_byte_rate": 7}),
                            ({"client-id": "c1"}, {"producer_byte_rate": 10}),
                            ({"client-id": None}, {"consumer_byte_rate": 20})):
        assert alter(at, components, ops).error_code == ErrorCode.NONE
    alice, default_user = (("user", "alice"),), (("user", None),)
    alice_c1 = (("client-id", "c1"), ("user", "alice"))
    alice_any = (("client-id", None), ("user", "alice"))
    # exact user, strict: alice alone; not strict: also alice's client ids
    assert described(describe(at, ("user", 0, "alice"), strict=True)) == {
        alice: {"producer_byte_rate": 1024.0}}
    assert set(described(describe(at, ("user", 0, "alice")))) == {alice, alice_c1, alice_any}
    # the default user (match type 1), any user (2: the default too)
    assert described(describe(at, ("user", 1, None), strict=True)) == {
        default_user: {"request_percentage": 50.5}}
    assert set(described(describe(at, ("user", 2, None), strict=True))) == {alice, default_user}
    # user and client id together
    assert set(described(describe(at, ("user", 0, "alice"), ("client-id", 2, None),
                                  strict=True))) == {alice_c1, alice_any}
    assert set(described(describe(at, ("client-id", 0, "c1"), strict=True))) == {
        (("client-id", "c1"),)}
    assert len(described(describe(at))) == 6  # no component, not strict: everything

    # a removed key goes; an entity left without a quota is no longer described
    assert alter(at, {"client-id": None}, {"consumer_byte_rate": None}).error_code == 0
    assert (("client-id", None),) not in described(describe(at))
    # validate_only checks and writes nothing
    assert alter(at, {"client-id": "c9"}, {"producer_byte_rate": 5},
                 validate_only=True).error_code == ErrorCode.NONE
    assert described(describe(at, ("client-id", 0, "c9"), strict=True)) == {}


@pytest.mark.parametrize(("components", "ops", "message"), [
    ({"user": "bob"}, {"unknown_rate": 1}, "Invalid configuration key unknown_rate"),
    ({"user": "bob"}, {"controller_mutation_rate": 1}, "controller_mutation_rate"),
    ({"client-id": "c"}, {"producer_byte_rate": 1.5}, "must be a LONG value"),
    ({}, {"producer_byte_rate": 1}, "Invalid empty client quota entity"),
    ({"user": ""}, {"producer_byte_rate": 1}, "Empty user not supported"),
    ({"group": "g"}, {"producer_byte_rate": 1}, "Unhandled client quota entity type"),
    ({"ip": "127.0.0.1"}, {"connection_creation_rate": 1}, "not supported"),
])
def test_alter_refuses_what_kafka_refuses(broker: BrokerProcess, components: dict[str, str],
                                          ops: dict[str, float], message: str) -> None:
    for version in (0, 1):
        answer = alter(broker.bootstrap, components, ops, version=version)
        assert answer.error_code == ErrorCode.INVALID_REQUEST
        assert message in answer.error_message


def test_describe_refuses_bad_filters(broker: BrokerProcess) -> None:
    twice = describe(broker.bootstrap, ("user", 2, None), ("user", 1, None))
    assert twice.error_code == ErrorCode.INVALID_REQUEST and "Duplicate" in twice.error_message
    custom = describe(broker.bootstrap, ("group", 2, None))
    assert custom.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert describe(broker.bootstrap, ("ip", 2, None)).entries == []


def test_configs_tool_round_trip_like_kafka_configs(broker: BrokerProcess,
                                                    quotas_cleared: None) -> None:
    assert configs(broker, "--entity-type", "users", "--entity-name", "carol",
                   "--entity-type", "clients", "--entity-name", "app", "--alter",
                   "--add-config", "producer_byte_rate=1024,consumer_byte_rate=20000000") == (
        0, "Completed updating config for user carol.\n")
    assert configs(broker, "--entity-type", "clients", "--entity-default", "--alter",
                   "--add-config", "request_percentage=12.5") == (
        0, "Completed updating default config for clients in the cluster.\n")
    assert configs(broker, "--entity-type", "users", "--entity-name", "carol",
                   "--entity-type", "clients", "--entity-name", "app", "--describe") == (
        0, "Quota configs for user-principal 'carol', client-id 'app' are "
           "consumer_byte_rate=2.0E7, producer_byte_rate=1024.0\n")
    assert configs(broker, "--entity-type", "clients", "--entity-default", "--describe") == (
        0, "Quota configs for the default client-id are request_percentage=12.5\n")
    assert configs(broker, "--entity-type", "users", "--entity-name", "carol",
                   "--entity-type", "clients", "--entity-name", "app", "--alter",
                   "--delete-config", "consumer_byte_rate")[0] == 0
    assert configs(broker, "--entity-type", "users", "--entity-name", "carol",
                   "--entity-type", "clients", "--entity-name", "app", "--describe")[1] == (
        "Quota configs for user-principal 'carol', client-id 'app' are "
        "producer_byte_rate=1024.0\n")
    assert configs(broker, "--entity-type", "clients", "--entity-default", "--alter",
                   "--delete-config", "request_percentage")[0] == 0
    assert configs(broker, "--entity-type", "clients", "--alter",
                   "--add-config", "producer_byte_rate=1")[0] == 2  # no name for --alter


# -- precedence and storage -------------------------------------------------------------------


@contextlib.contextmanager
def request_of(principal: str) -> Iterator[None]:
    """The current request comes from a connection authenticated as ``principal``."""
    session = Session(ListenerSecurity("PLAINTEXT"))
    session.principal = principal
    token = REQUEST.set(RequestContext(session))
    try:
        yield
    finally:
        REQUEST.reset(token)


def test_the_most_specific_of_kafkas_eight_entities_applies(tmp_path: Path) -> None:
    """Kafka's order, each entity removed in turn: the next one applies (the quota seen
    through the bytes a Fetch may read per window, ``quota * (num - 1) * size``)."""
    security = BrokerSecurity({}, tmp_path)
    quotas = QuotaManager(security, {"quota.window.num": "2", "quota.window.size.seconds": "1"})
    order = [entity(user="alice", client_id="app"), entity(user="alice", client_id=None),
             entity(user="alice"), entity(user=None, client_id="app"),
             entity(user=None, client_id=None), entity(user=None), entity(client_id="app"),
             entity(client_id=None)]
    for rank, quota_entity in enumerate(order):
        security.quotas.alter(quota_entity, {"consumer_byte_rate": 1000.0 + rank})
    assert ClientQuotas(tmp_path).entries() == security.quotas.entries()  # read back
    with request_of("User:alice"):
        for rank, quota_entity in enumerate(order):
            assert quotas.window_bytes("consumer_byte_rate", "app", 10**9) == 1000 + rank
            security.quotas.alter(quota_entity, {})
        assert quotas.window_bytes("consumer_byte_rate", "app", 10**9) == 10**9
        assert not quotas.enabled("consumer_byte_rate")
    on_disk = json.loads((tmp_path / "client-quotas.json").read_text())
    assert on_disk == {}


def test_throttle_time_is_the_time_to_fall_back_under_the_quota() -> None:
    """Kafka's sampled rate: 11 windows of 1 s, the rate over at least 10 of them; the
    throttle time is ``(rate - quota) / quota * window``, at most all 11 windows."""
    rate = Rate(1.0, 11)
    rate.record(1100, now=100.0)
    assert rate.rate(100.0) == pytest.approx(110)  # 1100 bytes over 10 s
    assert rate.throttle_ms(100, 100.0) == 1000  # 10% over: a tenth of the 10 s
    assert rate.throttle_ms(110, 100.0) == 0
    assert rate.throttle_ms(1, 100.0) == 11_000  # capped at the whole window
    rate.record(1100, now=115.0)  # the first sample is older than all 11 windows: gone
    assert rate.rate(115.0) == pytest.approx(110)


# -- enforcement --------------------------------------------------------------------------------


def throttle_seen(stats: list[dict[str, Any]]) -> int:
    """The largest broker throttle time librdkafka reported (its ``throttle`` window)."""
    return max((b["throttle"]["max"] for s in stats for b in s["brokers"].values()
                if b["nodeid"] >= 0), default=0)


def produce_for(bootstrap: str, topic: str, client_id: str, seconds: float,
                out: dict[str, tuple[int, int]]) -> None:
    """Produce 1 KB records as fast as acknowledged for ``seconds``: bytes acknowledged in
    that time and the largest throttle time seen."""
    stats: list[dict[str, Any]] = []
    acked = [0]
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id,
                         "linger.ms": 5, "batch.size": 16384, "queue.buffering.max.kbytes": 256,
                         "statistics.interval.ms": 200,
                         "stats_cb": lambda s: stats.append(json.loads(s))})
    started = time.monotonic()

    def delivered(error: Any, _: Any) -> None:
        if error is None and time.monotonic() - started < seconds:
            acked[0] += 1000

    while time.monotonic() - started < seconds:
        try:
            producer.produce(topic, b"x" * 1000, on_delivery=delivered)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.purge()
    producer.flush(TIMEOUT)
    out[client_id] = (acked[0], throttle_seen(stats))


Run = Callable[[str, str, str, float, dict[str, tuple[int, int]]], None]


def side_by_side(client: Run, broker: BrokerProcess, topic: str, quota_key: str, slow: str,
                 fast: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """``client`` run as ``slow`` (given a ``quota_key`` quota) and as ``fast`` at the same
    time for ``RUN_S``: each one's bytes and largest throttle time."""
    assert alter(broker.bootstrap, {"client-id": slow},
                 {quota_key: QUOTA}).error_code == ErrorCode.NONE
    out: dict[str, tuple[int, int]] = {}
    runs = [threading.Thread(target=client, args=(broker.bootstrap, topic, c, RUN_S, out))
            for c in (slow, fast)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(TIMEOUT * 2)
    return out[slow], out[fast]


def test_a_producer_quota_throttles_one_client_id_while_another_keeps_its_rate(
        broker: BrokerProcess, topic: str, quotas_cleared: None) -> None:
    create_topic(broker.bootstrap, topic)
    (slow, slow_throttle), (fast, fast_throttle) = side_by_side(
        produce_for, broker, topic, "producer_byte_rate", "slow-producer", "fast-producer")
    # the quota plus what one window lets through before the first throttle
    assert QUOTA * RUN_S / 2 < slow < QUOTA * (RUN_S + 2)
    assert fast > 10 * slow
    assert slow_throttle > 0 and fast_throttle == 0


def consume_for(bootstrap: str, topic: str, client_id: str, seconds: float,
                out: dict[str, tuple[int, int]]) -> None:
    stats: list[dict[str, Any]] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": client_id,
                         "client.id": client_id, "enable.auto.commit": False,
                         "statistics.interval.ms": 200,
                         "stats_cb": lambda s: stats.append(json.loads(s))})
    consumer.assign([CkTopicPartition(topic, 0, OFFSET_BEGINNING)])
    received, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        for message in consumer.consume(100, 0.05):
            if message.error() is None:
                received += len(message.value() or b"")
    consumer.close()
    out[client_id] = (received, throttle_seen(stats))


def test_a_consumer_quota_throttles_one_client_id_while_another_keeps_its_rate(
        broker: BrokerProcess, topic: str, quotas_cleared: None) -> None:
    create_topic(broker.bootstrap, topic)
    # batches well below a window's quota: a Fetch answers at least one whole batch, and
    # one larger than the quota allows over the window would be refused each time, as Kafka
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20,
                         "batch.size": 16384})
    for _ in range(4000):
        producer.produce(topic, b"y" * 1000)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0
    (slow, slow_throttle), (fast, fast_throttle) = side_by_side(
        consume_for, broker, topic, "consumer_byte_rate", "slow-consumer", "fast-consumer")
    assert 0 < slow < QUOTA * (RUN_S + 2)
    assert fast > 5 * slow
    assert slow_throttle > 0 and fast_throttle == 0


def test_a_throttled_connection_is_muted_for_the_throttle_time(
        broker: BrokerProcess, topic: str, quotas_cleared: None) -> None:
    """KIP-219: the answer carries the throttle time and the broker reads the connection's
    next request only once it passed; another connection is answered at once. The rate
    divides by at least one window here, so 1.1 windows' worth of quota is 10% over it."""
    create_topic(broker.bootstrap, topic)
    quota = 10_000
    assert alter(broker.bootstrap, {"client-id": "sparklog-tests"},
                 {"producer_byte_rate": quota}).error_code == ErrorCode.NONE
    with RawConnection(broker.bootstrap) as conn:
        answer = conn.call(produce_request(topic, 0, one_batch(b"z" * (quota + 1000)),
                                           version=8), ProduceResponse)
        throttle = answer.throttle_time_ms
        assert throttle > 0
        started = time.monotonic()
        conn.call(MetadataRequest(version=1, topics=[]), MetadataResponse)
        muted = time.monotonic() - started
    with RawConnection(broker.bootstrap) as other:
        started = time.monotonic()
        other.call(MetadataRequest(version=1, topics=[]), MetadataResponse)
        unmuted = time.monotonic() - started
    assert muted >= 0.8 * throttle / 1000
    assert unmuted < muted / 4
    # Kafka's kafka.server:type=Produce,client-id=... sensors, as the JMX exporter names them
    assert broker.metrics_url is not None
    with urllib.request.urlopen(broker.metrics_url + "metrics", timeout=TIMEOUT) as response:
        families = {f.name: f for f in text_string_to_metric_families(response.read().decode())}
    labels = {"resource": "Produce", "user": "", "clientId": "sparklog-tests"}
    for name in ("kafka_server_quota_byte_rate", "kafka_server_quota_throttle_time"):
        (sample,) = [s for s in families[name].samples if s.labels == labels]
        assert sample.value > 0


def test_a_request_percentage_quota_throttles_on_handler_time(
        broker: BrokerProcess, quotas_cleared: None) -> None:
    """A quota of a millionth of a request thread: any handled request exceeds it and is
    answered with a throttle time; ApiVersions is never throttled (a client needs it to
    read the throttle at all), as in Kafka."""
    assert alter(broker.bootstrap, {"client-id": "sparklog-tests"},
                 {"request_percentage": 0.0001}).error_code == ErrorCode.NONE
    with RawConnection(broker.bootstrap) as conn:
        assert conn.call(MetadataRequest(version=4, topics=[], allow_auto_topic_creation=False),
                         MetadataResponse).throttle_time_ms > 0
    with RawConnection(broker.bootstrap) as conn:
        assert conn.call(ApiVersionsRequest(version=2),
                         ApiVersionsResponse).throttle_time_ms == 0


def test_quotas_need_the_cluster_config_acls_and_a_user_quota_follows_the_principal(
        tmp_path: Path, certificates: Path) -> None:
    """With an authorizer, Describe needs DESCRIBE_CONFIGS and Alter ALTER_CONFIGS on the
    CLUSTER; a ``user`` quota applies to the connection's principal (a SASL login), not to
    its client id: alice's quota leaves admin alone until admin has one."""
    config = listeners_config(certificates, **{
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin"})
    with EmbeddedBroker(tmp_path / "data", config) as secured:
        at = f"127.0.0.1:{secured.listeners['SASL_PLAINTEXT']}"
        with sasl_raw(at, "alice") as conn:
            refused = conn.call(DescribeClientQuotasRequest(version=1, strict=False,
                                                            components=[]),
                                DescribeClientQuotasResponse)
            assert refused.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            entry = AlterClientQuotasRequest.EntryData
            (denied,) = conn.call(AlterClientQuotasRequest(version=1, validate_only=False,
                                                           entries=[entry(entity=[
                                                               entry.EntityData(
                                                                   entity_type="user",
                                                                   entity_name="alice")],
                                                               ops=[])]),
                                  AlterClientQuotasResponse).entries
            assert denied.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        admin = AdminClient({"bootstrap.servers": at,
                             **security("confluent", "SASL_PLAINTEXT", certificates,
                                        user="admin")})
        admin.create_topics([NewTopic("quoted", 1, 1)])["quoted"].result(TIMEOUT)

        def admin_throttle() -> int:
            with sasl_raw(at, "admin") as conn:
                answer = conn.call(produce_request("quoted", 0, one_batch(b"q" * 11_000),
                                                   version=8), ProduceResponse)
            assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE
            return answer.throttle_time_ms

        # 11 windows of 1 s: 11 KB at once is 10% over 1000 bytes/s
        with sasl_raw(at, "admin") as conn:
            for user in ("alice", "admin"):
                if user == "admin":
                    assert admin_throttle() == 0  # only alice has a quota
                (done,) = conn.call(AlterClientQuotasRequest(
                    version=1, validate_only=False, entries=[entry(
                        entity=[entry.EntityData(entity_type="user", entity_name=user)],
                        ops=[entry.OpData(key="producer_byte_rate", value=1000.0,
                                          remove=False)])]), AlterClientQuotasResponse).entries
                assert done.error_code == ErrorCode.NONE
        assert admin_throttle() > 0


# -- a cluster ----------------------------------------------------------------------------------


def test_a_quota_altered_through_one_broker_applies_on_every_broker(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    cluster = Cluster(zookeeper, tmp_path, "quotas")
    try:
        cluster.start()
        first, *others = cluster.brokers
        assert configs(first, "--entity-type", "clients", "--entity-name", "sparklog-tests",
                       "--alter", "--add-config", "producer_byte_rate=1000")[0] == 0
        wanted = {(("client-id", "sparklog-tests"),): {"producer_byte_rate": 1000.0}}
        for each in others:
            wait_until(lambda each=each: described(describe(each.bootstrap)) == wanted,
                       message=f"broker {each.bootstrap} to hear the quota")
        # enforced by the partition's leader, another broker than the one altered through:
        # 11 windows of 1 s, so 11 KB at once is 10% over 1000 bytes/s
        create_topic(cluster.bootstrap, "throttled", replicas=[[2]])
        assert cluster.leader("throttled") == 2
        with RawConnection(cluster.brokers[2].bootstrap) as conn:
            answer = conn.call(produce_request("throttled", 0, one_batch(b"z" * 11_000),
                                               acks=1, version=8), ProduceResponse)
        assert answer.throttle_time_ms > 0
        assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    finally:
        cluster.stop()
