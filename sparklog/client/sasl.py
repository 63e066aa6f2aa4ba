"""The client's side of SASL/PLAIN and SASL/SCRAM (RFC 4616, 5802, 7677).

``authenticate(exchange, security)`` runs the exchange over ``exchange(token) -> token``
(one SaslAuthenticate round trip each).

Invariants:
- SCRAM (``protocol.scram.ScramClient``): the server's final message is checked (its
  signature proves it knows the credential), else ``KafkaClientError``.
- No password, proof or key appears in any message or log.
"""

from __future__ import annotations

from collections.abc import Callable

from sparklog.client.errors import KafkaClientError
from sparklog.client.settings import ClientSecurity
from sparklog.protocol.scram import ScramClient, ScramError, plain_token

Exchange = Callable[[bytes], bytes]


def authenticate(exchange: Exchange, security: ClientSecurity) -> None:
    user, password = security.username or "", security.password or ""
    if security.mechanism == "PLAIN":
        exchange(plain_token(user, password))
        return
    scram = ScramClient(security.mechanism, user, password)
    try:
        scram.verify(exchange(scram.final(exchange(scram.first()))))
    except ScramError as exc:
        raise KafkaClientError(str(exc)) from None
