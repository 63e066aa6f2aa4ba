"""One connection's security state: its listener, principal and SASL exchange.

Invariants:
- ``SESSION`` is set by the server for every connection's task before its first request;
  handlers read the principal from it (``principal()``), never from the request.
- ``authenticated`` starts true on PLAINTEXT and SSL listeners and turns true on a SASL
  listener only when an exchange completed; until then the server serves nothing but
  ApiVersions, SaslHandshake and SaslAuthenticate.
- ``closing`` set by a handler makes the server close the connection once that response
  is written (after a failed authentication, as Kafka does).
"""

from __future__ import annotations

from contextvars import ContextVar

from sparklog.broker.security.listener import ANONYMOUS, ListenerSecurity
from sparklog.broker.security.sasl import Authenticator


class Session:
    def __init__(self, listener: ListenerSecurity, certificate_principal: str | None = None
                 ) -> None:
        self.listener = listener
        self.principal = certificate_principal if certificate_principal and not listener.sasl \
            else ANONYMOUS
        self.authenticated = not listener.sasl
        self.authenticator: Authenticator | None = None
        self.raw_tokens = False
        """SaslHandshake v0 was used: the next frames are bare SASL tokens."""
        self.closing = False


SESSION: ContextVar[Session | None] = ContextVar("session", default=None)


def principal() -> str:
    """The principal of the connection the current request came in on."""
    session = SESSION.get()
    return ANONYMOUS if session is None else session.principal


def listener_name() -> str | None:
    """The listener the current request came in on (None outside a connection)."""
    session = SESSION.get()
    return None if session is None else session.listener.name
