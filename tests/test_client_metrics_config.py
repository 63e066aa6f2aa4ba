"""Client-metrics subscriptions as config resources (KIP-714, resource type 16): DescribeConfigs,
IncrementalAlterConfigs and AlterConfigs on them, ListConfigResources listing them, the store
(the data directory on a single node, ZooKeeper's ``/config/client-metrics`` in a cluster) and
``sparklog client-metrics``, as ``kafka-client-metrics.sh`` against a Kafka broker."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_fixtures import (
    TIMEOUT,
    Cluster,
    RawConnection,
    confluent_producer,
    kp_request,
    kp_response,
    module_broker,
    private_broker,
    unique_topic,
    wait_until,
    zk_client,
    zookeeper,
)
from kafka import KafkaAdminClient
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType
from kafka.admin._configs import ConfigSourceType
from security_support import certificates, sasl_raw
from test_client_telemetry import telemetry_of
from test_security_acls import _kp_admin, _sasl, acls, secured

from sparklog.broker.client_metrics import STORE_FILE, ClientMetricsManager
from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.process import BrokerProcess
from sparklog.cli import main
from sparklog.errors import ErrorCode
from sparklog.protocol.versions import ApiKey, ConfigSource

__all__ = ["broker", "certificates", "fresh_broker", "secured", "zookeeper"]

PRODUCER_METRICS = "org.apache.kafka.producer."
CLIENT_METRICS = ConfigResourceType.CLIENT_METRICS
broker = module_broker({"metrics.listener": "http://127.0.0.1:0"})
fresh_broker = private_broker()


def tool(capsys: pytest.CaptureFixture[str], bootstrap: str, *argv: str) -> tuple[int, str, str]:
    """``sparklog client-metrics ARGV --bootstrap-server BOOTSTRAP``: code, stdout, stderr."""
    capsys.readouterr()
    code = main(["client-metrics", *argv, "--bootstrap-server", bootstrap])
    out, err = capsys.readouterr()
    return code, out, err


def ok(capsys: pytest.CaptureFixture[str], bootstrap: str, *argv: str) -> str:
    code, out, err = tool(capsys, bootstrap, *argv)
    assert code == 0, err
    return out


def kp_admin(bootstrap: str) -> KafkaAdminClient:
    """kafka-python 3's admin client at its newest versions (``api_version`` unset)."""
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = kp_admin(broker.bootstrap)
    yield client
    client.close()


def alter(admin: KafkaAdminClient, name: str, configs: dict[str, Any], *,
          incremental: bool = True, validate_only: bool = False) -> str:
    """'OK' or the error kafka-python names for the resource."""
    answer = admin.alter_configs([ConfigResource(CLIENT_METRICS, name, configs)],
                                 validate_only=validate_only, raise_on_unknown=False,
                                 incremental=incremental)
    return str(answer["client_metrics"][name])


def described(admin: KafkaAdminClient, name: str) -> dict[str, tuple[str, int, bool]]:
    """Each setting's (value, source, read-only), as DescribeConfigs v4 answers it."""
    answer = admin.describe_configs([ConfigResource(CLIENT_METRICS, name)],
                                    config_filter="all")
    return {key: (entry["value"], ConfigSourceType[entry["config_source"]].value,
                  entry["read_only"])
            for key, entry in answer["client_metrics"][name].items()}


