"""One connection's state: its listener, client address, principal, SASL exchange and the
client software it named (KIP-511).

Invariants:
- The server makes one ``Session`` per connection before its first request (every request
  of the connection sees it in its request context); handlers and the authorizer read the
  principal and the client's address from it, never from the request.
- ``authenticated`` starts true on PLAINTEXT and SSL listeners and turns true on a SASL
  listener only when an exchange completed; until then the server serves nothing but
  ApiVersions, SaslHandshake and SaslAuthenticate.
- ``muted_until`` (a ``time.monotonic`` instant) set by the quota manager makes the server
  read no further request of the connection before it (a throttled client, KIP-219).
- ``closing`` set by a handler makes the server close the connection once that response
  is written (after a failed authentication, as Kafka does); a failed SASL step sets it
  and answers only after the listener's ``connection.failed.authentication.delay.ms``.
"""

from __future__ import annotations

import asyncio
import logging

from sparklog.broker.security.listener import ANONYMOUS, ListenerSecurity
from sparklog.broker.security.sasl import AuthenticationFailed, Authenticator

log = logging.getLogger(__name__)


UNKNOWN_SOFTWARE = ("unknown", "unknown")
"""What Kafka calls a client that never named its software."""


class Session:
    def __init__(self, listener: ListenerSecurity, certificate_principal: str | None = None,
                 client_host: str = "", client_port: int | None = None) -> None:
        self.listener = listener
        self.client_host = client_host
        """The client's address as Kafka shows it (``/127.0.0.1``)."""
        self.client_port = client_port
        """The client's source port (None when not on a socket: KIP-714 matches it)."""
        self.principal = certificate_principal if certificate_principal and not listener.sasl \
            else ANONYMOUS
        self.authenticated = not listener.sasl
        self.authenticator: Authenticator | None = None
        self.raw_tokens = False
        """SaslHandshake v0 was used: the next frames are bare SASL tokens."""
        self.closing = False
        self.muted_until = 0.0
        """No request is read before this ``time.monotonic`` instant (quota throttling)."""
        self.client_software = UNKNOWN_SOFTWARE
        """The client's software name and version (KIP-511: ApiVersions v3+)."""

    async def step(self, token: bytes) -> tuple[bytes, str | None]:
        """The server's answer to one client token of the SASL exchange, and the failure
        message when it failed (then the session is closing and nothing it asked for is
        granted)."""
        authenticator = self.authenticator
        assert authenticator is not None
        try:
            answer = authenticator.step(token)
        except AuthenticationFailed as exc:
            self.closing = True
            log.warning("failed authentication on listener %s from %s with %s: %s",
                        self.listener.name, self.client_host,
                        type(authenticator).__name__.removesuffix("Authenticator"), exc)
            await asyncio.sleep(self.listener.failed_authentication_delay_s)
            return b"", str(exc)
        if authenticator.complete:
            self.principal = f"User:{authenticator.username}"
            self.authenticated, self.authenticator = True, None
            self.raw_tokens = False
        return answer, None
