"""The asyncio TCP server: frames in, handlers, frames out, in order, per connection.

Invariants:
- Requests on one connection are handled one at a time and answered in order (clients rely
  on it, and Kafka does the same); connections are independent of each other.
- A malformed, oversized or undecodable frame, or a request for an API or version no handler
  serves (``registry.serves``), closes that connection only (ApiVersions at an unknown
  version is answered with UNSUPPORTED_VERSION and the served versions, as the protocol
  says). Nothing acknowledged is affected: a response is only written after the log append
  it reports.
- Fault hooks (``Broker.faults``, tests only) are consulted after a request is decoded and
  before it is handled; with none added they cost one attribute test.
- With ``metrics`` (set when ``metrics.listener`` is), ``_dispatch`` records every request
  it decoded: its API, version, time to its encoded response and the response's error codes
  (``monitoring/requests.py``); without, that costs one attribute test.
- Each server is one listener (``listener``, its name), with its ``advertised`` address
  known before the first connection is accepted (the broker registers it; Metadata and
  FindCoordinator name each broker by its endpoint of the request's listener).
- Each server serves its listener's security (``security``): with TLS the handshake comes
  before the first frame; on a SASL listener a connection is served nothing but ApiVersions,
  SaslHandshake and SaslAuthenticate until it authenticated (anything else closes it), as
  in Kafka. Every request of a connection sees its ``Session`` (principal, SASL state) in
  its ``request_context.RequestContext``; a session marked ``closing`` is closed once its
  answer is written.
- Warnings about closed connections are rate-limited (``WarningLimiter``): a burst of bad
  connections gives a few lines and a count, not a line each.
- ``max.connections`` and ``max.connections.per.ip`` (Kafka's names and defaults: no limit)
  bound the broker's open client connections, over all its listeners (``ConnectionQuotas``,
  one per broker); a connection past either is closed at once, before anything is read
  (Kafka closes one past the per-address limit so too; past ``max.connections`` its
  acceptor waits instead), counted (``refused``, and in the request metrics per listener)
  and logged once a minute at most, with a count of the rest.
- An idle connection costs its task, session and transport: no receive buffer is held
  between requests (``FrameProtocol`` returns its staging buffer to a shared pool).
- Every accepted connection has TCP_NODELAY (``_no_delay``), as Kafka's sockets do: Nagle's
  algorithm would hold a small response back for the client's delayed ACK.
- On a cluster broker a connection's requests are pipelined (``request_context``: a request
  that released the connection (a Produce waiting for its ISR) lets the next one start,
  at most ``MAX_PIPELINED`` unanswered; answers are written in request order. A single
  node answers each request before reading the next, as Kafka does.
- Client quotas (``broker/quotas.py``): with a ``request_percentage`` quota set, each
  request's handling time (decoding, and the time its handler ran on the loop: not its
  long poll or its wait for the ISR, as Kafka counts a handler thread's time) counts
  towards it (not ApiVersions, the SASL exchange, a follower's Fetch or the brokers'
  WriteTxnMarkers) and its answer carries the larger of its own throttle time and that
  one's; a connection the quota manager muted (``Session.muted_until``) has no further
  request read until then. With no quota set each costs one test.
- File regions of a Fetch response are sent with ``loop.sendfile`` (``os.sendfile``), so
  record data goes from the page cache to the socket without entering Python; through TLS
  (no sendfile there) a region is read whole (``os.pread``, at most the request's
  ``max_bytes``) and written in one call, which asyncio's 16 KiB fallback made 3x slower.
  Such a response is corked (``TCP_CORK``) until its last part is written, so its header
  leaves with the records rather than alone, and is always uncorked after.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from sparklog.broker.monitoring.requests import RequestMetrics
from sparklog.broker.quotas import BusyTime, with_throttle
from sparklog.broker.registry import HANDLERS, served, serves
from sparklog.broker.request_context import REQUEST, RequestContext, extended
from sparklog.broker.security.client_quotas import REQUEST_PERCENTAGE
from sparklog.broker.security.listener import ListenerSecurity
from sparklog.broker.security.session import Session
from sparklog.broker.security.tls import certificate_principal
from sparklog.broker.state import Broker
from sparklog.broker.warning_limiter import WarningLimiter
from sparklog.errors import KafkaError
from sparklog.protocol.codec import decode_request, encode_api_versions_error, encode_response
from sparklog.protocol.fetch_response import FetchResponse, FileRegion, encode_fetch_response
from sparklog.protocol.frame_protocol import FrameProtocol
from sparklog.protocol.framing import FrameError, RequestHeader, parse_request_header
from sparklog.protocol.versions import ApiKey, api_name

Parts = list[bytes | FileRegion]
MAX_PIPELINED = 5
"""Requests of one connection started but not answered yet, at most (as Kafka's clients'
``max.in.flight.requests.per.connection`` for idempotence): memory stays bounded."""
_BEFORE_AUTHENTICATION = (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
_NOT_THROTTLED = frozenset((*_BEFORE_AUTHENTICATION, ApiKey.WRITE_TXN_MARKERS))


class DroppedByFault(Exception):
    """A fault hook asked for the connection to be closed without an answer."""

log = logging.getLogger(__name__)


class _Descriptor:
    """The file-object face ``loop.sendfile`` needs, over a segment's shared descriptor.

    ``readinto`` serves asyncio's fallback (plain writes), which it takes whenever
    ``os.sendfile`` fails before sending a byte, e.g. when the client has just hung up.
    Reads use explicit offsets (``pread``): the shared descriptor's position is never moved.
    """

    mode = "rb"

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._position = 0

    def fileno(self) -> int:
        return self._fd

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self._position = offset
        return offset

    def readinto(self, buffer: bytearray | memoryview) -> int:
        data = os.pread(self._fd, len(buffer), self._position)
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)


class ConnectionQuotas:
    """Kafka's ``max.connections`` and ``max.connections.per.ip``: open client connections
    of one broker, in all and per client address, over all its listeners."""

    def __init__(self, max_connections: int, max_per_ip: int) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self.refused = 0  # connections refused since start

    def admit(self, address: str) -> str | None:
        """Count a new connection from ``address`` in; else why it is refused."""
        if self.total >= self.max_connections:
            self.refused += 1
            return f"the broker has the configured maximum of {self.max_connections} " \
                   "connections (max.connections)"
        count = self.per_ip.get(address, 0)
        if count >= self.max_per_ip:
            self.refused += 1
            return f"{address} has the configured maximum of {self.max_per_ip} connections " \
                   "(max.connections.per.ip)"
        self.total += 1
        self.per_ip[address] = count + 1
        return None

    def release(self, address: str) -> None:
        self.total -= 1
        count = self.per_ip[address] - 1
        if count:
            self.per_ip[address] = count
        else:
            del self.per_ip[address]


_QUOTAS: weakref.WeakKeyDictionary[Broker, ConnectionQuotas] = weakref.WeakKeyDictionary()


def connection_quotas(broker: Broker) -> ConnectionQuotas:
    """The broker's connection counts, shared by its listeners' servers."""
    found = _QUOTAS.get(broker)
    if found is None:
        found = _QUOTAS[broker] = ConnectionQuotas(
            broker.config.get_int("max.connections"),
            broker.config.get_int("max.connections.per.ip"))
    return found


class BrokerServer:
    """Serves ``broker`` on ``sock``, a listening socket bound before the broker was loaded
    (so a port in use fails before the data directory is touched)."""

    def __init__(self, broker: Broker, sock: socket.socket,
                 metrics: RequestMetrics | None = None, listener: str = "PLAINTEXT",
                 security: ListenerSecurity | None = None) -> None:
        self.broker = broker
        self.sock = sock
        self.host, self.port = sock.getsockname()[:2]
        self.metrics = metrics
        self.listener = listener
        self.security = security or ListenerSecurity(listener)
        self.advertised = (self.host, self.port)  # until ``start`` is given another
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], Session] = {}
        self._max_frame = broker.config.get_int("socket.request.max.bytes")
        self._closing_warnings = WarningLimiter(log, "connections closed for bad input")
        self.quotas = connection_quotas(broker)
        self._refusals = WarningLimiter(log, "connections refused", burst=1, window_s=60.0)

    def client_software(self) -> Counter[tuple[str, str]]:
        """Open connections per client software name and version (KIP-511)."""
        return Counter(session.client_software for session in self._connections.values())

    async def start(self, advertise: Callable[[int], tuple[str, int]] | None = None
                    ) -> tuple[str, int]:
        """Make the listener; ``advertise(bound port)`` gives the address to advertise
        (default: the bound one). Connections wait in the socket's backlog until ``serve``
        (a cluster broker serves once it has joined the cluster)."""
        self._server = await asyncio.get_running_loop().create_server(
            lambda: FrameProtocol(self._max_frame, self._serve), sock=self.sock,
            ssl=self.security.ssl_context, start_serving=False)
        self.advertised = advertise(self.port) if advertise else (self.host, self.port)
        return self.host, self.port

    async def serve(self) -> None:
        """Accept connections (after ``start``)."""
        assert self._server is not None
        await self._server.start_serving()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        self._closing_warnings.flush()
        self._refusals.flush()

    async def _serve(self, frames: FrameProtocol, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        address = peer[0] if peer else ""
        refused = self.quotas.admit(address)
        if refused is not None:
            self._refusals.warning("refusing a connection from %s on %s: %s", address,
                                   self.listener, refused)
            if self.metrics is not None:
                self.metrics.refused_connection(self.listener)
            writer.close()
            return
        _no_delay(writer.get_extra_info("socket"))
        session = Session(self.security,
                          certificate_principal(writer.get_extra_info("ssl_object")),
                          f"/{peer[0]}" if peer else "", peer[1] if peer else None)
        self._connections[task] = session
        REQUEST.set(RequestContext(session))  # this connection's task and its requests
        pipelined = self.broker.replicas.has_peers  # requests may wait for other brokers
        answers: deque[asyncio.Task[None]] = deque()  # started requests' answers, in order
        try:
            while not session.closing:
                if session.muted_until:  # throttled by a quota, for longer if a request
                    # in flight meanwhile throttled it again
                    while (left := session.muted_until - time.monotonic()) > 0:
                        await asyncio.sleep(left)
                    session.muted_until = 0.0
                frame = await frames.read_frame()
                if frame is None:
                    break
                while answers and (answers[0].done() or len(answers) >= MAX_PIPELINED):
                    await answers.popleft()  # raises what failed (the connection closes)
                if pipelined and not session.raw_tokens:
                    answers.append(await self._start(
                        frame, session, writer, answers[-1] if answers else None))
                    continue
                while answers:  # the answers before this one's go first
                    await answers.popleft()
                if session.raw_tokens:  # after SaslHandshake v0: a bare SASL token
                    answer, failure = await session.step(bytes(frame))
                    parts = [] if failure else [len(answer).to_bytes(4, "big") + answer]
                else:
                    parts = await self._dispatch(frame, session)
                if parts:
                    await self._write(writer, parts)
            while answers:
                await answers.popleft()
        except (FrameError, KafkaError) as exc:
            self._closing_warnings.warning("closing connection from %s: %s", peer, exc)
        except DroppedByFault:
            log.info("closing connection from %s: dropped by a fault hook", peer)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            for pending in answers:
                pending.cancel()
                pending.add_done_callback(_retrieved)
            self._connections.pop(task, None)
            self.quotas.release(address)
            writer.close()

    async def _start(self, frame: memoryview, session: Session, writer: asyncio.StreamWriter,
                     previous: asyncio.Task[None] | None) -> asyncio.Task[None]:
        """Start a request of a pipelined connection; return, once it was answered or
        released (``request_context.release``), the task that writes its answer after
        ``previous``. A failed request closes the connection, so the reader sees its end."""
        released = asyncio.get_running_loop().create_future()

        def let_go(*_: object) -> None:
            if not released.done():
                released.set_result(None)

        with extended(release=let_go):
            request = asyncio.create_task(self._dispatch(frame, session))
        request.add_done_callback(let_go)
        request.add_done_callback(_retrieved)
        answered = asyncio.create_task(self._answer_after(previous, request, writer))
        answered.add_done_callback(
            lambda done: done.cancelled() or done.exception() is None or writer.close())
        try:
            await released
        except BaseException:
            answered.cancel()
            raise
        return answered

    async def _answer_after(self, previous: asyncio.Task[None] | None,
                            request: asyncio.Task[Parts], writer: asyncio.StreamWriter) -> None:
        if previous is not None:
            await previous
        parts = await request
        if parts:
            await self._write(writer, parts)

    async def _dispatch(self, frame: memoryview, session: Session) -> Parts:
        started = time.perf_counter()
        header, body_offset = parse_request_header(frame)
        if not session.authenticated and header.api_key not in _BEFORE_AUTHENTICATION:
            raise FrameError(f"API {header.api_key} before SASL authentication on listener "
                             f"{self.listener}")
        if not serves(header.api_key, header.api_version):
            if header.api_key == ApiKey.API_VERSIONS:
                return [encode_api_versions_error(header.correlation_id, served())]
            raise FrameError(f"{api_name(header.api_key)} (API key {header.api_key}) version "
                             f"{header.api_version} is not served")
        request = decode_request(header, frame, body_offset)
        try:
            quotas = self.broker.quotas
            if quotas.enabled(REQUEST_PERCENTAGE) and header.api_key not in _NOT_THROTTLED \
                    and not _from_follower(request):
                handling_from = time.perf_counter()  # decoding counts, as in Kafka
                handling = BusyTime(self._handle(header, request))
                result = await handling
                result = with_throttle(result, quotas.request_time(
                    header.client_id, handling.busy + handling_from - started))
            else:
                result = await self._handle(header, request)
            parts = _to_parts(header, result)
        except Exception as exc:
            if self.metrics is not None:
                self.metrics.failed(header, request, exc, time.perf_counter() - started)
            raise
        if self.metrics is not None:
            self.metrics.answered(header, request, result, time.perf_counter() - started)
        return parts

    async def _handle(self, header: RequestHeader, request: Any) -> Any:
        """The handler's result for ``request``, through the fault hooks when armed."""
        fault = self.broker.faults.take(header.api_key, request) if self.broker.faults.armed \
            else None
        if fault is not None:
            if fault.delay_s:
                await asyncio.sleep(fault.delay_s)
            if fault.drop:
                raise DroppedByFault
        handler = HANDLERS[header.api_key].handler
        if fault is None:
            return await handler(self.broker, header, request)
        with extended(fault=fault):
            result = await handler(self.broker, header, request)
        return fault.rewrite(result)

    async def _write(self, writer: asyncio.StreamWriter, parts: Parts) -> None:
        loop = asyncio.get_running_loop()
        corked = _cork(writer) if not self.security.tls and any(
            isinstance(part, FileRegion) for part in parts) else None
        try:
            for part in parts:
                if not isinstance(part, FileRegion):
                    writer.write(part)
                elif self.security.tls:  # no sendfile through TLS: one read, one write
                    writer.write(os.pread(part.fd, part.length, part.position))
                else:
                    await writer.drain()
                    await loop.sendfile(writer.transport, _Descriptor(part.fd),  # type: ignore[arg-type]
                                        part.position, part.length)
            await writer.drain()
        finally:
            if corked is not None:
                with contextlib.suppress(OSError):  # a connection gone has nothing to send
                    corked.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)


