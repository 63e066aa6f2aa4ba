"""Running a broker: its state, server, cleaner and maintenance on one event loop.

``BrokerService`` is a broker's whole life on a running event loop (``start``/``stop``);
``run`` serves one in the foreground until SIGTERM or Ctrl-C (``sparklog broker``), and
``sparklog.broker.embedded`` runs one on a thread of a test process.

Invariants:
- Start-up checks in the order that touches nothing before it must: the listening addresses
  are parsed (a port outside 0-65535 is refused), TLS listeners' key and certificate files
  are read, in a cluster the inter-broker listener's client settings
  (``inter_broker.InterBrokerSecurity``), every listener's socket is bound (a port
  in use fails here), and only then is the data directory locked and loaded. Each failure is
  a ``StartupError`` whose message is one line naming the cause; nothing is left listening.
- One server per listener of ``listeners`` (Kafka's ``NAME://HOST:PORT`` list); the
  ``listen`` address given to the service (``--listen``) replaces the first one's.
- ``start`` returns once every listener accepts connections; ``port`` is then the first
  listener's bound port (with port 0, the one the OS chose) and ``run`` prints a line per
  further listener, then ``sparklog broker listening on HOST:PORT`` (the first listener's
  address to connect to here) last.
- A listener advertises (Metadata, FindCoordinator, to the clients that came in through it)
  its ``advertised.listeners`` entry's host and port when there is one, else its listening
  address, with 127.0.0.1 for all interfaces or ``localhost`` (librdkafka may resolve
  ``localhost`` to ::1).
- ``stop`` stops accepting, closes connections, stops the cleaner, then flushes and closes
  every log and writes the clean-shutdown marker. SIGTERM and SIGINT stop ``run``, which
  then exits 0.
- The broker joins its cluster once its listeners are bound (the replica manager's
  ``start``, with every listener's advertised address and security protocol): with
  ``zookeeper.connect`` set it registers in ZooKeeper (Kafka's ``/brokers/ids/<id>``),
  without it it becomes the leader of every partition of a single node; then transactions
  left prepared are finished, and only then does it accept connections (until then they
  wait in the listen backlog), so a restarting broker never answers without its topics
  or as a single node. ZooKeeper out of reach or ``broker.id`` taken is a
  ``StartupError``. ``stop`` leaves the cluster (its registration goes at once) before it
  closes connections. Without ``zookeeper.connect`` nothing here touches ZooKeeper.
- Maintenance (time-based flushes, retention, checkpoints) runs on the event loop at the
  intervals Kafka's settings name; log compaction runs in the ``LogCleaner`` threads
  (``log.cleaner.*``).
- With ``metrics.listener`` set, the server records request metrics from its first request
  and the listener (metrics and status page) accepts connections before ``start`` returns;
  ``run`` then prints ``sparklog broker metrics and status page on URL`` before its
  listening line. ``stop`` closes the listener first; a listener that cannot bind stops the
  broker cleanly and ``start`` raises a ``StartupError`` naming ``metrics.listener``.
- With ``schema.registry.listeners`` set, the schema registry (``schema_registry``) replays
  ``_schemas`` and accepts connections before ``start`` returns (``run`` prints ``sparklog
  broker schema registry on URL``) and is then attached to ``Broker.schema_validation``
  (validated produce); ``stop`` detaches and closes it before the broker's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

from sparklog.broker.config import BrokerConfig
from sparklog.broker.monitoring.listener import MetricsListener
from sparklog.broker.monitoring.requests import RequestMetrics
from sparklog.broker.registry import load_handlers
from sparklog.broker.replication.inter_broker import InterBrokerSecurity
from sparklog.broker.schema_host import SchemaHost
from sparklog.broker.schema_registry.listener import RegistryListener
from sparklog.broker.security.listener import ListenerSecurity
from sparklog.broker.security.page_logins import PageLogins
from sparklog.broker.server import BrokerServer
from sparklog.broker.state import Broker
from sparklog.cluster.layout import Endpoint
from sparklog.cluster.session import ClusterError
from sparklog.errors import InvalidConfigError
from sparklog.signals import WATCHED, Stop
from sparklog.storage.cleaner import CleanerConfig, LogCleaner
from sparklog.storage.dir_lock import DataDirError

log = logging.getLogger(__name__)


_WILDCARDS = ("0.0.0.0", "", "::", "localhost")


class StartupError(Exception):
    """The broker cannot start; the message is one line naming the cause."""


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--listen expects HOST:PORT, got {listen!r}")
    if int(port) > 65535:
        raise ValueError(f"--listen {listen!r}: port {port} is outside 0-65535")
    host = host.rpartition("://")[2].strip("[]")  # a listener's NAME:// may lead
    return host or "0.0.0.0", int(port)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port), or a ``StartupError`` saying why not."""
    try:
        return socket.create_server((host, port), family=_family(host), backlog=1024)
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise StartupError(f"cannot listen on {host}:{port}: {reason}") from None


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def local_host(listen_host: str) -> str:
    """The host to connect to from this machine (loopback for a wildcard or ``localhost``)."""
    return "127.0.0.1" if listen_host in _WILDCARDS else listen_host


