"""The server side of the SASL mechanisms: PLAIN (RFC 4616) and SCRAM (RFC 5802, 7677).

An authenticator takes the client's tokens one at a time (``step``) and returns the next
server token; ``complete`` turns true once the client proved who it is, and ``username``
names it.

Invariants:
- A failed exchange raises ``AuthenticationFailed`` with a message fit for the client and
  the log: it names the user at most, never a password, proof or key. Unknown users and
  wrong passwords give the same message, so a client cannot probe for names.
- Passwords are compared in constant time (``hmac.compare_digest``).
- SCRAM: the server nonce is 24 random bytes; channel binding is refused (``p=`` GS2 flag);
  the client's final message must repeat the combined nonce; an authorization id other
  than the user is refused.
"""

from __future__ import annotations

import base64
import hmac
import os
from collections.abc import Callable

from sparklog.broker.security.scram_credentials import ScramCredential
from sparklog.protocol.scram import signature, stored_key, xor


class AuthenticationFailed(Exception):
    """The client did not authenticate; the message names no secret."""


class PlainAuthenticator:
    """``[authzid] NUL authcid NUL passwd`` against the JAAS ``user_<name>`` passwords."""

    def __init__(self, users: dict[str, str]) -> None:
        self._users = users
        self.complete = False
        self.username = ""

    def step(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("Invalid SASL/PLAIN request: expected 3 tokens")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an "
                                       "authorization id that is different from username")
        expected = self._users.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationFailed(f"Authentication failed: Invalid username or password "
                                       f"for user {user}")
        self.username, self.complete = user, True
        return b""


def _attributes(message: str) -> dict[str, str]:
    found = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise AuthenticationFailed("Invalid SCRAM message")
        found.setdefault(key, value)
    return found


def _unescape(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramAuthenticator:
    """The server's half of a SCRAM exchange: client-first, client-final."""

    def __init__(self, mechanism: str,
                 credential: Callable[[str, str], ScramCredential | None]) -> None:
        self._mechanism = mechanism
        self._credential = credential
        self._state: tuple[str, str, str, ScramCredential] | None = None
        self.complete = False
        self.username = ""

    def step(self, token: bytes) -> bytes:
        message = token.decode("utf-8", "replace")
        return self._first(message) if self._state is None else self._final(message)

    def _first(self, message: str) -> bytes:
        flag, _, rest = message.partition(",")
        authzid, _, bare = rest.partition(",")
        if flag.startswith("p="):
            raise AuthenticationFailed("SCRAM channel binding is not supported")
        if flag not in ("n", "y"):
            raise AuthenticationFailed("Invalid SCRAM client-first message")
        attributes = _attributes(bare)
        user, nonce = _unescape(attributes.get("n", "")), attributes.get("r", "")
        if not user or not nonce:
            raise AuthenticationFailed("Invalid SCRAM client-first message")
        if authzid and _unescape(authzid.removeprefix("a=")) != user:
            raise AuthenticationFailed("Authentication failed: authorization id differs "
                                       "from the user name")
        credential = self._credential(user, self._mechanism)
        if credential is None:
            raise AuthenticationFailed(f"Authentication failed during authentication due to "
                                       f"invalid credentials with SASL mechanism "
                                       f"{self._mechanism}")
        nonce += base64.b64encode(os.urandom(24)).decode()
        server_first = (f"r={nonce},s={base64.b64encode(credential.salt).decode()},"
                        f"i={credential.iterations}")
        self._state = (user, bare, server_first, credential)
        return server_first.encode()

    def _final(self, message: str) -> bytes:
        assert self._state is not None
        user, client_first_bare, server_first, credential = self._state
        without_proof, sep, proof = message.rpartition(",p=")
        attributes = _attributes(without_proof) if sep else {}
        if not sep or attributes.get("r") != _attributes(server_first)["r"]:
            raise AuthenticationFailed("Invalid SCRAM client-final message")
        auth_message = f"{client_first_bare},{server_first},{without_proof}".encode()
        expected = signature(self._mechanism, credential.stored_key, auth_message)
        try:
            client_proof = base64.b64decode(proof, validate=True)
        except ValueError:
            raise AuthenticationFailed("Invalid SCRAM client-final message") from None
        if len(client_proof) != len(expected) or not hmac.compare_digest(
                stored_key(self._mechanism, xor(client_proof, expected)), credential.stored_key):
            raise AuthenticationFailed(f"Authentication failed during authentication due to "
                                       f"invalid credentials with SASL mechanism "
                                       f"{self._mechanism}")
        self.username, self.complete = user, True
        verifier = signature(self._mechanism, credential.server_key, auth_message)
        return f"v={base64.b64encode(verifier).decode()}".encode()


Authenticator = PlainAuthenticator | ScramAuthenticator
