"""Every API refuses the unauthorised (issue 31): one case per API the broker serves, derived
from the registry so a new API cannot be left out (``test_every_served_api_has_a_case``), each
sent on a raw SASL connection (kafka-python's protocol classes, an encoder independent of the
broker's) by ``alice``, who holds no ACL, and by ``bob``, granted exactly the ACLs Kafka's
``KafkaApis`` checks for that request. Alice gets Kafka's authorization error
(TOPIC/GROUP/CLUSTER/TRANSACTIONAL_ID_AUTHORIZATION_FAILED), or for the listing APIs does not
see the resource; bob gets no authorization error (or sees it). Every case names its own
topic, group and transactional id, so one case's grants never serve another.

Plus TLS: a client certificate from a CA the broker does not trust, and an expired one from
the trusted CA, are refused at the handshake on the mutual-TLS listener."""

from __future__ import annotations

import datetime
import socket
import ssl
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from broker_fixtures import (
    kp_build,
    kp_request,
    kp_response,
    one_batch,
    request_frame,
    unique_topic,
)
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from kafka.protocol.api_message import ApiMessage
from kafka.record.default_records import DefaultRecordBatchBuilder
from security_support import certificates, listeners_config, sasl_raw, security

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.registry import load_handlers, served
from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.cli import main as sparklog_main
from sparklog.errors import ErrorCode
from sparklog.protocol.versions import ApiKey

__all__ = ["certificates"]

load_handlers()

TOPIC, GROUP, TXN, CLUSTER = (ResourceType.TOPIC, ResourceType.GROUP,
                              ResourceType.TRANSACTIONAL_ID, ResourceType.CLUSTER)
AUTHORIZATION_ERRORS = {ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
HIDDEN = -1
"""A case's ``refused`` for the listing APIs: Kafka leaves out what the principal may not
describe instead of answering an error."""

NOT_AUTHORIZED = {
    ApiKey.API_VERSIONS: "answered before authentication, to everyone (KIP-511)",
    ApiKey.SASL_HANDSHAKE: "authentication itself",
    ApiKey.SASL_AUTHENTICATE: "authentication itself",
    ApiKey.DESCRIBE_CLUSTER: "answered to everyone as Kafka does; only its cluster authorized "
                             "operations depend on the ACLs (test_security_acls)",
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: "KIP-714: Kafka checks no ACL for a client's metrics",
    ApiKey.PUSH_TELEMETRY: "KIP-714: Kafka checks no ACL for a client's metrics",
}
"""APIs no ACL guards, each with the reason."""


@dataclass(frozen=True)
class Names:
    topic: str
    group: str
    txn: str

    def of(self, resource_type: ResourceType) -> str:
        return {TOPIC: self.topic, GROUP: self.group, TXN: self.txn,
                CLUSTER: "kafka-cluster"}[resource_type]


@dataclass(frozen=True)
class Case:
    """``fields(names)``: the request at ``version`` as nested dicts; ``grants``: what bob
    needs; ``refused``: alice's error code (HIDDEN: ``hidden`` names what she may not see);
    ``setup``: requests the super user sends first (a group or transaction to list)."""
    api_key: int
    version: int
    fields: Callable[[Names], dict[str, Any]]
    grants: tuple[tuple[ResourceType, Operation], ...]
    refused: int
    hidden: ResourceType = TOPIC
    setup: tuple[tuple[int, int, Callable[[Names], dict[str, Any]]], ...] = ()
    creates_topic: bool = True
    variant: str = ""

    @property
    def id(self) -> str:
        return ApiKey(self.api_key).name + (f"-{self.variant}" if self.variant else "")


def _partition_offsets(names: Names) -> list[dict[str, Any]]:
    return [{"name": names.topic, "partitions": [{
        "partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1,
        "committed_metadata": ""}]}]


def _offset_commit(names: Names) -> dict[str, Any]:
    return {"group_id": names.group, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "topics": _partition_offsets(names)}


def _init_producer_id(names: Names) -> dict[str, Any]:
    return {"transactional_id": names.txn, "transaction_timeout_ms": 60_000,
            "producer_id": -1, "producer_epoch": -1}


def _produce(names: Names, batch: bytes, transactional_id: str | None = None) -> dict[str, Any]:
    return {"transactional_id": transactional_id, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": names.topic,
                            "partition_data": [{"index": 0, "records": batch}]}]}


