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

Security: ``ClientSecurity`` (``ClientConfig.security``) holds Kafka's client security
settings, read by ``ClientSecurity.from_settings`` under Kafka's names (Java clients' and
librdkafka's): ``security.protocol``; ``sasl.mechanism`` (librdkafka's ``sasl.mechanisms``
too), ``sasl.username`` / ``sasl.password`` or a ``sasl.jaas.config`` login module with
``username=`` and ``password=``; ``ssl.ca.location`` or a PEM ``ssl.truststore.location``;
``ssl.certificate.location`` + ``ssl.key.location`` or a PEM ``ssl.keystore.location`` (key
and chain in one file); ``ssl.key.password``; ``ssl.endpoint.identification.algorithm``
(``https``, the default, checks the broker's host name; empty or ``none`` does not).
- ``ClientSecurity`` is immutable, hashable and picklable like ``ClientConfig``; passwords
  never appear in its repr.
- A bad value raises ``SettingsError`` naming the setting as the caller's user spelled it
  (``prefix`` + key, e.g. ``kafka.sasl.mechanism``) and the allowed values; a password is
  never part of a message.
- ``librdkafka()`` gives the same settings in librdkafka's names, for confluent-kafka
  clients (Java-only forms such as a JAAS line or a PEM truststore are translated).
- ``SECURITY_KEYS`` lists every key read, so callers can tell them from unused ones.
- TLS contexts accept TLS 1.2 and newer only.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

Address = tuple[str, int]
"""A broker's (host, port)."""

DEFAULT_CLIENT_ID = "sparklog"
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
DEFAULT_FETCH_MAX_BYTES = 8 << 20
DEFAULT_FETCH_MAX_WAIT_MS = 500
DEFAULT_FETCH_MIN_BYTES = 1
DEFAULT_RETRY_BACKOFF_MS = 100
DEFAULT_API_TIMEOUT_MS = 60_000
BOOTSTRAP_TIMEOUT_S = 5.0
"""How long the Spark source's and sink's driver wait for a first bootstrap server to
accept a connection before they fail naming the servers (``RetryPolicy.bootstrap_timeout_s``)."""
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
"""Kafka's ``isolation.level`` values and their Fetch / ListOffsets wire values."""


class SettingsError(ValueError):
    """A client setting is missing or malformed; the message names the setting."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retry retriable failures every ``backoff_s`` until ``timeout_s`` has passed."""

    timeout_s: float
    backoff_s: float
    bootstrap_timeout_s: float | None = None
    """How long a client that no broker has answered yet keeps trying its bootstrap
    servers before it fails naming them (None: as long as any retriable failure). Once a
    broker answered, a broker going away is retried for ``timeout_s``."""


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
    default_api_timeout_s: float = DEFAULT_API_TIMEOUT_MS / 1000
    """Kafka's ``default.api.timeout.ms``: how long a metadata or offset lookup retries
    retriable errors (a leader's failover among them) before it fails."""
    isolation_level: int = ISOLATION_LEVELS["read_uncommitted"]
    """Kafka's: 0 read_uncommitted, 1 read_committed (up to the last stable offset, the
    records of aborted transactions dropped)."""
    security: ClientSecurity = field(default_factory=lambda: ClientSecurity())

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


PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
SECURITY_KEYS = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
    "sasl.password", "sasl.jaas.config", "ssl.ca.location", "ssl.truststore.location",
    "ssl.truststore.type", "ssl.certificate.location", "ssl.key.location",
    "ssl.keystore.location", "ssl.keystore.type", "ssl.key.password",
    "ssl.keystore.password", "ssl.endpoint.identification.algorithm",
})
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str = "PLAIN"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @classmethod
    def from_settings(cls, settings: Mapping[str, object], prefix: str = "") -> ClientSecurity:
        values = {k.lower(): str(v) for k, v in settings.items() if k.lower() in SECURITY_KEYS}

        def fail(key: str, why: str) -> SettingsError:
            return SettingsError(f"{prefix}{key}: {why}")

        protocol = values.get("security.protocol", "PLAINTEXT").upper()
        if protocol not in PROTOCOLS:
            raise fail("security.protocol", f"{protocol!r} is not one of {', '.join(PROTOCOLS)}")
        mechanism = values.get("sasl.mechanism", values.get("sasl.mechanisms", "PLAIN")).upper()
        if mechanism not in MECHANISMS:
            raise fail("sasl.mechanism", f"{mechanism!r} is not supported; allowed: "
                                         f"{', '.join(MECHANISMS)}")
        username, password = values.get("sasl.username"), values.get("sasl.password")
        if "sasl.jaas.config" in values:
            options = {k: re.sub(r"\\(.)", r"\1", v)
                       for k, v in _JAAS_OPTION.findall(values["sasl.jaas.config"])}
            username = options.get("username", username)
            password = options.get("password", password)
        if protocol.startswith("SASL_") and (not username or password is None):
            raise fail("sasl.username", f"security.protocol={protocol} needs a user: set "
                                        f"{prefix}sasl.username and {prefix}sasl.password (or "
                                        f"{prefix}sasl.jaas.config)")
        for kind in ("ssl.truststore.type", "ssl.keystore.type"):
            if values.get(kind, "PEM").upper() != "PEM":
                raise fail(kind, "only PEM files are read (set it to PEM)")
        keystore = values.get("ssl.keystore.location")
        identification = values.get("ssl.endpoint.identification.algorithm", "https").lower()
        if identification not in ("https", "", "none"):
            raise fail("ssl.endpoint.identification.algorithm",
                       f"{identification!r}: expected https, none or empty")
        return cls(protocol, mechanism, username, password,
                   values.get("ssl.ca.location", values.get("ssl.truststore.location")),
                   values.get("ssl.certificate.location", keystore),
                   values.get("ssl.key.location", keystore),
                   values.get("ssl.key.password", values.get("ssl.keystore.password")),
                   identification == "https")

    def librdkafka(self) -> dict[str, str]:
        """These settings in librdkafka's names (none for PLAINTEXT)."""
        found = {} if self.protocol == "PLAINTEXT" else {"security.protocol": self.protocol}
        if self.sasl:
            found.update({"sasl.mechanism": self.mechanism, "sasl.username": self.username or "",
                          "sasl.password": self.password or ""})
        if self.tls:
            found["ssl.endpoint.identification.algorithm"] = \
                "https" if self.check_hostname else "none"
            for key, value in (("ssl.ca.location", self.ca_location),
                               ("ssl.certificate.location", self.certificate_location),
                               ("ssl.key.location", self.key_location),
                               ("ssl.key.password", self.key_password)):
                if value:
                    found[key] = value
        return found

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context to open connections with (``tls`` must be true)."""
        context = ssl.create_default_context(cafile=self.ca_location)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = self.check_hostname
        if self.certificate_location:
            context.load_cert_chain(self.certificate_location, self.key_location,
                                    self.key_password)
        return context
