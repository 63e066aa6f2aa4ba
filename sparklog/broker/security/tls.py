"""TLS for the SSL and SASL_SSL listeners: the server's ``ssl.SSLContext``, the principal
a client certificate names, and the client context this broker connects to other brokers'
listener with (``client_context``: the listener's truststore to check them, its keystore as
the client certificate, host names checked unless
``ssl.endpoint.identification.algorithm`` is empty).

Invariants:
- Only TLS 1.2 and newer are accepted, whatever ``ssl.enabled.protocols`` says (a value
  naming only older versions is a start-up error).
- Keys and certificates are PEM (Kafka's ``ssl.keystore.type=PEM``): ``ssl.keystore.location``
  holds the private key and the certificate chain, encrypted keys are opened with
  ``ssl.key.password``; ``ssl.truststore.location`` holds the CA certificates that client
  certificates must chain to. JKS and PKCS12 stores are refused with a message saying so.
- ``ssl.client.auth``: ``required`` refuses a client without a valid certificate (mutual
  TLS), ``requested`` verifies one when it is offered, ``none`` asks for none.
- A bad setting or an unreadable file is an ``InvalidConfigError`` naming the listener and
  the setting, raised before any socket is bound. Passwords never appear in a message.
- The principal of a client certificate is ``User:`` and its subject's distinguished name
  in RFC 4514 (RFC 2253) form, as Kafka's default principal builder gives it.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping

from cryptography import x509

from sparklog.broker.security.settings import listener_setting
from sparklog.errors import InvalidConfigError

CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL,
               "none": ssl.CERT_NONE}
_MODERN = ("TLSv1.2", "TLSv1.3")


def server_context(props: Mapping[str, str], listener: str) -> ssl.SSLContext:
    """The TLS context of ``listener`` (see the module invariants)."""

    def setting(key: str) -> str:
        return listener_setting(props, listener, key)

    def fail(key: str, why: str) -> InvalidConfigError:
        return InvalidConfigError(f"listener {listener}: {key} {why}")

    for kind in ("ssl.keystore.type", "ssl.truststore.type"):
        if setting(kind).upper() != "PEM":
            raise fail(kind, f"is {setting(kind)!r}: only PEM stores are read "
                             f"(set {kind}=PEM and give a PEM file)")
    protocols = [p.strip() for p in setting("ssl.enabled.protocols").split(",") if p.strip()]
    if not any(p in _MODERN for p in protocols):
        raise fail("ssl.enabled.protocols", f"is {','.join(protocols)!r}: TLSv1.2 or TLSv1.3 "
                                            "must be enabled (older versions are refused)")
    auth = setting("ssl.client.auth").lower()
    if auth not in CLIENT_AUTH:
        raise fail("ssl.client.auth", f"is {auth!r}: expected required, requested or none")
    keystore = setting("ssl.keystore.location")  # set: checked with the listener's config
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2 if "TLSv1.2" in protocols \
        else ssl.TLSVersion.TLSv1_3
    password = setting("ssl.key.password") or setting("ssl.keystore.password") or None
    try:
        context.load_cert_chain(keystore, password=password)
    except (OSError, ssl.SSLError) as exc:
        raise fail("ssl.keystore.location", f"{keystore}: cannot load the key and certificate "
                                            f"({_reason(exc)})") from None
    context.verify_mode = CLIENT_AUTH[auth]
    truststore = setting("ssl.truststore.location")
    if truststore:
        try:
            context.load_verify_locations(cafile=truststore)
        except (OSError, ssl.SSLError) as exc:
            raise fail("ssl.truststore.location",
                       f"{truststore}: cannot load CA certificates ({_reason(exc)})") from None
    elif auth != "none":
        raise fail("ssl.truststore.location", f"is not set: ssl.client.auth={auth} needs the "
                                              "CA certificates client certificates chain to")
    return context


def client_context(props: Mapping[str, str], listener: str) -> ssl.SSLContext:
    """The context to connect to other brokers' ``listener`` (see the module docstring)."""

    def setting(key: str) -> str:
        return listener_setting(props, listener, key)

    truststore = setting("ssl.truststore.location") or None
    try:
        context = ssl.create_default_context(cafile=truststore)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidConfigError(f"listener {listener}: ssl.truststore.location {truststore}: "
                                 f"cannot load CA certificates ({_reason(exc)})") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = bool(setting("ssl.endpoint.identification.algorithm"))
    keystore = setting("ssl.keystore.location")
    if keystore:
        password = setting("ssl.key.password") or setting("ssl.keystore.password") or None
        try:
            context.load_cert_chain(keystore, password=password)
        except (OSError, ssl.SSLError) as exc:
            raise InvalidConfigError(f"listener {listener}: ssl.keystore.location {keystore}: "
                                     f"cannot load the key and certificate "
                                     f"({_reason(exc)})") from None
    return context


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)


def certificate_principal(ssl_object: ssl.SSLObject | None) -> str | None:
    """``User:<subject DN>`` of the peer's verified certificate; None without one."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    return "User:" + x509.load_der_x509_certificate(der).subject.rfc4514_string()