def _transactional_batch() -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True,
                                        producer_id=1, producer_epoch=0, base_sequence=0,
                                        batch_size=1 << 20)
    builder.append(0, timestamp=None, key=None, value=b"v", headers=[])
    return bytes(builder.build())


def _fetch(names: Names, replica_id: int) -> dict[str, Any]:
    """Fetch v12 of partition 0 from offset 0, as a consumer (-1) or a follower."""
    return {"replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
            "forgotten_topics_data": [], "topics": [{"topic": names.topic, "partitions": [{
                "partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                "log_start_offset": -1, "current_leader_epoch": -1}]}]}


def _txn(names: Names, **extra: Any) -> dict[str, Any]:
    return {"transactional_id": names.txn, "producer_id": 1, "producer_epoch": 0, **extra}


def _topic_partitions(key: str, partitions: str) -> Callable[[Names], list[dict[str, Any]]]:
    return lambda names: [{key: names.topic, partitions: [0]}]


def _config_resource(names: Names, **extra: Any) -> dict[str, Any]:
    return {"resource_type": 2, "resource_name": names.topic, **extra}


ACL_FILTER = {"resource_type_filter": 2, "pattern_type_filter": 3, "principal_filter": None,
              "host_filter": None, "operation": 1, "permission_type": 1}

CASES = [
    Case(ApiKey.PRODUCE, 12, lambda n: _produce(n, one_batch(b"v")), ((TOPIC, Operation.WRITE),),
         ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    Case(ApiKey.PRODUCE, 12, lambda n: _produce(n, _transactional_batch(), n.txn),
         ((TOPIC, Operation.WRITE), (TXN, Operation.WRITE)),
         ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, variant="transactional"),
    Case(ApiKey.PRODUCE, 3, lambda n: _produce(n, one_batch(b"v")),
         ((TOPIC, Operation.WRITE),), ErrorCode.TOPIC_AUTHORIZATION_FAILED, variant="v3"),
    Case(ApiKey.FETCH, 12, lambda n: _fetch(n, -1),
         ((TOPIC, Operation.READ),), ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    Case(ApiKey.FETCH, 12, lambda n: _fetch(n, 7),
         ((CLUSTER, Operation.CLUSTER_ACTION),), ErrorCode.TOPIC_AUTHORIZATION_FAILED,
         variant="follower"),
    Case(ApiKey.LIST_OFFSETS, 9, lambda n: {
        "replica_id": -1, "isolation_level": 0, "topics": [{"name": n.topic, "partitions": [{
            "partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]},
         ((TOPIC, Operation.DESCRIBE),), ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    Case(ApiKey.METADATA, 12, lambda n: {
        "topics": [{"name": n.topic, "topic_id": None}], "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False},
         ((TOPIC, Operation.DESCRIBE),), ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    Case(ApiKey.METADATA, 12, lambda n: {
        "topics": [{"name": n.topic, "topic_id": None}], "allow_auto_topic_creation": True,
        "include_topic_authorized_operations": False},
         ((TOPIC, Operation.DESCRIBE), (TOPIC, Operation.CREATE)),
         ErrorCode.TOPIC_AUTHORIZATION_FAILED, creates_topic=False, variant="auto-create"),
    Case(ApiKey.OFFSET_COMMIT, 9, _offset_commit,
         ((GROUP, Operation.READ), (TOPIC, Operation.READ)), ErrorCode.GROUP_AUTHORIZATION_FAILED),
    Case(ApiKey.OFFSET_FETCH, 8, lambda n: {
        "require_stable": False, "groups": [{"group_id": n.group, "topics": [
            {"name": n.topic, "partition_indexes": [0]}]}]},
         ((GROUP, Operation.DESCRIBE), (TOPIC, Operation.DESCRIBE)),
         ErrorCode.GROUP_AUTHORIZATION_FAILED),
    Case(ApiKey.OFFSET_FETCH, 7, lambda n: {
        "group_id": n.group, "topics": [{"name": n.topic, "partition_indexes": [0]}],
        "require_stable": False},
         ((GROUP, Operation.DESCRIBE), (TOPIC, Operation.DESCRIBE)),
         ErrorCode.GROUP_AUTHORIZATION_FAILED, variant="v7"),
    Case(ApiKey.FIND_COORDINATOR, 3, lambda n: {"key": n.group, "key_type": 0},
         ((GROUP, Operation.DESCRIBE),), ErrorCode.GROUP_AUTHORIZATION_FAILED, variant="v3"),
    Case(ApiKey.FIND_COORDINATOR, 4, lambda n: {"key_type": 0, "coordinator_keys": [n.group]},
         ((GROUP, Operation.DESCRIBE),), ErrorCode.GROUP_AUTHORIZATION_FAILED),
    Case(ApiKey.FIND_COORDINATOR, 4, lambda n: {"key_type": 1, "coordinator_keys": [n.txn]},
         ((TXN, Operation.DESCRIBE),), ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
         variant="transaction"),
    Case(ApiKey.JOIN_GROUP, 9, lambda n: {
        "group_id": n.group, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}], "reason": None},
         ((GROUP, Operation.READ),), ErrorCode.GROUP_AUTHORIZATION_FAILED),
    Case(ApiKey.HEARTBEAT, 4, lambda n: {
        "group_id": n.group, "generation_id": 0, "member_id": "m", "group_instance_id": None},
         ((GROUP, Operation.READ),), ErrorCode.GROUP_AUTHORIZATION_FAILED),
    Case(ApiKey.LEAVE_GROUP, 5, lambda n: {
        "group_id": n.group, "members": [{"member_id": "m", "group_instance_id": None,
                                          "reason": None}]},
         ((GROUP, Operation.READ),), ErrorCode.GROUP_AUTHORIZATION_FAILED),
    Case(ApiKey.SYNC_GROUP, 5, lambda n: {
        "group_id": n.group, "generation_id": 0, "member_id": "m", "group_instance_id": None,
        "protocol_type": "consumer", "protocol_name": "range", "assignments": []},
         ((GROUP, Operation.READ),), ErrorCode.GROUP_AUTHORIZATION_FAILED),
    Case(ApiKey.DESCRIBE_GROUPS, 5, lambda n: {
        "groups": [n.group], "include_authorized_operations": False},
         ((GROUP, Operation.DESCRIBE),), ErrorCode.GROUP_AUTHORIZATION_FAILED),
    Case(ApiKey.LIST_GROUPS, 4, lambda n: {"states_filter": []},
         ((GROUP, Operation.DESCRIBE),), HIDDEN, hidden=GROUP,
         setup=((ApiKey.OFFSET_COMMIT, 9, _offset_commit),)),
    Case(ApiKey.CREATE_TOPICS, 7, lambda n: {
        "topics": [{"name": n.topic, "num_partitions": 1, "replication_factor": 1,
                    "assignments": [], "configs": []}],
        "timeout_ms": 5000, "validate_only": True},
         ((TOPIC, Operation.CREATE), (TOPIC, Operation.DESCRIBE_CONFIGS)),
         ErrorCode.TOPIC_AUTHORIZATION_FAILED, creates_topic=False),
    Case(ApiKey.DELETE_TOPICS, 6, lambda n: {
        "topics": [{"name": n.topic, "topic_id": uuid.UUID(int=0)}], "timeout_ms": 5000},
         ((TOPIC, Operation.DELETE),), ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    Case(ApiKey.DELETE_RECORDS, 2, lambda n: {
        "topics": [{"name": n.topic, "partitions": [{"partition_index": 0, "offset": 0}]}],
        "timeout_ms": 5000},
         ((TOPIC, Operation.DELETE),), ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    Case(ApiKey.INIT_PRODUCER_ID, 5, _init_producer_id,
         ((TXN, Operation.WRITE),), ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    Case(ApiKey.INIT_PRODUCER_ID, 5, lambda n: {**_init_producer_id(n), "transactional_id": None},
         ((TOPIC, Operation.WRITE),), ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
         variant="idempotent"),
    Case(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, lambda n: {
        "replica_id": -1, "topics": [{"topic": n.topic, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]},
         ((TOPIC, Operation.DESCRIBE),), ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    Case(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, lambda n: {
        "replica_id": 7, "topics": [{"topic": n.topic, "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]},
         ((CLUSTER, Operation.CLUSTER_ACTION),), ErrorCode.TOPIC_AUTHORIZATION_FAILED,
         variant="follower"),
    Case(ApiKey.ADD_PARTITIONS_TO_TXN, 3, lambda n: {
        f"v3_and_below_{key}": value for key, value in _txn(
            n, topics=_topic_partitions("name", "partitions")(n)).items()},
         ((TXN, Operation.WRITE), (TOPIC, Operation.WRITE)),
         ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    Case(ApiKey.ADD_OFFSETS_TO_TXN, 4, lambda n: _txn(n, group_id=n.group),
         ((TXN, Operation.WRITE), (GROUP, Operation.READ)),
         ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    Case(ApiKey.END_TXN, 4, lambda n: _txn(n, committed=False),
         ((TXN, Operation.WRITE),), ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    Case(ApiKey.WRITE_TXN_MARKERS, 1, lambda n: {"markers": [{
        "producer_id": 1, "producer_epoch": 0, "transaction_result": False,
        "coordinator_epoch": 0, "topics": _topic_partitions("name", "partition_indexes")(n)}]},
         ((CLUSTER, Operation.CLUSTER_ACTION),), ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    Case(ApiKey.TXN_OFFSET_COMMIT, 3, lambda n: _txn(
        n, group_id=n.group, generation_id=-1, member_id="", group_instance_id=None,
        topics=_partition_offsets(n)),
         ((TXN, Operation.WRITE), (GROUP, Operation.READ), (TOPIC, Operation.READ)),
         ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    Case(ApiKey.DESCRIBE_ACLS, 3, lambda n: {**ACL_FILTER, "resource_name_filter": n.topic},
         ((CLUSTER, Operation.DESCRIBE),), ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    Case(ApiKey.CREATE_ACLS, 3, lambda n: {"creations": [{
        "resource_type": 2, "resource_name": n.topic, "resource_pattern_type": 3,
        "principal": "User:carol", "host": "*", "operation": 3, "permission_type": 3}]},
         ((CLUSTER, Operation.ALTER),), ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    Case(ApiKey.DELETE_ACLS, 3, lambda n: {"filters": [
        {**ACL_FILTER, "resource_name_filter": n.topic, "principal_filter": "User:carol"}]},
         ((CLUSTER, Operation.ALTER),), ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    Case(ApiKey.DESCRIBE_CONFIGS, 4, lambda n: {
        "resources": [_config_resource(n, configuration_keys=None)],
        "include_synonyms": False, "include_documentation": False},
         ((TOPIC, Operation.DESCRIBE_CONFIGS),), ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    Case(ApiKey.DESCRIBE_CONFIGS, 4, lambda n: {
        "resources": [{"resource_type": 4, "resource_name": "", "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False},
         ((CLUSTER, Operation.DESCRIBE_CONFIGS),), ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
         variant="broker"),
    Case(ApiKey.ALTER_CONFIGS, 2, lambda n: {
        "resources": [_config_resource(n, configs=[{"name": "retention.ms",
                                                    "value": "100000"}])],
        "validate_only": True},
         ((TOPIC, Operation.ALTER_CONFIGS),), ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    Case(ApiKey.DESCRIBE_LOG_DIRS, 4, lambda n: {"topics": None},
         ((CLUSTER, Operation.DESCRIBE),), ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    Case(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, lambda n: {"dirs": [{
        "path": "/elsewhere", "topics": [{"name": n.topic, "partitions": [0]}]}]},
         ((CLUSTER, Operation.ALTER),), ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    Case(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, lambda n: {
        "group_id": n.group, "member_id": uuid.uuid4().hex, "member_epoch": 0,
        "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 30_000,
        "subscribed_topic_names": [n.topic], "subscribed_topic_regex": None,
        "server_assignor": None, "topic_partitions": []},
         ((GROUP, Operation.READ), (TOPIC, Operation.DESCRIBE)),
         ErrorCode.GROUP_AUTHORIZATION_FAILED),
    Case(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, lambda n: {
        "group_ids": [n.group], "include_authorized_operations": False},
         ((GROUP, Operation.DESCRIBE),), ErrorCode.GROUP_AUTHORIZATION_FAILED),
    Case(ApiKey.CREATE_PARTITIONS, 3, lambda n: {
        "topics": [{"name": n.topic, "count": 2, "assignments": None}], "timeout_ms": 5000,
        "validate_only": True},
         ((TOPIC, Operation.ALTER),), ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    Case(ApiKey.DELETE_GROUPS, 2, lambda n: {"groups_names": [n.group]},
         ((GROUP, Operation.DELETE),), ErrorCode.GROUP_AUTHORIZATION_FAILED),
    Case(ApiKey.ELECT_LEADERS, 2, lambda n: {
        "election_type": 0, "timeout_ms": 5000,
        "topic_partitions": _topic_partitions("topic", "partitions")(n)},
         ((CLUSTER, Operation.ALTER),), ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    Case(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, lambda n: {
        "resources": [_config_resource(n, configs=[{
            "name": "retention.ms", "config_operation": 0, "value": "100000"}])],
        "validate_only": True},
         ((TOPIC, Operation.ALTER_CONFIGS),), ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    Case(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, lambda n: {
        "resources": [{"resource_type": 4, "resource_name": "", "configs": [{
            "name": "log.cleaner.threads", "config_operation": 0, "value": "1"}]}],
        "validate_only": True},
         ((CLUSTER, Operation.ALTER_CONFIGS),), ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
         variant="broker"),
    Case(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, lambda n: {
        "timeout_ms": 5000, "topics": [{"name": n.topic, "partitions": [
            {"partition_index": 0, "replicas": None}]}]},
         ((CLUSTER, Operation.ALTER),), ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    Case(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, lambda n: {"timeout_ms": 5000, "topics": None},
         ((CLUSTER, Operation.DESCRIBE),), ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    Case(ApiKey.OFFSET_DELETE, 0, lambda n: {
        "group_id": n.group, "topics": [{"name": n.topic, "partitions": [
            {"partition_index": 0}]}]},
         ((GROUP, Operation.DELETE), (TOPIC, Operation.READ)),
         ErrorCode.GROUP_AUTHORIZATION_FAILED),
    Case(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, lambda n: {"components": [], "strict": False},
         ((CLUSTER, Operation.DESCRIBE_CONFIGS),), ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    Case(ApiKey.ALTER_CLIENT_QUOTAS, 1, lambda n: {"validate_only": True, "entries": [{
        "entity": [{"entity_type": "user", "entity_name": "carol"}],
        "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}]},
         ((CLUSTER, Operation.ALTER_CONFIGS),), ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    Case(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, lambda n: {"users": None},
         ((CLUSTER, Operation.DESCRIBE),), ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    Case(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, lambda n: {
        "deletions": [{"name": "carol", "mechanism": 1}], "upsertions": []},
         ((CLUSTER, Operation.ALTER),), ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    Case(ApiKey.DESCRIBE_PRODUCERS, 0, lambda n: {
        "topics": _topic_partitions("name", "partition_indexes")(n)},
         ((TOPIC, Operation.READ),), ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    Case(ApiKey.DESCRIBE_TRANSACTIONS, 0, lambda n: {"transactional_ids": [n.txn]},
         ((TXN, Operation.DESCRIBE),), ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    Case(ApiKey.LIST_TRANSACTIONS, 1, lambda n: {
        "state_filters": [], "producer_id_filters": [], "duration_filter": -1},
         ((TXN, Operation.DESCRIBE),), HIDDEN, hidden=TXN,
         setup=((ApiKey.INIT_PRODUCER_ID, 5, _init_producer_id),)),
    Case(ApiKey.LIST_CONFIG_RESOURCES, 1, lambda n: {"resource_types": []},
         ((CLUSTER, Operation.DESCRIBE_CONFIGS),), ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    Case(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, lambda n: {
        "topics": [{"name": n.topic}], "response_partition_limit": 100, "cursor": None},
         ((TOPIC, Operation.DESCRIBE),), ErrorCode.TOPIC_AUTHORIZATION_FAILED),
]


def test_every_served_api_has_a_case() -> None:
    """The registry is the list: a new API needs a case here or a reason in NOT_AUTHORIZED."""
    covered = {case.api_key for case in CASES}
    assert not covered & NOT_AUTHORIZED.keys()
    missing = set(served()) - covered - NOT_AUTHORIZED.keys()
    assert not missing, [ApiKey(key).name for key in sorted(missing)]
    assert all(low <= case.version <= high for case in CASES
               for low, high in [served()[case.api_key]]), "a case at a version not served"


def call(address: str, user: str, api_key: int, version: int, values: dict[str, Any]) -> Any:
    request: ApiMessage = kp_build(kp_request(api_key), version, values)
    with sasl_raw(address, user) as conn:
        return conn.call(request, kp_response(api_key)).to_dict()


def _walk(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield key, inner
            yield from _walk(inner)
    elif isinstance(value, list | tuple):
        for inner in value:
            yield from _walk(inner)


def error_codes(response: dict[str, Any]) -> set[int]:
    return {v for k, v in _walk(response) if k.endswith("error_code") and isinstance(v, int)}


def strings(response: dict[str, Any]) -> set[str]:
    return {v for _, v in _walk(response) if isinstance(v, str)}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, certificates: Path
            ) -> Iterator[EmbeddedBroker]:
    config = listeners_config(certificates, **{
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin", "transaction.state.log.replication.factor": "1",
        "offsets.topic.replication.factor": "1"})
    with EmbeddedBroker(tmp_path_factory.mktemp("acl-matrix") / "data", config) as broker:
        yield broker


def _grant(address: str, names: Names, grants: tuple[tuple[ResourceType, Operation], ...]
           ) -> None:
    creations = [{"resource_type": int(kind), "resource_name": names.of(kind),
                  "resource_pattern_type": 3, "principal": "User:bob", "host": "*",
                  "operation": int(operation), "permission_type": 3}
                 for kind, operation in grants]
    answer = call(address, "admin", ApiKey.CREATE_ACLS, 3, {"creations": creations})
    assert error_codes(answer) == {0}, answer


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_each_api_refuses_without_the_acl_and_serves_with_it(
        secured: EmbeddedBroker, certificates: Path, case: Case) -> None:
    address = f"127.0.0.1:{secured.listeners['SASL_PLAINTEXT']}"
    hint = case.id.lower().replace("_", "-")
    names = Names(unique_topic(f"m-{hint}"), f"group-{hint}-{uuid.uuid4().hex[:6]}",
                  f"txn-{hint}-{uuid.uuid4().hex[:6]}")
    if case.creates_topic:
        admin = AdminClient({"bootstrap.servers": address,
                             **security("confluent", "SASL_PLAINTEXT", certificates,
                                        user="admin")})
        admin.create_topics([NewTopic(names.topic, 1)])[names.topic].result(20)
    for api_key, version, fields in case.setup:
        assert error_codes(call(address, "admin", api_key, version, fields(names))) <= {0}
    _grant(address, names, case.grants)

    refused = call(address, "alice", case.api_key, case.version, case.fields(names))
    served_ = call(address, "bob", case.api_key, case.version, case.fields(names))
    if case.refused == HIDDEN:
        assert names.of(case.hidden) not in strings(refused), refused
        assert names.of(case.hidden) in strings(served_), served_
    else:
        assert case.refused in error_codes(refused), refused
    assert not error_codes(served_) & AUTHORIZATION_ERRORS, served_


@pytest.fixture(scope="module")
def foreign_certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second CA (one the broker does not trust) with a client ``mallory``."""
    directory = tmp_path_factory.mktemp("foreign-certs")
    assert sparklog_main(["certs", "create", "--dir", str(directory),
                          "--client", "mallory"]) == 0
    return directory


def _expired_client(certs: Path, directory: Path) -> tuple[Path, Path]:
    """A client certificate signed by the trusted CA that expired yesterday."""
    ca = x509.load_pem_x509_certificate((certs / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((certs / "ca.key").read_bytes(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "alice")])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=30))
            .not_valid_after(now - datetime.timedelta(days=1))
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    cert_path, key_path = directory / "expired.crt", directory / "expired.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def _handshake(broker: EmbeddedBroker, certs: Path, cert: Path, key: Path) -> None:
    """A TLS handshake and one ApiVersions on the mutual-TLS listener with ``cert``."""
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    context.load_cert_chain(str(cert), str(key))
    with socket.create_connection(("127.0.0.1", broker.listeners["MTLS"]), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(request_frame(ApiKey.API_VERSIONS, 0, 1))
        if not tls.recv(4):  # TLS 1.3: the refusal of the certificate arrives on first read
            raise ssl.SSLError("closed")


def test_tls_client_certificates_from_an_untrusted_ca_or_expired_are_refused(
        secured: EmbeddedBroker, certificates: Path, foreign_certificates: Path,
        tmp_path: Path) -> None:
    _handshake(secured, certificates, certificates / "alice.crt", certificates / "alice.key")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _handshake(secured, certificates, foreign_certificates / "mallory.crt",
                   foreign_certificates / "mallory.key")
    with pytest.raises((ssl.SSLError, ConnectionError)):
        _handshake(secured, certificates, *_expired_client(certificates, tmp_path))
