"""One blocking connection to one broker, speaking Kafka's wire protocol through kio.

Requests and responses are kio (0.6) dataclasses built and read by ``sparklog.protocol``:
Metadata v1-8, ListOffsets v1-5 and Fetch v4-11 (which Apache Kafka 3.x and 4.x accept) are
required; the coordinator APIs the tools and the transactional sink use (FindCoordinator,
InitProducerId, EndTxn, the transaction admin APIs, WriteTxnMarkers) and DescribeLogDirs
are spoken when the broker offers them.

Invariants:
- The connection negotiates with ApiVersions when it opens: each API is spoken at the
  highest version inside ``RANGES`` (or ``OPTIONAL``) that the broker advertises
  (``versions``); a broker outside a required range is refused with ``KafkaClientError``
  naming the API and both ranges; an optional API it lacks is missing from ``versions``.
- Responses are read in request order (Kafka answers in order), so a caller may send the
  next request before it reads the previous answer; a correlation id out of order closes
  nothing but raises ``ConnectionError`` (the caller drops the connection).
- With ``config.security``, the socket is wrapped in TLS before the first byte and, on a
  SASL protocol, the connection logs in (SaslHandshake v1 and SaslAuthenticate) right after
  ApiVersions; a refused login (or mechanism) is a ``failures.ConnectionFailure`` naming the
  listener, the user, the mechanism and the broker's reason.
- Socket failures surface as ``OSError`` (``ConnectionError`` for a closed connection);
  retrying is the caller's business.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping
from typing import Any

from sparklog.client.errors import KafkaClientError
from sparklog.client.failures import ConnectionFailure, authentication_failed
from sparklog.client.sasl import authenticate
from sparklog.client.settings import ClientConfig, ClientSecurity
from sparklog.errors import ErrorCode, error_name
from sparklog.protocol.codec import decode_response, encode_request, request_class
from sparklog.protocol.entities import build
from sparklog.protocol.versions import ApiKey, api_name

RANGES = {ApiKey.FETCH: (4, 11), ApiKey.LIST_OFFSETS: (1, 5), ApiKey.METADATA: (1, 8)}
"""The versions this client can speak of the APIs it requires, per API."""
OPTIONAL = {ApiKey.FIND_COORDINATOR: (1, 2), ApiKey.INIT_PRODUCER_ID: (0, 1),
            ApiKey.END_TXN: (0, 2), ApiKey.WRITE_TXN_MARKERS: (1, 1),
            ApiKey.DESCRIBE_TRANSACTIONS: (0, 0), ApiKey.LIST_TRANSACTIONS: (0, 1),
            ApiKey.DESCRIBE_PRODUCERS: (0, 0), ApiKey.DESCRIBE_LOG_DIRS: (1, 5),
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
            ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0), ApiKey.OFFSET_DELETE: (0, 0),
            ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1), ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
            ApiKey.DESCRIBE_CONFIGS: (1, 4), ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
            ApiKey.LIST_CONFIG_RESOURCES: (0, 1), ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1)}
"""The versions it can speak of the APIs it uses where a broker offers them."""

_SIZE = struct.Struct(">i")


class BrokerConnection:
    """A blocking connection to one broker, with the API versions it was negotiated at."""

    def __init__(self, host: str, port: int, config: ClientConfig) -> None:
        self.address = f"{host}:{port}"
        self._client_id = config.client_id.encode()
        security = config.security
        self._sock = socket.create_connection((host, port), timeout=config.request_timeout_s)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if security.tls:
                self._sock = security.ssl_context().wrap_socket(self._sock,
                                                                server_hostname=host)
            self._correlation = 0
            self.answers = 0
            """Answers read so far (ApiVersions' included)."""
            self._pending: list[tuple[int, int, int]] = []  # (correlation id, api, version)
            self.versions = self._negotiate()
            if security.sasl:
                self._login(security)
        except BaseException:
            self._sock.close()
            raise

    def _negotiate(self) -> dict[int, int]:
        answer = self.request(ApiKey.API_VERSIONS, 0, {})
        if answer.error_code != ErrorCode.NONE:
            raise KafkaClientError(f"broker {self.address}: ApiVersions failed with error "
                                   f"{error_name(answer.error_code)}")
        offered = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        versions = {}
        for key, (low, high) in RANGES.items():
            theirs = offered.get(key)
            if theirs is None or theirs[1] < low or theirs[0] > high:
                raise KafkaClientError(
                    f"broker {self.address} serves {api_name(key)} "
                    f"{'not at all' if theirs is None else f'v{theirs[0]}-{theirs[1]}'}; the "
                    f"sparklog client needs a version in v{low}-{high}")
            versions[key] = min(high, theirs[1])
        for key, (low, high) in OPTIONAL.items():
            theirs = offered.get(key)
            if theirs is not None and theirs[0] <= high and theirs[1] >= low:
                versions[key] = min(high, theirs[1])
        return versions

    def _login(self, security: ClientSecurity) -> None:
        """SaslHandshake v1, then the mechanism's tokens in SaslAuthenticate requests."""
        answer = self.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": security.mechanism})
        if answer.error_code != ErrorCode.NONE:
            raise ConnectionFailure(
                f"the {security.protocol} listener at {self.address} refuses SASL mechanism "
                f"{security.mechanism} ({error_name(answer.error_code)}; enabled: "
                f"{', '.join(answer.mechanisms)})")

        def exchange(token: bytes) -> bytes:
            reply = self.request(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": token})
            if reply.error_code != ErrorCode.NONE:
                raise authentication_failed(self.address, security,
                                            f"{error_name(reply.error_code)}: "
                                            f"{reply.error_message}")
            return reply.auth_bytes

        authenticate(exchange, security)

    def send(self, api_key: int, version: int, body: Mapping[str, Any]) -> None:
        self._correlation += 1
        request = build(request_class(api_key, version), body)
        self._sock.sendall(encode_request(api_key, version, self._correlation, self._client_id,
                                          request))
        self._pending.append((self._correlation, api_key, version))

    def receive(self) -> Any:
        """The answer to the oldest request sent and not yet received."""
        correlation, api_key, version = self._pending.pop(0)
        (size,) = _SIZE.unpack(self._read_exactly(4))
        frame = self._read_exactly(size)
        (got,) = _SIZE.unpack_from(frame)
        if got != correlation:
            raise ConnectionError(f"broker {self.address} answered correlation id {got}, "
                                  f"expected {correlation}")
        self.answers += 1
        return decode_response(api_key, version, frame)

    def request(self, api_key: int, version: int, body: Mapping[str, Any]) -> Any:
        """Send and read the answer; answers to earlier requests still unread are dropped."""
        self.send(api_key, version, body)
        while len(self._pending) > 1:
            self.receive()
        return self.receive()

    def _read_exactly(self, size: int) -> memoryview:
        buffer = bytearray(size)
        view = memoryview(buffer)
        got = 0
        while got < size:
            n = self._sock.recv_into(view[got:])
            if n == 0:
                raise ConnectionError(f"broker {self.address} closed the connection")
            got += n
        return view.toreadonly()

    def close(self) -> None:
        self._sock.close()
