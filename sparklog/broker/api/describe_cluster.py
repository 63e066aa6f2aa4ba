"""DescribeCluster (key 60, v0-v2): the cluster as an admin client sees it (KIP-700).

Behaviour, as a ZooKeeper-era Kafka broker answers it (a single node is a one-broker
cluster):
- The cluster id, the controller (the broker holding ``/controller``; -1 when there is none
  or it is not among the brokers listed, as Kafka avoids naming a node the answer lacks),
  and every live broker with its rack, at its endpoint of the listener the request came in
  on (``Broker.listed_endpoints``, as Metadata; brokers without that listener are left
  out).
- v1 adds ``endpoint_type`` (KIP-919): 1 (brokers) is what a broker serves; 2 (controllers)
  is MISMATCHED_ENDPOINT_TYPE, as on any broker (a ZooKeeper-era broker has no controller
  endpoints to describe), and any other value UNSUPPORTED_ENDPOINT_TYPE (INVALID_REQUEST
  for both at v0, which cannot carry them); the answer names the type described (1).
- v2 adds ``include_fenced_brokers`` and each broker's ``is_fenced`` (KIP-1073): brokers
  here are either registered (live, unfenced) or gone, so every broker listed is unfenced
  and the flag changes nothing.
- Authorization, as Kafka's: the request itself needs none (like Metadata); the cluster's
  authorized operations, when asked for, are Kafka's bit field given DESCRIBE on the
  CLUSTER, else 0, and ``-2**31`` (omitted) when not asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparklog.broker.api.metadata import cluster_operations
from sparklog.broker.registry import handles
from sparklog.broker.request_context import listener_name
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.describe_cluster.v2.request import DescribeClusterRequest

BROKERS, CONTROLLERS = 1, 2
"""Kafka's ``EndpointType`` ids (0 is UNKNOWN)."""


@handles(ApiKey.DESCRIBE_CLUSTER, versions=(0, 2))
async def describe_cluster(broker: Broker, header: RequestHeader,
                           request: DescribeClusterRequest) -> Any:
    build = Build(header)
    asked = getattr(request, "endpoint_type", BROKERS)
    if asked != BROKERS:
        known = asked == CONTROLLERS
        code = ErrorCode.INVALID_REQUEST if build.version == 0 else (
            ErrorCode.MISMATCHED_ENDPOINT_TYPE if known else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE)
        message = ("this is a broker: describe controllers at a controller endpoint" if known
                   else f"unsupported endpoint type {asked}")
        return build.response(error_code=code, error_message=message, cluster_id="",
                              brokers=(), endpoint_type=BROKERS)
    operations = cluster_operations(broker, request.include_cluster_authorized_operations)
    replicas = broker.replicas
    nodes = broker.listed_endpoints(listener_name(), live_only=True)
    return build.response(
        error_code=ErrorCode.NONE, error_message=None, endpoint_type=BROKERS,
        cluster_id=broker.cluster_id,
        controller_id=replicas.controller_id if replicas.controller_id in nodes else -1,
        brokers=tuple(build("DescribeClusterBroker", broker_id=b, host=e.host, port=e.port,
                            rack=rack, is_fenced=False)
                      for b, (e, rack) in sorted(nodes.items())),
        cluster_authorized_operations=operations)
