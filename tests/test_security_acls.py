"""ACLs (issue 15): with ``authorizer.class.name`` set, produce, fetch, group join, offset
commit, topic create/delete and config changes are refused without the ACL (Kafka's error
codes) and allowed with it; prefixed patterns; deny over allow; super users;
``allow.everyone.if.no.acl.found``; Metadata lists only describable topics with Kafka's
authorized-operations bit fields; the mutual TLS principal; ``sparklog acls``; ElectLeaders
needs ALTER on the CLUSTER, DescribeLogDirs DESCRIBE; USER resource bindings (ACLs v3);
DescribeCluster's cluster operations and ListConfigResources' DESCRIBE_CONFIGS."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_fixtures import (
    CLIENT_ID,
    TIMEOUT,
    FetchResult,
    consume_confluent,
    kp_request,
    kp_response,
    raw_fetch,
    unique_topic,
    wait_until,
)
from confluent_kafka import Consumer, ElectionType, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kafka import KafkaAdminClient
from kafka import errors as KpErrors
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from security_support import certificates, listeners_config, sasl_raw, security

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.security.acls import Operation
from sparklog.cli import main as sparklog_main
from sparklog.errors import ErrorCode, InvalidConfigError
from sparklog.protocol.versions import ApiKey

__all__ = ["certificates"]

AUTHORIZED = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
              "super.users": "User:admin"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, certificates: Path
            ) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path_factory.mktemp("acls") / "data",
                        listeners_config(certificates, **AUTHORIZED)) as broker:
        yield broker


def _sasl(broker: EmbeddedBroker) -> str:
    return f"127.0.0.1:{broker.listeners['SASL_PLAINTEXT']}"


def as_user(user: str, certs: Path) -> dict[str, Any]:
    return security("confluent", "SASL_PLAINTEXT", certs, user=user)


def acls(broker: EmbeddedBroker, certs: Path, *argv: str) -> tuple[int, str]:
    """``sparklog acls ARGV`` as the super user ``admin``: exit code and stdout."""
    settings = [f"{k}={v}" for k, v in as_user("admin", certs).items()]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = sparklog_main(["acls", *argv, "--bootstrap-server", _sasl(broker),
                              "-X", *settings])
    return code, out.getvalue()


def _admin(broker: EmbeddedBroker, certs: Path, user: str = "admin") -> AdminClient:
    return AdminClient({"bootstrap.servers": _sasl(broker), **as_user(user, certs)})


def _topic(broker: EmbeddedBroker, certs: Path, hint: str) -> str:
    name = unique_topic(hint)
    admin = _admin(broker, certs)  # referenced: its futures fail once it is freed
    admin.create_topics([NewTopic(name, 1)])[name].result(TIMEOUT)
    return name


def produce_error(broker: EmbeddedBroker, certs: Path, user: str, topic: str) -> int | None:
    """The error code of producing one record as ``user`` (None: acknowledged)."""
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": _sasl(broker), "message.timeout.ms": 5000,
                         "enable.idempotence": False, **as_user(user, certs)})
    producer.produce(topic, b"v", on_delivery=lambda err, _: errors.append(err))
    producer.flush(TIMEOUT)
    return errors[0].code() if errors and errors[0] is not None else None


def fetch_error(broker: EmbeddedBroker, user: str, topic: str) -> FetchResult:
    """One Fetch of ``topic`` as ``user`` on a raw SASL connection (no group involved)."""
    with sasl_raw(_sasl(broker), user) as conn:
        return raw_fetch(conn, topic, 0, 0)


def test_produce_is_refused_without_write_and_allowed_with_it(
        secured: EmbeddedBroker, certificates: Path) -> None:
    topic = _topic(secured, certificates, "acl-produce")
    assert produce_error(secured, certificates, "alice", topic) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert acls(secured, certificates, "add", "--producer", "--allow-principal", "User:alice",
                "--topic", topic)[0] == 0
    assert produce_error(secured, certificates, "alice", topic) is None
    assert produce_error(secured, certificates, "bob", topic) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_fetch_is_refused_without_read_and_allowed_with_it(
        secured: EmbeddedBroker, certificates: Path) -> None:
    topic = _topic(secured, certificates, "acl-fetch")
    assert produce_error(secured, certificates, "admin", topic) is None
    refused = fetch_error(secured, "alice", topic)
    assert refused == (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -1, -1, b"")  # nothing leaks
    acls(secured, certificates, "add", "--allow-principal", "User:alice", "--operation", "Read",
         "--topic", topic)
    allowed = fetch_error(secured, "alice", topic)
    assert allowed.error_code == ErrorCode.NONE and allowed.high_watermark == 1
    assert allowed.records


def test_group_join_and_offset_commit_need_read_on_the_group(
        secured: EmbeddedBroker, certificates: Path) -> None:
    topic, group = _topic(secured, certificates, "acl-group"), unique_topic("group")
    produce_error(secured, certificates, "admin", topic)
    acls(secured, certificates, "add", "--allow-principal", "User:alice", "--operation", "Read",
         "--topic", topic)
    errors: list[KafkaError] = []
    consumer = Consumer({"bootstrap.servers": _sasl(secured), "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "error_cb": errors.append, **as_user("alice", certificates)})
    try:
        consumer.subscribe([topic])

        def refused() -> bool:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error():
                errors.append(msg.error())
            return any(e.code() == KafkaError.GROUP_AUTHORIZATION_FAILED for e in errors)

        wait_until(refused, message="GROUP_AUTHORIZATION_FAILED")
    finally:
        consumer.close()
    acls(secured, certificates, "add", "--consumer", "--allow-principal", "User:alice",
         "--topic", topic, "--group", group)
    consumer = Consumer({"bootstrap.servers": _sasl(secured), "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         **as_user("alice", certificates)})
    try:
        consumer.subscribe([topic])
        msg = None
        for _ in range(80):
            msg = consumer.poll(0.25)
            if msg is not None:
                break
        assert msg is not None and msg.error() is None
        committed = consumer.commit(message=msg, asynchronous=False)
        assert committed[0].error is None and committed[0].offset == 1
    finally:
        consumer.close()


def test_offset_commit_errors_are_kafkas(secured: EmbeddedBroker, certificates: Path) -> None:
    topic, group = _topic(secured, certificates, "acl-commit"), unique_topic("commit")
    request = kp_request(ApiKey.OFFSET_COMMIT)
    entry = request.OffsetCommitRequestTopic
    commit = request(
        version=2, group_id=group, generation_id_or_member_epoch=-1, member_id="",
        retention_time_ms=-1, topics=[entry(name=topic, partitions=[
            entry.OffsetCommitRequestPartition(partition_index=0, committed_offset=0,
                                               committed_metadata="")])])

    def code() -> int:
        with sasl_raw(_sasl(secured), "bob") as conn:
            answer = conn.call(commit, kp_response(ApiKey.OFFSET_COMMIT))
        return answer.topics[0].partitions[0].error_code

    assert code() == ErrorCode.GROUP_AUTHORIZATION_FAILED
    acls(secured, certificates, "add", "--allow-principal", "User:bob", "--operation", "Read",
         "--group", group)
    assert code() == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    acls(secured, certificates, "add", "--allow-principal", "User:bob", "--operation", "Read",
         "--topic", topic)
    assert code() == ErrorCode.NONE


def test_offset_delete_needs_delete_on_the_group_and_read_on_the_topic(
        secured: EmbeddedBroker, certificates: Path) -> None:
    topic, group = _topic(secured, certificates, "acl-offset-delete"), unique_topic("del")
    commit = kp_request(ApiKey.OFFSET_COMMIT)
    entry = commit.OffsetCommitRequestTopic
    with sasl_raw(_sasl(secured), "admin") as conn:
        committed = conn.call(commit(
            version=8, group_id=group, generation_id_or_member_epoch=-1, member_id="",
            topics=[entry(name=topic, partitions=[entry.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=3, committed_metadata="")])]),
            kp_response(ApiKey.OFFSET_COMMIT))
    assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE
    request = kp_request(ApiKey.OFFSET_DELETE)
    named = request.OffsetDeleteRequestTopic
    delete = request(version=0, group_id=group, topics=[named(
        name=topic, partitions=[named.OffsetDeleteRequestPartition(partition_index=0)])])

    def codes() -> tuple[int, list[int]]:
        with sasl_raw(_sasl(secured), "bob") as conn:
            answer = conn.call(delete, kp_response(ApiKey.OFFSET_DELETE))
        return answer.error_code, [p.error_code for t in answer.topics for p in t.partitions]

    assert codes() == (ErrorCode.GROUP_AUTHORIZATION_FAILED, [])
    acls(secured, certificates, "add", "--allow-principal", "User:bob", "--operation", "Delete",
         "--group", group)
    assert codes() == (ErrorCode.NONE, [ErrorCode.TOPIC_AUTHORIZATION_FAILED])
    acls(secured, certificates, "add", "--allow-principal", "User:bob", "--operation", "Read",
         "--topic", topic)
    assert codes() == (ErrorCode.NONE, [ErrorCode.NONE])


def test_topic_create_delete_and_config_changes_need_their_acls(
        secured: EmbeddedBroker, certificates: Path) -> None:
    prefix = unique_topic("bobs") + "-"
    topic = prefix + "t"
    bob = _admin(secured, certificates, "bob")

    def failure(future: Any) -> int | None:
        try:
            future.result(TIMEOUT)
        except KafkaException as exc:
            return exc.args[0].code()
        return None

    assert failure(bob.create_topics([NewTopic(topic, 1)])[topic]) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls(secured, certificates, "add", "--allow-principal", "User:bob", "--operation", "Create",
         "--operation", "AlterConfigs", "--topic", prefix, "--resource-pattern-type", "prefixed")
    assert failure(bob.create_topics([NewTopic(topic, 1)])[topic]) is None
    change = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)])
    assert failure(bob.incremental_alter_configs([change])[change]) is None
    alice = _admin(secured, certificates, "alice")
    assert failure(alice.incremental_alter_configs([change])[change]) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert failure(bob.delete_topics([topic])[topic]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    acls(secured, certificates, "add", "--allow-principal", "User:bob", "--operation", "Delete",
         "--topic", topic)
    assert failure(bob.delete_topics([topic])[topic]) is None
    other = unique_topic("not-bobs")
    assert failure(bob.create_topics([NewTopic(other, 1)])[other]) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_create_topics_v7_shows_configs_only_to_who_may_describe_them_and_delete_by_id_hides_names(
        secured: EmbeddedBroker, certificates: Path) -> None:
    """CreateTopics v5+ leave the configs out (TOPIC_CONFIG_ERROR: TOPIC_AUTHORIZATION_FAILED)
    without DESCRIBE_CONFIGS on the topic; DeleteTopics v6 by id without DELETE is
    TOPIC_AUTHORIZATION_FAILED without the topic's name, as Kafka answers them."""
    topic = unique_topic("alices")
    acls(secured, certificates, "add", "--allow-principal", "User:alice", "--operation",
         "Create", "--topic", topic)
    create = kp_request(ApiKey.CREATE_TOPICS)
    delete = kp_request(ApiKey.DELETE_TOPICS)

    def created(user: str, name: str) -> Any:
        with sasl_raw(_sasl(secured), user) as conn:
            (answer,) = conn.call(create(
                version=7, timeout_ms=10000, validate_only=False, topics=[create.CreatableTopic(
                    name=name, num_partitions=1, replication_factor=-1, assignments=[],
                    configs=[])]), kp_response(ApiKey.CREATE_TOPICS)).topics
        return answer

    answer = created("alice", topic)
    assert (answer.error_code, answer.topic_config_error_code, answer.configs) == \
        (ErrorCode.NONE, ErrorCode.TOPIC_AUTHORIZATION_FAILED, [])
    assert answer.num_partitions == 1 and answer.topic_id.int != 0
    with sasl_raw(_sasl(secured), "alice") as conn:
        (refused,) = conn.call(delete(version=6, timeout_ms=10000, topics=[
            delete.DeleteTopicState(name=None, topic_id=answer.topic_id)]),
            kp_response(ApiKey.DELETE_TOPICS)).responses
    assert (refused.error_code, refused.name, refused.topic_id) == \
        (ErrorCode.TOPIC_AUTHORIZATION_FAILED, None, answer.topic_id)
    described = created("admin", unique_topic("admins"))
    assert described.topic_config_error_code == ErrorCode.NONE and described.configs


