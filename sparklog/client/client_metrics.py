"""Client-metrics subscriptions (KIP-714's CLIENT_METRICS config resources, type 16) over
the Kafka protocol, as Kafka's admin client and ``kafka-client-metrics.sh`` reach them
(confluent-kafka's ``ResourceType`` has no CLIENT_METRICS).

Invariants:
- Every call goes to the first bootstrap broker (any broker answers for the cluster):
  ``list_subscriptions`` is ListConfigResources (v1 asking for type 16, or v0, Kafka 3.7's
  ListClientMetricsResources), ``describe_subscription`` DescribeConfigs,
  ``alter_subscription`` one IncrementalAlterConfigs of SET and DELETE operations (both
  ``sparklog.client.configs``'s).
- An error in the answer raises ``KafkaClientError`` naming the subscription, the Kafka
  error and the broker's message.
"""

from __future__ import annotations

from sparklog.client.configs import CLIENT_METRICS, alter_configs, check, describe_configs
from sparklog.client.kafka import KafkaClient
from sparklog.protocol.versions import ApiKey


def list_subscriptions(client: KafkaClient) -> list[str]:
    """The names of every client-metrics subscription."""
    answer = client.admin_request(ApiKey.LIST_CONFIG_RESOURCES,
                                  {"resource_types": (CLIENT_METRICS,)})
    check(answer.error_code, None, "listing client metrics resources")
    return sorted(r.resource_name for r in answer.config_resources
                  if getattr(r, "resource_type", CLIENT_METRICS) == CLIENT_METRICS)


def describe_subscription(client: KafkaClient, name: str) -> list[tuple[str, str | None]]:
    """The settings of subscription ``name`` (none when it does not exist)."""
    return [(c.name, c.value) for c in describe_configs(client, CLIENT_METRICS, name,
                                                        f"client metrics {name!r}")]


def alter_subscription(client: KafkaClient, name: str,
                       changes: dict[str, str | None]) -> None:
    """Set each setting given a value, delete each given None."""
    alter_configs(client, CLIENT_METRICS, name, f"client metrics {name!r}", changes)
