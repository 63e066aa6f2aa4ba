"""The ``kafka.*`` options as the source's Kafka client uses them, validated.

Invariants:
- ``ClientConfig`` and ``RetryPolicy`` are immutable and picklable: they travel inside every
  input partition to the executors.
- ``ClientConfig.from_params`` refuses, with ``OptionError`` naming the option, what Spark's
  Kafka source refuses (``kafka.auto.offset.reset``, deserializers, auto commit,
  interceptors) and what this client cannot do yet (TLS, SASL, read_committed); it accepts
  and ignores (with a warning) any other setting it does not use, as Kafka's consumer does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from sparklog.datasource.options import OptionError

log = logging.getLogger(__name__)

Address = tuple[str, int]
"""A broker's (host, port)."""

# kafka.* settings Spark's Kafka source refuses, with what to use instead.
_REFUSED = {
    "auto.offset.reset": "set the source option startingOffsets instead",
    "key.deserializer": "keys are always read as bytes; cast or deserialize them in Spark",
    "value.deserializer": "values are always read as bytes; cast or deserialize them in Spark",
    "enable.auto.commit": "the source does not commit offsets; Spark checkpoints them",
    "interceptor.classes": "the source does not run consumer interceptors",
}
_SECURITY_PREFIXES = ("ssl.", "sasl.")
# kafka.* settings this client reads; others are accepted and ignored, as Kafka's consumer
# accepts and ignores settings it does not know.
_USED = frozenset({
    "bootstrap.servers", "client.id", "request.timeout.ms", "fetch.max.bytes",
    "max.partition.fetch.bytes", "fetch.max.wait.ms", "fetch.min.bytes", "retry.backoff.ms",
    "security.protocol", "isolation.level", "group.id",
})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retry retriable failures every ``backoff_s`` until ``timeout_s`` has passed."""

    timeout_s: float
    backoff_s: float


_DEFAULT_CLIENT_ID = "sparklog-source"
_DEFAULT_FETCH_BYTES = 8 << 20
_DEFAULT_FETCH_WAIT_MS = 500


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """The ``kafka.*`` settings the client uses, validated (picklable, hashable).

    Defaults differ from Kafka's consumer in one place: a partition fetch may return up to
    ``fetch.max.bytes`` (8 MiB), not ``max.partition.fetch.bytes`` (1 MiB), because a task
    fetches one partition at a time; setting either option caps it.
    """

    bootstrap: tuple[Address, ...]
    client_id: str = _DEFAULT_CLIENT_ID
    request_timeout_s: float = 30.0
    fetch_max_bytes: int = _DEFAULT_FETCH_BYTES
    fetch_max_wait_ms: int = _DEFAULT_FETCH_WAIT_MS
    fetch_min_bytes: int = 1
    retry_backoff_s: float = 0.1

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> ClientConfig:
        """Build from ``kafka.*`` options (prefix removed); OptionError names a bad one."""
        lowered = {k.lower(): v for k, v in params.items()}
        for name, hint in _REFUSED.items():
            if name in lowered:
                raise OptionError(f"Kafka option kafka.{name} is not supported: {hint}")
        protocol = lowered.get("security.protocol", "PLAINTEXT")
        if protocol.upper() != "PLAINTEXT":
            raise OptionError(f"kafka.security.protocol={protocol} is not supported by the "
                              "sparklog source yet; allowed: PLAINTEXT")
        for name in lowered:
            if name.startswith(_SECURITY_PREFIXES):
                raise OptionError(f"kafka.{name}: TLS and SASL are not supported by the "
                                  "sparklog source yet (only PLAINTEXT)")
        isolation = lowered.get("isolation.level", "read_uncommitted")
        if isolation != "read_uncommitted":
            raise OptionError(f"kafka.isolation.level={isolation} is not supported by the "
                              "sparklog source yet; allowed: read_uncommitted")
        ignored = sorted(set(lowered) - _USED)
        if ignored:
            log.warning("kafka options not used by the sparklog source: %s", ", ".join(ignored))
        max_bytes = _positive(lowered, "fetch.max.bytes", _DEFAULT_FETCH_BYTES)
        return cls(
            bootstrap=parse_bootstrap(lowered.get("bootstrap.servers", "")),
            client_id=lowered.get("client.id", _DEFAULT_CLIENT_ID),
            request_timeout_s=_positive(lowered, "request.timeout.ms", 30000) / 1000,
            fetch_max_bytes=min(max_bytes,
                                _positive(lowered, "max.partition.fetch.bytes", max_bytes)),
            fetch_max_wait_ms=_positive(lowered, "fetch.max.wait.ms", _DEFAULT_FETCH_WAIT_MS),
            fetch_min_bytes=_positive(lowered, "fetch.min.bytes", 1),
            retry_backoff_s=_positive(lowered, "retry.backoff.ms", 100) / 1000,
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


def parse_bootstrap(servers: str) -> tuple[Address, ...]:
    """``host:port[,host:port]`` (IPv6 as ``[addr]:port``) to (host, port) pairs."""
    pairs = []
    for entry in (s.strip() for s in servers.split(",")):
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise OptionError(f"kafka.bootstrap.servers: {entry!r} is not HOST:PORT")
        pairs.append((host.strip("[]"), int(port)))
    if not pairs:
        raise OptionError("option kafka.bootstrap.servers is required (HOST:PORT[,HOST:PORT])")
    return tuple(pairs)