def test_prefixed_patterns_and_deny_wins_over_allow(secured: EmbeddedBroker,
                                                    certificates: Path) -> None:
    prefix = unique_topic("orders") + "-"
    eu, us = _topic(secured, certificates, prefix + "eu"), _topic(secured, certificates,
                                                                  prefix + "us")
    acls(secured, certificates, "add", "--allow-principal", "User:alice", "--operation", "All",
         "--topic", prefix, "--resource-pattern-type", "prefixed")
    acls(secured, certificates, "add", "--deny-principal", "User:alice", "--operation", "Write",
         "--topic", us)
    assert produce_error(secured, certificates, "alice", eu) is None
    assert produce_error(secured, certificates, "alice", us) == \
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert fetch_error(secured, "alice", us).error_code == ErrorCode.NONE  # only Write denied


def _metadata(secured: EmbeddedBroker, user: str, topics: list[str] | None = None) -> Any:
    request = kp_request(ApiKey.METADATA)(
        version=8, topics=None if topics is None else [{"name": t} for t in topics],
        allow_auto_topic_creation=False, include_cluster_authorized_operations=True,
        include_topic_authorized_operations=True)
    with sasl_raw(_sasl(secured), user) as conn:
        return conn.call(request, kp_response(ApiKey.METADATA))


