"""SCRAM's key derivations (RFC 5802, RFC 7677), shared by the broker (server) and the
client: the same math on both sides of the SASL exchange.

Invariants:
- ``HASHES`` names the mechanisms served: SCRAM-SHA-256 and SCRAM-SHA-512.
- Nothing here keeps or logs a password; callers hold secrets only as long as they need.
"""

from __future__ import annotations

import hashlib
import hmac

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
