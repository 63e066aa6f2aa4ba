"""SCRAM-SHA-256 and SCRAM-SHA-512 credentials (RFC 5802, RFC 7677), stored by the broker.

Invariants:
- Only salted forms are kept: per user and mechanism the salt, iteration count, StoredKey
  and ServerKey; a password or SaltedPassword is never written or logged.
- The store is one JSON file in the data directory (``scram-credentials.json``), replaced
  atomically on every change, so a crash leaves the old or the new set, never a mix.
- Iterations are within Kafka's bounds (4096 to 16384); a request outside them is refused
  with UNACCEPTABLE_CREDENTIAL by the handler.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path

from sparklog.protocol.scram import client_key, salted_password, server_key, stored_key
from sparklog.storage.checkpoint import write_atomically

MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
"""Mechanism -> Kafka's ScramMechanism id on the wire."""
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384
DEFAULT_ITERATIONS = 8192
STORE_FILE = "scram-credentials.json"


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_salted_password(cls, mechanism: str, salt: bytes, iterations: int,
                             salted_password: bytes) -> ScramCredential:
        return cls(salt, iterations, stored_key(mechanism, client_key(mechanism, salted_password)),
                   server_key(mechanism, salted_password))

    @classmethod
    def from_password(cls, mechanism: str, password: str,
                      iterations: int = DEFAULT_ITERATIONS) -> ScramCredential:
        salt = os.urandom(32)
        return cls.from_salted_password(mechanism, salt, iterations,
                                        salted_password(mechanism, password, salt, iterations))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class ScramStore:
    """user -> mechanism -> credential, persisted in the data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / STORE_FILE
        self._users: dict[str, dict[str, ScramCredential]] = {}
        if self.path.exists():
            for user, mechanisms in json.loads(self.path.read_text()).items():
                self._users[user] = {
                    m: ScramCredential(base64.b64decode(c["salt"]), c["iterations"],
                                       base64.b64decode(c["stored_key"]),
                                       base64.b64decode(c["server_key"]))
                    for m, c in mechanisms.items()}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        """A copy: user -> mechanism -> credential, users sorted."""
        return {u: dict(self._users[u]) for u in sorted(self._users)}

    def upsert(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        self._users.setdefault(user, {})[mechanism] = credential
        self._save()

    def delete(self, user: str, mechanism: str) -> bool:
        """Whether there was such a credential (now gone)."""
        mechanisms = self._users.get(user, {})
        if mechanisms.pop(mechanism, None) is None:
            return False
        if not mechanisms:
            del self._users[user]
        self._save()
        return True

    def _save(self) -> None:
        data = {u: {m: {"salt": _b64(c.salt), "iterations": c.iterations,
                        "stored_key": _b64(c.stored_key), "server_key": _b64(c.server_key)}
                    for m, c in ms.items()} for u, ms in self._users.items()}
        write_atomically(self.path, json.dumps(data, indent=1, sort_keys=True).encode())