def test_metadata_lists_only_describable_topics_with_their_operations(
        secured: EmbeddedBroker, certificates: Path) -> None:
    mine, hidden = _topic(secured, certificates, "carols"), _topic(secured, certificates, "x")
    acls(secured, certificates, "add", "--allow-principal", "User:bob", "--operation", "Read",
         "--topic", mine)
    listed = {t.name: t for t in _metadata(secured, "bob").topics}
    assert mine in listed and hidden not in listed
    # kafka-python decodes Kafka's bit field into the set of operations
    assert listed[mine].authorized_operations == {Operation.READ, Operation.DESCRIBE}
    named = _metadata(secured, "bob", [hidden]).topics[0]
    assert named.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    everything = _metadata(secured, "admin")
    assert {mine, hidden} <= {t.name for t in everything.topics}
    assert Operation.ALTER in everything.authorized_operations  # the cluster's, for admin


def test_the_mutual_tls_principal_is_the_certificate_subject(
        secured: EmbeddedBroker, certificates: Path) -> None:
    topic = _topic(secured, certificates, "mtls")
    produce_error(secured, certificates, "admin", topic)
    address = f"127.0.0.1:{secured.listeners['MTLS']}"
    settings = security("confluent", "MTLS", certificates, certificate="alice")
    with pytest.raises(KafkaException):
        consume_confluent(address, topic, 1, timeout=3, **settings)
    acls(secured, certificates, "add", "--allow-principal", "User:CN=alice", "--operation",
         "Read", "--topic", topic, "--group", CLIENT_ID)  # the consumer's group.id
    assert len(consume_confluent(address, topic, 1, **settings)) == 1


