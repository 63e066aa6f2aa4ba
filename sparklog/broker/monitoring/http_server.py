"""The broker's HTTP listeners' server (the status page's, the schema registry's): the
standard library's threaded WSGI server on a thread of its own.

Invariants:
- ``serve`` binds (port 0: any free port; IPv4 or IPv6 as the host resolves) and starts
  serving on a daemon thread before it returns; a bind failure is an ``OSError`` whose
  message names the setting and the URL.
- A request runs on a thread of its own: a slow HTTP client never holds the broker's
  event loop.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import ThreadingWSGIServer

App = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing per request (a scrape every few seconds would flood the log)."""


def url_of(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(host: str, port: int, app: App, setting: str,
          handler: type[WSGIRequestHandler] = QuietHandler) -> WSGIServer:
    """A started server for ``app`` on host:port (``setting`` names it in errors)."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        server_class = type("HttpServer", (ThreadingWSGIServer,), {"address_family": family})
        httpd = make_server(host, port, app, server_class, handler_class=handler)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot listen on {setting} {url_of(host, port)}/: "
                                 f"{exc.strerror}") from None
    threading.Thread(target=httpd.serve_forever, name=setting, daemon=True).start()
    return httpd
