"""Config resources over the Kafka protocol, for what confluent-kafka cannot name: a
resource with an empty name (a broker resource named "" is the cluster-wide default, as
Kafka's ``--entity-default``) or a type it lacks (CLIENT_METRICS, KIP-714).

Invariants:
- A broker resource named by an id goes to that broker (as Kafka's admin client sends it:
  each broker answers for its own configs); any other to one broker
  (``KafkaClient.admin_request``), which answers for the cluster's defaults and
  subscriptions.
- ``describe_configs`` is one DescribeConfigs with synonyms when asked for; ``alter_configs``
  one IncrementalAlterConfigs of SET (a value) and DELETE (None) operations.
- An error in the answer raises ``KafkaClientError`` naming the resource, the Kafka error and
  the broker's message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.client.errors import KafkaClientError
from sparklog.client.kafka import KafkaClient
from sparklog.errors import ErrorCode
from sparklog.protocol.versions import ApiKey

BROKER, CLIENT_METRICS = 4, 16
SET, DELETE = 0, 1


@dataclass(frozen=True, slots=True)
class ConfigValue:
    """One config as DescribeConfigs answers it; ``synonyms`` are (source, name, value),
    most specific first (``source`` is Kafka's ConfigSource number)."""

    name: str
    value: str | None
    source: int
    sensitive: bool
    synonyms: tuple[tuple[int, str, str | None], ...] = ()


def check(code: int, message: str | None, what: str) -> None:
    """A ``KafkaClientError`` naming ``what`` unless ``code`` is NONE."""
    if code != ErrorCode.NONE:
        raise KafkaClientError.of(what, code, message)


def _request(client: KafkaClient, resource_type: int, name: str, api_key: ApiKey,
             body: Mapping[str, Any]) -> Any:
    if resource_type == BROKER and name.isdigit():
        brokers = client.metadata([]).brokers
        if int(name) in brokers:
            return client.broker_request(brokers[int(name)], api_key, body)
    return client.admin_request(api_key, body)


def describe_configs(client: KafkaClient, resource_type: int, name: str, what: str,
                     synonyms: bool = False) -> list[ConfigValue]:
    """The configs of resource (``resource_type``, ``name``); ``what`` names it in errors."""
    answer = _request(client, resource_type, name, ApiKey.DESCRIBE_CONFIGS, {
        "resources": ({"resource_type": resource_type, "resource_name": name,
                       "configuration_keys": None},),
        "include_synonyms": synonyms, "include_documentation": False})
    [result] = answer.results
    check(result.error_code, result.error_message, what)
    return [ConfigValue(c.name, c.value, c.config_source, c.is_sensitive,
                        tuple((s.source, s.name, s.value) for s in c.synonyms))
            for c in result.configs]


def alter_configs(client: KafkaClient, resource_type: int, name: str, what: str,
                  changes: dict[str, str | None]) -> None:
    """Set each config given a value, delete each given None."""
    answer = _request(client, resource_type, name, ApiKey.INCREMENTAL_ALTER_CONFIGS, {
        "resources": ({"resource_type": resource_type, "resource_name": name, "configs": tuple(
            {"name": key, "config_operation": SET if value is not None else DELETE,
             "value": value} for key, value in changes.items())},),
        "validate_only": False})
    [result] = answer.responses
    check(result.error_code, result.error_message, what)