def test_sparklog_acls_lists_and_removes(secured: EmbeddedBroker, certificates: Path) -> None:
    topic = _topic(secured, certificates, "listed")
    code, out = acls(secured, certificates, "add", "--allow-principal", "User:bob",
                     "--operation", "Read", "--operation", "Describe", "--topic", topic)
    assert code == 0
    pattern = f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)"
    assert f"Adding ACLs for resource `{pattern}`" in out
    code, out = acls(secured, certificates, "list", "--topic", topic)
    assert f"Current ACLs for resource `{pattern}`" in out
    assert "(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)" in out
    assert "operation=DESCRIBE" in out
    assert acls(secured, certificates, "remove", "--allow-principal", "User:bob",
                "--operation", "Read", "--topic", topic)[0] == 0
    out = acls(secured, certificates, "list", "--topic", topic)[1]
    assert "operation=READ" not in out and "operation=DESCRIBE" in out
    assert acls(secured, certificates, "add", "--topic", topic)[0] == 2  # no principal


def test_anonymous_and_the_no_acl_default(tmp_path: Path, certificates: Path) -> None:
    config = listeners_config(certificates, **AUTHORIZED)
    with EmbeddedBroker(tmp_path / "closed", config) as broker:
        assert produce_error_plain(broker, "t") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    config["allow.everyone.if.no.acl.found"] = "true"
    with EmbeddedBroker(tmp_path / "open", config) as broker:
        assert produce_error_plain(broker, "t") is None


