"""Dynamic broker configs: the ones Kafka lets ``kafka-configs.sh --entity-type brokers
--alter`` change at run time, per broker (``--entity-name ID``) or for every broker of the
cluster (``--entity-default``).

Invariants:
- The configs that may change are the topic defaults (every ``log.*`` synonym of a topic
  config, ``message.max.bytes``, ``min.insync.replicas``, ...: Kafka's DynamicLogConfig);
  any other key is INVALID_REQUEST, ``Cannot update these configs dynamically: ...`` as
  Kafka answers. A bad value is INVALID_CONFIG naming it, before anything is stored.
- Precedence, as Kafka's: this broker's dynamic config > the cluster-wide default >
  ``server.properties`` / ``--set`` > Kafka's default. ``source`` names the layer a value
  comes from, ``synonyms`` lists every layer that sets it, most specific first.
- They are stored as Kafka stores them: on a cluster ZooKeeper's ``/config/brokers/<id>``
  and ``/config/brokers/<default>`` with a change notification (``EntityConfigs``), which
  every broker applies; on a single node the data directory's ``dynamic-broker-configs.json``
  (``{"<default>": {...}, "<id>": {...}}``). A restart reads them back.
- Applied live: the effective topic defaults are handed to ``on_defaults`` (the log
  manager's, so every topic without an override of that config follows at once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sparklog.broker.config import TOPIC_DEFAULTS
from sparklog.broker.entity_store import LocalEntityConfigs, StoredEntityConfigs
from sparklog.errors import InvalidRequestError
from sparklog.protocol.versions import ConfigSource
from sparklog.storage.config import broker_defaults

log = logging.getLogger(__name__)

DEFAULT = "<default>"
"""The store's name of the cluster-wide default (Kafka's ConfigEntityName.DEFAULT); a
config resource names it ""."""
ENTITY_TYPE = "brokers"
STORE_FILE = "dynamic-broker-configs.json"
DYNAMIC = frozenset(TOPIC_DEFAULTS)
"""The broker configs that may change at run time here (Kafka's DynamicLogConfig)."""


class DynamicBrokerConfigs(StoredEntityConfigs):
    entity_type = ENTITY_TYPE
    what = "dynamic broker configs"
    encode = staticmethod(str)  # Kafka writes /config/brokers/<default> as it is

    def __init__(self, broker_id: int, static: Mapping[str, str], explicit: frozenset[str],
                 on_defaults: Callable[[dict[str, Any]], None],
                 data_dir: Path | None = None) -> None:
        super().__init__(LocalEntityConfigs(data_dir / STORE_FILE) if data_dir else None)
        self.broker_id = str(broker_id)
        self._static, self._explicit = dict(static), explicit
        self._on_defaults = on_defaults
        self.configs: dict[str, dict[str, str]] = {}
        """What the store holds: ``DEFAULT`` and broker ids -> their dynamic configs."""
        self.load()

    def names(self) -> list[str]:
        return list(self.configs)

    @staticmethod
    def store_name(resource_name: str) -> str:
        return resource_name or DEFAULT

    def validate(self, name: str, config: Mapping[str, str]) -> None:
        """Kafka's checks: only dynamic keys, values the topic defaults accept."""
        static = sorted(config.keys() - DYNAMIC)
        if static:
            raise InvalidRequestError("Cannot update these configs dynamically: "
                                      + ", ".join(static))
        broker_defaults({**self._static, **config})  # InvalidConfigError for a bad value

    def apply(self, name: str, config: dict[str, str]) -> None:
        """What the store holds for ``name``; this broker's topic defaults follow."""
        if config == self.configs.get(name, {}):
            return
        if config:
            self.configs[name] = dict(config)
        else:
            self.configs.pop(name, None)
        if name in (DEFAULT, self.broker_id):
            log.info("dynamic broker configs of %s now %s", name, config)
            self._on_defaults(broker_defaults(self.effective()))

    def effective(self, name: str | None = None) -> dict[str, str]:
        """The broker properties in force at ``name``'s level (this broker's by default;
        ``DEFAULT``: without any broker's own)."""
        layers = [self._static, self.configs.get(DEFAULT, {})]
        if name != DEFAULT:
            layers.append(self.configs.get(name or self.broker_id, {}))
        return {k: v for layer in layers for k, v in layer.items()}

    def layers(self, key: str, name: str | None = None
               ) -> list[tuple[ConfigSource, str]]:
        """(source, value) of every layer setting ``key``, most specific first."""
        found = []
        if name != DEFAULT and key in self.configs.get(name or self.broker_id, {}):
            found.append((ConfigSource.DYNAMIC_BROKER_CONFIG,
                          self.configs[name or self.broker_id][key]))
        if key in self.configs.get(DEFAULT, {}):
            found.append((ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                          self.configs[DEFAULT][key]))
        if key in self._explicit:
            found.append((ConfigSource.STATIC_BROKER_CONFIG, self._static[key]))
        return found
