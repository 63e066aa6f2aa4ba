"""Security on a cluster (issue 15 on issue 19's cluster): SCRAM users and ACLs live in
ZooKeeper in Kafka's layout and every broker serves the cluster's view.

What a user relies on: a user added through one broker logs in on another, also after that
broker restarted, and a deleted one nowhere; an ACL created through one broker allows on
another, and once deleted refuses everywhere; ``sparklog acls`` and ``sparklog users`` work
against any broker; Metadata lists only the topics a principal may describe, on every
broker, with the authorized operations; ZooKeeper holds what Kafka's tools expect
(``/config/users/<user>``, ``/kafka-acl/...``, ``/kafka-acl-extended/prefixed/...`` and
their change notifications).

Between brokers: with ``inter.broker.listener.name`` naming a SASL_SSL listener, followers
replicate over it logged in as the broker's principal (acks=all answered with three in-sync
replicas); a broker whose principal lacks CLUSTER_ACTION cannot replicate (its fetches are
refused and logged, it stays out of the ISR, nothing crashes) until that ACL is added.

One ZooKeeper (module), three broker processes per test (each its own chroot), each with a
PLAINTEXT listener (``User:ANONYMOUS``, a super user here: the tools' and the test's way
in) and a SASL_PLAINTEXT one (SCRAM users from ZooKeeper, PLAIN user bob from the config).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_fixtures import (
    TIMEOUT,
    Cluster,
    create_topic,
    kp_request,
    kp_response,
    numbered,
    one_batch,
    produce_confluent,
    raw_produce,
    wait_until,
    watermarks,
    zk_client,
    zookeeper,
)
from confluent_kafka import KafkaError, Producer
from kazoo.client import KazooClient
from security_support import certificates, inter_broker_config, plain_jaas, sasl_raw

from sparklog.broker.process import BrokerProcess
from sparklog.broker.replication.inter_broker import InterBrokerSecurity, inter_broker_listener
from sparklog.broker.security.acls import Operation
from sparklog.cli import main as sparklog_main
from sparklog.cluster import config_changes
from sparklog.cluster.security_store import SecurityStore
from sparklog.cluster.zookeeper_server import ZooKeeperServer
from sparklog.errors import ErrorCode, InvalidConfigError
from sparklog.protocol.versions import ApiKey

__all__ = ["certificates", "zookeeper"]  # fixtures, imported for pytest

SASL = "SASL_PLAINTEXT"
SECURE_CLUSTER = {
    "listeners": f"PLAINTEXT://127.0.0.1:0,{SASL}://127.0.0.1:0",
    "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,{SASL}:{SASL}",
    f"listener.name.{SASL.lower()}.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
    f"listener.name.{SASL.lower()}.plain.sasl.jaas.config": plain_jaas({"bob": "bob-secret"}),
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path,
            request: pytest.FixtureRequest) -> Iterator[Cluster]:
    running = Cluster(zookeeper, tmp_path, request.node.name, config=SECURE_CLUSTER)
    try:
        yield running.start()
    finally:
        running.stop()


def tool(name: str, broker: BrokerProcess, *argv: str) -> tuple[int, str]:
    """``sparklog NAME ARGV`` against ``broker``'s PLAINTEXT listener: exit code, stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = sparklog_main([name, *argv, "--bootstrap-server", broker.bootstrap])
    return code, out.getvalue()


REFUSED = (KafkaError._AUTHENTICATION, KafkaError._MSG_TIMED_OUT)
"""A refused login as librdkafka reports it (it retries the login until the timeout)."""


def scram_login_error(broker: BrokerProcess, user: str, password: str) -> Any:
    """The error of producing one record as a SCRAM user through ``broker``'s SASL listener
    (None: acknowledged)."""
    errors: list[KafkaError | None] = []
    producer = Producer({"bootstrap.servers": broker.listeners[SASL],
                         "security.protocol": SASL, "sasl.mechanism": "SCRAM-SHA-512",
                         "sasl.username": user, "sasl.password": password,
                         "message.timeout.ms": 5000, "enable.idempotence": False})
    producer.produce("logins", b"v", on_delivery=lambda err, _: errors.append(err))
    producer.flush(TIMEOUT)
    return errors[0].code() if errors and errors[0] is not None else None


