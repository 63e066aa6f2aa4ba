"""Which coroutine answers which API at which versions: the broker's one API table.

Every handler module declares what it serves next to its code, as franz-go's kfake does:
``@handles(ApiKey.PRODUCE, versions=(0, 8))``. ``load_handlers`` imports every module of
``sparklog.broker.api`` (which holds handler modules and nothing else), so a new API module
registers itself by existing.

Invariants:
- This table is the only list of supported APIs: ApiVersions advertises exactly ``served()``,
  the server answers exactly what ``serves`` allows (ApiVersions at another version gets
  UNSUPPORTED_VERSION, anything else closes the connection), and nothing else keeps a list.
- An API key is registered once; a second registration raises ``DuplicateHandlerError`` when
  its module is imported, so a handler can never replace another silently.
- A handler receives the decoded kio request (typed as its newest served version's kio
  class; an older version lacks some fields, which handlers read with ``getattr``) and
  returns either a kio response object (the
  server encodes it for the request's version), a ``FetchResponse`` (zero-copy Fetch), or
  None when no response is sent (Produce with acks=0). Per-partition errors are answered
  inside the response; an exception escaping a handler closes that connection only.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from sparklog.protocol.framing import RequestHeader

if TYPE_CHECKING:
    from sparklog.broker.state import Broker

Handler = Callable[["Broker", RequestHeader, Any], Awaitable[Any]]


class DuplicateHandlerError(RuntimeError):
    """Two handlers claim the same API key."""


@dataclass(frozen=True, slots=True)
class Registration:
    api_key: int
    min_version: int
    max_version: int
    handler: Handler


_HANDLERS: dict[int, Registration] = {}
HANDLERS: Mapping[int, Registration] = MappingProxyType(_HANDLERS)
"""api key -> its registration (read-only view)."""


def handles(api_key: int, *, versions: tuple[int, int]) -> Callable[[Handler], Handler]:
    """Register the decorated coroutine for ``api_key`` at ``versions`` (inclusive)."""
    low, high = versions
    if not 0 <= low <= high:
        raise ValueError(f"API {api_key}: versions {versions} are not an increasing range")

    def register(handler: Handler) -> Handler:
        existing = _HANDLERS.get(api_key)
        if existing is not None and existing.handler is not handler:
            raise DuplicateHandlerError(
                f"API {api_key} is served by {_name(existing.handler)}; {_name(handler)} "
                "cannot register it again")
        _HANDLERS[api_key] = Registration(api_key, low, high, handler)
        return handler

    return register


def _name(handler: Handler) -> str:
    return f"{handler.__module__}.{handler.__qualname__}"


def served() -> dict[int, tuple[int, int]]:
    """api key -> (min, max) version of every registered API, in api key order."""
    return {key: (r.min_version, r.max_version) for key, r in sorted(_HANDLERS.items())}


def serves(api_key: int, version: int) -> bool:
    found = _HANDLERS.get(api_key)
    return found is not None and found.min_version <= version <= found.max_version


def load_handlers() -> None:
    """Import every module of ``sparklog.broker.api`` (each registers its APIs)."""
    package = importlib.import_module("sparklog.broker.api")
    for module in pkgutil.iter_modules(package.__path__, "sparklog.broker.api."):
        importlib.import_module(module.name)
