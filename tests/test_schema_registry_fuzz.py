"""Hostile input to the schema registry: neither its REST layer nor the broker's HTTP
listener can be made to fail by what a client sends.

In process, ``rest.handle`` over a store with an in-memory ``_schemas`` is fed random
methods, paths, queries and bodies (JSON of every shape, deeply nested documents, schemas
of every type, bytes): it must answer every one with a status and a JSON value, never raise.
Against a broker process (a child: anything that could end it shows as a dead process),
raw HTTP requests, well-formed and not, must each get an HTTP answer or a closed
connection, and the broker must stay healthy and keep serving.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator

import pytest
from broker_fixtures import TIMEOUT, assert_healthy, start_broker
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.broker.process import BrokerProcess
from sparklog.broker.schema_registry.rest import handle
from sparklog.broker.schema_registry.store import SchemaStore

SEGMENTS = st.sampled_from(["subjects", "versions", "schemas", "ids", "config", "mode",
                            "compatibility", "latest", "-1", "0", "1", "2", "schema",
                            "referencedby", "types", "s", "p", "%2F", "%ZZ", "99999999999999",
                            "..", "a b"])
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats()
                           | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=4),
                           max_leaves=20)
AVRO = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
PROTO = ('syntax = "proto3"; package p; message M { int32 a = 1; oneof o { string b = 2; } '
         'map<string, M> c = 3; message N { repeated N n = 1; } }')
PROTO_WORDS = st.sampled_from(["message", "M", "N", "{", "}", "int32", "string", "a", "=", "1",
                               "2", ";", "oneof", "o", "map<string,", ">", "repeated",
                               "required", "package", "p", "import", '"x.proto"', "enum",
                               'syntax = "proto2";', "{" * 200])
"""Words of .proto text, to put together in every order: what the registry's Protobuf
parser and compatibility check must refuse or check, never fail on."""


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return draw(st.binary(max_size=200))
    if kind == 1:
        return json.dumps(draw(JSON_VALUES)).encode()
    if kind == 2:
        depth = draw(st.integers(1, 100_000))
        return b"[" * depth + b"]" * draw(st.integers(0, depth))
    schema = draw(st.sampled_from([AVRO, "\"string\"", "{", json.dumps(draw(JSON_VALUES)),
                                   "[" * 5000 + "]" * 5000,
                                   json.dumps({"type": "object", "properties": {
                                       "a": {"$ref": "#/properties/a"}}})]))
    return json.dumps({"schema": schema, "schemaType": draw(st.sampled_from(
        ["AVRO", "JSON", "PROTOBUF", "XML", 5, None])), "references": draw(st.one_of(
            st.none(), JSON_VALUES, st.just([{"name": "n", "subject": "s", "version": 1}])))
    }).encode()


def _store() -> SchemaStore:
    store = SchemaStore(lambda records: None)
    handle(store, "POST", "/subjects/s/versions", {}, json.dumps({"schema": AVRO}).encode())
    handle(store, "POST", "/subjects/p/versions", {},
           json.dumps({"schema": PROTO, "schemaType": "PROTOBUF"}).encode())
    return store


FUZZ = settings(max_examples=400, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]),
       segments=st.lists(SEGMENTS, max_size=6),
       query=st.dictionaries(st.sampled_from(["deleted", "permanent", "verbose", "force",
                                              "defaultToGlobal", "subjectPrefix"]),
                             st.sampled_from(["true", "false", "", "x"])),
       body=bodies())
def test_rest_answers_everything(method: str, segments: list[str], query: dict[str, str],
                                 body: bytes) -> None:
    status, answer = handle(_store(), method, "/" + "/".join(segments), query, body)
    json.dumps(answer)
    assert 200 <= status < 600
    if status != 200:
        assert isinstance(answer["error_code"], int) and isinstance(answer["message"], str)


@FUZZ
@given(words=st.lists(PROTO_WORDS, max_size=40), where=st.integers(0, len(PROTO)),
       path=st.sampled_from(["/subjects/p/versions", "/compatibility/subjects/p/versions/latest",
                             "/subjects/p"]))
def test_protobuf_text_is_checked_or_refused(words: list[str], where: int, path: str) -> None:
    """.proto text put together from its words, alone or inside a valid file, registered
    over a PROTOBUF version (so the compatibility check builds and compares it), checked and
    looked up: an answer every time."""
    for text in (" ".join(words), PROTO[:where] + " ".join(words) + PROTO[where:]):
        body = json.dumps({"schema": text, "schemaType": "PROTOBUF"}).encode()
        status, answer = handle(_store(), "POST", path, {"verbose": "true"}, body)
        json.dumps(answer)
        assert status in (200, 404, 409, 422), answer


@pytest.fixture(scope="module")
def registry_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path_factory.mktemp("fuzz"),
                        {"schema.registry.listeners": "http://127.0.0.1:0"})
    yield proc
    assert_healthy(proc)
    assert proc.stop() == 0


def _raw(broker: BrokerProcess, data: bytes) -> bytes:
    assert broker.schema_registry_url is not None
    host, port = broker.schema_registry_url.removeprefix("http://").rsplit(":", 1)
    chunks = []
    with socket.create_connection((host, int(port)), timeout=TIMEOUT) as sock:
        try:  # the server may answer (413) and close before it read everything
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    return b"".join(chunks)


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(method=st.sampled_from([b"GET", b"POST", b"PUT", b"DELETE", b"BREW", b""]),
       segments=st.lists(SEGMENTS, max_size=5), body=bodies(),
       length=st.sampled_from([None, -1, 0, 10**12, "x"]),
       garbage=st.binary(max_size=100))
def test_the_listener_survives_hostile_requests(registry_broker: BrokerProcess, method: bytes,
                                                segments: list[str], body: bytes,
                                                length: object, garbage: bytes) -> None:
    declared = len(body) if length is None else length
    request = (method + b" /" + "/".join(segments).encode() + b" HTTP/1.1\r\nHost: x\r\n"
               + f"Content-Length: {declared}\r\n\r\n".encode() + body + garbage)
    answer = _raw(registry_broker, request)
    # a status line, or the standard library's page for a request line it cannot parse
    assert answer == b"" or answer.startswith(b"HTTP/1.") or b"Error response" in answer
    # still serving
    assert _raw(registry_broker, b"GET /subjects HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 200")
    assert registry_broker.running
