"""kafka-python 3.0.12's protocol classes for the KIP-714 APIs it lacks
(GetTelemetrySubscriptions 71, PushTelemetry 72) and KIP-848's (ConsumerGroupHeartbeat 68,
ConsumerGroupDescribe 69), built by kafka-python's own JSON-schema
machinery from the message definitions beside this file (Kafka's fields and versions, as
``clients/src/main/resources/common/message/`` defines them), so the tests encode and decode
them independently of the broker's kio codec. ``broker_fixtures.kp_request`` finds them.
"""

from __future__ import annotations

import sys

from kafka.protocol.api_message import ApiMessage

_HERE = sys.modules[__name__]


class GetTelemetrySubscriptionsRequest(ApiMessage, load_json=_HERE):
    pass


class GetTelemetrySubscriptionsResponse(ApiMessage, load_json=_HERE):
    pass


class PushTelemetryRequest(ApiMessage, load_json=_HERE):
    pass


class PushTelemetryResponse(ApiMessage, load_json=_HERE):
    pass


class ConsumerGroupHeartbeatRequest(ApiMessage, load_json=_HERE):
    pass


class ConsumerGroupHeartbeatResponse(ApiMessage, load_json=_HERE):
    pass


class ConsumerGroupDescribeRequest(ApiMessage, load_json=_HERE):
    pass


class ConsumerGroupDescribeResponse(ApiMessage, load_json=_HERE):
    pass
