"""Kafka's broker security settings, read per listener.

Invariants:
- A listener's value of a setting is ``listener.name.<listener, lower case>.<key>`` when set,
  else ``<key>``, as in Kafka; SASL login modules are looked up in
  ``listener.name.<listener>.<mechanism, lower case>.sasl.jaas.config``, then
  ``listener.name.<listener>.sasl.jaas.config``, then ``sasl.jaas.config``.
- ``SECURITY_DEFAULTS`` are the defaults of the security settings the broker reads; any
  ``listener.name.*`` key is known (Kafka accepts any listener-prefixed setting).
- Secrets (``is_sensitive``: passwords, JAAS lines) are described with no value, as Kafka
  describes PASSWORD configs.
- ``sasl.enabled.mechanisms`` defaults to every mechanism sparklog serves, PLAIN only where
  a PlainLoginModule names users (Kafka's default, GSSAPI, is not served: naming it is a
  start-up error).
"""

from __future__ import annotations

from collections.abc import Mapping

from sparklog.broker.security.acls import AUTHORIZER_CLASSES
from sparklog.errors import InvalidConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
"""Kafka's security protocols, all served."""
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
"""The SASL mechanisms served."""

SECURITY_DEFAULTS: dict[str, str] = {
    "ssl.keystore.type": "PEM",
    "ssl.keystore.location": "",
    "ssl.keystore.password": "",
    "ssl.key.password": "",
    "ssl.truststore.type": "PEM",
    "ssl.truststore.location": "",
    "ssl.truststore.password": "",
    "ssl.client.auth": "none",
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.protocol": "TLSv1.3",
    "ssl.endpoint.identification.algorithm": "https",
    "sasl.enabled.mechanisms": ",".join(MECHANISMS),
    "sasl.jaas.config": "",
    "sasl.mechanism.inter.broker.protocol": "GSSAPI",
    "inter.broker.listener.name": "",
    "security.inter.broker.protocol": "",
    "connection.failed.authentication.delay.ms": "100",
    "authorizer.class.name": "",
    "super.users": "",
    "allow.everyone.if.no.acl.found": "false",
}
LISTENER_PREFIX = "listener.name."


def listener_setting(props: Mapping[str, str], listener: str, key: str) -> str:
    """``key`` as ``listener`` sees it (its ``listener.name.`` override first)."""
    prefixed = f"{LISTENER_PREFIX}{listener.lower()}.{key}"
    return props.get(prefixed, props.get(key, SECURITY_DEFAULTS.get(key, ""))).strip()


def jaas_config(props: Mapping[str, str], listener: str, mechanism: str) -> str:
    """The JAAS login module configured for ``mechanism`` on ``listener`` ('' if none)."""
    for key in (f"{LISTENER_PREFIX}{listener.lower()}.{mechanism.lower()}.sasl.jaas.config",
                f"{LISTENER_PREFIX}{listener.lower()}.sasl.jaas.config", "sasl.jaas.config"):
        if props.get(key, "").strip():
            return props[key].strip()
    return ""


def enabled_mechanisms(props: Mapping[str, str], listener: str) -> tuple[str, ...]:
    """``sasl.enabled.mechanisms`` of ``listener``; an unserved mechanism is refused."""
    value = listener_setting(props, listener, "sasl.enabled.mechanisms")
    names = tuple(m.strip().upper() for m in value.split(",") if m.strip())
    for name in names:
        if name not in MECHANISMS:
            raise InvalidConfigError(
                f"invalid value {value!r} for broker config sasl.enabled.mechanisms of "
                f"listener {listener}: {name} is not served (served: {', '.join(MECHANISMS)})")
    if not names:
        raise InvalidConfigError(f"sasl.enabled.mechanisms of listener {listener} is empty: "
                                 f"name one of {', '.join(MECHANISMS)}")
    return names


def is_sensitive(key: str) -> bool:
    """Whether ``key`` holds a secret (a password or a JAAS line): never answered or logged,
    as Kafka's PASSWORD-typed configs."""
    return key.endswith((".password", "sasl.jaas.config"))


def is_security_key(key: str) -> bool:
    """Whether ``key`` is a security setting the broker knows."""
    return key in SECURITY_DEFAULTS or key.startswith(LISTENER_PREFIX)


def check_authorizer_settings(props: Mapping[str, str]) -> None:
    """``authorizer.class.name`` and ``allow.everyone.if.no.acl.found`` are valid."""
    name = props.get("authorizer.class.name", "").strip()
    if name and name not in AUTHORIZER_CLASSES:
        raise InvalidConfigError(
            f"invalid value {name!r} for broker config authorizer.class.name: expected one "
            f"of {', '.join(sorted(AUTHORIZER_CLASSES))} (or empty: no authorizer)")
    flag = props.get("allow.everyone.if.no.acl.found", "false").strip().lower()
    if flag not in ("true", "false"):
        raise InvalidConfigError(f"invalid value {flag!r} for broker config "
                                 "allow.everyone.if.no.acl.found: expected true or false")
