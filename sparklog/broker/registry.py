"""Which coroutine answers which API: one registry filled by the per-API modules.

Invariant: a handler receives the decoded kio request and returns either a kio response
object (the server encodes it for the request's version), a list of ready frame parts
(``bytes`` and ``FileRegion``, for zero-copy Fetch), or None when no response is sent
(Produce with acks=0). Per-partition errors are answered inside the response; an exception
escaping a handler closes that connection only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from sparklog.protocol.fetch_response import FileRegion
from sparklog.protocol.framing import RequestHeader

if TYPE_CHECKING:
    from sparklog.broker.state import Broker

Parts = list[bytes | FileRegion]
Handler = Callable[["Broker", RequestHeader, Any], Awaitable[Any]]

HANDLERS: dict[int, Handler] = {}

CLIENT_HOST: ContextVar[str] = ContextVar("client_host", default="")
"""The address of the connection a handler serves, as Kafka shows it (``/127.0.0.1``)."""


def handles(*api_keys: int) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for key in api_keys:
            HANDLERS[key] = handler
        return handler

    return register
