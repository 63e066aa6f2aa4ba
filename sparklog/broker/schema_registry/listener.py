"""The schema registry's HTTP listener (``schema.registry.listeners``).

Invariants:
- The server is the status page's (``monitoring.http_server``), on threads of its own: a
  slow HTTP client never holds the broker's event loop. Each request is read on its thread,
  then handed whole to the loop (``run_coroutine_threadsafe``), where the store answers it
  in one step: requests are applied one at a time, in the order the loop takes them.
- ``start`` replays ``_schemas`` before the listener accepts anything, so the first answer
  already sees every change the topic holds.
- A body larger than ``MAX_BODY_BYTES`` is refused (413) unread; a request the loop does
  not answer within ``TIMEOUT_S`` gets 50002, and one after ``stop`` 503 (50003).
- Answers carry ``Content-Type: application/vnd.schemaregistry.v1+json``; a request's
  content type is not checked (Confluent's ``application/vnd.schemaregistry.v1+json``,
  ``application/json`` and the rest all read the body as JSON).
- A write the log refuses (``KafkaError``, ``OSError``) is answered 50001 and changes
  nothing in memory.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qsl
from wsgiref.simple_server import WSGIServer

from sparklog.broker.monitoring.http_server import QuietHandler, serve, url_of
from sparklog.broker.schema_registry import errors
from sparklog.broker.schema_registry.records import TOPIC
from sparklog.broker.schema_registry.rest import handle
from sparklog.broker.schema_registry.store import SchemaStore
from sparklog.coordinator.internal_topic import InternalTopic, append_records, replay
from sparklog.errors import KafkaError

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_BODY_BYTES = 16 * 1024 * 1024
TIMEOUT_S = 30.0
LOAD_BUFFER_BYTES = 1 << 20

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
_STATUS = {200: "200 OK", 400: "400 Bad Request", 401: "401 Unauthorized",
           403: "403 Forbidden", 404: "404 Not Found", 405: "405 Method Not Allowed",
           409: "409 Conflict", 413: "413 Payload Too Large", 415: "415 Unsupported Media Type",
           422: "422 Unprocessable Entity", 500: "500 Internal Server Error",
           503: "503 Service Unavailable"}


class _Handler(QuietHandler):
    def get_environ(self) -> dict[str, Any]:
        """wsgiref's environ, with the path as sent (``RAW_PATH``: PATH_INFO is decoded, so
        a subject's ``%2F`` would split it)."""
        environ = super().get_environ()
        environ["RAW_PATH"] = self.path.split("?", 1)[0]
        return environ


class RegistryListener:
    def __init__(self, topic: InternalTopic, now_ms: Callable[[], int], host: str,
                 port: int) -> None:
        self._topic = topic
        self._now_ms = now_ms
        self.host, self.port = host, port
        self.store = SchemaStore(self._write)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._httpd: WSGIServer | None = None
        self._serving = False

    @property
    def url(self) -> str:
        return url_of(self.host, self.port)

    def _write(self, records: list[tuple[bytes, bytes | None]]) -> None:
        try:
            append_records(self._topic, 0, records, self._now_ms())
        except (KafkaError, OSError) as exc:
            raise errors.store_error(str(exc)) from None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.store.replay((r.key, r.value) for r in replay(self._topic, 0, LOAD_BUFFER_BYTES)
                          if r.key is not None)
        self._httpd = serve(self.host, self.port, self._app, "schema.registry.listeners",
                            _Handler)
        self.port = self._httpd.server_port
        self._serving = True
        log.info("schema registry on %s (%s)", self.url, TOPIC)

    async def stop(self) -> None:
        self._serving = False
        if self._httpd is not None:
            await asyncio.to_thread(self._httpd.shutdown)
            self._httpd.server_close()

    # -- on request threads --------------------------------------------------------------
    def _answer(self, method: str, path: str, query: dict[str, str], body: bytes
                ) -> tuple[int, Any]:
        async def call() -> tuple[int, Any]:
            if not self._serving:
                return 503, {"error_code": 50003, "message": "The broker is stopping"}
            try:
                return handle(self.store, method, path, query, body)
            except Exception:  # a defect: logged, answered as Confluent's internal error
                log.exception("schema registry: internal error on %s %s", method, path)
                return 500, {"error_code": 50001, "message": "Internal error"}

        assert self._loop is not None
        try:
            return asyncio.run_coroutine_threadsafe(call(), self._loop).result(TIMEOUT_S)
        except TimeoutError:
            error = errors.timeout_error()
            return error.status, {"error_code": error.error_code, "message": error.message}
        except RuntimeError:  # the loop is closed
            return 503, {"error_code": 50003, "message": "The broker is stopping"}

    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method = environ["REQUEST_METHOD"]
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            status, answer = 413, {"error_code": 413, "message": "Request body too large"}
        else:
            body = environ["wsgi.input"].read(length) if length else b""
            query = dict(parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
            path = environ.get("RAW_PATH") or "/"
            status, answer = self._answer(method, path, query, body)
        data = json.dumps(answer).encode()
        start_response(_STATUS.get(status, f"{status} Error"),
                       [("Content-Type", CONTENT_TYPE), ("Content-Length", str(len(data)))])
        return [data]
