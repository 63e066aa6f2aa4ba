"""Kafka client settings: bootstrap servers, the settings of ``KafkaClient``, retry policy.

Invariants:
- ``ClientConfig`` and ``RetryPolicy`` are immutable, hashable and picklable: they travel
  inside every input partition of the Spark source to the executors.
- ``parse_bootstrap`` accepts exactly Kafka's ``host:port[,host:port]`` (IPv6 as
  ``[addr]:port``) and raises ``SettingsError`` naming the setting and the bad entry;
  ``ClientConfig.servers`` writes the list back in that form.
- The defaults (``DEFAULT_*``) are Kafka's consumer defaults but one: a partition fetch may
  return up to ``fetch.max.bytes`` (8 MiB), not ``max.partition.fetch.bytes`` (1 MiB),
  because the client fetches one partition at a time.
- Importing this module imports nothing of the protocol (it is cheap: Spark's planner
  process imports it).
"""

from __future__ import annotations

from dataclasses import dataclass

Address = tuple[str, int]
"""A broker's (host, port)."""

DEFAULT_CLIENT_ID = "sparklog"
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
DEFAULT_FETCH_MAX_BYTES = 8 << 20
DEFAULT_FETCH_MAX_WAIT_MS = 500
DEFAULT_FETCH_MIN_BYTES = 1
DEFAULT_RETRY_BACKOFF_MS = 100
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
"""Kafka's ``isolation.level`` values and their Fetch / ListOffsets wire values."""


class SettingsError(ValueError):
    """A client setting is missing or malformed; the message names the setting."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retry retriable failures every ``backoff_s`` until ``timeout_s`` has passed."""

    timeout_s: float
    backoff_s: float


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """What ``KafkaClient`` needs to know: where the brokers are, and how to fetch."""

    bootstrap: tuple[Address, ...]
    client_id: str = DEFAULT_CLIENT_ID
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_MS / 1000
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    fetch_max_wait_ms: int = DEFAULT_FETCH_MAX_WAIT_MS
    fetch_min_bytes: int = DEFAULT_FETCH_MIN_BYTES
    retry_backoff_s: float = DEFAULT_RETRY_BACKOFF_MS / 1000
    isolation_level: int = ISOLATION_LEVELS["read_uncommitted"]
    """Kafka's: 0 read_uncommitted, 1 read_committed (up to the last stable offset, the
    records of aborted transactions dropped)."""

    @property
    def servers(self) -> str:
        """The bootstrap servers as a ``bootstrap.servers`` value (other clients take it)."""
        return ",".join(f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
                        for host, port in self.bootstrap)


def parse_bootstrap(servers: str, setting: str = "bootstrap.servers") -> tuple[Address, ...]:
    """``host:port[,host:port]`` (IPv6 as ``[addr]:port``) to (host, port) pairs; errors name
    ``setting`` (the name the caller's user typed)."""
    pairs = []
    for entry in (s.strip() for s in servers.split(",")):
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise SettingsError(f"{setting}: {entry!r} is not HOST:PORT")
        pairs.append((host.strip("[]"), int(port)))
    if not pairs:
        raise SettingsError(f"option {setting} is required (HOST:PORT[,HOST:PORT])")
    return tuple(pairs)
