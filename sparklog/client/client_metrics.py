"""Client-metrics subscriptions (KIP-714's CLIENT_METRICS config resources, type 16) over
the Kafka protocol, as Kafka's admin client and ``kafka-client-metrics.sh`` reach them
(confluent-kafka's ``ResourceType`` has no CLIENT_METRICS).

Invariants:
- Every call goes to the first bootstrap broker (any broker answers for the cluster):
  ``list_subscriptions`` is ListConfigResources (v1 asking for type 16, or v0, Kafka 3.7's
  ListClientMetricsResources), ``describe_subscription`` DescribeConfigs,
  ``alter_subscription`` one IncrementalAlterConfigs of SET and DELETE operations.
- An error in the answer raises ``KafkaClientError`` naming the subscription, the Kafka
  error and the broker's message.
"""

from __future__ import annotations

from sparklog.client.errors import KafkaClientError
from sparklog.client.kafka import KafkaClient
from sparklog.errors import ErrorCode
from sparklog.protocol.versions import ApiKey

CLIENT_METRICS = 16
SET, DELETE = 0, 1


def _check(code: int, message: str | None, what: str) -> None:
    if code != ErrorCode.NONE:
        raise KafkaClientError.of(what, code, message)


def list_subscriptions(client: KafkaClient) -> list[str]:
    """The names of every client-metrics subscription."""
    answer = client.admin_request(ApiKey.LIST_CONFIG_RESOURCES,
                                  {"resource_types": (CLIENT_METRICS,)})
    _check(answer.error_code, None, "listing client metrics resources")
    return sorted(r.resource_name for r in answer.config_resources
                  if getattr(r, "resource_type", CLIENT_METRICS) == CLIENT_METRICS)


def describe_subscription(client: KafkaClient, name: str) -> list[tuple[str, str | None]]:
    """The settings of subscription ``name`` (none when it does not exist)."""
    answer = client.admin_request(ApiKey.DESCRIBE_CONFIGS, {
        "resources": ({"resource_type": CLIENT_METRICS, "resource_name": name,
                       "configuration_keys": None},),
        "include_synonyms": False, "include_documentation": False})
    [result] = answer.results
    _check(result.error_code, result.error_message, f"client metrics {name!r}")
    return [(c.name, c.value) for c in result.configs]


def alter_subscription(client: KafkaClient, name: str,
                       changes: dict[str, str | None]) -> None:
    """Set each setting given a value, delete each given None."""
    answer = client.admin_request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {
        "resources": ({"resource_type": CLIENT_METRICS, "resource_name": name, "configs": tuple(
            {"name": key, "config_operation": SET if value is not None else DELETE,
             "value": value} for key, value in changes.items())},),
        "validate_only": False})
    [result] = answer.responses
    _check(result.error_code, result.error_message, f"client metrics {name!r}")
