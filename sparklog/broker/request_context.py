"""The context of the request a handler serves: Kafka's ``RequestChannel.Request``, kfake's
``creq``, as one object.

A handler receives the broker, the request header and the decoded body; everything else it
may need about the request (who sent it, on which listener, what a fault hook does to it,
how it lets its connection go on) is its ``RequestContext``, read with ``current()``.

Invariants:
- The server sets ``REQUEST`` once per connection, to a context holding the connection's
  ``session`` (security: listener, client address, principal, SASL exchange), before its
  first request; each request task inherits it. A request with more to carry (the fault a
  hook armed for it, the pipelining ``release``) runs in a copy holding that too
  (``extended``), never changing what other requests see. Outside a request (the broker's
  own work: markers, replication, coordinator timers) there is none.
- Pipelining: a connection's requests start in the order they arrived, each once the one
  before it was answered or called ``release``. Produce releases after appending every
  partition of the request and before waiting for acks=all, so appends keep the order of
  requests (an idempotent producer's sequences arrive in order) while one request's
  replication overlaps the next one's append. Kafka mutes a connection until its answer is
  sent; on a cluster of Python brokers that serialises leader, followers and producer
  (each idle while another works), which this overlap avoids. Outside a pipelined
  connection (a single node, an inter-broker call) ``release`` does nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

from sparklog.broker.fault_hooks import Fault
from sparklog.broker.security.session import Session


@dataclass(frozen=True, slots=True)
class RequestContext:
    session: Session
    fault: Fault | None = None
    """The fault hook acting on this request (tests only)."""
    release: Callable[[], None] | None = None
    """Lets the connection's next request start (a pipelined connection only)."""


REQUEST: ContextVar[RequestContext | None] = ContextVar("request", default=None)


def current() -> RequestContext | None:
    return REQUEST.get()


def current_session() -> Session | None:
    """The security session of the connection the current request came in on."""
    context = REQUEST.get()
    return None if context is None else context.session


def listener_name() -> str | None:
    """The listener the current request came in on (None outside a request)."""
    context = REQUEST.get()
    return None if context is None else context.session.listener.name


def client_host() -> str:
    """The address of the connection the current request came in on (``/127.0.0.1``)."""
    context = REQUEST.get()
    return "" if context is None else context.session.client_host


def release() -> None:
    """The current request has done what must happen in request order."""
    context = REQUEST.get()
    if context is not None and context.release is not None:
        context.release()


@contextmanager
def extended(**changes: Any) -> Iterator[None]:
    """Run the enclosed code in a copy of the current context with ``changes``."""
    context = REQUEST.get()
    assert context is not None, "no request context to extend"
    token = REQUEST.set(replace(context, **changes))
    try:
        yield
    finally:
        REQUEST.reset(token)
