"""The HTTP listener of ``metrics.listener``: Prometheus metrics and the status page.

Routes: ``/metrics`` (Prometheus text or OpenMetrics, by prometheus-client), ``/`` (the status
page, one static HTML file with its script), ``/status.json`` (what the page shows: the status
snapshot and the rate history).

Invariants:
- The server is the standard library's threaded WSGI server (prometheus-client's
  ``ThreadingWSGIServer``), on threads of its own: a slow or stuck HTTP client never holds
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
  free port) is ``url``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict
from importlib import resources
from typing import Any, TypeVar
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from sparklog.broker.monitoring.exporter import BrokerCollector
from sparklog.broker.monitoring.history import INTERVAL_S, RateHistory, Sample
from sparklog.broker.monitoring.requests import RequestMetrics
from sparklog.broker.monitoring.status import Broker, BrokerStatus, take_status
from sparklog.storage.cleaner import LogCleaner

log = logging.getLogger(__name__)

T = TypeVar("T")
READ_TIMEOUT_S = 10.0
PAGE = "status_page.html"

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class BrokerUnavailable(Exception):
    """The listener is stopped, or the broker's loop did not answer in time."""


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing per request (a scrape every few seconds would flood the log)."""


class MetricsListener:
    def __init__(self, broker: Broker,
                 connections: Callable[[], dict[str, Counter[tuple[str, str]]]],
                 requests: RequestMetrics, cleaner: LogCleaner | None,
                 host: str, port: int) -> None:
        self.broker = broker
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
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            family = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)[0][0]
            server_class = type("MetricsServer", (ThreadingWSGIServer,),
                                {"address_family": family})
            self._httpd = make_server(self.host, self.port, self._app, server_class,
                                      handler_class=_QuietHandler)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot listen on metrics.listener "
                                     f"{self.url}: {exc.strerror}") from None
        self.port = self._httpd.server_port
        self._serving = True
        threading.Thread(target=self._httpd.serve_forever, name="metrics-listener",
                         daemon=True).start()
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
                data = json.dumps({"status": asdict(status), "history": history,
                                   "interval_s": INTERVAL_S}).encode()
                return _respond(start_response, "200 OK", data, "application/json")
        except BrokerUnavailable as exc:
            return _respond(start_response, "503 Service Unavailable", f"{exc}\n".encode())
        return _respond(start_response, "404 Not Found",
                        b"not found: try /, /metrics or /status.json\n")


def _respond(start_response: StartResponse, status: str, body: bytes,
             content_type: str = "text/plain; charset=utf-8") -> list[bytes]:
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body))),
                            ("Cache-Control", "no-store")])
    return [body]
