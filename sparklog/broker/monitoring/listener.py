"""The HTTP listener of ``metrics.listener``: Prometheus metrics and the status page.

Routes: ``/metrics`` (Prometheus text or OpenMetrics, by prometheus-client), ``/`` (the status
page, one static HTML file with its script), ``/status.json`` (what the page shows: the status
snapshot, the rate history and the other brokers' groups), ``/groups.json`` (this broker's
groups only: what the other brokers' pages read), ``/messages.json?topic=T&partition=P``
with ``offset=O`` or ``timestamp=MS`` and ``limit=N`` (a page of the message browser,
``browser.py``).

Invariants:
- The server is the standard library's threaded WSGI server (``http_server``), on threads
  of its own: a slow or stuck HTTP client never holds
  the broker's event loop. Broker state is read only on the loop: a request thread hands
  ``take_status`` (and the history copy) to the loop with ``run_coroutine_threadsafe`` and
  waits at most ``READ_TIMEOUT_S``; the loop spends one snapshot per scrape or page refresh
  on it (well under a millisecond for a few dozen partitions), and the request thread
  formats the frozen result.
- After ``stop`` (or while the loop does not answer in time) requests get 503; no read is
  ever made of a closed broker.
- The rate history is sampled on the loop every ``history.INTERVAL_S`` while the listener
  runs.
- Nothing is listened on unless ``metrics.listener`` is set; the bound address (port 0: any
  free port) is ``url``; ``url_from`` is the one the broker registers in ZooKeeper for the
  other brokers (its advertised host when the listener binds every interface).
- A cluster's groups live on their coordinators only (in memory, loaded from
  ``__consumer_offsets``; ZooKeeper never holds them), so ``/status.json`` adds the groups
  of every other live broker read from its ``/groups.json`` at the URL it registered, all
  at once on threads of their own, each within ``PEER_TIMEOUT_S`` (an unreachable one is
  listed with its error and link, the page still answers). ``/groups.json`` never asks
  further, so no request fans out twice. The rest of the cluster view (brokers, partition
  leaders and ISRs) is this broker's own view of ZooKeeper: every broker watches it all.
- Records are read only by a login the broker's ``Logins`` accept (HTTP basic auth: 401
  with a Basic challenge without one, when a login is required; the page's own requests,
  which say ``X-Requested-With``, get a challenge no browser answers with its dialog, as
  the page has its own login fields) with READ on the topic (403
  otherwise); a partition without a log here answers 404 with the leader's page to ask.
  The login is checked on the request's thread (its key derivation is slow on purpose),
  the ACL and the read on the loop, like every read of the broker.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from importlib import resources
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app

from sparklog.broker.monitoring.browser import DEFAULT_RECORDS, MessagePage, browse
from sparklog.broker.monitoring.exporter import BrokerCollector
from sparklog.broker.monitoring.history import INTERVAL_S, RateHistory, Sample
from sparklog.broker.monitoring.http_server import serve, url_of
from sparklog.broker.monitoring.requests import RequestMetrics
from sparklog.broker.monitoring.status import (
    Broker,
    BrokerStatus,
    ClusterBroker,
    take_groups,
    take_status,
)
from sparklog.storage.cleaner import LogCleaner

log = logging.getLogger(__name__)

T = TypeVar("T")
READ_TIMEOUT_S = 10.0
PEER_TIMEOUT_S = 2.0
PAGE = "status_page.html"
WILDCARD_HOSTS = ("", "0.0.0.0", "::")
CHALLENGE = 'Basic realm="sparklog broker", charset="UTF-8"'
PAGE_CHALLENGE = 'PageBasic realm="sparklog broker"'
"""The challenge answered to the page's own requests (``X-Requested-With``): a browser
shows its login dialog for a Basic one, and the page asks in its own form instead."""

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class BrokerUnavailable(Exception):
    """The listener is stopped, or the broker's loop did not answer in time."""


class Logins(Protocol):
    """Who may read records (``broker.security.page_logins.PageLogins``): ``principal`` on
    any thread, ``may_read`` on the loop."""

    @property
    def required(self) -> bool: ...
    def principal(self, credentials: tuple[str, str] | None) -> str | None: ...
    def may_read(self, principal: str, host: str, topic: str) -> bool: ...


