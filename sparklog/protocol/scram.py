"""SCRAM's key derivations (RFC 5802, RFC 7677), shared by the broker (server) and the
client: the same math on both sides of the SASL exchange; and the client's messages
(``ScramClient``, no I/O), which the synchronous client and a broker's inter-broker
connections both send.

Invariants:
- ``HASHES`` names the mechanisms served: SCRAM-SHA-256 and SCRAM-SHA-512.
- Nothing here keeps or logs a password; callers hold secrets only as long as they need.
- ``ScramClient``: the client nonce is 24 random bytes; the server's first message must
  extend it; the server's final message is checked (its signature proves it knows the
  credential), else ``ScramError``, whose message names no secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
"""Mechanism -> hashlib name."""


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i)."""
    return hashlib.pbkdf2_hmac(HASHES[mechanism], password.encode(), salt, iterations)


def client_key(mechanism: str, salted: bytes) -> bytes:
    return hmac.digest(salted, b"Client Key", HASHES[mechanism])


def server_key(mechanism: str, salted: bytes) -> bytes:
    return hmac.digest(salted, b"Server Key", HASHES[mechanism])


def stored_key(mechanism: str, key: bytes) -> bytes:
    """H(ClientKey)."""
    return hashlib.new(HASHES[mechanism], key).digest()


def signature(mechanism: str, key: bytes, auth_message: bytes) -> bytes:
    """HMAC(key, AuthMessage): the client signature (StoredKey) or server's (ServerKey)."""
    return hmac.digest(key, auth_message, HASHES[mechanism])


def xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


class ScramError(ValueError):
    """The server's SCRAM message is invalid or does not prove the credential."""


class ScramClient:
    """The client's side of one exchange: ``first()``, ``final(server_first)``, then
    ``verify(server_final)``."""

    def __init__(self, mechanism: str, user: str, password: str) -> None:
        self.mechanism = mechanism
        self._password = password
        self._nonce = base64.b64encode(os.urandom(24)).decode()
        name = user.replace("=", "=3D").replace(",", "=2C")
        self._first_bare = f"n={name},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8", "replace")
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        if not fields.get("r", "").startswith(self._nonce) or "s" not in fields \
                or "i" not in fields or not fields["i"].isdigit():
            raise ScramError(f"SASL {self.mechanism}: the broker's first message is invalid")
        try:
            salt = base64.b64decode(fields["s"], validate=True)
        except ValueError:
            raise ScramError(f"SASL {self.mechanism}: the broker's salt is not base64") from None
        salted = salted_password(self.mechanism, self._password, salt, int(fields["i"]))
        self._password = ""
        final_bare = f"c=biws,r={fields['r']}"
        auth_message = f"{self._first_bare},{text},{final_bare}".encode()
        key = client_key(self.mechanism, salted)
        proof = xor(key, signature(self.mechanism, stored_key(self.mechanism, key),
                                   auth_message))
        self._server_signature = b"v=" + base64.b64encode(
            signature(self.mechanism, server_key(self.mechanism, salted), auth_message))
        return f"{final_bare},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        if not self._server_signature or not hmac.compare_digest(server_final,
                                                                 self._server_signature):
            raise ScramError(f"SASL {self.mechanism}: the broker's signature does not match")


def plain_token(user: str, password: str) -> bytes:
    """SASL/PLAIN's one client message (RFC 4616), without an authorization id."""
    return f"\0{user}\0{password}".encode()