def bob_produces(broker: BrokerProcess, topic: str, partition: int) -> int:
    """The error code of one Produce as bob (PLAIN) on ``broker``'s SASL listener."""
    with sasl_raw(broker.listeners[SASL], "bob", "bob-secret") as conn:
        return raw_produce(conn, topic, partition, one_batch(b"x")).error_code


def led_by(cluster: Cluster, topic: str, broker_id: int, partitions: int) -> int:
    return next(p for p in range(partitions) if cluster.leader(topic, p) == broker_id)


def test_a_user_added_through_one_broker_logs_in_on_every_broker(cluster: Cluster) -> None:
    first, second, third = cluster.brokers
    create_topic(first.bootstrap, "logins", replication_factor=3)
    assert tool("acls", first, "add", "--allow-principal", "User:alice", "--operation",
                "Write", "--topic", "logins")[0] == 0
    assert tool("users", first, "add", "alice", "--password", "alice-secret",
                "--mechanism", "SCRAM-SHA-512")[0] == 0
    wait_until(lambda: scram_login_error(third, "alice", "alice-secret") is None,
               message="alice logs in on broker 2")
    assert scram_login_error(second, "alice", "wrong") in REFUSED
    assert "alice" in tool("users", second, "list")[1]
    with zk_client(cluster) as zk:
        stored = json.loads(zk.get("/config/users/alice")[0])
        assert stored["version"] == 1
        credential = stored["config"]["SCRAM-SHA-512"]
        assert [f.partition("=")[0] for f in credential.split(",")] == \
            ["salt", "stored_key", "server_key", "iterations"]
        assert "alice-secret" not in credential
        notes = [json.loads(zk.get(f"/config/changes/{c}")[0])
                 for c in zk.get_children("/config/changes")]
        assert {"version": 2, "entity_path": "users/alice"} in notes
    third.restart()
    assert scram_login_error(third, "alice", "alice-secret") is None  # ZooKeeper's, not local
    assert tool("users", second, "delete", "alice", "--mechanism", "SCRAM-SHA-512")[0] == 0
    for broker in cluster.brokers:
        wait_until(lambda b=broker: scram_login_error(b, "alice", "alice-secret") in REFUSED,
                   message=f"alice refused on {broker.bootstrap}")