def produce_error_plain(broker: EmbeddedBroker, topic: str) -> int | None:
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 5000})
    producer.produce(topic, b"v", on_delivery=lambda err, _: errors.append(err))
    producer.flush(TIMEOUT)
    return errors[0].code() if errors and errors[0] is not None else None


def test_acls_survive_a_restart(tmp_path: Path, certificates: Path) -> None:
    config = listeners_config(certificates, **AUTHORIZED)
    with EmbeddedBroker(tmp_path / "data", config) as broker:
        acls(broker, certificates, "add", "--allow-principal", "User:ANONYMOUS", "--operation",
             "All", "--topic", "open-", "--resource-pattern-type", "prefixed")
    with EmbeddedBroker(tmp_path / "data", config) as broker:
        assert produce_error_plain(broker, "open-t") is None


def test_an_unknown_authorizer_class_is_a_config_error() -> None:
    with pytest.raises(InvalidConfigError, match=r"authorizer\.class\.name"):
        EmbeddedBroker(Path("/nowhere"), {"authorizer.class.name": "com.example.Nope"})


def test_cluster_operations_need_their_cluster_acls(secured: EmbeddedBroker,
                                                    certificates: Path) -> None:
    """ElectLeaders needs ALTER on the CLUSTER, DescribeLogDirs DESCRIBE on it, as Kafka
    checks them."""
    topic = _topic(secured, certificates, "elect")

    def log_dirs(user: str) -> tuple[int, int]:
        """DescribeLogDirs v3 as ``user``: (top-level error, directories answered)."""
        request = kp_request(ApiKey.DESCRIBE_LOG_DIRS)(version=3, topics=None)
        with sasl_raw(_sasl(secured), user) as conn:
            answer = conn.call(request, kp_response(ApiKey.DESCRIBE_LOG_DIRS))
        return answer.error_code, len(answer.results)

    assert log_dirs("alice") == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, 0)
    assert log_dirs("admin") == (0, 1)

    def elect_error(user: str) -> int:
        admin = _admin(secured, certificates, user)
        future = admin.elect_leaders(ElectionType.PREFERRED, [CkTopicPartition(topic, 0)])
        try:
            (error,) = future.result(TIMEOUT).values()
        except KafkaException as exc:
            return int(exc.args[0].code())
        return int(error.code()) if error is not None else 0

    assert elect_error("alice") == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert elect_error("admin") == KafkaError.ELECTION_NOT_NEEDED  # a single node leads
    grant = ("--allow-principal", "User:alice", "--operation", "Alter", "--cluster")
    acls(secured, certificates, "add", *grant)
    try:
        assert elect_error("alice") == KafkaError.ELECTION_NOT_NEEDED
        assert log_dirs("alice") == (0, 1)  # ALTER implies DESCRIBE, as in Kafka
    finally:
        acls(secured, certificates, "remove", *grant, "--force")


