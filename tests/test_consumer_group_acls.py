"""KIP-848 consumer groups under an authorizer, as Kafka's: ConsumerGroupHeartbeat needs READ on
the GROUP and DESCRIBE on every topic it subscribes to by name, ConsumerGroupDescribe
DESCRIBE on the GROUP (READ implies it). Raw requests (kafka-python's protocol classes) on a
SASL/PLAIN connection per user.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_fixtures import TIMEOUT, kp_request, kp_response, unique_topic
from confluent_kafka.admin import AdminClient, NewTopic
from security_support import certificates, listeners_config, sasl_raw, security

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.security.acls import AclBinding, Operation, PatternType, Permission
from sparklog.broker.security.acls import ResourceType as Resource
from sparklog.errors import ErrorCode
from sparklog.protocol.versions import ApiKey

__all__ = ["certificates"]


@pytest.fixture
def secured(tmp_path: Path, certificates: Path) -> Iterator[EmbeddedBroker]:
    """A broker with Kafka's ACL authorizer, ``admin`` its super user."""
    config = listeners_config(certificates, **{
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin"})
    with EmbeddedBroker(tmp_path / "data", config) as broker:
        yield broker


def allow(broker: EmbeddedBroker, user: str, operation: Operation, resource: Resource,
          name: str) -> None:
    binding = AclBinding(resource, name, PatternType.LITERAL, f"User:{user}", "*", operation,
                         Permission.ALLOW)
    broker.call(lambda b: b.security.authorizer.add([binding]))


def heartbeat(broker: EmbeddedBroker, user: str, group: str, topics: list[str]) -> Any:
    with sasl_raw(f"127.0.0.1:{broker.listeners['SASL_PLAINTEXT']}", user) as conn:
        request = kp_request(ApiKey.CONSUMER_GROUP_HEARTBEAT)(
            version=1, group_id=group, member_id=str(uuid.uuid4()), member_epoch=0,
            rebalance_timeout_ms=30000, subscribed_topic_names=topics, topic_partitions=[])
        return conn.call(request, kp_response(ApiKey.CONSUMER_GROUP_HEARTBEAT))


def describe(broker: EmbeddedBroker, user: str, group: str) -> Any:
    with sasl_raw(f"127.0.0.1:{broker.listeners['SASL_PLAINTEXT']}", user) as conn:
        request = kp_request(ApiKey.CONSUMER_GROUP_DESCRIBE)(
            version=1, group_ids=[group], include_authorized_operations=True)
        return conn.call(request, kp_response(ApiKey.CONSUMER_GROUP_DESCRIBE)).groups[0]


def test_heartbeat_and_describe_need_their_acls(secured: EmbeddedBroker,
                                                certificates: Path) -> None:
    topic, hidden, group = unique_topic("acl848"), unique_topic("hidden"), unique_topic("g")
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{secured.listeners['SASL_PLAINTEXT']}",
                         **security("confluent", "SASL_PLAINTEXT", certificates, user="admin")})
    for future in admin.create_topics([NewTopic(topic, 1), NewTopic(hidden, 1)]).values():
        future.result(TIMEOUT)
    allow(secured, "alice", Operation.READ, Resource.TOPIC, topic)
    refused = heartbeat(secured, "alice", group, [topic])
    assert refused.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    allow(secured, "alice", Operation.READ, Resource.GROUP, group)
    unseen = heartbeat(secured, "alice", group, [topic, hidden])
    assert unseen.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert hidden in unseen.error_message and topic not in unseen.error_message
    joined = heartbeat(secured, "alice", group, [topic])
    assert (joined.error_code, joined.member_epoch) == (ErrorCode.NONE, 1)
    assert describe(secured, "bob", group).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    seen = describe(secured, "alice", group)
    assert (seen.error_code, seen.group_state, len(seen.members)) == (ErrorCode.NONE,
                                                                      "Stable", 1)
    assert seen.authorized_operations & (1 << Operation.READ)