def test_an_acl_created_through_one_broker_applies_on_every_broker(cluster: Cluster) -> None:
    first, second, third = cluster.brokers
    create_topic(first.bootstrap, "orders", partitions=3, replication_factor=3)
    partition = led_by(cluster, "orders", 0, 3)
    assert bob_produces(first, "orders", partition) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert tool("acls", second, "add", "--allow-principal", "User:bob", "--operation", "Write",
                "--topic", "orders")[0] == 0
    wait_until(lambda: bob_produces(first, "orders", partition) == ErrorCode.NONE,
               message="bob may write orders on broker 0")
    assert "User:bob" in tool("acls", third, "list", "--topic", "orders")[1]
    first.restart()
    wait_until(lambda: cluster.leader("orders", partition) >= 0, message="a leader")
    leader = cluster.brokers[cluster.leader("orders", partition)]
    assert bob_produces(leader, "orders", partition) == ErrorCode.NONE  # from ZooKeeper
    assert tool("acls", second, "add", "--allow-principal", "User:bob", "--operation", "Read",
                "--topic", "ord", "--resource-pattern-type", "prefixed")[0] == 0
    with zk_client(cluster) as zk:
        literal = json.loads(zk.get("/kafka-acl/Topic/orders")[0])
        assert literal == {"version": 1, "acls": [{"principal": "User:bob",
                                                   "permissionType": "Allow",
                                                   "operation": "Write", "host": "*"}]}
        prefixed = json.loads(zk.get("/kafka-acl-extended/prefixed/Topic/ord")[0])
        assert prefixed["acls"][0]["operation"] == "Read"
        assert b"Topic:orders" in [zk.get(f"/kafka-acl-changes/{c}")[0]
                                   for c in zk.get_children("/kafka-acl-changes")]
        extended = [json.loads(zk.get(f"/kafka-acl-extended-changes/{c}")[0])
                    for c in zk.get_children("/kafka-acl-extended-changes")]
        assert {"version": 1, "resourceType": "Topic", "name": "ord",
                "patternType": "PREFIXED"} in extended
    assert tool("acls", third, "remove", "--allow-principal", "User:bob", "--operation",
                "Write", "--topic", "orders")[0] == 0
    for broker in cluster.brokers:
        wait_until(lambda b=broker: "User:bob" not in tool("acls", b, "list", "--topic",
                                                           "orders",
                                                           "--resource-pattern-type",
                                                           "literal")[1],
                   message=f"the ACL gone on {broker.bootstrap}")
    leader = cluster.brokers[cluster.leader("orders", partition)]
    assert bob_produces(leader, "orders", partition) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    with zk_client(cluster) as zk:
        assert zk.exists("/kafka-acl/Topic/orders") is None  # no ACL left: no znode


def bob_metadata(broker: BrokerProcess, topics: list[str] | None = None) -> Any:
    """Metadata v8 as bob on ``broker``'s SASL listener, with the authorized operations."""
    request = kp_request(ApiKey.METADATA)(
        version=8, topics=None if topics is None else [{"name": t} for t in topics],
        allow_auto_topic_creation=True, include_cluster_authorized_operations=True,
        include_topic_authorized_operations=True)
    with sasl_raw(broker.listeners[SASL], "bob", "bob-secret") as conn:
        return conn.call(request, kp_response(ApiKey.METADATA))


def test_metadata_lists_only_describable_topics_on_every_broker(cluster: Cluster) -> None:
    first, _, third = cluster.brokers
    for name in ("visible", "hidden"):
        create_topic(first.bootstrap, name, replication_factor=3)
    assert tool("acls", first, "add", "--allow-principal", "User:bob", "--operation", "Read",
                "--topic", "visible")[0] == 0
    wait_until(lambda: all("visible" in {t.name for t in bob_metadata(b).topics}
                           for b in cluster.brokers), message="every broker lists visible")
    for broker in cluster.brokers:
        answer = bob_metadata(broker)
        listed = {t.name: t for t in answer.topics}
        assert "hidden" not in listed
        assert listed["visible"].authorized_operations == {Operation.READ, Operation.DESCRIBE}
        assert answer.authorized_operations == set()  # nothing on the cluster for bob
        # the brokers at their SASL listener's address, the one this request came in on
        assert sorted(f"{b.host}:{b.port}" for b in answer.brokers) == \
            sorted(b.listeners[SASL] for b in cluster.brokers)
    named = bob_metadata(third, ["hidden", "missing"]).topics
    assert [t.error_code for t in named] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED] * 2
    assert "missing" not in cluster.metadata().topics  # not created by whom may not


