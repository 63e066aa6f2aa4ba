"""ApiVersions (key 18), v0-v2.

Behaviour: lists exactly the APIs and versions the handlers registered (``registry.served``).
An unsupported ApiVersions version never reaches this handler: the server answers it with a
v0 body carrying UNSUPPORTED_VERSION and the same list, and the client retries at a version
we support.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles, served
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.api_versions.v2.request import ApiVersionsRequest



@handles(ApiKey.API_VERSIONS, versions=(0, 2))
async def api_versions(broker: Broker, header: RequestHeader,
                       request: ApiVersionsRequest) -> Any:
    build = Build(header)
    keys = tuple(
        build("ApiVersion", api_key=key, min_version=lo, max_version=hi)
        for key, (lo, hi) in served().items()
    )
    return build.response(error_code=ErrorCode.NONE, api_keys=keys)
