"""Client metrics (KIP-714): which clients are asked to push which metrics, the client
instances that ask, and the latest value of each metric each instance pushed. Kafka's
``ClientMetricsManager``, ``ClientMetricsConfigs`` and ``ClientMetricsInstance``; the
handlers are ``broker/api/client_telemetry.py`` (and ``config_admin.py`` and
``list_config_resources.py`` for the subscriptions as config resources).

Subscriptions (Kafka's CLIENT_METRICS config resources):
- Each is named and has Kafka's three settings: ``metrics`` (a comma-separated list of
  metric name prefixes; ``*`` for every metric; empty for none), ``interval.ms`` (the push
  interval, 100 to 3,600,000, default 300,000) and ``match`` (a comma-separated list of
  ``key=regex`` over ``client_instance_id``, ``client_id``, ``client_software_name``,
  ``client_software_version``, ``client_source_address``, ``client_source_port``; a regex
  must match the whole value, every entry must match, an empty list matches every client).
  Validated as Kafka's ``ClientMetricsConfigs.validate``: an empty name, an unknown setting
  and an interval out of range are ``InvalidRequestError`` (Kafka's InvalidRequestException),
  an interval that is not an integer and a bad pattern ``InvalidConfigError``.
- The broker config presets one, named ``default``, from ``client.telemetry.default.metrics``,
  ``client.telemetry.default.interval.ms`` and ``client.telemetry.default.match``; with no
  metrics (the default) there is none and no client pushes anything, as on Kafka until an
  operator adds a subscription. ``update_subscription`` adds, replaces or (with no settings)
  removes one; each change bumps a version, and an instance made under an older version is
  evaluated again at its next request (new subscription id, metrics and interval).
- The subscriptions operators configure (CLIENT_METRICS resources, ``configs``: name ->
  the settings as given) are the store's, one shape for a single node and a cluster:
  ``alter`` validates, writes the store, then applies; a single node's store is
  ``client-metrics.json`` in the data directory (replaced atomically), a cluster's
  ZooKeeper's ``/config/client-metrics/<name>`` with Kafka's change notification
  (``cluster.entity_configs``), which every broker applies within its watch's delay
  (``join_cluster``: the single node's file is then not read). A configured subscription
  named ``default`` hides the preset while it exists. A stored subscription that does not
  validate (written by hand) is logged and left out.

An instance's subscription is every subscription that matches it (its metadata as of its
first request): the union of their metrics (just ``*`` when one asks for all), the smallest
of their intervals (300,000 when none matches, with no metrics). Its subscription id is the
CRC-32C of the sorted metrics and the interval, XOR the instance id's Java hash, as Kafka
computes it, so it changes when either changes.

Requests, as Kafka answers them:
- GetTelemetrySubscriptions: the zero id gets a new random id (so does Kafka's other
  reserved id, the metadata topic's, which Kafka would keep and then refuse every push of).
  A request within the push interval of the instance's last accepted request is
  THROTTLING_QUOTA_EXCEEDED, unless the instance's last push failed with
  UNKNOWN_SUBSCRIPTION_ID or UNSUPPORTED_COMPRESSION_TYPE
  (KIP-714: then the client must fetch its subscription at once).
- PushTelemetry, checked in this order: the zero (or reserved) id is INVALID_REQUEST; a push
  after a terminating push is INVALID_REQUEST; a push within the interval of the last one is
  THROTTLING_QUOTA_EXCEEDED, except the first after a Get and a terminating push; a
  subscription id other than the instance's is UNKNOWN_SUBSCRIPTION_ID; a compression type
  outside Kafka's (0-4) is UNSUPPORTED_COMPRESSION_TYPE; more than ``telemetry.max.bytes``
  is TELEMETRY_TOO_LARGE; a payload that does not decompress into ``telemetry.max.bytes``
  or is not OTLP ``MetricsData`` is INVALID_RECORD. The terminating flag is recorded
  whatever the answer, so a terminating push is accepted once.

Kept per instance: client id, software name and version (KIP-511), source address, last
push time, push count, last error, and the latest value of each series (metric name and
attributes): a gauge's value, a sum's total (a delta sum, as Kafka asks clients for with
``delta_temporality``, is added to it; a cumulative one replaces it), a histogram's mean;
None for a value that is not a finite number (the status is JSON, which has no NaN).

Bounds: at most ``MAX_INSTANCES`` instances (a new one evicts the least recently heard
from), each with at most ``MAX_SERIES`` series (a push's new series past that are dropped)
and at most ``MAX_SERIES`` points read per push; an instance not heard from for
max(60 s, 3 push intervals) is forgotten (Kafka's expiry), checked at every request and
every snapshot. All of it runs on the broker's event loop thread.
"""

