"""Configs of named entities a broker keeps in a store: a single node's file in the data
directory, or ZooKeeper's ``/config/<type>`` once the broker joined a cluster (client-metrics
subscriptions, dynamic broker configs).

Invariants:
- ``alter`` validates, writes the store (blocking: in a worker thread; one write at a time,
  applied in that order), then applies here; the other brokers apply it when the store's
  notification reaches them (``EntityConfigs``, a listener of the session's one
  ``/config/changes`` watcher), and a broker hearing its own write changes nothing
  (``apply`` of the same config is a no-op in each subclass).
- ``join_cluster`` drops what the data directory's file gave (with a warning when it held
  any: it is not read in a cluster) and loads ZooKeeper's before it returns.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sparklog.cluster.entity_configs import EntityConfigs
from sparklog.cluster.security_store import sanitize
from sparklog.storage.checkpoint import write_atomically

log = logging.getLogger(__name__)


class LocalEntityConfigs:
    """A single node's configs: ``{name: {key: value}}`` in one JSON file, replaced
    atomically on every change."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.configs: dict[str, dict[str, str]] = json.loads(self.path.read_text()) \
            if self.path.exists() else {}

    def write(self, name: str, config: dict[str, str]) -> None:
        if config:
            self.configs[name] = config
        elif self.configs.pop(name, None) is None:
            return
        write_atomically(self.path, json.dumps(self.configs, indent=1, sort_keys=True).encode())


class StoredEntityConfigs:
    """The stored configs of one entity type; subclasses give ``validate`` and ``apply``."""

    entity_type = ""
    """ZooKeeper's name of the type (``/config/<entity_type>``)."""
    what = ""
    """What the configs are, in log lines."""
    encode: Callable[[str], str] = staticmethod(sanitize)
    """A name as its znode is named."""

    def __init__(self, local: LocalEntityConfigs | None) -> None:
        self._store: LocalEntityConfigs | EntityConfigs | None = local
        self._cluster: EntityConfigs | None = None
        self._writing = asyncio.Lock()

    def load(self) -> None:
        """Apply what the data directory's file holds (once, when the subclass is ready)."""
        if isinstance(self._store, LocalEntityConfigs):
            for name, config in self._store.configs.items():
                self.apply(name, config)

    def validate(self, name: str, config: Mapping[str, str]) -> None:
        raise NotImplementedError

    def apply(self, name: str, config: dict[str, str]) -> None:
        raise NotImplementedError

    def names(self) -> list[str]:
        raise NotImplementedError

    async def alter(self, name: str, config: dict[str, str]) -> None:
        """Make ``config`` entity ``name``'s (``{}``: delete it) in the store, then here."""
        self.validate(name, config)
        async with self._writing:
            if self._store is not None:
                await asyncio.get_running_loop().run_in_executor(None, self._store.write,
                                                                 name, config)
            self.apply(name, config)

    async def join_cluster(self, zk: Any) -> None:
        """Serve the cluster's configs (ZooKeeper's, over the session's started
        ``KazooClient``) instead of the data directory's, loaded before this returns."""
        loop = asyncio.get_running_loop()
        if isinstance(self._store, LocalEntityConfigs) and self._store.configs:
            log.warning("%s is a single node's and is not read in a cluster, whose %s are "
                        "ZooKeeper's", self._store.path, self.what)
        for name in self.names():
            self.apply(name, {})
        self._cluster = EntityConfigs(
            zk, self.entity_type, lambda name, config: loop.call_soon_threadsafe(
                self.apply, name, config), encode=self.encode)
        self._store = self._cluster
        # the loaded configs reach the loop (call_soon_threadsafe) before this resumes
        await loop.run_in_executor(None, self._cluster.start)

    def leave_cluster(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
