"""ApiVersions (key 18), v0-v2.

Behaviour: lists every API that has a handler with the version range from
``protocol.versions``. An unsupported ApiVersions version never reaches this handler: the
server answers it with a v0 body carrying UNSUPPORTED_VERSION and the same list, and the
client retries at a version we support.
"""

from __future__ import annotations

from typing import Any

from sparklog.broker.registry import HANDLERS, handles
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ADVERTISED, ApiKey


@handles(ApiKey.API_VERSIONS)
async def api_versions(broker: Broker, header: RequestHeader, request: Any) -> Any:
    build = Build(header)
    keys = tuple(
        build("ApiVersion", api_key=key, min_version=lo, max_version=hi)
        for key, (lo, hi) in sorted(ADVERTISED.items()) if key in HANDLERS
    )
    return build.response(error_code=ErrorCode.NONE, api_keys=keys)
