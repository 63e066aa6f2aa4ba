"""The schema registry's HTTP listener (``schema.registry.listeners``).

Invariants:
- The server is the status page's (``monitoring.http_server``), on threads of its own: a
  slow HTTP client never holds the broker's event loop. Each request is read on its thread,
  then handed whole to the loop (``run_coroutine_threadsafe``), where the store answers it
  in one synchronous step (a change then waits for the ISR): requests are applied one at
  a time, in the order the loop takes them.
- Only the broker leading ``_schemas``-0 answers (its store replayed from the log whenever
  its leader epoch there changes, so a new leader starts from everything the topic holds);
  any other broker forwards the request as it came to the leader's registry (its URL from
  the ``Host``) and relays the answer, so every broker serves the same ids. A forwarded
  request is never forwarded again (50003 when its receiver does not lead either).
- A change is answered once ``_schemas``' ISR has it; one that did not replicate is
  answered 50001 and the store is replayed from the log before the next answer.
- A body larger than ``MAX_BODY_BYTES`` is refused (413) unread; a request the loop does
  not answer within ``TIMEOUT_S`` gets 50002, and one after ``stop`` 503 (50003).
- Answers carry ``Content-Type: application/vnd.schemaregistry.v1+json``; a request's
  content type is not checked (Confluent's ``application/vnd.schemaregistry.v1+json``,
  ``application/json`` and the rest all read the body as JSON).
- When the broker's listeners use SASL, every request needs HTTP basic auth of a SASL user
  (``Host.principal``, on the request's thread: a SCRAM key derivation never holds the
  loop; 401 40101 without), and with an authorizer the ACL ``rest.access`` names, checked on
  the loop by the broker that received the request (403 40301; the subject list keeps the
  subjects the user may read); a forwarded request carries
  its ``Authorization`` and is checked again by the leader, with the forwarding broker's
  address as the client's host.
- A write the log refuses (``KafkaError``, ``OSError``) is answered 50001 and changes
  nothing in memory.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol
from urllib.parse import parse_qsl, quote
from wsgiref.simple_server import WSGIServer

from sparklog.broker.monitoring.http_server import QuietHandler, serve, url_of
from sparklog.broker.schema_registry import errors
from sparklog.broker.schema_registry.forwarding import CONTENT_TYPE, Answer, Request, forward
from sparklog.broker.schema_registry.records import TOPIC
from sparklog.broker.schema_registry.rest import access, handle, route
from sparklog.broker.schema_registry.store import SchemaStore
from sparklog.coordinator.internal_topic import InternalTopic, append_records, replay
from sparklog.errors import KafkaError

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 1024 * 1024
TIMEOUT_S = 30.0
LOAD_BUFFER_BYTES = 1 << 20
FORWARDED_HEADER = "HTTP_X_SPARKLOG_FORWARDED"


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


class Host(Protocol):
    """What the registry needs of its broker (``sparklog.broker.schema_host``)."""

    def now_ms(self) -> int: ...
    async def publish(self, url: str) -> None: ...
    async def prepare(self) -> None: ...
    def leader(self) -> int | None: ...
    def leader_epoch(self) -> int | None: ...
    def topic(self) -> InternalTopic: ...
    async def replicated(self) -> bool: ...
    async def url_of(self, broker_id: int) -> str | None: ...
    def principal(self, credentials: tuple[str, str] | None) -> str | None: ...
    def allowed(self, principal: str, client_host: str,
                needs: tuple[str, str, str] | None) -> bool: ...


class RegistryListener:
    def __init__(self, host: Host, address: str, port: int) -> None:
        self._host = host
        self.host, self.port = address, port
        self.store = SchemaStore(self._write)
        self._epoch: int | None = None  # the leader epoch the store was loaded in
        self._loop: asyncio.AbstractEventLoop | None = None
        self._httpd: WSGIServer | None = None
        self._serving = False

    @property
    def url(self) -> str:
        return url_of(self.host, self.port)

    def _write(self, records: list[tuple[bytes, bytes | None]]) -> None:
        try:
            append_records(self._host.topic(), 0, records, self._host.now_ms())
        except (KafkaError, OSError) as exc:
            raise errors.store_error(str(exc)) from None

    def _load(self, epoch: int) -> None:
        """The store as ``_schemas`` holds it, for a leadership that began in ``epoch``."""
        self.store = SchemaStore(self._write)
        self.store.replay((r.key, r.value) for r in replay(self._host.topic(), 0,
                                                           LOAD_BUFFER_BYTES)
                          if r.key is not None)
        self._epoch = epoch

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        epoch = self._host.leader_epoch()
        if epoch is not None:
            self._load(epoch)
        self._httpd = serve(self.host, self.port, self._app, "schema.registry.listeners",
                            _Handler)
        self.port = self._httpd.server_port
        self._serving = True
        await self._host.publish(self.url)
        log.info("schema registry on %s (%s)", self.url, TOPIC)

    async def stop(self) -> None:
        self._serving = False
        if self._httpd is not None:
            await asyncio.to_thread(self._httpd.shutdown)
            self._httpd.server_close()

    # -- on the loop ---------------------------------------------------------------------
    def leader_store(self) -> SchemaStore | None:
        """The store, as ``_schemas`` holds it, while this broker leads ``_schemas``-0
        (loaded again when its leader epoch there changed); None while another leads it."""
        epoch = self._host.leader_epoch()
        if epoch is None:
            return None
        if epoch != self._epoch:
            self._load(epoch)
        return self.store

    async def leader_url(self) -> str | None:
        """The registry URL of the broker leading ``_schemas``-0 (None: no leader yet)."""
        await self._host.prepare()
        leader = self._host.leader()
        return None if leader is None else await self._host.url_of(leader)

    async def _serve(self, request: Request) -> Answer | str:
        """The answer, when this broker leads ``_schemas``; else the leader's URL."""
        if not self._serving:
            return errors.RegistryError(50003, "The broker is stopping").answer
        needs = access(request.method, request.path)
        if not self._host.allowed(request.principal, request.client_host, needs):
            assert needs is not None
            return errors.RegistryError(
                40301, f"User {request.principal} is not authorized to {needs[2]} "
                       f"{needs[0]} {needs[1]}").answer
        await self._host.prepare()
        if self.leader_store() is None:
            leader = self._host.leader()
            url = None if leader is None or request.forwarded else \
                await self._host.url_of(leader)
            return url or errors.RegistryError(
                50003, f"Error while forwarding the request to the leader: {TOPIC} has "
                       f"no leader with a registry (leader: {leader})").answer
        writes = self.store.writes
        try:
            answer = handle(self.store, *request.parts)
        except Exception:  # a defect: logged, answered as Confluent's internal error
            log.exception("schema registry: internal error on %s %s", *request.parts[:2])
            return errors.RegistryError(50001, "Internal error").answer
        if self.store.writes != writes and not await self._host.replicated():
            self._epoch = None  # reload from the log before the next answer
            return errors.store_error(f"{TOPIC} did not replicate the change").answer
        if request.method == "GET" and route(request.path) == ["subjects"] \
                and answer[0] == 200:  # the subjects the user may read
            return 200, [s for s in answer[1] if self._host.allowed(
                request.principal, request.client_host,
                access("GET", "/subjects/" + quote(s, safe="")))]
        return answer

    # -- on request threads --------------------------------------------------------------
    def _answer(self, request: Request) -> Answer:
        assert self._loop is not None
        try:
            found = asyncio.run_coroutine_threadsafe(self._serve(request), self._loop
                                                     ).result(TIMEOUT_S)
        except TimeoutError:
            return errors.timeout_error().answer
        except RuntimeError:  # the loop is closed
            return errors.RegistryError(50003, "The broker is stopping").answer
        return forward(found, request, TIMEOUT_S) if isinstance(found, str) else found

    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            status, answer = 413, {"error_code": 413, "message": "Request body too large"}
        else:
            body = environ["wsgi.input"].read(length) if length else b""
            query = dict(parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
            authorization = environ.get("HTTP_AUTHORIZATION", "")
            principal = self._host.principal(_basic(authorization))
            if principal is None:
                status, answer = 401, {"error_code": 40101, "message": "Unauthorized"}
            else:
                status, answer = self._answer(Request(
                    environ["REQUEST_METHOD"], environ.get("RAW_PATH") or "/", query, body,
                    environ.get("QUERY_STRING", ""), FORWARDED_HEADER in environ,
                    principal, environ.get("REMOTE_ADDR", ""), authorization))
        data = json.dumps(answer).encode()
        headers = [("Content-Type", CONTENT_TYPE), ("Content-Length", str(len(data)))]
        if status == 401:
            headers.append(("WWW-Authenticate", 'Basic realm="sparklog schema registry"'))
        start_response(_STATUS.get(status, f"{status} Error"), headers)
        return [data]


def _basic(header: str) -> tuple[str, str] | None:
    """The (user, password) of an HTTP basic ``Authorization`` header; None without one."""
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, colon, password = base64.b64decode(token.strip(), validate=True).decode().partition(
            ":")
    except (ValueError, UnicodeDecodeError):
        return None
    return (user, password) if colon else None