def _kp_admin(broker: EmbeddedBroker, certs: Path, user: str) -> KafkaAdminClient:
    """kafka-python 3's admin client as ``user`` (``api_version`` unset: its newest
    versions, ACLs v3)."""
    return KafkaAdminClient(bootstrap_servers=_sasl(broker), request_timeout_ms=10_000,
                            **security("kafka-python", "SASL_PLAINTEXT", certs, user=user))


def test_user_resource_acls_of_version_3(secured: EmbeddedBroker, certificates: Path) -> None:
    """ACLs v3 add the USER resource type (KIP-373's token bindings): kafka-python creates,
    describes and deletes one (it sends them only at v3); a raw v3 DescribeAcls answers the
    type as 7; other resources' bindings are not touched."""
    binding = ACL("User:alice", "*", ACLOperation.CREATE_TOKENS, ACLPermissionType.ALLOW,
                  ResourcePattern(ResourceType.USER, "bob"))
    users = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                      ResourcePatternFilter(ResourceType.USER, None, ACLResourcePatternType.ANY))
    client = _kp_admin(secured, certificates, "admin")
    try:
        created = client.create_acls([binding])
        assert created["succeeded"] == [binding] and not created["failed"]
        described, error = client.describe_acls(users)
        assert error is KpErrors.NoError
        assert [(a.principal, a.operation, a.resource_pattern.resource_name)
                for a in described] == [("User:alice", ACLOperation.CREATE_TOKENS, "bob")]
        request_class = kp_request(ApiKey.DESCRIBE_ACLS)
        with sasl_raw(_sasl(secured), "admin") as conn:
            raw = conn.call(request_class(
                version=3, resource_type_filter=7, resource_name_filter=None,
                pattern_type_filter=1, principal_filter=None, host_filter=None, operation=1,
                permission_type=1), kp_response(ApiKey.DESCRIBE_ACLS))
        assert [(r.resource_type, r.resource_name) for r in raw.resources] == [(7, "bob")]
        ((_, deleted, error),) = client.delete_acls([users])
        assert error is KpErrors.NoError and [a.resource_pattern.resource_name
                                               for a in deleted] == ["bob"]
        assert client.describe_acls(users)[0] == []
    finally:
        client.close()


def test_describe_cluster_and_list_config_resources_need_their_cluster_acls(
        secured: EmbeddedBroker, certificates: Path) -> None:
    """As Kafka: DescribeCluster needs no ACL, but its cluster operations are 0 without
    DESCRIBE on the CLUSTER; ListConfigResources needs DESCRIBE_CONFIGS on the CLUSTER."""
    def operations(user: str) -> set[str]:
        """The cluster's operations kafka-python's describe_cluster (DescribeCluster v2)
        reports to ``user`` (librdkafka's describe_cluster sends Metadata instead)."""
        client = _kp_admin(secured, certificates, user)
        try:
            described = client.describe_cluster()
        finally:
            client.close()
        assert [b["broker_id"] for b in described["brokers"]] == [0]
        return {getattr(op, "name", op) for op in described["authorized_operations"] or ()}

    def listed(user: str) -> dict[str, list[str]] | str:
        client = _kp_admin(secured, certificates, user)
        try:
            return client.list_config_resources(["BROKER"])
        except KpErrors.KafkaError as exc:
            return type(exc).__name__
        finally:
            client.close()

    assert operations("alice") == set()
    assert {"DESCRIBE", "ALTER", "CLUSTER_ACTION"} <= operations("admin")
    assert listed("alice") == "ClusterAuthorizationFailedError"
    assert listed("admin") == {"broker": ["0"]}
    grant = ("--allow-principal", "User:alice", "--operation", "DescribeConfigs", "--cluster")
    acls(secured, certificates, "add", *grant)
    try:
        assert listed("alice") == {"broker": ["0"]}
        assert operations("alice") == set()  # DESCRIBE_CONFIGS does not imply DESCRIBE
        # Metadata v8-v10 answer the cluster's operations by the same rule
        assert _metadata(secured, "alice").authorized_operations == set()
    finally:
        acls(secured, certificates, "remove", *grant, "--force")