def _from_follower(request: Any) -> bool:
    """A follower's Fetch (or OffsetForLeaderEpoch): quotas never throttle replication."""
    state = getattr(request, "replica_state", None)
    return (state.replica_id if state is not None else getattr(request, "replica_id", -1)) >= 0


def _retrieved(task: asyncio.Task[Any]) -> None:
    """Mark a pipelined request's failure as seen: it reaches the connection through the
    answer chain (the first failure closes it), and later ones need no log line each."""
    if not task.cancelled():
        task.exception()


def _cork(writer: asyncio.StreamWriter) -> Any:
    """Hold a response's parts in the kernel until all are written (``TCP_CORK``): the
    header before a ``sendfile`` leaves with the records, in one segment, not on its own
    (one wake-up of the reader instead of two); the socket, to uncork, or None."""
    sock = writer.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
    except OSError:  # the client hung up: writing is a no-op, as asyncio's own writes are
        return None
    return sock


def _no_delay(sock: Any) -> None:
    """TCP_NODELAY on an accepted connection: asyncio sets it only on sockets whose ``proto``
    says TCP, which a socket from ``socket.create_server`` does not, and with Nagle's
    algorithm a response written in two parts (header, then ``sendfile``) waits for the
    peer's delayed ACK (40 ms on Linux)."""
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _to_parts(header: RequestHeader, result: object) -> Parts:
    if result is None:
        return []
    if isinstance(result, FetchResponse):
        return encode_fetch_response(header.correlation_id, header.api_version, result)
    return [encode_response(header, result)]  # type: ignore[arg-type]
