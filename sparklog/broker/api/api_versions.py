"""ApiVersions (key 18), v0-v4.

Behaviour:
- Lists exactly the APIs and versions the handlers registered (``registry.served``). An
  unsupported ApiVersions version never reaches this handler: the server answers it with a
  v0 body carrying UNSUPPORTED_VERSION and the same list, and the client retries at a
  version we support.
- v3+ (KIP-511): the client names its software and version; both must match Kafka's
  pattern (letters, digits, ``-`` and ``.``, starting and ending with a letter or digit),
  else the answer is INVALID_REQUEST with no APIs, as Kafka's. The connection keeps them
  (``Session.client_software``) for the status page and ``/metrics``; a client that never
  says is "unknown" "unknown".
- v3+ also carry the features (``sparklog.broker.features``): the supported levels (in
  v3 without those whose minimum is 0, as Kafka 4 omits them there: KAFKA-17011) and the
  finalized ones with their epoch.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sparklog.broker import features
from sparklog.broker.registry import handles, served
from sparklog.broker.request_context import current_session
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.api_versions.v4.request import ApiVersionsRequest

SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
"""Kafka's pattern for a client's software name and version (KIP-511)."""


@handles(ApiKey.API_VERSIONS, versions=(0, 4))
async def api_versions(broker: Broker, header: RequestHeader,
                       request: ApiVersionsRequest) -> Any:
    build = Build(header)
    if header.api_version >= 3:
        software = (request.client_software_name, request.client_software_version)
        if not all(SOFTWARE.fullmatch(part) for part in software):
            return build.response(error_code=ErrorCode.INVALID_REQUEST, api_keys=())
        session = current_session()
        if session is not None:
            session.client_software = software
    keys = tuple(
        build("ApiVersion", api_key=key, min_version=lo, max_version=hi)
        for key, (lo, hi) in served().items()
    )
    supported = tuple(
        build("SupportedFeatureKey", name=name, min_version=low, max_version=high)
        for name, (low, high) in features.SUPPORTED.items() if low > 0 or header.api_version > 3)
    finalized = tuple(  # v3+ (tagged fields): no such entity before
        build("FinalizedFeatureKey", name=name, min_version_level=level, max_version_level=level)
        for name, level in features.FINALIZED.items() if header.api_version >= 3)  # v3+ has them
    return build.response(error_code=ErrorCode.NONE, api_keys=keys,
                          supported_features=supported,
                          finalized_features_epoch=features.FINALIZED_EPOCH,
                          finalized_features=finalized)