def test_replication_over_a_sasl_ssl_inter_broker_listener(
        zookeeper: ZooKeeperServer, tmp_path: Path, certificates: Path) -> None:
    running = Cluster(zookeeper, tmp_path, "inter_broker",
                      config=inter_broker_config(certificates, "broker"))
    try:
        cluster = running.start()
        create_topic(cluster.bootstrap, "replicated", replication_factor=3)
        cluster.wait_for_isr("replicated", {0, 1, 2})
        records = numbered(100)
        acked = produce_confluent(cluster.bootstrap, "replicated", records, acks="all")
        assert len(acked) == 100
        assert watermarks(cluster.bootstrap, "replicated")[1] == 100  # every ISR member has all
        with zk_client(cluster) as zk:
            registered = json.loads(zk.get("/brokers/ids/1")[0])
            assert registered["listener_security_protocol_map"] == {
                "CLIENT": "PLAINTEXT", "REPLICATION": "SASL_SSL"}
            assert registered["endpoints"][1] == \
                f"REPLICATION://{cluster.brokers[1].listeners['REPLICATION']}"

        rogue = cluster.brokers[2]  # logs in as a principal without CLUSTER_ACTION
        rogue.stop()
        rogue.config.update(inter_broker_config(certificates, "rogue"))
        rogue.start()
        cluster.wait_for_isr("replicated", {0, 1})
        produce_confluent(cluster.bootstrap, "replicated", numbered(10), acks="all")
        wait_until(lambda: "needs CLUSTER_ACTION" in rogue.log_file.read_text(),
                   message="the refused fetch logged by broker 2")
        assert set(cluster.partition("replicated").isrs) == {0, 1}
        assert rogue.running
        assert tool("acls", cluster.brokers[0], "add", "--allow-principal", "User:rogue",
                    "--operation", "ClusterAction", "--cluster")[0] == 0
        cluster.wait_for_isr("replicated", {0, 1, 2})  # the ACL is what it lacked
        assert "rogue-secret" not in rogue.log_file.read_text()
    finally:
        running.stop()


@pytest.mark.parametrize(("change", "message"), [
    ({"security.inter.broker.protocol": "SASL_SSL"},
     "only one of inter.broker.listener.name and security.inter.broker.protocol"),
    ({"inter.broker.listener.name": "REPLICATON"},
     "'REPLICATON' for broker config inter.broker.listener.name: not a listener"),
    ({"sasl.mechanism.inter.broker.protocol": "GSSAPI"},
     "'GSSAPI' for broker config sasl.mechanism.inter.broker.protocol"),
    ({"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"},
     "SCRAM-SHA-256 is not in the sasl.enabled.mechanisms of the inter-broker listener"),
    ({"listener.name.replication.plain.sasl.jaas.config":
      "org.apache.kafka.common.security.plain.PlainLoginModule required user_a=\"s\";"},
     "listener.name.replication.plain.sasl.jaas.config needs username"),
])
def test_inter_broker_settings_are_checked_at_start_up(
        certificates: Path, change: dict[str, str], message: str) -> None:
    props = {**inter_broker_config(certificates, "broker"), **change}
    protocols = {"CLIENT": "PLAINTEXT", "REPLICATION": "SASL_SSL"}
    with pytest.raises(InvalidConfigError, match=re.escape(message)) as refused:
        InterBrokerSecurity.load(props, protocols)
    assert "secret" not in str(refused.value)


def test_the_inter_broker_listener_defaults_as_in_kafka(certificates: Path) -> None:
    props = inter_broker_config(certificates, "broker")
    protocols = {"CLIENT": "PLAINTEXT", "REPLICATION": "SASL_SSL"}
    loaded = InterBrokerSecurity.load(props, protocols)
    assert (loaded.listener, loaded.mechanism, loaded.username) == \
        ("REPLICATION", "PLAIN", "broker")
    assert "broker-secret" not in repr(loaded)
    del props["inter.broker.listener.name"]
    assert inter_broker_listener({**props, "security.inter.broker.protocol": "REPLICATION"},
                                 protocols) == "REPLICATION"
    assert inter_broker_listener(props, {"PLAINTEXT": "PLAINTEXT", "B": "SSL"}) == "PLAINTEXT"
    assert inter_broker_listener(props, protocols) == "CLIENT"  # none named PLAINTEXT: first