from __future__ import annotations

import logging
import math
import re
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from sparklog.broker.entity_store import LocalEntityConfigs, StoredEntityConfigs
from sparklog.broker.monitoring.status import TelemetryClient, TelemetryMetric
from sparklog.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidConfigError,
    InvalidRequestError,
    KafkaError,
)
from sparklog.protocol.otlp_metrics import DataPoint, MalformedMetricsError, decode_metrics
from sparklog.record.compression import CODECS, GZIP, LZ4, SNAPPY, ZSTD, decompress_bounded

log = logging.getLogger(__name__)

ALL_METRICS = "*"
DEFAULT_INTERVAL_MS = 300_000
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 100, 3_600_000
MATCH_KEYS = ("client_instance_id", "client_id", "client_software_name",
              "client_software_version", "client_source_address", "client_source_port")
SETTINGS = ("metrics", "interval.ms", "match")
ACCEPTED_COMPRESSION = (ZSTD, LZ4, GZIP, SNAPPY)
"""Offered to clients in Kafka's order of preference (a client may also push uncompressed)."""
MAX_INSTANCES = 1000
MAX_SERIES = 200
MIN_EXPIRY_MS = 60_000
DEFAULT_SUBSCRIPTION = "default"
PRESET_PREFIX = "client.telemetry.default."
STORE_FILE = "client-metrics.json"
ENTITY_TYPE = "client-metrics"
RESERVED_IDS = (uuid.UUID(int=0), uuid.UUID(int=1))
"""Kafka's ``Uuid.RESERVED``: the zero id and the metadata topic's."""

Series = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True, slots=True)
class Subscription:
    name: str
    metrics: tuple[str, ...]
    interval_ms: int
    match: tuple[tuple[str, re.Pattern[str]], ...]

    @classmethod
    def parse(cls, name: str, settings: Mapping[str, str]) -> Subscription:
        """A subscription from Kafka's CLIENT_METRICS settings, validated as Kafka does."""
        if not name:
            raise InvalidRequestError("a client metrics subscription needs a name")
        unknown = sorted(settings.keys() - set(SETTINGS))
        if unknown:
            raise InvalidRequestError(f"unknown client metrics configuration {unknown[0]}: "
                                      f"expected one of {', '.join(SETTINGS)}")
        given = settings.get("interval.ms", str(DEFAULT_INTERVAL_MS)).strip()
        try:
            interval = int(given)
        except ValueError:
            raise InvalidConfigError(f"invalid value {given!r} for interval.ms of client "
                                     f"metrics subscription {name}: not an integer") from None
        if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
            raise InvalidRequestError(
                f"invalid value {given!r} for interval.ms of client metrics subscription "
                f"{name}: expected {MIN_INTERVAL_MS} to {MAX_INTERVAL_MS} (1 hour)")
        return cls(name, _list(settings.get("metrics", "")), interval,
                   tuple(_pattern(name, item) for item in _list(settings.get("match", ""))))

    def matches(self, metadata: Mapping[str, str | None]) -> bool:
        return all((value := metadata.get(key)) is not None and pattern.fullmatch(value)
                   for key, pattern in self.match)


