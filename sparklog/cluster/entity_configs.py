"""Configs of named entities of one type in ZooKeeper, as Kafka's ZooKeeper-era brokers keep
them (client-metrics subscriptions, Kafka 3.7's ``client-metrics``; dynamic broker configs,
``brokers``, named by broker id or ``<default>``, which Kafka writes as they are).

Layout: ``/config/<type>/<name, URL-encoded unless the type's encode says otherwise>`` =
``{"version":1,"config":{...}}``; each change adds ``/config/changes/config_change_<seq>`` =
``{"version":2,"entity_path":"<type>/<name>"}`` (``config_changes``).

Invariants:
- ``write`` replaces an entity's config (an empty one deletes its znode, as a resource
  whose every config was deleted is gone) with ``config_changes.alter_config``: the config
  and its notification in one transaction, races retried, an unchanged config not written.
- ``start`` hands every entity's config to ``on_change``, then listens to the session's
  ``/config/changes`` watcher (``config_changes.ConfigChanges``) for this type, from the
  sequence it had before the load: each notification naming an entity of the type makes
  ``on_change`` hear its config read again (``{}`` once it is gone). ``on_change`` runs on
  kazoo's threads and must not block. ``close`` stops listening.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from sparklog.cluster.config_changes import (
    ConfigChanges,
    Listener,
    alter_config,
    decode_config,
)
from sparklog.cluster.security_store import sanitize


class EntityConfigs:
    """The configs of the entities of ``entity_type`` (``client-metrics``) over ``zk``."""

    def __init__(self, zk: KazooClient, entity_type: str,
                 on_change: Callable[[str, dict[str, str]], None],
                 encode: Callable[[str], str] = sanitize) -> None:
        self.zk = zk
        self.encode = encode
        self.entity_type = entity_type
        self.root = f"/config/{entity_type}"
        self.on_change = on_change
        self._listener: Listener | None = None

    def path(self, name: str) -> str:
        return f"{self.root}/{self.encode(name)}"

    def start(self) -> None:
        """Load every entity and listen for changes (blocking: a worker thread)."""
        self.zk.ensure_path(self.root)
        changes = ConfigChanges(self.zk)
        since = changes.latest()
        for child in self.zk.get_children(self.root):
            self._read(urllib.parse.unquote(child))
        self._listener = changes.listen(
            (self.entity_type,),
            lambda entity: self._read(urllib.parse.unquote(entity.partition("/")[2])), since)

    def close(self) -> None:
        if self._listener is not None:
            self._listener.leave()

    def _read(self, name: str) -> None:
        try:
            config = decode_config(self.zk.get(self.path(name))[0])
        except NoNodeError:
            config = {}
        self.on_change(name, config)

    def write(self, name: str, config: dict[str, str]) -> None:
        """Replace the entity's config (``{}``: delete it) and announce the change
        (blocking: a worker thread)."""
        alter_config(self.zk, f"{self.entity_type}/{self.encode(name)}", lambda _: config,
                     delete_when_empty=True)
