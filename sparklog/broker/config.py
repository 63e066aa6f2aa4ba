"""Broker configuration: Kafka's broker property names and defaults, from a file and --set.

Invariants:
- Keys are Kafka's (``num.partitions``, ``log.segment.bytes``...). Values stay strings until
  read through a typed getter, exactly like a ``server.properties`` file.
- Precedence: built-in defaults < ``--config FILE`` < ``--set key=value``.
- An unknown key is kept (Kafka logs and ignores it) and reported by ``unknown_keys``; a
  known key with a bad value fails at start-up with a message naming key and value.
- ``metrics.listener`` (sparklog's own: the Prometheus endpoint and status page) is empty
  (off) or ``http://HOST:PORT``; port 0 takes any free port.
- ``schema.registry.listeners`` (the schema registry's REST API, ``broker/schema_registry``)
  is empty (off) or one ``http://HOST:PORT``, like ``metrics.listener``.
- ``zookeeper.connect`` empty (the default) is the single-node broker; set, the broker joins
  the cluster it names (``sparklog.broker.replication.replica_manager``) as ``broker_id``
  (``broker.id``, else ``node.id``).
- ``listeners`` and ``advertised.listeners`` are Kafka's ``NAME://HOST:PORT`` lists: names
  are unique, every advertised name is a listener's, and every listener's name maps to a
  security protocol in ``listener.security.protocol.map`` whose settings check out
  (``security.listener.ListenerSecurity.check``; TLS files are read later, before binding).
- ``group.consumer.assignors`` names Kafka's server-side assignors (``uniform``, ``range``,
  or their class names), and ``group.consumer.migration.policy`` is one of Kafka's
  (``bidirectional``, ``upgrade``, ``downgrade``, ``disabled``; any case): both checked here.
- ``client.telemetry.default.metrics``, ``.interval.ms`` and ``.match`` preset one client
  metrics subscription (KIP-714), checked here as Kafka checks a CLIENT_METRICS resource
  (``broker/client_metrics.py``); ``telemetry.max.bytes`` is at least 1.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from urllib.parse import urlsplit

from sparklog.broker.client_metrics import preset_subscriptions
from sparklog.broker.security.listener import ListenerSecurity
from sparklog.broker.security.settings import check_authorizer_settings, is_security_key
from sparklog.coordinator.consumer_group_coordinator import ConsumerGroupConfig
from sparklog.errors import InvalidConfigError
from sparklog.properties import read_properties
from sparklog.storage.config import CONFIG_KEYS, ConfigKey, broker_defaults

log = logging.getLogger(__name__)

# Broker-only settings (topic defaults such as log.segment.bytes come from storage.config).
BROKER_DEFAULTS: dict[str, str] = {
    "node.id": "0",
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "advertised.listeners": "",
    "listener.security.protocol.map":
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
    "log.dirs": "/tmp/sparklog-logs",
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "delete.topic.enable": "true",
    "socket.request.max.bytes": "104857600",
    # connections (Kafka's: no limit by default) and descriptors (log.open.files.max is
    # sparklog's own, -1: a quarter of the descriptor limit; max.broker.partitions KIP-578's
    # name, -1: ten per descriptor; storage/log_manager.py)
    "max.connections": "2147483647",
    "max.connections.per.ip": "2147483647",
    "log.open.files.max": "-1",
    "max.broker.partitions": "-1",
    "max.request.partition.size.limit": "2000",
    "log.retention.check.interval.ms": "300000",
    "log.flush.scheduler.interval.ms": "1000",
    "log.flush.offset.checkpoint.interval.ms": "60000",
    "offsets.topic.num.partitions": "50",
    "offsets.topic.segment.bytes": "104857600",
    "offsets.load.buffer.size": "5242880",
    "offsets.retention.minutes": "10080",
    "offsets.retention.check.interval.ms": "600000",
    "offset.metadata.max.bytes": "4096",
    "group.initial.rebalance.delay.ms": "3000",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    "group.consumer.session.timeout.ms": "45000",
    "group.consumer.heartbeat.interval.ms": "5000",
    "group.consumer.assignors": "uniform,range",
    "group.consumer.max.size": "2147483647",
    "group.consumer.migration.policy": "bidirectional",
    "producer.id.expiration.ms": "86400000",
    "transaction.state.log.num.partitions": "50",
    "transaction.state.log.segment.bytes": "104857600",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.load.buffer.size": "5242880",
    "transaction.max.timeout.ms": "900000",
    "transactional.id.expiration.ms": "604800000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "10000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "3600000",
    "log.cleaner.enable": "true",
    "log.cleaner.backoff.ms": "15000",
    "log.cleaner.dedupe.buffer.size": "134217728",
    "log.cleaner.threads": "1",
    "metrics.listener": "",
    # the schema registry's REST API (broker/schema_registry; empty: off)
    "schema.registry.listeners": "",
    "quota.window.num": "11",
    "quota.window.size.seconds": "1",
    # replication (a cluster: set zookeeper.connect; empty runs the single-node broker)
    "broker.id": "-1",
    "broker.rack": "",
    "zookeeper.connect": "",
    "zookeeper.session.timeout.ms": "18000",
    "replica.lag.time.max.ms": "30000",
    "replica.fetch.wait.max.ms": "500",
    "replica.fetch.max.bytes": "1048576",
    "controlled.shutdown.enable": "true",
    "offsets.topic.replication.factor": "3",
    "auto.leader.rebalance.enable": "true",
    "leader.imbalance.check.interval.seconds": "300",
    # client telemetry (KIP-714): the largest push Kafka accepts, and a preset subscription
    # (broker/client_metrics.py; no metrics: off, as Kafka until one is configured)
    "telemetry.max.bytes": "1048576",
    "client.telemetry.default.metrics": "",
    "client.telemetry.default.interval.ms": "300000",
    "client.telemetry.default.match": "",
}

_INT_KEYS = {
    "node.id", "num.partitions", "default.replication.factor", "socket.request.max.bytes",
    "max.connections", "max.connections.per.ip", "log.open.files.max", "max.broker.partitions",
    "max.request.partition.size.limit",
    "log.retention.check.interval.ms", "log.flush.scheduler.interval.ms",
    "log.flush.offset.checkpoint.interval.ms", "offsets.topic.num.partitions",
    "offsets.topic.segment.bytes", "offsets.load.buffer.size",
    "transaction.state.log.num.partitions", "transaction.state.log.segment.bytes",
    "transaction.state.log.replication.factor", "transaction.state.log.min.isr",
    "transaction.state.log.load.buffer.size", "transaction.max.timeout.ms",
    "transactional.id.expiration.ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    "transaction.remove.expired.transaction.cleanup.interval.ms",
    "offsets.retention.minutes", "offsets.retention.check.interval.ms",
    "offset.metadata.max.bytes", "group.initial.rebalance.delay.ms",
    "group.min.session.timeout.ms", "group.max.session.timeout.ms", "producer.id.expiration.ms",
    "group.consumer.session.timeout.ms", "group.consumer.heartbeat.interval.ms",
    "group.consumer.max.size", "log.retention.hours", "log.retention.minutes", "log.roll.hours",
    "log.cleaner.backoff.ms", "log.cleaner.dedupe.buffer.size", "log.cleaner.threads",
    "broker.id", "zookeeper.session.timeout.ms", "replica.lag.time.max.ms",
    "replica.fetch.wait.max.ms", "replica.fetch.max.bytes", "offsets.topic.replication.factor",
    "leader.imbalance.check.interval.seconds", "telemetry.max.bytes",
    "client.telemetry.default.interval.ms", "quota.window.num", "quota.window.size.seconds",
}
_BOOL_KEYS = {"auto.create.topics.enable", "delete.topic.enable", "log.cleaner.enable",
              "controlled.shutdown.enable", "auto.leader.rebalance.enable"}
_LISTENER = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<host>\[[0-9a-fA-F:.]*\]|[^:/\[\]]*)"
                       r":(?P<port>\d{1,5})$")

TOPIC_DEFAULTS: Mapping[str, ConfigKey] = MappingProxyType(
    {k.broker_synonym: k for k in CONFIG_KEYS.values() if k.broker_synonym})
"""Broker keys of topic defaults (``log.segment.bytes``) -> the topic config they default."""


_LIST_KEYS = {"ssl.enabled.protocols", "sasl.enabled.mechanisms", "group.consumer.assignors",
              "client.telemetry.default.metrics", "client.telemetry.default.match"}


def config_type(key: str) -> str | None:
    """A broker config's type in ``ConfigKey.type``'s words (a topic default's is its topic
    config's; the other settings the broker knows are strings, as Kafka types its listeners,
    directories and principals), None when this broker does not know it."""
    if key in _BOOL_KEYS or key == "allow.everyone.if.no.acl.found":
        return "boolean"
    if key in _INT_KEYS or key == "connection.failed.authentication.delay.ms":
        return "int"
    if key in _LIST_KEYS:
        return "list"
    topic_key = TOPIC_DEFAULTS.get(key)
    if topic_key is not None:
        return topic_key.type
    return "string" if key in BROKER_DEFAULTS or is_security_key(key) else None


class BrokerConfig:
    def __init__(self, props: Mapping[str, str] | None = None) -> None:
        self.explicit = frozenset(props or {})
        self.props = dict(BROKER_DEFAULTS)
        self.props.update(props or {})
        for key in _INT_KEYS & self.props.keys():
            self.get_int(key)
        for key in _BOOL_KEYS & self.props.keys():
            self.get_bool(key)
        self.topic_defaults = broker_defaults(self.props)  # validates log.* values
        self.metrics_listener()
        self.schema_registry_listener()
        self._check_listeners()
        if self.get_int("telemetry.max.bytes") < 1:
            raise InvalidConfigError(f"invalid value {self.props['telemetry.max.bytes']!r} "
                                     "for broker config telemetry.max.bytes: at least 1")
        preset_subscriptions(self.props)  # a bad preset stops the broker at start
        ConsumerGroupConfig.from_props(self.props)  # an unknown assignor or policy too

    @classmethod
    def load(cls, path: Path | None = None, overrides: Iterable[str] = ()) -> BrokerConfig:
        props = read_properties(path) if path else {}
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise InvalidConfigError(f"--set expects key=value, got {item!r}")
            props[key.strip()] = value.strip()
        config = cls(props)
        for key in config.unknown_keys():
            log.warning("ignoring unknown broker config %s", key)
        return config

    def unknown_keys(self) -> list[str]:
        known = BROKER_DEFAULTS.keys() | _INT_KEYS | TOPIC_DEFAULTS.keys() | {
            "log.retention.ms", "log.retention.minutes", "log.roll.hours"}
        return sorted(k for k in self.props if k not in known and not is_security_key(k))

    def listeners(self, key: str = "listeners") -> dict[str, tuple[str, int]]:
        """``listeners`` or ``advertised.listeners``: name -> (host, port), in their order."""
        value = self.props[key]
        found: dict[str, tuple[str, int]] = {}
        for item in (i.strip() for i in value.split(",") if i.strip()):
            match = _LISTENER.match(item)
            if not match or int(match["port"]) > 65535 or match["name"] in found:
                twice = match is not None and match["name"] in found
                why = "a listener named twice" if twice else "expected NAME://HOST:PORT,..."
                raise InvalidConfigError(
                    f"invalid value {value!r} for broker config {key}: {why}, e.g. "
                    "PLAINTEXT://0.0.0.0:9092,PLAINTEXT_HOST://0.0.0.0:29092")
            found[match["name"]] = (match["host"].strip("[]"), int(match["port"]))
        return found

    def _check_listeners(self) -> None:
        listeners = self.listeners()
        if not listeners:
            raise InvalidConfigError("broker config listeners is empty: name at least one, "
                                     "e.g. PLAINTEXT://0.0.0.0:9092")
        unknown = sorted(self.listeners("advertised.listeners").keys() - listeners.keys())
        if unknown:
            raise InvalidConfigError(
                f"advertised.listeners names {', '.join(unknown)}, not one of listeners "
                f"({', '.join(listeners)})")
        for name, protocol in self.security_protocols().items():
            ListenerSecurity.check(self.props, name, protocol)
        check_authorizer_settings(self.props)

    def security_protocols(self) -> dict[str, str]:
        """Every listener's security protocol (``listener.security.protocol.map``)."""
        protocols = dict(item.strip().partition(":")[::2]
                         for item in self.props["listener.security.protocol.map"].split(","))
        found = {}
        for name in self.listeners():
            protocol = protocols.get(name)
            if protocol is None:
                raise InvalidConfigError(
                    f"listener {name} has no security protocol in "
                    f"listener.security.protocol.map: add {name}:PLAINTEXT")
            found[name] = protocol
        return found

    def metrics_listener(self) -> tuple[str, int] | None:
        """``metrics.listener`` as (host, port); None when it is not set (no listener)."""
        return self._http_listener("metrics.listener", 9404)

    def schema_registry_listener(self) -> tuple[str, int] | None:
        """``schema.registry.listeners`` as (host, port); None when it is not set."""
        return self._http_listener("schema.registry.listeners", 8081)

    def _http_listener(self, key: str, example_port: int) -> tuple[str, int] | None:
        """An ``http://HOST:PORT`` setting as (host, port); None when it is empty."""
        value = self.props[key].strip()
        if not value:
            return None
        url = urlsplit(value)
        try:
            port = url.port
        except ValueError:
            port = None
        if url.scheme != "http" or not url.hostname or port is None or url.path not in ("", "/"):
            raise InvalidConfigError(
                f"invalid value {value!r} for broker config {key}: expected "
                f"http://HOST:PORT, e.g. http://127.0.0.1:{example_port}")
        return url.hostname, port

    @property
    def broker_id(self) -> int:
        """``broker.id`` (ZooKeeper-era name) when set, else ``node.id``."""
        broker_id = self.get_int("broker.id")
        return broker_id if broker_id >= 0 else self.get_int("node.id")

    @property
    def zookeeper_connect(self) -> str | None:
        """``zookeeper.connect`` (``host:port,...[/chroot]``); None runs the single node."""
        return self.props["zookeeper.connect"].strip() or None

    def get(self, key: str) -> str:
        return self.props[key]

    def get_int(self, key: str) -> int:
        try:
            return int(self.props[key])
        except ValueError:
            raise InvalidConfigError(
                f"invalid value {self.props[key]!r} for broker config {key}: expected an integer"
            ) from None

    def get_bool(self, key: str) -> bool:
        value = self.props[key].strip().lower()
        if value not in ("true", "false"):
            raise InvalidConfigError(
                f"invalid value {self.props[key]!r} for broker config {key}: expected true or false"
            )
        return value == "true"
