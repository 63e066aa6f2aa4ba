"""The client's side of SASL/PLAIN and SASL/SCRAM (RFC 4616, 5802, 7677).

``authenticate(exchange, security)`` runs the exchange over ``exchange(token) -> token``
(one SaslAuthenticate round trip each).

Invariants:
- SCRAM: the client nonce is 24 random bytes; the server's final message is checked (its
  signature proves it knows the credential), else ``KafkaClientError``.
- No password, proof or key appears in any message or log.
"""

from __future__ import annotations

import base64
import hmac
import os
from collections.abc import Callable

from sparklog.client.errors import KafkaClientError
from sparklog.client.settings import ClientSecurity
from sparklog.protocol.scram import (
    client_key,
    salted_password,
    server_key,
    signature,
    stored_key,
    xor,
)

Exchange = Callable[[bytes], bytes]


def authenticate(exchange: Exchange, security: ClientSecurity) -> None:
    user, password = security.username or "", security.password or ""
    if security.mechanism == "PLAIN":
        exchange(f"\0{user}\0{password}".encode())
        return
    mechanism = security.mechanism
    nonce = base64.b64encode(os.urandom(24)).decode()
    name = user.replace("=", "=3D").replace(",", "=2C")
    first_bare = f"n={name},r={nonce}"
    server_first = exchange(f"n,,{first_bare}".encode()).decode()
    fields = dict(part.split("=", 1) for part in server_first.split(",") if "=" in part)
    if not fields.get("r", "").startswith(nonce) or "s" not in fields or "i" not in fields:
        raise KafkaClientError(f"SASL {mechanism}: the broker's first message is invalid")
    salted = salted_password(mechanism, password, base64.b64decode(fields["s"]),
                             int(fields["i"]))
    final_bare = f"c=biws,r={fields['r']}"
    auth_message = f"{first_bare},{server_first},{final_bare}".encode()
    key = client_key(mechanism, salted)
    proof = xor(key, signature(mechanism, stored_key(mechanism, key), auth_message))
    server_final = exchange(f"{final_bare},p={base64.b64encode(proof).decode()}".encode())
    expected = b"v=" + base64.b64encode(
        signature(mechanism, server_key(mechanism, salted), auth_message))
    if not hmac.compare_digest(server_final, expected):
        raise KafkaClientError(f"SASL {mechanism}: the broker's signature does not match")
