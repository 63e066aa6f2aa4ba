"""Client quota configs (Kafka's ``/config/users`` and ``/config/clients`` quotas): the
entities, their keys and the store a broker keeps them in.

Invariants:
- An entity is Kafka's ``ClientQuotaEntity``: a ``user`` and/or a ``client-id`` component,
  each a name or None for the default entity of its type (``Entity``: (type, name) pairs
  sorted by type). Its path is ZooKeeper's: ``users/<user>``, ``clients/<client-id>``,
  ``users/<user>/clients/<client-id>``, a name URL-encoded as Kafka's ``Sanitizer`` does and
  ``<default>`` for the default.
- Keys are Kafka's: ``producer_byte_rate`` and ``consumer_byte_rate`` (LONG, bytes per
  second), ``request_percentage`` (DOUBLE, percent of one request thread). Values are kept
  as Kafka writes them in ZooKeeper, strings (``1024``, ``50.0``), read as floats.
- On a single node the store is ``client-quotas.json`` in the data directory (entity path
  -> config), replaced atomically on every change; on a cluster (``ClientQuotas(None)``) it
  is this broker's view of ZooKeeper's entity configs (``replace``), as ``ScramStore`` is.
- ``generation`` changes on every change and ``keys_in_use`` is the set of keys some
  entity sets: enforcement caches its lookups per generation and skips a key nobody set,
  so with no quota a request pays one set lookup.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

from sparklog.storage.checkpoint import write_atomically

STORE_FILE = "client-quotas.json"
USER, CLIENT_ID = "user", "client-id"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
QUOTA_KEYS = {PRODUCER_BYTE_RATE: "LONG", CONSUMER_BYTE_RATE: "LONG",
              REQUEST_PERCENTAGE: "DOUBLE"}
"""Quota key -> Kafka's config type (a LONG must be given as a whole number)."""
DEFAULT = "<default>"
"""Kafka's ``ConfigEntityName.Default``: the default entity's name in a path."""
_ROOTS = {USER: "users", CLIENT_ID: "clients"}

Entity = tuple[tuple[str, str | None], ...]
"""(entity type, name or None for the default) pairs, sorted by type."""


def entity(user: str | bool | None = False, client_id: str | bool | None = False) -> Entity:
    """The entity with the given components (False: no such component, None: default)."""
    parts = []
    if client_id is not False:
        parts.append((CLIENT_ID, client_id))
    if user is not False:
        parts.append((USER, user))
    return tuple(parts)  # type: ignore[arg-type]


def sanitize(name: str | None) -> str:
    """A name as Kafka writes it in a path: URL-encoded (``*`` as %2A), ``<default>``."""
    return DEFAULT if name is None else urllib.parse.quote(name, safe="-_.")


def entity_path(quota_entity: Entity) -> str:
    """The entity's config path below ``/config`` (``users/alice/clients/c1``)."""
    names = dict(quota_entity)
    if USER in names and CLIENT_ID in names:
        return f"users/{sanitize(names[USER])}/clients/{sanitize(names[CLIENT_ID])}"
    ((kind, name),) = quota_entity
    return f"{_ROOTS[kind]}/{sanitize(name)}"


def entity_of_path(path: str) -> Entity | None:
    """The entity of a config path (None: not a user or client path)."""
    parts = path.split("/")

    def name(text: str) -> str | None:
        return None if text == DEFAULT else urllib.parse.unquote(text)

    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return entity(user=name(parts[1]), client_id=name(parts[3]))
    if len(parts) == 2 and parts[0] == "users":
        return entity(user=name(parts[1]))
    if len(parts) == 2 and parts[0] == "clients":
        return entity(client_id=name(parts[1]))
    return None


def quota_values(config: Mapping[str, str]) -> dict[str, float]:
    """The quota keys of an entity's config (a user's also holds SCRAM credentials), as
    floats; an unreadable value is left out."""
    found = {}
    for key, value in config.items():
        if key in QUOTA_KEYS:
            try:
                found[key] = float(value)
            except ValueError:
                continue
    return found


def kafka_value(key: str, value: float) -> str:
    """A quota value as Kafka writes it: a LONG without decimals, a DOUBLE with them."""
    return str(int(value)) if QUOTA_KEYS[key] == "LONG" else str(float(value))


class ClientQuotas:
    """Entity -> quota key -> value, persisted in the data directory (``data_dir`` None: a
    cluster's view, persisted in ZooKeeper by others)."""

    def __init__(self, data_dir: Path | None) -> None:
        self.path = data_dir / STORE_FILE if data_dir is not None else None
        self._quotas: dict[Entity, dict[str, float]] = {}
        self.generation = 0
        self.keys_in_use: frozenset[str] = frozenset()
        if self.path is not None and self.path.exists():
            for path, config in json.loads(self.path.read_text()).items():
                found = entity_of_path(path)
                if found is not None:
                    self.replace(found, quota_values(config))

    def entries(self) -> dict[Entity, dict[str, float]]:
        """A copy: every entity with a quota and its values."""
        return {e: dict(values) for e, values in self._quotas.items()}

    def get(self, quota_entity: Entity) -> dict[str, float]:
        return self._quotas.get(quota_entity, {})

    def replace(self, quota_entity: Entity, values: Mapping[str, float]) -> None:
        """The entity's quotas are now ``values`` (none: it has no quota left)."""
        if values:
            self._quotas[quota_entity] = dict(values)
        elif self._quotas.pop(quota_entity, None) is None:
            return
        self.generation += 1
        self.keys_in_use = frozenset(k for values in self._quotas.values() for k in values)

    def alter(self, quota_entity: Entity, values: Mapping[str, float]) -> None:
        """Replace the entity's quotas and save (a single node)."""
        self.replace(quota_entity, values)
        assert self.path is not None, "a cluster's quotas are written to ZooKeeper"
        data = {entity_path(e): {k: kafka_value(k, v) for k, v in sorted(values.items())}
                for e, values in self._quotas.items()}
        write_atomically(self.path, json.dumps(data, indent=1, sort_keys=True).encode())
