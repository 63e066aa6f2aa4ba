"""SCRAM-SHA-256 and SCRAM-SHA-512 credentials (RFC 5802, RFC 7677), stored by the broker.

Invariants:
- Only salted forms are kept: per user and mechanism the salt, iteration count, StoredKey
  and ServerKey; a password or SaltedPassword is never written or logged.
- On a single node the store is one JSON file in the data directory
  (``scram-credentials.json``), replaced atomically on every change, so a crash leaves the
  old or the new set, never a mix. On a cluster (``ScramStore(None)``) it is only this
  broker's view of what ZooKeeper holds (``replace``), kept in Kafka's credential string
  (``to_kafka`` / ``from_kafka``: ``salt=<b64>,stored_key=<b64>,server_key=<b64>,
  iterations=<n>``).
- Iterations are within Kafka's bounds (4096 to 16384); a request outside them is refused
  with UNACCEPTABLE_CREDENTIAL by the handler.
"""

from __future__ import annotations

import base64
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sparklog.protocol.scram import client_key, salted_password, server_key, stored_key
from sparklog.storage.checkpoint import write_atomically

log = logging.getLogger(__name__)

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

    def to_kafka(self) -> str:
        """Kafka's form of a credential in ``/config/users/<user>``."""
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
                f"server_key={_b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_kafka(cls, value: str) -> ScramCredential:
        fields = dict(part.partition("=")[::2] for part in value.split(","))
        return cls(base64.b64decode(fields["salt"]), int(fields["iterations"]),
                   base64.b64decode(fields["stored_key"]), base64.b64decode(fields["server_key"]))


def credentials_of(user: str, config: Mapping[str, str]) -> dict[str, ScramCredential]:
    """The SCRAM credentials in a user's config from ZooKeeper (``/config/users/<user>``:
    mechanism -> Kafka's string; other keys, such as quotas, are not credentials). An
    unreadable one is left out with a warning naming the user and mechanism only."""
    found = {}
    for mechanism, value in config.items():
        if mechanism in MECHANISM_IDS:
            try:
                found[mechanism] = ScramCredential.from_kafka(value)
            except (KeyError, ValueError):
                log.warning("ignoring an unreadable %s credential of user %s in ZooKeeper",
                            mechanism, user)
    return found


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class ScramStore:
    """user -> mechanism -> credential, persisted in the data directory (``data_dir`` None:
    a cluster's view, persisted in ZooKeeper by others)."""

    def __init__(self, data_dir: Path | None) -> None:
        self.path = data_dir / STORE_FILE if data_dir is not None else None
        self._users: dict[str, dict[str, ScramCredential]] = {}
        if self.path is not None and self.path.exists():
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

    def replace(self, user: str, credentials: dict[str, ScramCredential]) -> None:
        """The user's credentials are now ``credentials`` (none: the user is gone)."""
        if credentials:
            self._users[user] = dict(credentials)
        else:
            self._users.pop(user, None)

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
        assert self.path is not None, "a cluster's credentials are written to ZooKeeper"
        data = {u: {m: {"salt": _b64(c.salt), "iterations": c.iterations,
                        "stored_key": _b64(c.stored_key), "server_key": _b64(c.server_key)}
                    for m, c in ms.items()} for u, ms in self._users.items()}
        write_atomically(self.path, json.dumps(data, indent=1, sort_keys=True).encode())
