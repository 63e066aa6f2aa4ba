"""Connection failures no retry can cure, found fast and told in one line.

A refused SASL login, or a client whose ``security.protocol`` is not the listener's (a
plaintext client on a TLS port, TLS on a plaintext port, SASL where the listener has none),
fails the same way on every attempt; Kafka's clients retry them until their timeouts end,
with the cause only in their logs. Every client sparklog opens (the tools', the jobs', the
Spark source's and sink's, confluent-kafka's and sparklog's own ``KafkaClient``) turns them
into a ``ConnectionFailure`` here, whose message names the listener's address and security
protocol, the client's user and SASL mechanism, and what to change.

Invariants:
- ``ConnectionFailure`` is a ``KafkaClientError``: whatever prints those (the tools, in one
  line) prints these; its message never holds a password.
- ``listener_protocol`` asks a listener which security protocol it speaks without logging
  in: ApiVersions in plaintext, else in TLS (the certificate is not checked: nothing is
  sent but the probe); then Metadata at a version the broker offers (Kafka 4 serves no
  v0-v3), which a SASL listener refuses before a login. It answers None when nothing
  answers (refused, timed out, not Kafka).
- sparklog's ``KafkaClient`` raises these from its connections; confluent-kafka's clients
  get them from ``sparklog.client.watch``.
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Mapping, Sequence

from sparklog.client.errors import KafkaClientError
from sparklog.client.settings import Address, ClientSecurity
from sparklog.protocol.codec import decode_response, encode_request, request_class
from sparklog.protocol.entities import build
from sparklog.protocol.versions import ApiKey

PROBE_TIMEOUT_S = 2.0
PROBE_METADATA_VERSION = 8
"""The highest Metadata version sparklog's client speaks (``connection.RANGES``)."""



class ConnectionFailure(KafkaClientError):
    """The client cannot use this cluster as configured: a refused login or a protocol
    mismatch (the message names the listener, the user and the mechanism)."""


def client_identity(security: ClientSecurity) -> str:
    """The client's side of a connection, as a user reads it (never a password)."""
    if not security.sasl:
        return f"the client's security.protocol={security.protocol} (no SASL login)"
    return (f"user {security.username!r} with SASL mechanism {security.mechanism} "
            f"(security.protocol={security.protocol})")


def authentication_failed(address: str, security: ClientSecurity,
                          reason: str) -> ConnectionFailure:
    """The broker at ``address`` refused ``security``'s login, for ``reason``."""
    return ConnectionFailure(
        f"authentication failed on the {security.protocol} listener at {address} for "
        f"{client_identity(security)}: {reason}")


def protocol_mismatch(address: str, listener: str,
                      security: ClientSecurity) -> ConnectionFailure:
    """The listener at ``address`` speaks ``listener``, not the client's protocol."""
    needs = f"security.protocol={listener}"
    if listener.startswith("SASL_"):
        needs += " with sasl.mechanism, sasl.username and sasl.password"
    return ConnectionFailure(f"the listener at {address} speaks {listener} but "
                             f"{client_identity(security)}: set {needs}")


def listener_protocol(address: Address, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """The security protocol the listener at ``address`` speaks, or None if it answers
    neither in plaintext nor in TLS."""
    for tls in (False, True):
        try:
            with _probe_socket(address, tls, timeout) as sock:
                offered = _answer(sock, ApiKey.API_VERSIONS, 0, {})
                if offered is None:
                    continue
                plain = _answer(sock, ApiKey.METADATA, _metadata_version(offered), {
                    "topics": [], "allow_auto_topic_creation": False,
                    "include_cluster_authorized_operations": False,
                    "include_topic_authorized_operations": False}) is not None
        except ConnectionRefusedError:
            return None
        except (OSError, ValueError):  # MalformedResponseError is a ConnectionError
            continue
        return ("" if plain else "SASL_") + ("SSL" if tls else "PLAINTEXT")
    return None


def _metadata_version(api_versions: bytes) -> int:
    """A Metadata version the broker serves (Kafka 4 no longer serves v0-v3): the highest
    the client speaks (``connection.RANGES``' v8) or the broker's lowest above it."""
    answer = decode_response(ApiKey.API_VERSIONS, 0, api_versions)
    for key in answer.api_keys:
        if key.api_key == ApiKey.METADATA:
            return max(key.min_version, min(key.max_version, PROBE_METADATA_VERSION))
    return PROBE_METADATA_VERSION


def _probe_socket(address: Address, tls: bool, timeout: float) -> socket.socket:
    sock = socket.create_connection(address, timeout=timeout)
    if not tls:
        return sock
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        return context.wrap_socket(sock)
    except BaseException:
        sock.close()
        raise


def _answer(sock: socket.socket, api_key: int, version: int, body: Mapping[str, object]
            ) -> bytes | None:
    """The broker's answer frame to this request (from the correlation id on), or None when
    the connection closes or what comes back is no answer to it."""
    sock.sendall(encode_request(api_key, version, 1, b"sparklog-probe",
                                build(request_class(api_key, version), body)))
    head = _read(sock, 8)
    if head is None:
        return None
    size, correlation = struct.unpack(">ii", head)
    if correlation != 1 or not 4 <= size < 1 << 24:
        return None
    rest = _read(sock, size - 4)
    return None if rest is None else head[4:] + rest


def _read(sock: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def mismatch_at(addresses: Sequence[Address], security: ClientSecurity
                ) -> ConnectionFailure | None:
    """A ``ConnectionFailure`` if a listener among ``addresses`` speaks another protocol
    than ``security``'s (None when all that answer agree, or none answers)."""
    for host, port in addresses:
        spoken = listener_protocol((host, port))
        if spoken is not None and spoken != security.protocol:
            return protocol_mismatch(f"{host}:{port}", spoken, security)
    return None


def refused_for_good(address: Address, error: OSError, security: ClientSecurity
                     ) -> ConnectionFailure | None:
    """A ``ConnectionFailure`` if no retry can cure ``error`` (a connection to ``address``
    that failed before its first answer): its TLS certificate is not trusted, or its
    listener speaks another security protocol. None for a refused or timed-out connection
    or a name that does not resolve (a broker away, retried)."""
    where = f"{address[0]}:{address[1]}"
    if isinstance(error, ssl.SSLCertVerificationError):
        return ConnectionFailure(f"the TLS certificate of the broker at {where} is not "
                                 f"trusted: {error.verify_message} (set ssl.ca.location or "
                                 f"ssl.truststore.location to its CA)")
    if isinstance(error, ConnectionRefusedError | TimeoutError | socket.gaierror):
        return None
    return mismatch_at([address], security)
