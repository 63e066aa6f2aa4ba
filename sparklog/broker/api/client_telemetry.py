"""GetTelemetrySubscriptions (71, v0) and PushTelemetry (72, v0): KIP-714 client telemetry.

A client asks which metrics to push (GetTelemetrySubscriptions), then pushes them as OTLP
``MetricsData`` every push interval (PushTelemetry), and once more, ``terminating``, when it
closes. The rules (subscriptions, ids, intervals, errors, what is kept and for how long) are
``broker/client_metrics.py``'s; these handlers only read the request's client (the header's
client id, the connection's KIP-511 software and address) and answer.

Behaviour (Kafka's KafkaApis and ClientMetricsManager):
- GetTelemetrySubscriptions v0: ``client_instance_id`` (the zero UUID: a new one is
  assigned; else the client's own, echoed), ``subscription_id``, the accepted compression
  types (zstd, lz4, gzip, snappy, Kafka's list and order), ``push_interval``,
  ``telemetry_max_bytes`` (``telemetry.max.bytes``), ``delta_temporality`` true (Kafka's:
  sums are pushed as deltas), ``requested_metrics`` (the metric name prefixes; empty: push
  nothing; ``*``: everything, as Kafka's broker answers and its clients and librdkafka read
  it). THROTTLING_QUOTA_EXCEEDED within the push interval, answered with no subscription.
- PushTelemetry v0: NONE, or INVALID_REQUEST, THROTTLING_QUOTA_EXCEEDED,
  UNKNOWN_SUBSCRIPTION_ID, UNSUPPORTED_COMPRESSION_TYPE, TELEMETRY_TOO_LARGE, INVALID_RECORD
  (``ClientMetricsManager.push``).
- Every broker answers for the clients that ask it (no authorization, as Kafka).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sparklog.broker.client_metrics import ACCEPTED_COMPRESSION
from sparklog.broker.registry import handles
from sparklog.broker.request_context import current_session
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.get_telemetry_subscriptions.v0.request import (
        GetTelemetrySubscriptionsRequest,
    )
    from kio.schema.push_telemetry.v0.request import PushTelemetryRequest


def _client(header: RequestHeader) -> dict[str, str | None]:
    """The request's client as Kafka's ``ClientMetricsInstanceMetadata`` sees it."""
    session = current_session()
    name, version = session.client_software if session else (None, None)
    return {"client_id": header.client_id or "", "client_software_name": name,
            "client_software_version": version,
            "client_source_address": session.client_host.lstrip("/") if session else None,
            "client_source_port": None if session is None or session.client_port is None
            else str(session.client_port)}


@handles(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, versions=(0, 0))
async def get_telemetry_subscriptions(broker: Broker, header: RequestHeader,
                                      request: GetTelemetrySubscriptionsRequest) -> Any:
    manager = broker.client_metrics
    error, instance = manager.get_subscriptions(request.client_instance_id, _client(header))
    build = Build(header)
    if error != ErrorCode.NONE:
        return build.response(error_code=error, client_instance_id=None, subscription_id=0,
                              push_interval=timedelta(0), telemetry_max_bytes=0,
                              delta_temporality=False)
    return build.response(
        error_code=ErrorCode.NONE, client_instance_id=instance.instance_id,
        subscription_id=instance.subscription_id,
        accepted_compression_types=ACCEPTED_COMPRESSION,
        push_interval=timedelta(milliseconds=instance.interval_ms),
        telemetry_max_bytes=manager.max_bytes, delta_temporality=True,
        requested_metrics=instance.metrics)


@handles(ApiKey.PUSH_TELEMETRY, versions=(0, 0))
async def push_telemetry(broker: Broker, header: RequestHeader,
                         request: PushTelemetryRequest) -> Any:
    error = broker.client_metrics.push(
        request.client_instance_id, request.subscription_id, request.terminating,
        request.compression_type, request.metrics, _client(header))
    return Build(header).response(error_code=error)