def _list(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())


def _pattern(name: str, item: str) -> tuple[str, re.Pattern[str]]:
    parts = item.split("=")
    while len(parts) > 1 and not parts[-1]:  # Java's split drops trailing empty strings
        parts.pop()
    key = parts[0].strip()
    if len(parts) != 2 or key not in MATCH_KEYS:
        raise InvalidConfigError(
            f"illegal client matching pattern {item!r} in client metrics subscription {name}: "
            f"expected KEY=REGEX with KEY one of {', '.join(MATCH_KEYS)}")
    try:
        return key, re.compile(parts[1].strip())
    except re.error as exc:
        raise InvalidConfigError(f"illegal client matching pattern {item!r} in client "
                                 f"metrics subscription {name}: {exc}") from None


def preset_subscriptions(props: Mapping[str, str]) -> dict[str, Subscription]:
    """The subscription the broker config presets (``client.telemetry.default.*``), if any."""
    settings = {key: props.get(PRESET_PREFIX + key, "") for key in SETTINGS}
    if not _list(settings["metrics"]):
        return {}
    try:
        return {DEFAULT_SUBSCRIPTION: Subscription.parse(
            DEFAULT_SUBSCRIPTION, {k: v for k, v in settings.items() if v.strip()})}
    except KafkaError as exc:  # a broker config: the broker's config error
        raise InvalidConfigError(f"{PRESET_PREFIX}*: {exc}") from None


def _java_hash(instance_id: uuid.UUID) -> int:
    """Kafka's ``Uuid.hashCode``: the halves XORed, folded into 32 bits."""
    halves = (instance_id.int >> 64) ^ (instance_id.int & (2**64 - 1))
    return (halves >> 32) ^ (halves & 0xFFFFFFFF)


def _signed32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 2**32 if value >= 2**31 else value


