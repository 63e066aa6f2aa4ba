"""What one listener asks of its connections: TLS, SASL mechanisms and their users.

Invariants:
- ``ListenerSecurity.check`` reads and validates every setting a listener's protocol needs
  without touching a file (the config check at start-up); ``load`` does the same and also
  builds the TLS context (certificate files read), before any socket is bound.
- A PLAINTEXT or SSL listener needs no authentication: its connections start authenticated
  (as ``User:ANONYMOUS``, or the client certificate's subject with SSL); a SASL_PLAINTEXT or
  SASL_SSL connection must complete SaslHandshake and SaslAuthenticate first.
- PLAIN users come from the listener's ``PlainLoginModule`` JAAS line (``user_<name>``);
  enabling PLAIN explicitly without one is a start-up error (nobody could log in); the
  default mechanisms leave PLAIN out when there is no such line.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from sparklog.broker.security.jaas import plain_users
from sparklog.broker.security.settings import (
    LISTENER_PREFIX,
    PROTOCOLS,
    enabled_mechanisms,
    jaas_config,
    listener_setting,
)
from sparklog.broker.security.tls import server_context
from sparklog.errors import InvalidConfigError

ANONYMOUS = "User:ANONYMOUS"


@dataclass(frozen=True)
class ListenerSecurity:
    name: str
    protocol: str = "PLAINTEXT"
    mechanisms: tuple[str, ...] = ()
    plain_users: Mapping[str, str] = field(default_factory=dict, repr=False)
    failed_authentication_delay_s: float = 0.1
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @classmethod
    def check(cls, props: Mapping[str, str], name: str, protocol: str) -> ListenerSecurity:
        if protocol not in PROTOCOLS:
            raise InvalidConfigError(
                f"listener {name} maps to {protocol!r} in listener.security.protocol.map: "
                f"expected one of {', '.join(PROTOCOLS)}")
        delay = listener_setting(props, name, "connection.failed.authentication.delay.ms")
        if not delay.isdigit():
            raise InvalidConfigError(f"invalid value {delay!r} for broker config "
                                     "connection.failed.authentication.delay.ms: expected an "
                                     "integer")
        security = cls(name, protocol, failed_authentication_delay_s=int(delay) / 1000)
        if security.tls and not listener_setting(props, name, "ssl.keystore.location"):
            raise InvalidConfigError(
                f"listener {name}: ssl.keystore.location is not set: a TLS listener needs a "
                "PEM file with its private key and certificate chain (sparklog certs create "
                "makes a test one)")
        if not security.sasl:
            return security
        mechanisms = enabled_mechanisms(props, name)
        jaas = jaas_config(props, name, "PLAIN")
        explicit = {"sasl.enabled.mechanisms",
                    f"{LISTENER_PREFIX}{name.lower()}.sasl.enabled.mechanisms"} & props.keys()
        if "PLAIN" in mechanisms and not jaas and not explicit:
            mechanisms = tuple(m for m in mechanisms if m != "PLAIN")  # the default: no users
        users: dict[str, str] = {}
        if "PLAIN" in mechanisms:
            if not jaas:
                raise InvalidConfigError(
                    f"listener {name} enables SASL PLAIN but has no users: set "
                    f"listener.name.{name.lower()}.plain.sasl.jaas.config to a PlainLoginModule "
                    "with user_<name>=\"<password>\" entries")
            users = plain_users(jaas, f"the sasl.jaas.config of listener {name}")
        return cls(name, protocol, mechanisms, users, security.failed_authentication_delay_s)

    @classmethod
    def load(cls, props: Mapping[str, str], name: str, protocol: str) -> ListenerSecurity:
        checked = cls.check(props, name, protocol)
        if not checked.tls:
            return checked
        return cls(checked.name, checked.protocol, checked.mechanisms, checked.plain_users,
                   checked.failed_authentication_delay_s, server_context(props, name))
