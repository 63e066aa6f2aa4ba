"""Configs of named entities of one type in ZooKeeper, as Kafka's ZooKeeper-era brokers keep
them (client-metrics subscriptions, Kafka 3.7's ``client-metrics``; dynamic broker configs,
``brokers``, named by broker id or ``<default>``, which Kafka writes as they are).

Layout: ``/config/<type>/<name, URL-encoded unless the type's encode says otherwise>`` =
``{"version":1,"config":{...}}``; each
change adds ``/config/changes/config_change_<seq>`` = ``{"version":2,"entity_path":
"<type>/<name>"}``, the notification topic configs (``session``) and SCRAM users
(``security_store``) share.

Invariants:
- ``write`` replaces an entity's config (an empty one deletes its znode, as a resource
  whose every config was deleted is gone) and adds its notification in one ZooKeeper
  transaction; a race with another writer creating or deleting the znode is retried.
- ``start`` hands every entity's config to ``on_change``, then watches ``/config/changes``:
  each notification newer than the last one handled that names this type makes
  ``on_change`` hear the entity's config read again (``{}`` once it is gone), so replayed or
  coalesced notifications are harmless. ``on_change`` runs on kazoo's threads and must not
  block. Expired notifications are purged by the other readers and writers of the path.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from sparklog.cluster.security_store import CONFIG_CHANGE_PREFIX, CONFIG_CHANGES, sanitize

log = logging.getLogger(__name__)


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
        self._seen = -1
        self._closed = False

    def path(self, name: str) -> str:
        return f"{self.root}/{self.encode(name)}"

    def start(self) -> None:
        """Load every entity and watch for changes (blocking: a worker thread)."""
        for path in (self.root, CONFIG_CHANGES):
            self.zk.ensure_path(path)
        self._seen = max((seq for seq, _ in self._notifications(
            self.zk.get_children(CONFIG_CHANGES))), default=-1)
        for child in self.zk.get_children(self.root):
            self._read(urllib.parse.unquote(child))
        self.zk.ChildrenWatch(CONFIG_CHANGES, self._changed)

    def close(self) -> None:
        self._closed = True

    def _read(self, name: str) -> None:
        try:
            data = json.loads(self.zk.get(self.path(name))[0])
        except NoNodeError:
            data = {}
        self.on_change(name, {k: str(v) for k, v in data.get("config", {}).items()})

    @staticmethod
    def _notifications(children: list[str]) -> list[tuple[int, str]]:
        return sorted((int(c.removeprefix(CONFIG_CHANGE_PREFIX)), c) for c in children
                      if c.startswith(CONFIG_CHANGE_PREFIX))

    def _changed(self, children: list[str]) -> bool:
        if self._closed:
            return False
        try:
            names: list[str] = []
            for sequence, child in self._notifications(children):
                if sequence <= self._seen:
                    continue
                self._seen = sequence
                try:
                    entity = json.loads(self.zk.get(f"{CONFIG_CHANGES}/{child}")[0])
                except NoNodeError:  # purged meanwhile: a newer one follows it
                    continue
                kind, _, name = str(entity.get("entity_path", "")).partition("/")
                if kind == self.entity_type and name and name not in names:
                    names.append(name)
            for name in names:
                self._read(urllib.parse.unquote(name))
        except Exception:
            if not self._closed:  # a closing session's reads fail: nothing to report
                log.exception("reading the %s configs changed in ZooKeeper failed",
                              self.entity_type)
        return True

    def write(self, name: str, config: dict[str, str]) -> None:
        """Replace the entity's config (``{}``: delete it) and announce the change
        (blocking: a worker thread)."""
        path = self.path(name)
        notification = json.dumps({"version": 2,
                                   "entity_path": f"{self.entity_type}/{self.encode(name)}"},
                                  separators=(",", ":")).encode()
        data = json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()
        self.zk.ensure_path(self.root)
        while True:
            exists = self.zk.exists(path) is not None
            if not exists and not config:
                return
            transaction = self.zk.transaction()
            if not config:
                transaction.delete(path)
            elif exists:
                transaction.set_data(path, data)
            else:
                transaction.create(path, data)
            transaction.create(f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}", notification,
                               sequence=True)
            failures = [r for r in transaction.commit() if isinstance(r, Exception)]
            if not failures:
                return
            if not any(isinstance(f, (NodeExistsError, NoNodeError)) for f in failures):
                raise failures[0]