def advertised_address(advertised: tuple[str, int] | None, listen_host: str,
                       bound_port: int) -> tuple[str, int]:
    """Where a listener's clients are told to connect: its ``advertised.listeners`` entry
    (host AND port, for NAT and Docker set-ups), else its listening address."""
    if advertised is not None:
        host, port = advertised
        return host, port or bound_port
    return local_host(listen_host), bound_port


async def _every(interval_ms: int, action: Callable[[], None]) -> None:
    while True:
        await asyncio.sleep(interval_ms / 1000)
        try:
            action()
        except Exception:
            log.exception("maintenance task failed")


class BrokerService:
    """One broker on the running event loop (see the module invariants)."""

    def __init__(self, config: BrokerConfig, data_dir: Path, listen: str) -> None:
        self.config = config
        self.data_dir = data_dir
        self.listen_on = config.listeners()  # name -> (host, port)
        self.listen_on[next(iter(self.listen_on))] = parse_listen(listen)
        self.broker: Broker | None = None
        self._servers: list[BrokerServer] = []
        self._cleaner: LogCleaner | None = None
        self._listener: MetricsListener | None = None
        self._registry: RegistryListener | None = None
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def host(self) -> str:
        """The first listener's host to connect to from this machine."""
        return local_host(next(iter(self.listen_on.values()))[0])

    @property
    def port(self) -> int:
        """The first listener's bound port."""
        assert self._servers, "the broker is not started"
        return self._servers[0].port

    @property
    def servers(self) -> list[BrokerServer]:
        """One per listener, in the order of ``listeners``."""
        return list(self._servers)

    def client_software(self) -> dict[str, Counter[tuple[str, str]]]:
        """Per listener, open connections per client software name and version (KIP-511)."""
        return {server.listener: server.client_software() for server in self._servers}

    @property
    def metrics_url(self) -> str | None:
        """The metrics listener's URL (status page at its root), None when it is off."""
        return None if self._listener is None else self._listener.url

    @property
    def schema_registry_url(self) -> str | None:
        """The schema registry's URL, None when it is off."""
        return None if self._registry is None else self._registry.url

    async def start(self) -> None:
        load_handlers()
        config = self.config
        security = self._listener_security()
        inter_broker = self._inter_broker_security()
        sockets = self._bind_listeners()
        try:
            broker = self.broker = Broker(config, self.data_dir, inter_broker=inter_broker)
        except BaseException as exc:
            for sock in sockets.values():
                sock.close()
            if isinstance(exc, DataDirError):
                raise StartupError(str(exc)) from None
            raise
        broker.start()
        metrics_at, requests = config.metrics_listener(), RequestMetrics()
        broker.logs.on_log_deleted.append(lambda tp: requests.forget_topic(tp[0]))
        advertised = config.listeners("advertised.listeners")
        broker.advertised = {}
        for name, (host, _) in self.listen_on.items():
            server = BrokerServer(broker, sockets[name],
                                  requests if metrics_at is not None else None, name,
                                  security[name])
            self._servers.append(server)
            await server.start(partial(advertised_address, advertised.get(name), host))
            broker.advertised[name] = server.advertised
            log.info("listener %s on %s:%d, advertised as %s:%d", name, host, server.port,
                     *server.advertised)
        self._cleaner = LogCleaner(broker.logs, CleanerConfig.from_props(config.props))
        if metrics_at is not None:  # before joining: the registration names its URL
            self._listener = MetricsListener(
                broker, self.client_software,
                requests,
                self._cleaner if self._cleaner.config.enable else None, *metrics_at,
                PageLogins(security.values(), broker.security))
            try:
                await self._listener.start()
            except OSError as exc:  # its address is taken or unknown: stop what started
                await self.stop()
                raise StartupError(str(exc)) from None
        await self._join_cluster(broker)
        await broker.txn_coordinator.settle()
        for server in self._servers:  # a broker answers nothing before it joined
            await server.serve()
        if self._cleaner.config.enable:
            self._cleaner.start()
        registry_at = config.schema_registry_listener()
        if registry_at is not None:
            self._registry = RegistryListener(SchemaHost(broker, security.values()), *registry_at)
            try:
                await self._registry.start()
                broker.schema_validation.attach(self._registry)
            except OSError as exc:
                await self.stop()
                raise StartupError(str(exc)) from None
        self._tasks = [
            asyncio.create_task(_every(config.get_int(interval), action))
            for interval, action in (
                ("log.flush.scheduler.interval.ms", broker.logs.flush_due),
                ("log.retention.check.interval.ms", broker.logs.apply_retention),
                ("log.flush.offset.checkpoint.interval.ms", broker.logs.checkpoint),
            )
        ]
        log.info("serving %d listener(s), data in %s", len(self._servers), self.data_dir)

    def _listener_security(self) -> dict[str, ListenerSecurity]:
        """Every listener's security, its TLS files read (a bad one fails here)."""
        try:
            return {name: ListenerSecurity.load(self.config.props, name, protocol)
                    for name, protocol in self.config.security_protocols().items()}
        except InvalidConfigError as exc:
            raise StartupError(str(exc)) from None

    def _inter_broker_security(self) -> InterBrokerSecurity | None:
        """In a cluster, how this broker reaches the others (a bad setting fails here)."""
        if self.config.zookeeper_connect is None:
            return None
        try:
            return InterBrokerSecurity.load(self.config.props,
                                            self.config.security_protocols())
        except InvalidConfigError as exc:
            raise StartupError(str(exc)) from None

    async def _join_cluster(self, broker: Broker) -> None:
        """Join the cluster (register in ZooKeeper, or lead every partition of a single
        node) with every listener's advertised address."""
        protocols = self.config.security_protocols()
        try:
            await broker.replicas.start(tuple(
                Endpoint(name, protocols[name], host, port)
                for name, (host, port) in broker.advertised.items()),
                None if self._listener is None else
                self._listener.url_from(next(iter(broker.advertised.values()))[0]))
        except ClusterError as exc:
            await self.stop()
            raise StartupError(str(exc)) from None

    def _bind_listeners(self) -> dict[str, socket.socket]:
        """Every listener's socket, bound; none left open when one fails."""
        sockets: dict[str, socket.socket] = {}
        try:
            for name, (host, port) in self.listen_on.items():
                sockets[name] = bind(host, port)
        except StartupError:
            for sock in sockets.values():
                sock.close()
            raise
        return sockets

    async def stop(self) -> None:
        log.info("shutting down")
        if self._listener is not None:
            await self._listener.stop()
        if self._registry is not None:
            if self.broker is not None:
                self.broker.schema_validation.close()
            await self._registry.stop()
        for task in self._tasks:
            task.cancel()
        if self.broker is not None:
            await self.broker.replicas.stop()
        for server in self._servers:
            await server.stop()
        if self._cleaner is not None:
            self._cleaner.stop()
        if self.broker is not None:
            self.broker.close()
        log.info("stopped cleanly")


async def serve(config: BrokerConfig, data_dir: Path, listen: str,
                stop: asyncio.Event) -> None:
    """Serve until ``stop`` is set."""
    service = BrokerService(config, data_dir, listen)
    await service.start()
    if service.metrics_url is not None:
        print(f"sparklog broker metrics and status page on {service.metrics_url}", flush=True)
    if service.schema_registry_url is not None:
        print(f"sparklog broker schema registry on {service.schema_registry_url}", flush=True)
    for server in service.servers[1:]:
        print(f"sparklog broker listener {server.listener} on {server.host}:{server.port}, "
              "advertised as {}:{}".format(*server.advertised), flush=True)
    print(f"sparklog broker listening on {service.host}:{service.port}", flush=True)
    try:
        await stop.wait()
    finally:
        await service.stop()


def run(config: BrokerConfig, data_dir: Path, listen: str) -> int:
    """Run in the foreground until SIGTERM or Ctrl-C."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        shutdown = Stop(on_request=stop.set)  # every signal, not just the first, stops cleanly
        for sig in WATCHED:
            loop.add_signal_handler(sig, shutdown.request, sig)
        await serve(config, data_dir, listen, stop)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
    return 0