def test_the_cli_round_trip_and_a_librdkafka_client_pushing_what_it_subscribes(
        broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    """--alter makes a subscription librdkafka asks for and pushes through (no preset on
    this broker: nothing pushes before); --describe, --list and --delete show and remove it."""
    name, client_id = unique_topic("cm"), unique_topic("subscribed")
    out = ok(capsys, broker.bootstrap, "--alter", "--name", name, "--metrics", PRODUCER_METRICS,
             "--interval", "1000", "--match", f"client_id={client_id}")
    assert out == f"Altered client metrics config for {name}.\n"
    assert name in ok(capsys, broker.bootstrap, "--list").splitlines()
    assert ok(capsys, broker.bootstrap, "--describe", "--name", name) == (
        f"Client metrics configs for {name} are:\n  metrics={PRODUCER_METRICS}\n"
        f"  interval.ms=1000\n  match=client_id={client_id}\n")
    assert f"Client metrics configs for {name} are:\n" in ok(capsys, broker.bootstrap,
                                                              "--describe")

    topic = unique_topic("cm-pushes")
    producer = confluent_producer(broker.bootstrap, client_id=client_id)

    def pushed() -> bool:
        producer.produce(topic, b"x")
        producer.poll(0.05)
        found = telemetry_of(broker, client_id)
        return found is not None and found["pushes"] >= 1

    wait_until(pushed, message="the subscribed producer to push")
    client = telemetry_of(broker, client_id)
    assert client is not None
    assert (client["subscribed"], client["push_interval_ms"]) == ([PRODUCER_METRICS], 1000)
    assert all(m["name"].startswith(PRODUCER_METRICS) for m in client["metrics"])
    producer.flush(TIMEOUT)

    # an empty value deletes that setting only
    ok(capsys, broker.bootstrap, "--alter", "--name", name, "--match", "")
    assert "match=" not in ok(capsys, broker.bootstrap, "--describe", "--name", name)
    assert ok(capsys, broker.bootstrap, "--delete", "--name", name) == \
        f"Deleted client metrics config for {name}.\n"
    assert name not in ok(capsys, broker.bootstrap, "--list").splitlines()
    assert ok(capsys, broker.bootstrap, "--describe", "--name", name) == \
        f"Client metrics configs for {name} are:\n"


def test_the_cli_refuses_what_kafkas_refuses(broker: BrokerProcess,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = tool(capsys, broker.bootstrap, "--list", "--describe")
    assert code == 2 and "exactly one action: --alter, --delete, --describe or --list" in err
    code, _, err = tool(capsys, broker.bootstrap, "--alter", "--metrics", "*")
    assert code == 2 and "One of --name or --generate-name must be specified" in err
    code, _, err = tool(capsys, broker.bootstrap, "--delete")
    assert code == 2 and "name must be specified with --delete" in err
    code, _, err = tool(capsys, broker.bootstrap, "--describe", "--interval", "100")
    assert code == 2 and "--describe can't be used with --interval" in err
    with pytest.raises(SystemExit) as exited:
        main(["client-metrics", "--bootstrap-server", broker.bootstrap, "--alter",
              "--name", "n", "--intervall", "100"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --intervall (did you mean '--interval'?) 100" in \
        capsys.readouterr().err
    code, _, err = tool(capsys, broker.bootstrap, "--alter", "--name", "n",
                        "--interval", "99")
    assert code == 1 and "INVALID_REQUEST" in err and "interval.ms" in err
    generated = ok(capsys, broker.bootstrap, "--alter", "--generate-name", "--metrics", "*")
    name = generated.removeprefix("Altered client metrics config for ").removesuffix(".\n")
    assert len(name) == 36  # a UUID
    ok(capsys, broker.bootstrap, "--delete", "--name", name)


def test_configs_of_a_subscription_as_kafka_answers_them(broker: BrokerProcess,
                                                        admin: KafkaAdminClient) -> None:
    """kafka-python's IncrementalAlterConfigs v1 / AlterConfigs v2 / DescribeConfigs v4 on
    type 16: Kafka's validation and error codes, APPEND and SUBTRACT on the list settings,
    validate_only, the source CLIENT_METRICS_CONFIG, and the subscription gone once its
    every setting is deleted."""
    name = unique_topic("cm-configs")
    cases = [({"metrics": "*", "interval.ms": "99"}, "InvalidRequestError"),
             ({"metrics": "*", "interval.ms": "3600001"}, "InvalidRequestError"),
             ({"metrics": "*", "interval.ms": "soon"}, "InvalidConfigurationError"),
             ({"metrics": "*", "retries": "1"}, "InvalidRequestError"),
             ({"match": "client_rack=a"}, "InvalidConfigurationError"),
             ({"match": "client_id=(unclosed"}, "InvalidConfigurationError"),
             ({"match": "client_id="}, "InvalidConfigurationError")]
    for configs, error in cases:
        assert error in alter(admin, name, configs), configs
    assert "InvalidRequestError" in alter(admin, "", {"metrics": "*"})
    assert alter(admin, name, {"metrics": "*"}, validate_only=True) == "OK"
    assert described(admin, name) == {}

    assert alter(admin, name, {"metrics": "a.,b.", "interval.ms": "5000"}) == "OK"
    assert alter(admin, name, {"metrics": (AlterConfigOp.APPEND, "c.,a."),
                               "match": (AlterConfigOp.APPEND, "client_id=x")}) == "OK"
    assert alter(admin, name, {"metrics": (AlterConfigOp.SUBTRACT, "b.")}) == "OK"
    assert "InvalidConfigurationError" in alter(
        admin, name, {"interval.ms": (AlterConfigOp.APPEND, "1")})
    source = ConfigSource.CLIENT_METRICS_CONFIG
    assert described(admin, name) == {"metrics": ("a.,c.", source, False),
                                      "interval.ms": ("5000", source, False),
                                      "match": ("client_id=x", source, False)}
    assert name in admin.list_config_resources(["CLIENT_METRICS"])["client_metrics"]

    # AlterConfigs v2 replaces the whole set (kafka-python would send the others along)
    request_class = kp_request(ApiKey.ALTER_CONFIGS)

    def legacy(*configs: tuple[str, str | None]) -> int:
        resource = request_class.AlterConfigsResource(
            resource_type=CLIENT_METRICS, resource_name=name, configs=[
                request_class.AlterConfigsResource.AlterableConfig(name=k, value=v)
                for k, v in configs])
        with RawConnection(broker.bootstrap) as conn:
            answer = conn.call(request_class(version=2, resources=[resource],
                                             validate_only=False),
                               kp_response(ApiKey.ALTER_CONFIGS))
        return int(answer.responses[0].error_code)

    assert legacy(("metrics", None)) == ErrorCode.INVALID_REQUEST
    assert legacy(("metrics", "d.")) == ErrorCode.NONE
    assert described(admin, name) == {"metrics": ("d.", source, False)}
    assert alter(admin, name, {"metrics": (AlterConfigOp.DELETE, None)}) == "OK"
    assert described(admin, name) == {}
    assert name not in admin.list_config_resources(["CLIENT_METRICS"]).get(
        "client_metrics", [])


def test_list_config_resources_v0_lists_subscriptions_only(broker: BrokerProcess,
                                                           admin: KafkaAdminClient) -> None:
    """v0 is Kafka 3.7's ListClientMetricsResources: the subscriptions' names."""
    name = unique_topic("cm-list")
    assert alter(admin, name, {"metrics": "*"}) == "OK"
    try:
        with RawConnection(broker.bootstrap) as conn:
            answer = conn.call(kp_request(ApiKey.LIST_CONFIG_RESOURCES)(version=0),
                               kp_response(ApiKey.LIST_CONFIG_RESOURCES))
        assert answer.error_code == 0
        assert name in [r.resource_name for r in answer.config_resources]
        listed = admin.list_config_resources()
        assert name in listed["client_metrics"] and "topic" in listed
    finally:
        alter(admin, name, {"metrics": (AlterConfigOp.DELETE, None)})


def test_a_restarted_broker_keeps_its_subscriptions(fresh_broker: BrokerProcess,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    ok(capsys, fresh_broker.bootstrap, "--alter", "--name", "kept", "--metrics", "*",
       "--interval", "60000")
    ok(capsys, fresh_broker.bootstrap, "--alter", "--name", "gone", "--metrics", "*")
    ok(capsys, fresh_broker.bootstrap, "--delete", "--name", "gone")
    fresh_broker.restart()
    assert ok(capsys, fresh_broker.bootstrap, "--list") == "kept\n"
    assert ok(capsys, fresh_broker.bootstrap, "--describe", "--name", "kept") == \
        "Client metrics configs for kept are:\n  metrics=*\n  interval.ms=60000\n"


def test_an_alter_through_one_broker_reaches_the_other(
        zookeeper: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """In ZooKeeper as a ZooKeeper-era Kafka keeps it (``/config/client-metrics/<name>``, a
    change notification): the other broker describes it within seconds, and after a restart."""
    cluster = Cluster(zookeeper, tmp_path, "client-metrics", size=2,
                      config={"default.replication.factor": "2", "min.insync.replicas": "1"})
    try:
        first, second = (b.bootstrap for b in cluster.start().brokers)
        ok(capsys, first, "--alter", "--name", "everyone", "--metrics", "*",
           "--interval", "2000")
        expected = "Client metrics configs for everyone are:\n  metrics=*\n  interval.ms=2000\n"
        wait_until(lambda: ok(capsys, second, "--describe", "--name", "everyone") == expected,
                   message="the second broker to apply the subscription")
        with zk_client(cluster) as zk:
            stored = json.loads(zk.get("/config/client-metrics/everyone")[0])
            assert stored == {"version": 1, "config": {"metrics": "*", "interval.ms": "2000"}}
            changes = [json.loads(zk.get(f"/config/changes/{c}")[0])
                       for c in zk.get_children("/config/changes")]
            assert {"version": 2, "entity_path": "client-metrics/everyone"} in changes
        cluster.brokers[1].restart()
        assert ok(capsys, second, "--list") == "everyone\n"  # read from ZooKeeper
        ok(capsys, second, "--delete", "--name", "everyone")
        wait_until(lambda: ok(capsys, first, "--list") == "\n",
                   message="the first broker to drop the subscription")
    finally:
        cluster.stop()


def test_subscriptions_need_the_clusters_config_acls(secured: EmbeddedBroker,
                                                     certificates: Path) -> None:
    """As Kafka: ALTER_CONFIGS / DESCRIBE_CONFIGS on the CLUSTER for type 16."""
    name = unique_topic("cm-acl")

    def attempt(user: str) -> tuple[str, int]:
        """IncrementalAlterConfigs through kafka-python, and a raw DescribeConfigs v4."""
        client = _kp_admin(secured, certificates, user)
        try:
            altered = alter(client, name, {"metrics": "*"})
        finally:
            client.close()
        request_class = kp_request(ApiKey.DESCRIBE_CONFIGS)
        request = request_class(version=4, resources=[request_class.DescribeConfigsResource(
            resource_type=CLIENT_METRICS, resource_name=name, configuration_keys=None)],
            include_synonyms=False, include_documentation=False)
        with sasl_raw(_sasl(secured), user) as conn:
            [result] = conn.call(request, kp_response(ApiKey.DESCRIBE_CONFIGS)).results
        return altered.partition(":")[0], result.error_code

    assert attempt("alice") == ("[Error 31] ClusterAuthorizationFailedError",
                                ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    grants = [("--allow-principal", "User:alice", "--operation", op, "--cluster")
              for op in ("AlterConfigs", "DescribeConfigs")]
    for grant in grants:
        acls(secured, certificates, "add", *grant)
    try:
        assert attempt("alice") == ("OK", ErrorCode.NONE)
    finally:
        for grant in grants:
            acls(secured, certificates, "remove", *grant, "--force")


def test_the_data_directorys_store_and_the_preset(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """client-metrics.json holds the configured subscriptions; one that does not validate
    (written by hand) is logged and left out; a configured ``default`` replaces the broker
    config's preset, which comes back when it is deleted."""
    props = {"telemetry.max.bytes": "1048576", "client.telemetry.default.metrics": "p."}
    (tmp_path / STORE_FILE).write_text(json.dumps({
        "bad": {"interval.ms": "5"}, "good": {"metrics": "g.", "interval.ms": "1000"}}))
    manager = ClientMetricsManager.from_props(props, lambda: 0, tmp_path)
    assert manager.configs == {"good": {"metrics": "g.", "interval.ms": "1000"}}
    assert sorted(manager.subscriptions) == ["default", "good"]
    assert "client metrics subscription bad is left out" in caplog.text

    asyncio.run(manager.alter("default", {"metrics": "d."}))
    assert manager.subscriptions["default"].metrics == ("d.",)
    asyncio.run(manager.alter("default", {}))
    asyncio.run(manager.alter("good", {}))
    assert manager.subscriptions["default"].metrics == ("p.",)  # the preset again
    assert sorted(manager.subscriptions) == ["default"] and manager.configs == {}
    assert json.loads((tmp_path / STORE_FILE).read_text()) == {
        "bad": {"interval.ms": "5"}}  # kept as written, for the operator to mend
    restarted = ClientMetricsManager.from_props(props, lambda: 0, tmp_path)
    assert restarted.configs == {}