class Heard:
    """A ``SecurityListener`` that remembers what it heard last."""

    def __init__(self) -> None:
        self.users_heard: dict[str, dict[str, str]] = {}
        self.acls_heard: dict[tuple[str, str, str], list[dict[str, str]]] = {}

    def user(self, name: str, config: dict[str, str]) -> None:
        self.users_heard[name] = config

    def acls(self, resource: tuple[str, str, str], entries: list[dict[str, str]]) -> None:
        self.acls_heard[resource] = entries


def test_change_notifications_reach_other_stores_and_expire(
        zookeeper: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two brokers' stores over one ZooKeeper: what one writes the other hears through the
    notification; a notification past its expiry is deleted by the next reader."""
    root = KazooClient(hosts=zookeeper.connect)
    root.start(timeout=TIMEOUT)
    root.ensure_path("/notifications")
    root.stop()
    root.close()
    clients = [KazooClient(hosts=f"{zookeeper.connect}/notifications") for _ in range(2)]
    for client in clients:
        client.start(timeout=TIMEOUT)
    try:
        heard = [Heard(), Heard()]
        writer, reader = (SecurityStore(c, h) for c, h in zip(clients, heard, strict=True))
        writer.start()
        reader.start()
        writer.alter_user("bob smith", lambda config: {**config, "producer_byte_rate": "1"})
        wait_until(lambda: heard[1].users_heard.get("bob smith") == {"producer_byte_rate": "1"},
                   message="the other store hears the user")
        assert clients[0].exists("/config/users/bob%20smith") is not None
        monkeypatch.setattr(config_changes, "NOTIFICATION_EXPIRY_MS", -1)
        monkeypatch.setattr(config_changes, "PURGE_INTERVAL_MS", -1)
        entry = {"principal": "User:bob", "permissionType": "Allow", "operation": "Read",
                 "host": "*"}
        writer.alter_acls(("PREFIXED", "Group", "g"), lambda entries: [*entries, entry])
        wait_until(lambda: heard[1].acls_heard.get(("PREFIXED", "Group", "g")) == [entry],
                   message="the other store hears the ACL")
        writer.alter_user("bob smith", lambda config: {})
        wait_until(lambda: heard[1].users_heard.get("bob smith") == {},
                   message="the other store hears the change")
        for path in ("/config/changes", "/kafka-acl-extended-changes"):
            wait_until(lambda path=path: clients[0].get_children(path) == [],
                       message=f"expired notifications under {path} deleted")
        writer.close()
        reader.close()
    finally:
        for client in clients:
            client.stop()
            client.close()


def test_brokers_replicate_with_scram_credentials_added_in_zookeeper_first(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """The brokers' own SCRAM user, made with ``sparklog users add --zookeeper`` before any
    broker runs (as ``kafka-configs.sh --zookeeper``), is what they replicate with."""
    scram = "SCRAM-SHA-512"
    running = Cluster(zookeeper, tmp_path, "scram_inter_broker", config={
        "listeners": "CLIENT://127.0.0.1:0,REPLICATION://127.0.0.1:0",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:SASL_PLAINTEXT",
        "inter.broker.listener.name": "REPLICATION",
        "listener.name.replication.sasl.enabled.mechanisms": scram,
        "sasl.mechanism.inter.broker.protocol": scram,
        f"listener.name.replication.{scram.lower()}.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="broker" password="broker-secret";',
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:broker;User:ANONYMOUS",
    })
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert sparklog_main(["users", "add", "broker", "--password", "broker-secret",
                              "--mechanism", scram, "--zookeeper", running.connect]) == 0
        assert sparklog_main(["users", "list", "--zookeeper", running.connect]) == 0
    assert "user-principal 'broker' are SCRAM-SHA-512=iterations=8192" in out.getvalue()
    try:
        cluster = running.start()
        create_topic(cluster.bootstrap, "scrammed", replication_factor=3)
        cluster.wait_for_isr("scrammed", {0, 1, 2})
        assert len(produce_confluent(cluster.bootstrap, "scrammed", numbered(10),
                                     acks="all")) == 10
    finally:
        running.stop()
