"""The schema registry when the broker's listeners use SASL: HTTP basic auth of the
broker's SASL users (confluent-kafka's ``basic.auth.user.info``), and the broker's ACLs on
a subject's topic (READ to read, WRITE to change) and on the cluster (ALTER_CONFIGS for the
global config)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from broker_fixtures import TIMEOUT, start_broker
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from security_support import USERS, plain_jaas

from sparklog.broker.process import BrokerProcess

SCHEMA = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
CONFIG = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
          "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT",
          "sasl.enabled.mechanisms": "PLAIN",
          "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(USERS),
          "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
          "super.users": "User:admin",
          "schema.registry.listeners": "http://127.0.0.1:0"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("sasl"), CONFIG)
    admin = AdminClient({"bootstrap.servers": proc.bootstrap, "security.protocol":
                         "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "admin", "sasl.password": "admin-secret"})
    grants = [AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL,
                         "User:alice", "*", operation, AclPermissionType.ALLOW)
              for operation in (AclOperation.READ, AclOperation.WRITE)]
    grants.append(AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL,
                             "User:bob", "*", AclOperation.READ, AclPermissionType.ALLOW))
    for future in admin.create_acls(grants, request_timeout=TIMEOUT).values():
        future.result()
    yield proc
    assert proc.stop() == 0


def client(broker: BrokerProcess, user: str | None, password: str = "") -> SchemaRegistryClient:
    conf = {"url": broker.schema_registry_url}
    if user is not None:
        conf["basic.auth.user.info"] = f"{user}:{password or USERS[user]}"
    return SchemaRegistryClient(conf)


def refused(call: object) -> SchemaRegistryError:
    with pytest.raises(SchemaRegistryError) as caught:
        call()  # type: ignore[operator]
    return caught.value


def test_logins_and_acls(broker: BrokerProcess) -> None:
    assert refused(lambda: client(broker, None).get_subjects()).http_status_code == 401
    assert refused(lambda: client(broker, "alice", "wrong").get_subjects()
                   ).error_code == 40101
    alice, bob = client(broker, "alice"), client(broker, "bob")
    schema_id = alice.register_schema("orders-value", Schema(SCHEMA, "AVRO"))
    # bob reads the subject (READ on its topic) but cannot change it (no WRITE)
    assert bob.get_latest_version("orders-value").schema_id == schema_id
    denied = refused(lambda: bob.register_schema("orders-value", Schema(SCHEMA, "AVRO")))
    assert (denied.http_status_code, denied.error_code) == (403, 40301)
    assert refused(lambda: bob.delete_subject("orders-value")).error_code == 40301
    # a subject of another topic: nobody but admin
    assert refused(lambda: alice.register_schema("payments-value", Schema(SCHEMA, "AVRO"))
                   ).error_code == 40301
    assert refused(lambda: alice.set_compatibility(level="NONE")).error_code == 40301
    admin = client(broker, "admin")
    assert admin.register_schema("payments-value", Schema(SCHEMA, "AVRO")) == schema_id
    admin.set_compatibility(level="FULL")
    assert bob.get_compatibility() == "FULL"  # global reads: any logged-in user
    assert bob.get_schema(schema_id).schema_str
    # the subject list shows what the user may read
    assert bob.get_subjects() == ["orders-value"]
    assert admin.get_subjects() == ["orders-value", "payments-value"]
