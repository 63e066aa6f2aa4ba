"""SaslHandshake (key 17, v0-v1) and SaslAuthenticate (key 36, v0-v2): logging in on a
SASL_PLAINTEXT or SASL_SSL listener.

Versions, as Kafka's JSON: SaslAuthenticate v1 adds the session lifetime (KIP-368), answered
0 as Kafka does with ``connections.max.reauth.ms`` unset (this broker never asks a client
to log in again); v2 is the first flexible version.

Behaviour, as Kafka's:
- SaslHandshake names a mechanism; one the listener does not enable is answered
  UNSUPPORTED_SASL_MECHANISM with the enabled list. A handshake on a listener without SASL,
  a second one, or one after authenticating is ILLEGAL_SASL_STATE.
- After a v1 handshake, each SASL token comes in a SaslAuthenticate request; after a v0
  handshake (old clients) the tokens are bare size-prefixed frames (``raw_token``).
- A failed exchange is answered SASL_AUTHENTICATION_FAILED with a message naming no secret,
  after ``connection.failed.authentication.delay.ms``, and the connection is then closed.
  The log line names the listener, client address and mechanism, never a password.
- On success the session's principal is ``User:<name>``. SaslAuthenticate without a v1
  handshake is ILLEGAL_SASL_STATE (and closes the connection of a client not yet
  authenticated).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.request_context import current_session
from sparklog.broker.security.sasl import (
    PlainAuthenticator,
    ScramAuthenticator,
)
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest


@handles(ApiKey.SASL_HANDSHAKE, versions=(0, 1))
async def sasl_handshake(broker: Broker, header: RequestHeader,
                         request: SaslHandshakeRequest) -> Any:
    build = Build(header)
    session = current_session()
    if session is None or not session.listener.sasl:
        return build.response(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=())
    enabled = session.listener.mechanisms
    if session.authenticated or session.authenticator is not None:
        return build.response(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=enabled)
    mechanism = request.mechanism
    if mechanism not in enabled:
        return build.response(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                              mechanisms=enabled)
    session.authenticator = (
        PlainAuthenticator(dict(session.listener.plain_users)) if mechanism == "PLAIN"
        else ScramAuthenticator(mechanism, broker.security.scram.get))
    session.raw_tokens = header.api_version == 0
    return build.response(error_code=ErrorCode.NONE, mechanisms=enabled)


@handles(ApiKey.SASL_AUTHENTICATE, versions=(0, 2))
async def sasl_authenticate(broker: Broker, header: RequestHeader,
                            request: SaslAuthenticateRequest) -> Any:
    build = Build(header)
    session = current_session()
    if session is None or session.authenticator is None or session.raw_tokens:
        if session is not None and not session.authenticated:
            session.closing = True  # a SASL listener's client out of step: nothing to serve
        return build.response(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                              error_message="SaslAuthenticate without a SaslHandshake v1",
                              auth_bytes=b"")
    answer, failure = await session.step(request.auth_bytes)
    if failure is not None:
        return build.response(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED,
                              error_message=failure, auth_bytes=b"")
    return build.response(error_code=ErrorCode.NONE, error_message=None, auth_bytes=answer)
