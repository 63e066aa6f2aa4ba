"""The source's ``kafka.*`` options as the settings of its Kafka client, validated.

Invariants:
- ``client_config`` refuses, with ``OptionError`` naming the option, what Spark's Kafka
  source refuses (``kafka.auto.offset.reset``, deserializers, auto commit, interceptors)
  and reads Kafka's security settings (``kafka.security.protocol``, ``kafka.sasl.*``,
  ``kafka.ssl.*``: TLS, SASL PLAIN and SCRAM, see ``ClientSecurity``); it accepts and
  ignores (with a warning) any other setting it does not use, as Kafka's consumer does: a
  name that is no Kafka consumer setting at all is warned about with the nearest one
  (``client.known_settings``), as a typo usually is.
- Settings not given take the client's defaults (``sparklog.client.settings``), except the
  client id, ``sparklog-source``; ``fetch.max.bytes`` and ``max.partition.fetch.bytes`` both
  cap a partition fetch.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from sparklog.client.known_settings import CONSUMER_SETTINGS, nearest_setting
from sparklog.client.settings import (
    DEFAULT_API_TIMEOUT_MS,
    DEFAULT_FETCH_MAX_BYTES,
    DEFAULT_FETCH_MAX_WAIT_MS,
    DEFAULT_FETCH_MIN_BYTES,
    DEFAULT_REQUEST_TIMEOUT_MS,
    DEFAULT_RETRY_BACKOFF_MS,
    ISOLATION_LEVELS,
    SECURITY_KEYS,
    ClientConfig,
    ClientSecurity,
    SettingsError,
    parse_bootstrap,
)
from sparklog.datasource.options import OptionError

log = logging.getLogger(__name__)

SOURCE_CLIENT_ID = "sparklog-source"

# kafka.* settings Spark's Kafka source refuses, with what to use instead.
_REFUSED = {
    "auto.offset.reset": "set the source option startingOffsets instead",
    "key.deserializer": "keys are always read as bytes; cast or deserialize them in Spark",
    "value.deserializer": "values are always read as bytes; cast or deserialize them in Spark",
    "enable.auto.commit": "the source does not commit offsets; Spark checkpoints them",
    "interceptor.classes": "the source does not run consumer interceptors",
}
# kafka.* settings the source reads; others are accepted and ignored, as Kafka's consumer
# accepts and ignores settings it does not know.
_USED = frozenset({
    "bootstrap.servers", "client.id", "request.timeout.ms", "fetch.max.bytes",
    "max.partition.fetch.bytes", "fetch.max.wait.ms", "fetch.min.bytes", "retry.backoff.ms",
    "isolation.level", "group.id", "default.api.timeout.ms",
}) | SECURITY_KEYS


def client_config(params: Mapping[str, str]) -> ClientConfig:
    """Build from ``kafka.*`` options (prefix removed); OptionError names a bad one."""
    lowered = {k.lower(): v for k, v in params.items()}
    for name, hint in _REFUSED.items():
        if name in lowered:
            raise OptionError(f"Kafka option kafka.{name} is not supported: {hint}")
    isolation = lowered.get("isolation.level", "read_uncommitted")
    if isolation not in ISOLATION_LEVELS:
        raise OptionError(f"kafka.isolation.level={isolation} is not a Kafka isolation level; "
                          "allowed: read_uncommitted, read_committed")
    ignored = sorted(set(lowered) - _USED)
    for name in ignored:
        if name not in CONSUMER_SETTINGS:
            near = nearest_setting(name)
            log.warning("option kafka.%s is not a Kafka consumer setting%s; it is ignored",
                        name, f" (did you mean kafka.{near}?)" if near else "")
    if unused := [name for name in ignored if name in CONSUMER_SETTINGS]:
        log.warning("kafka options not used by the sparklog source: %s", ", ".join(unused))
    try:
        bootstrap = parse_bootstrap(lowered.get("bootstrap.servers", ""),
                                    "kafka.bootstrap.servers")
        security = ClientSecurity.from_settings(lowered, "kafka.")
    except SettingsError as exc:
        raise OptionError(str(exc)) from None
    max_bytes = _positive(lowered, "fetch.max.bytes", DEFAULT_FETCH_MAX_BYTES)
    return ClientConfig(
        bootstrap=bootstrap,
        client_id=lowered.get("client.id", SOURCE_CLIENT_ID),
        request_timeout_s=_positive(lowered, "request.timeout.ms",
                                    DEFAULT_REQUEST_TIMEOUT_MS) / 1000,
        fetch_max_bytes=min(max_bytes, _positive(lowered, "max.partition.fetch.bytes", max_bytes)),
        fetch_max_wait_ms=_positive(lowered, "fetch.max.wait.ms", DEFAULT_FETCH_MAX_WAIT_MS),
        fetch_min_bytes=_positive(lowered, "fetch.min.bytes", DEFAULT_FETCH_MIN_BYTES),
        retry_backoff_s=_positive(lowered, "retry.backoff.ms", DEFAULT_RETRY_BACKOFF_MS) / 1000,
        default_api_timeout_s=_positive(lowered, "default.api.timeout.ms",
                                        DEFAULT_API_TIMEOUT_MS) / 1000,
        isolation_level=ISOLATION_LEVELS[isolation],
        security=security,
    )


def _positive(params: Mapping[str, str], name: str, default: int) -> int:
    raw = params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"kafka.{name} must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise OptionError(f"kafka.{name} must be a positive integer, got {raw!r}")
    return value
