"""The brokers a client is told about, each at its endpoint of the listener the request
came in on (Kafka's ``MetadataCache.getAliveBrokerNodes(listenerName)``): Metadata and
DescribeCluster list them alike.

Invariant: a broker without an endpoint of that listener is left out, as Kafka leaves it
out (a client could not reach it there); outside a request the first endpoint is used.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparklog.broker.request_context import listener_name
from sparklog.cluster.layout import BrokerInfo, Endpoint


def listener_endpoints(brokers: Mapping[int, BrokerInfo]
                       ) -> dict[int, tuple[BrokerInfo, Endpoint]]:
    """broker id -> (its registration, its endpoint of the current request's listener)."""
    listener = listener_name()
    return {b: (info, e) for b, info in brokers.items()
            if (e := info.endpoint(listener)) is not None}
