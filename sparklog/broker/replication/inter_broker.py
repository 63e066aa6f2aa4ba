"""How this broker reaches the other brokers of its cluster (the replica fetchers' leader
connections): the inter-broker listener and its security, as a client.

Invariants:
- The listener is ``inter.broker.listener.name``, or the one named after
  ``security.inter.broker.protocol`` (Kafka's alternative); setting both, or naming no
  listener of ``listeners``, is a start-up error naming the setting. With neither, the
  listener named PLAINTEXT, else the first one (Kafka insists on one named PLAINTEXT).
  Other brokers are reached at their endpoint of that name (``/brokers/ids/<id>``).
- TLS (SSL, SASL_SSL): ``tls.client_context`` from the listener's ``ssl.*`` settings
  (``listener.name.<l>.ssl.*`` first).
- SASL (SASL_PLAINTEXT, SASL_SSL): the mechanism is ``sasl.mechanism.inter.broker.protocol``
  (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; Kafka's default GSSAPI is not served, a start-up
  error), which the listener must enable; the ``username`` and ``password`` are the options
  of the listener's login module for it (``listener.name.<l>.<mechanism>.sasl.jaas.config``,
  then the less specific keys, as Kafka reads them).
- Settings are checked at start-up only in a cluster (``zookeeper.connect``): a single node
  connects to no broker.
- The password lives in memory only (never in a ``repr``, message or log line); a refused
  login raises ``InterBrokerError`` (a ``ConnectionError``: the fetcher backs off and
  retries) naming the listener, mechanism and user.
- A ``LeaderConnection`` carries one request at a time and checks each answer's
  correlation id. Answers arrive through a ``FrameProtocol`` that keeps its large buffer
  (``keep_buffer``): a follower's 1 MB Fetch answers reuse one buffer once the previous
  answer is no longer used. An answer cut by the connection's end is a
  ``ConnectionError``, an answer that never came an ``EOFError`` (the fetcher retries).
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparklog.broker.security.jaas import jaas_options
from sparklog.broker.security.settings import (
    MECHANISMS,
    enabled_mechanisms,
    jaas_config,
    listener_setting,
)
from sparklog.broker.security.tls import client_context
from sparklog.errors import ErrorCode, InvalidConfigError, error_name
from sparklog.protocol.codec import decode_response, encode_request, request_class
from sparklog.protocol.entities import build
from sparklog.protocol.frame_protocol import FrameProtocol
from sparklog.protocol.framing import FrameError
from sparklog.protocol.scram import ScramClient, ScramError, plain_token
from sparklog.protocol.versions import ApiKey

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 2**31 - 1
"""No limit of this side's own on an answer's size (a Fetch answer is bounded by the
request's ``max_bytes``); a negative size still closes the connection."""


class InterBrokerError(ConnectionError):
    """Another broker refused this one's login; the message names no secret."""


def inter_broker_listener(props: Mapping[str, str], protocols: Mapping[str, str]) -> str:
    """The listener other brokers are reached at (see the module invariants)."""
    name = props.get("inter.broker.listener.name", "").strip()
    protocol = props.get("security.inter.broker.protocol", "").strip()
    if name and protocol:
        raise InvalidConfigError("only one of inter.broker.listener.name and "
                                 "security.inter.broker.protocol may be set")
    wanted, setting = (name, "inter.broker.listener.name") if name else \
        (protocol, "security.inter.broker.protocol")
    if not wanted:
        return "PLAINTEXT" if "PLAINTEXT" in protocols else next(iter(protocols))
    if wanted not in protocols:
        raise InvalidConfigError(f"invalid value {wanted!r} for broker config {setting}: not "
                                 f"a listener of listeners ({', '.join(protocols)})")
    return wanted


@dataclass(frozen=True)
class InterBrokerSecurity:
    listener: str
    protocol: str = "PLAINTEXT"
    mechanism: str = ""
    username: str = ""
    password: str = field(default="", repr=False)
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @classmethod
    def load(cls, props: Mapping[str, str], protocols: Mapping[str, str]
             ) -> InterBrokerSecurity:
        """The inter-broker listener's client settings; ``InvalidConfigError`` if unusable."""
        listener = inter_broker_listener(props, protocols)
        protocol = protocols[listener]
        context = client_context(props, listener) if protocol in ("SSL", "SASL_SSL") else None
        if not protocol.startswith("SASL_"):
            return cls(listener, protocol, ssl_context=context)
        mechanism = listener_setting(props, listener,
                                     "sasl.mechanism.inter.broker.protocol").upper()
        if mechanism not in MECHANISMS:
            raise InvalidConfigError(
                f"invalid value {mechanism!r} for broker config "
                f"sasl.mechanism.inter.broker.protocol: the inter-broker listener {listener} "
                f"is {protocol}; set one of {', '.join(MECHANISMS)}")
        if mechanism not in enabled_mechanisms(props, listener):
            raise InvalidConfigError(
                f"sasl.mechanism.inter.broker.protocol {mechanism} is not in the "
                f"sasl.enabled.mechanisms of the inter-broker listener {listener}")
        jaas = jaas_config(props, listener, mechanism)
        setting = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
        options = jaas_options(jaas, setting) if jaas else {}
        if not options.get("username") or "password" not in options:
            raise InvalidConfigError(
                f"{setting} needs username=\"...\" and password=\"...\": the credentials "
                f"this broker logs in with to the other brokers' listener {listener}")
        return cls(listener, protocol, mechanism, options["username"], options["password"],
                   context)


class LeaderConnection:
    """One asyncio connection to another broker, logged in, one request at a time."""

    def __init__(self, frames: FrameProtocol, client_id: bytes) -> None:
        assert frames.writer is not None
        self.frames, self.writer, self.client_id = frames, frames.writer, client_id
        self._correlation = 0

    @classmethod
    async def open(cls, host: str, port: int, client_id: str,
                   security: InterBrokerSecurity) -> LeaderConnection:
        context = security.ssl_context
        _, frames = await asyncio.get_running_loop().create_connection(
            lambda: FrameProtocol(MAX_RESPONSE_BYTES, keep_buffer=True), host, port, ssl=context,
            server_hostname=host if context is not None else None)
        connection = cls(frames, client_id.encode())
        try:
            if security.sasl:
                await connection._login(security, f"{host}:{port}")
        except BaseException:
            connection.close()
            raise
        return connection

    async def _login(self, security: InterBrokerSecurity, address: str) -> None:
        mechanism = security.mechanism

        def refused(why: str) -> InterBrokerError:
            return InterBrokerError(f"broker {address} (listener {security.listener}) refused "
                                    f"the {mechanism} login of {security.username}: {why}")

        answer = await self.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
        if answer.error_code != ErrorCode.NONE:
            raise refused(error_name(answer.error_code))

        async def exchange(token: bytes) -> bytes:
            reply = await self.request(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": token})
            if reply.error_code != ErrorCode.NONE:
                raise refused(f"{error_name(reply.error_code)}: {reply.error_message}")
            return bytes(reply.auth_bytes)

        if mechanism == "PLAIN":
            await exchange(plain_token(security.username, security.password))
            return
        scram = ScramClient(mechanism, security.username, security.password)
        try:
            scram.verify(await exchange(scram.final(await exchange(scram.first()))))
        except ScramError as exc:
            raise refused(str(exc)) from None

    async def request(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        self._correlation += 1
        self.writer.write(encode_request(api_key, version, self._correlation, self.client_id,
                                         build(request_class(api_key, version), body)))
        await self.writer.drain()
        try:
            frame = await self.frames.read_frame()
        except FrameError as exc:
            raise ConnectionError(f"the broker's answer was cut: {exc}") from None
        if frame is None:
            raise EOFError("the broker closed the connection")
        if _SIZE.unpack_from(frame)[0] != self._correlation:
            raise ConnectionError("the broker answered out of order")
        return decode_response(api_key, version, frame)

    def close(self) -> None:
        self.writer.close()
