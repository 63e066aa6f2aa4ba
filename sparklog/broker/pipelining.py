"""Pipelining on a connection: a Produce waiting for its ISR lets the connection's next
request start.

Invariants:
- A connection's requests start in the order they arrived, each once the one before it
  was answered or called ``release``. Produce releases after appending every partition of
  the request and before waiting for acks=all, so appends keep the order of requests (an
  idempotent producer's sequences arrive in order) while one request's replication
  overlaps the next one's append. Kafka mutes a connection until its answer is sent; on
  a cluster of Python brokers that serialises leader, followers and producer (each idle
  while another works), which this overlap avoids.
- Answers are written in the order of the requests (the protocol's rule); a request that
  fails closes the connection as before, and no later request is answered.
- Outside a pipelined connection (a single node, an inter-broker call) ``release`` does
  nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

RELEASE: ContextVar[Callable[[], None] | None] = ContextVar("release", default=None)
"""What lets the current request's connection start its next request."""


def release() -> None:
    """The current request has done what must happen in request order."""
    let_go = RELEASE.get()
    if let_go is not None:
        let_go()
