"""ListConfigResources (key 74, v0-v1): the resources that have configs (KIP-1142).

Versions, as Kafka's JSON: v0 is Kafka 3.7's ListClientMetricsResources (KIP-714), which
lists client-metrics subscriptions only; v1 (Kafka 4.1) adds ``resource_types`` to the
request and each resource's type to the answer.

Behaviour, as Kafka 4.1's broker:
- DESCRIBE_CONFIGS on the CLUSTER is required (CLUSTER_AUTHORIZATION_FAILED otherwise).
- v1's types are those Kafka 4.1 lists: GROUP (32), CLIENT_METRICS (16), BROKER_LOGGER
  (8), BROKER (4), TOPIC (2); an empty list means all of them, and a list naming any other
  type is UNSUPPORTED_VERSION for the whole request. Resources come in that order of types.
- Only the resources this broker has configs for are listed: every topic (by name, the
  internal ones included), every live broker reachable on the request's listener (by
  node id, as DescribeConfigs names it) and every configured client-metrics subscription
  (by name, as DescribeConfigs names it: the store's, not the broker config's preset),
  which is all v0 lists. This broker has no group configs or dynamic logger levels
  (DescribeConfigs does not serve those types), so they list nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.request_context import listener_name
from sparklog.broker.security.acls import Operation
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.list_config_resources.v1.request import ListConfigResourcesRequest

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
LISTED_TYPES = (GROUP, CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC)
"""The types v1 lists, in the order Kafka's answer lists them."""


@handles(ApiKey.LIST_CONFIG_RESOURCES, versions=(0, 1))
async def list_config_resources(broker: Broker, header: RequestHeader,
                                request: ListConfigResourcesRequest) -> Any:
    build = Build(header)
    asked = set(getattr(request, "resource_types", ()) or LISTED_TYPES) \
        if build.version >= 1 else {CLIENT_METRICS}
    refusal = ErrorCode.CLUSTER_AUTHORIZATION_FAILED \
        if not broker.security.allows_cluster(Operation.DESCRIBE_CONFIGS) \
        else None if asked <= set(LISTED_TYPES) else ErrorCode.UNSUPPORTED_VERSION
    if refusal is not None:
        return build.response(error_code=refusal, config_resources=())
    names = {TOPIC: sorted(broker.replicas.assignments),
             BROKER: [str(b) for b in sorted(broker.listed_endpoints(listener_name(),
                                                                     live_only=True))],
             CLIENT_METRICS: sorted(broker.client_metrics.configs)}
    return build.response(error_code=ErrorCode.NONE, config_resources=tuple(
        build("ConfigResource", resource_name=name, resource_type=kind)
        for kind in LISTED_TYPES if kind in asked for name in names.get(kind, ())))