class _Refused(Exception):
    def __init__(self, status: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.extra = status, extra


class MetricsListener:
    def __init__(self, broker: Broker,
                 connections: Callable[[], dict[str, Counter[tuple[str, str]]]],
                 requests: RequestMetrics, cleaner: LogCleaner | None,
                 host: str, port: int, logins: Logins) -> None:
        self.broker = broker
        self._logins = logins
        self._connections = connections
        self._requests = requests
        self._cleaner = cleaner
        self.host, self.port = host, port
        self.history = RateHistory(broker, requests)
        self._page = resources.files(__package__).joinpath(PAGE).read_bytes()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(BrokerCollector(lambda: self._on_loop(self._status)))
        ProcessCollector(registry=registry)
        self._metrics_app = make_wsgi_app(registry)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._httpd: WSGIServer | None = None
        self._sampler: asyncio.Task[None] | None = None
        self._serving = False

    @property
    def url(self) -> str:
        return url_of(self.host, self.port) + "/"

    def url_from(self, advertised_host: str) -> str:
        """``url``, with ``advertised_host`` when the listener binds every interface."""
        if self.host not in WILDCARD_HOSTS:
            return self.url
        return url_of(advertised_host, self.port) + "/"

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._httpd = serve(self.host, self.port, self._app, "metrics.listener")
        self.port = self._httpd.server_port
        self._serving = True
        self.history.sample()
        self._sampler = asyncio.create_task(self._sample())
        log.info("metrics and status page on %s", self.url)

    async def stop(self) -> None:
        self._serving = False
        if self._sampler is not None:
            self._sampler.cancel()
        if self._httpd is not None:
            await asyncio.to_thread(self._httpd.shutdown)
            self._httpd.server_close()

    async def _sample(self) -> None:
        while True:
            await asyncio.sleep(INTERVAL_S)
            self.history.sample()

    # -- on the broker's loop ------------------------------------------------------------
    def _status(self) -> BrokerStatus:
        return take_status(self.broker, self._connections(), self._requests, self._cleaner)

    def _page_data(self) -> tuple[BrokerStatus, tuple[Sample, ...]]:
        return self._status(), self.history.samples()

    def _on_loop(self, read: Callable[[], T]) -> T:
        """``read()`` run on the broker's loop thread, from a request thread."""

        async def call() -> T:
            if not self._serving:
                raise BrokerUnavailable("the broker is stopping")
            return read()

        assert self._loop is not None
        try:
            return asyncio.run_coroutine_threadsafe(call(), self._loop).result(READ_TIMEOUT_S)
        except (TimeoutError, RuntimeError) as exc:  # RuntimeError: the loop is closed
            raise BrokerUnavailable(str(exc) or "the broker did not answer in time") from None

    # -- on request threads --------------------------------------------------------------
    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO") or "/", environ["REQUEST_METHOD"]
        if method not in ("GET", "HEAD"):
            return _respond(start_response, "405 Method Not Allowed", b"use GET\n")
        try:
            if path == "/metrics":  # collects before it starts the response
                return self._metrics_app(environ, start_response)  # type: ignore[no-any-return]
            if path == "/":
                return _respond(start_response, "200 OK", self._page, "text/html; charset=utf-8")
            if path == "/status.json":  # read on the loop, formatted here
                status, history = self._on_loop(self._page_data)
                return _json(start_response, {
                    "status": asdict(status), "history": history, "interval_s": INTERVAL_S,
                    "peer_groups": _peer_groups(status), "login_required": self._logins.required})
            if path == "/groups.json":
                groups = self._on_loop(lambda: take_groups(self.broker))
                return _json(start_response, {"groups": [asdict(g) for g in groups]})
            if path == "/messages.json":
                return _json(start_response, asdict(self._messages(environ)))
        except BrokerUnavailable as exc:
            return _respond(start_response, "503 Service Unavailable", f"{exc}\n".encode())
        except _Refused as refused:
            from_page = bool(environ.get("HTTP_X_REQUESTED_WITH"))
            headers = [("WWW-Authenticate", PAGE_CHALLENGE if from_page else CHALLENGE)
                       ] if refused.status.startswith("401") else []
            return _json(start_response, {"error": str(refused), **refused.extra},
                         refused.status, headers)
        return _respond(start_response, "404 Not Found",
                        b"not found: try /, /metrics or /status.json\n")

    def _messages(self, environ: dict[str, Any]) -> MessagePage:
        """The browser's page the query asks for, for a login that may read the topic."""
        query = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        try:
            topic = query["topic"]
            partition = int(query.get("partition", "0"))
            offset = int(query["offset"]) if query.get("offset") else None
            timestamp = int(query["timestamp"]) if query.get("timestamp") else None
            limit = int(query.get("limit") or DEFAULT_RECORDS)
        except (KeyError, ValueError):
            raise _Refused("400 Bad Request", "expected topic=T&partition=P with offset=O "
                           "or timestamp=MS, and limit=N (numbers)") from None
        principal = self._logins.principal(_basic(environ.get("HTTP_AUTHORIZATION", "")))
        if principal is None:
            raise _Refused("401 Unauthorized", "log in as one of the broker's SASL users")
        host = environ.get("REMOTE_ADDR", "")

        def read() -> MessagePage:
            if not self._logins.may_read(principal, host, topic):
                raise _Refused("403 Forbidden", f"{principal} may not READ topic {topic}")
            log = self.broker.logs.logs.get((topic, partition))
            replica = self.broker.replicas.partitions.get((topic, partition))
            if log is None or replica is None:
                raise _Refused("404 Not Found", f"no replica of {topic}-{partition} on broker "
                               f"{self.broker.node_id}", leader_url=self._leader_url(topic,
                                                                                      partition))
            return browse(log, replica, topic, partition, offset=offset, timestamp=timestamp,
                          limit=limit)

        return self._on_loop(read)

    def _leader_url(self, topic: str, partition: int) -> str | None:
        """The status page of the partition's leader, where it has one (on the loop)."""
        replica = self.broker.replicas.partitions.get((topic, partition))
        leader = None if replica is None else self.broker.replicas.live.get(replica.leader)
        return None if leader is None else leader.metrics_url


def _basic(authorization: str) -> tuple[str, str] | None:
    """(user, password) of an HTTP basic ``Authorization`` header; None without one."""
    scheme, _, encoded = authorization.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, colon, password = base64.b64decode(encoded.strip(), validate=True
                                                 ).decode("utf-8").partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if colon else None


def _peer_groups(status: BrokerStatus) -> list[dict[str, Any]]:
    """Every other live broker's groups, read from its page at once (see the invariants)."""
    peers = [b for b in status.brokers
             if b.alive and b.broker_id != status.node_id and b.metrics_url]
    if not peers:
        return []
    with ThreadPoolExecutor(len(peers), thread_name_prefix="peer-groups") as pool:
        return list(pool.map(_groups_of, peers))


def _groups_of(peer: ClusterBroker) -> dict[str, Any]:
    assert peer.metrics_url is not None
    found: dict[str, Any] = {"broker_id": peer.broker_id, "url": peer.metrics_url,
                             "groups": None, "error": None}
    try:
        with urllib.request.urlopen(peer.metrics_url + "groups.json",
                                    timeout=PEER_TIMEOUT_S) as response:
            found["groups"] = json.loads(response.read())["groups"]
    except (OSError, ValueError, KeyError) as exc:
        found["error"] = str(exc) or type(exc).__name__
    return found


def _json(start_response: StartResponse, value: object, status: str = "200 OK",
          headers: list[tuple[str, str]] | None = None) -> list[bytes]:
    return _respond(start_response, status, json.dumps(value).encode(), "application/json",
                    headers)


def _respond(start_response: StartResponse, status: str, body: bytes,
             content_type: str = "text/plain; charset=utf-8",
             headers: list[tuple[str, str]] | None = None) -> list[bytes]:
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body))),
                            ("Cache-Control", "no-store"), *(headers or [])])
    return [body]