@dataclass(slots=True)
class ClientInstance:
    """One client instance: what it was subscribed to, when it last asked and pushed, and
    the latest values it pushed."""

    instance_id: uuid.UUID
    metadata: dict[str, str | None]  # MATCH_KEYS -> value, as of its first request
    version: int  # the subscriptions' version it was evaluated under
    subscription_id: int
    metrics: tuple[str, ...]
    interval_ms: int
    last_get_ms: int = 0
    last_push_ms: int = 0  # the last push within the interval rules (Kafka's timestamp)
    last_seen_ms: int = 0
    pushes: int = 0
    pushed_ms: int | None = None  # the last push accepted
    terminating: bool = False
    last_error: ErrorCode = ErrorCode.NONE
    series: dict[Series, TelemetryMetric] = field(default_factory=dict)

    def accept_get(self, now_ms: int) -> bool:
        if self.last_error in (ErrorCode.UNKNOWN_SUBSCRIPTION_ID,
                               ErrorCode.UNSUPPORTED_COMPRESSION_TYPE) \
                or now_ms - max(self.last_get_ms, self.last_push_ms) >= self.interval_ms:
            self.last_get_ms = now_ms
            return True
        return False

    def accept_push(self, now_ms: int) -> bool:
        """The first push after a Get may come early (clients jitter the interval)."""
        if self.last_get_ms > self.last_push_ms or \
                now_ms - self.last_push_ms >= self.interval_ms:
            self.last_push_ms = now_ms
            return True
        return False

    def record(self, points: Iterable[DataPoint]) -> None:
        for point in points:
            key = (point.name, point.attributes)
            kept = self.series.get(key)
            if kept is None and len(self.series) >= MAX_SERIES:
                continue
            value = point.value + (kept.value or 0.0) if point.delta and kept is not None \
                else point.value
            self.series[key] = TelemetryMetric(
                point.name, point.kind, point.unit, dict(point.attributes),
                value if math.isfinite(value) else None, point.time_unix_nano // 1_000_000)

    def status(self) -> TelemetryClient:
        m = self.metadata
        return TelemetryClient(
            str(self.instance_id), m["client_id"] or "", m["client_software_name"] or "",
            m["client_software_version"] or "", m["client_source_address"] or "",
            self.subscription_id, self.metrics, self.interval_ms, self.pushes,
            self.pushed_ms, self.last_error.name,
            self.terminating, tuple(metric for _, metric in sorted(self.series.items())))


def decode_push(compression: int, payload: bytes, max_bytes: int) -> list[DataPoint]:
    """The data points of a push's payload (at most ``MAX_SERIES``);
    ``MalformedMetricsError`` for one that does not decompress into ``max_bytes`` bytes or
    is not OTLP ``MetricsData``."""
    try:
        data = decompress_bounded(compression, payload, max_bytes)
    except CorruptRecordError as exc:
        raise MalformedMetricsError(str(exc)) from exc
    return decode_metrics(data, MAX_SERIES)


class ClientMetricsManager(StoredEntityConfigs):
    entity_type = ENTITY_TYPE
    what = "client metrics subscriptions"

    def __init__(self, max_bytes: int, clock_ms: Callable[[], int],
                 subscriptions: Mapping[str, Subscription] | None = None,
                 store: LocalEntityConfigs | None = None) -> None:
        super().__init__(store)
        self.max_bytes = max_bytes
        self._clock_ms = clock_ms
        self._preset = dict(subscriptions or {})
        self.subscriptions: dict[str, Subscription] = dict(self._preset)
        self.configs: dict[str, dict[str, str]] = {}
        """The configured subscriptions (CLIENT_METRICS resources), as the store holds them."""
        self.version = 0
        self._instances: OrderedDict[uuid.UUID, ClientInstance] = OrderedDict()
        self.load()

    @classmethod
    def from_props(cls, props: Mapping[str, str], clock_ms: Callable[[], int],
                   data_dir: Path | None = None) -> ClientMetricsManager:
        return cls(int(props["telemetry.max.bytes"]), clock_ms, preset_subscriptions(props),
                   LocalEntityConfigs(data_dir / STORE_FILE) if data_dir is not None else None)

    def update_subscription(self, name: str, settings: Mapping[str, str]) -> None:
        """Add or replace subscription ``name``; no settings remove it."""
        if settings:
            self.subscriptions[name] = Subscription.parse(name, settings)
        elif self.subscriptions.pop(name, None) is None:
            return
        self.version += 1

    # -- configured subscriptions (CLIENT_METRICS resources) -------------------------------
    @staticmethod
    def validate(name: str, config: Mapping[str, str]) -> None:
        """Kafka's checks of a resource's new config (an empty one deletes it)."""
        if not name:
            raise InvalidRequestError("Subscription name can't be empty")
        if config:
            Subscription.parse(name, config)

    def apply(self, name: str, config: dict[str, str]) -> None:
        """What the store holds for ``name`` (``{}``: nothing; the preset comes back); the
        same settings again (the notification of this broker's own write) change nothing."""
        if config == self.configs.get(name, {}):
            return
        try:
            if config:
                self.update_subscription(name, config)
            elif name in self._preset:
                self.subscriptions[name] = self._preset[name]
                self.version += 1
            else:
                self.update_subscription(name, {})
        except KafkaError as exc:
            log.warning("client metrics subscription %s is left out: %s", name, exc)
            return
        if config:
            self.configs[name] = dict(config)
        else:
            self.configs.pop(name, None)

    def names(self) -> list[str]:
        return list(self.configs)

    # -- requests --------------------------------------------------------------------------
    def get_subscriptions(self, instance_id: uuid.UUID | None,
                          metadata: dict[str, str | None]) -> tuple[ErrorCode, ClientInstance]:
        now = self._clock_ms()
        if instance_id is None or instance_id in RESERVED_IDS:
            instance_id = uuid.uuid4()
            while instance_id in self._instances:
                instance_id = uuid.uuid4()
        instance = self._instance(instance_id, metadata, now)
        if not instance.accept_get(now):
            return ErrorCode.THROTTLING_QUOTA_EXCEEDED, instance
        instance.last_error = ErrorCode.NONE
        return ErrorCode.NONE, instance

    def push(self, instance_id: uuid.UUID | None, subscription_id: int, terminating: bool,
             compression: int, payload: bytes, metadata: dict[str, str | None]) -> ErrorCode:
        if instance_id is None or instance_id in RESERVED_IDS:
            return ErrorCode.INVALID_REQUEST
        now = self._clock_ms()
        instance = self._instance(instance_id, metadata, now)
        error = self._check_push(instance, subscription_id, terminating, compression,
                                 payload, now)
        instance.terminating = terminating
        if error == ErrorCode.NONE and payload:
            try:
                instance.record(decode_push(compression, payload, self.max_bytes))
            except MalformedMetricsError:
                error = ErrorCode.INVALID_RECORD
        if error == ErrorCode.NONE:
            instance.pushes, instance.pushed_ms = instance.pushes + 1, now
        instance.last_error = error
        return error

    def _check_push(self, instance: ClientInstance, subscription_id: int, terminating: bool,
                    compression: int, payload: bytes, now: int) -> ErrorCode:
        if instance.terminating:
            return ErrorCode.INVALID_REQUEST
        if not instance.accept_push(now) and not terminating:
            return ErrorCode.THROTTLING_QUOTA_EXCEEDED
        if subscription_id != instance.subscription_id:
            return ErrorCode.UNKNOWN_SUBSCRIPTION_ID
        if compression not in CODECS:
            return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        if len(payload) > self.max_bytes:
            return ErrorCode.TELEMETRY_TOO_LARGE
        return ErrorCode.NONE

    # -- instances -------------------------------------------------------------------------
    def _instance(self, instance_id: uuid.UUID, metadata: dict[str, str | None],
                  now: int) -> ClientInstance:
        """The instance (new, or evaluated again after a subscription changed), marked as
        heard from now; the expired and the least recently heard from past the cap go."""
        self._expire(now)
        instance = self._instances.pop(instance_id, None)
        if instance is None or instance.version < self.version:
            known = metadata if instance is None else instance.metadata
            fresh = self._evaluate(instance_id, known | {"client_instance_id": str(instance_id)})
            if instance is not None:  # what it pushed stays; the timing starts again
                fresh.series, fresh.pushes = instance.series, instance.pushes
                fresh.pushed_ms = instance.pushed_ms
            instance = fresh
        instance.last_seen_ms = now
        self._instances[instance_id] = instance
        while len(self._instances) > MAX_INSTANCES:
            self._instances.popitem(last=False)
        return instance

    def _evaluate(self, instance_id: uuid.UUID,
                  metadata: dict[str, str | None]) -> ClientInstance:
        matched = [s for s in self.subscriptions.values() if s.matches(metadata)]
        metrics = {m for s in matched for m in s.metrics}
        if ALL_METRICS in metrics:
            metrics = {ALL_METRICS}
        interval = min((s.interval_ms for s in matched), default=DEFAULT_INTERVAL_MS)
        ordered = tuple(sorted(metrics))
        crc = crc32c.crc32c(f"[{', '.join(ordered)}]{interval}".encode())
        return ClientInstance(instance_id, metadata, self.version,
                              _signed32(crc ^ _java_hash(instance_id)), ordered, interval)

    def _expire(self, now: int) -> None:
        gone = [i for i, instance in self._instances.items()
                if now - instance.last_seen_ms > max(MIN_EXPIRY_MS, 3 * instance.interval_ms)]
        for instance_id in gone:
            del self._instances[instance_id]

    def snapshot(self) -> list[TelemetryClient]:
        """Every instance known, by client id then instance id (an order that stays put
        while they push)."""
        self._expire(self._clock_ms())
        return sorted((instance.status() for instance in self._instances.values()),
                      key=lambda c: (c.client_id, c.client_instance_id))
