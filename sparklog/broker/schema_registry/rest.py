"""Confluent Schema Registry's REST API routed onto a ``SchemaStore``.

``handle(store, method, path, query, body)`` answers one request with (HTTP status, JSON
value). Routes: ``/subjects`` (list; ``/{s}`` lookup or delete; ``/{s}/versions``
list or register; ``/{s}/versions/{v|latest}`` get or delete, ``/schema`` its text,
``/referencedby``), ``/schemas/ids/{id}`` (and ``/schema``, ``/subjects``, ``/versions``),
``/schemas/types``, ``/config`` and ``/config/{s}`` (get, put, delete), ``/mode`` and
``/mode/{s}``, ``/compatibility/subjects/{s}/versions[/{v|latest}]`` (``verbose=true``
lists the incompatibilities).

Invariants:
- ``handle`` never raises for anything a client sends: a malformed body, path, version or
  id is answered with Confluent's code (400 for a body that is not the expected JSON,
  42202 for a bad version, 404 for an unknown route); only a store failure escapes.
- Nothing here keeps state; the store decides every change.
- ``access`` maps a request onto Kafka's ACLs (Confluent's SUBJECT resources are not
  Kafka's): a subject's reads need READ and its changes WRITE on the subject's topic;
  global changes need ALTER_CONFIGS on the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote

from sparklog.broker.schema_registry import errors
from sparklog.broker.schema_registry.errors import RegistryError
from sparklog.broker.schema_registry.records import Reference
from sparklog.broker.schema_registry.schema_types import TYPES, ParsedSchema
from sparklog.broker.schema_registry.store import MAX_VERSION, SchemaStore

Answer = tuple[int, Any]
Query = Mapping[str, str]


def _flag(query: Query, name: str) -> bool:
    return query.get(name, "false").lower() == "true"


def _version(text: str) -> int | None:
    """A path's version: None for ``latest`` (or -1)."""
    if text == "latest":
        return None
    try:
        version = int(text)
    except ValueError:
        raise errors.invalid_version(text) from None
    if version == -1:
        return None
    if not 1 <= version <= MAX_VERSION:
        raise errors.invalid_version(text)
    return version


def _id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise RegistryError(404, "HTTP 404 Not Found") from None


def _json_body(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body or b"{}")
    except (ValueError, RecursionError) as exc:
        raise RegistryError(400, f"Unexpected character in the request body: {exc}") from None
    if not isinstance(data, dict):
        raise RegistryError(400, "The request body must be a JSON object")
    return data


def _schema_request(store: SchemaStore, body: bytes) -> tuple[ParsedSchema, dict[str, Any]]:
    data = _json_body(body)
    schema_type = data.get("schemaType") or "AVRO"
    text = data.get("schema")
    if not isinstance(text, str) or not isinstance(schema_type, str):
        raise errors.invalid_schema("the request has no schema")
    if schema_type not in TYPES:
        raise errors.invalid_schema(f"unknown schema type {schema_type}")
    try:
        references = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                           for r in data.get("references") or ())
    except (KeyError, TypeError, ValueError):
        raise errors.invalid_schema("references need a name, a subject and a version") from None
    return store.parse(schema_type, text, references), data


def _schema_by_id(store: SchemaStore, schema_id: int) -> dict[str, Any]:
    entry = store.entry_of_id(schema_id)
    out = entry.as_dict()
    for key in ("subject", "version", "id"):
        out.pop(key)
    return out


def _compatibility(store: SchemaStore, subject: str, version: str | None, query: Query,
                   body: bytes) -> Answer:
    schema, _ = _schema_request(store, body)
    if version is None:
        found = store.incompatibilities(subject, schema)
    else:
        number = _version(version)
        try:
            against = store.version(subject, number)
        except RegistryError as exc:
            if number is None and exc.error_code == 40401:
                return 200, {"is_compatible": True}
            raise
        found = store.incompatibilities(subject, schema, against)
    answer: dict[str, Any] = {"is_compatible": not found}
    if _flag(query, "verbose"):
        answer["messages"] = found
    return 200, answer


def _subjects(store: SchemaStore, method: str, parts: list[str], query: Query,
              body: bytes) -> Answer:
    deleted = _flag(query, "deleted")
    if not parts:
        if method == "GET":
            prefix = query.get("subjectPrefix", "")
            return 200, [s for s in store.subject_names(deleted) if s.startswith(prefix)]
        raise _not_allowed()
    subject, rest = parts[0], parts[1:]
    if not rest:
        if method == "POST":
            schema, _ = _schema_request(store, body)
            return 200, store.lookup(subject, schema, deleted).as_dict()
        if method == "DELETE":
            return 200, store.delete_subject(subject, _flag(query, "permanent"))
        raise _not_allowed()
    if rest[0] != "versions" or len(rest) > 3:
        raise _not_found()
    if len(rest) == 1:
        if method == "GET":
            return 200, [e.version for e in store.versions(subject, deleted)]
        if method == "POST":
            schema, data = _schema_request(store, body)
            schema_id, version = data.get("id"), data.get("version")
            if not all(x is None or (isinstance(x, int) and x > 0) for x in (schema_id, version)):
                raise errors.invalid_schema("id and version are positive integers")
            entry = store.register(subject, schema, schema_id, version)
            return 200, {"id": entry.id}
        raise _not_allowed()
    version = _version(rest[1])
    if len(rest) == 3:
        entry = store.version(subject, version, deleted)
        if rest[2] == "schema" and method == "GET":
            return 200, json.loads(entry.schema) if entry.schema_type != "PROTOBUF" \
                else entry.schema
        if rest[2] == "referencedby" and method == "GET":
            return 200, sorted(e.id for e in store.subjects_entries()
                               if not e.deleted and any(
                                   r.subject == subject and r.version == entry.version
                                   for r in e.references))
        raise _not_found()
    if method == "GET":
        return 200, store.version(subject, version, deleted).as_dict()
    if method == "DELETE":
        return 200, store.delete_version(subject, version, _flag(query, "permanent"))
    raise _not_allowed()


def _schemas(store: SchemaStore, method: str, parts: list[str], query: Query) -> Answer:
    if method != "GET":
        raise _not_allowed()
    if parts == ["types"]:
        return 200, list(TYPES)
    if len(parts) < 2 or parts[0] != "ids" or len(parts) > 3:
        raise _not_found()
    schema_id = _id(parts[1])
    if len(parts) == 2:
        return 200, _schema_by_id(store, schema_id)
    deleted = _flag(query, "deleted")
    match parts[2]:
        case "schema":
            entry = store.entry_of_id(schema_id)
            return 200, entry.schema if entry.schema_type == "PROTOBUF" \
                else json.loads(entry.schema)
        case "subjects":
            return 200, sorted({e.subject for e in store.usages(schema_id, deleted)})
        case "versions":
            return 200, [{"subject": e.subject, "version": e.version}
                         for e in store.usages(schema_id, deleted)]
    raise _not_found()


def _config(store: SchemaStore, method: str, subject: str | None, query: Query,
            body: bytes) -> Answer:
    if method == "GET":
        if subject is not None and subject not in store.configs \
                and not _flag(query, "defaultToGlobal"):
            raise errors.subject_config_not_found(subject)
        return 200, {"compatibilityLevel": store.level(subject)}
    if method == "PUT":
        level = _json_body(body).get("compatibility")
        store.set_level(subject, str(level).upper() if isinstance(level, str) else level)
        return 200, {"compatibility": store.level(subject)}
    if method == "DELETE":
        return 200, {"compatibilityLevel": store.delete_level(subject)}
    raise _not_allowed()


def _mode(store: SchemaStore, method: str, subject: str | None, query: Query,
          body: bytes) -> Answer:
    if method == "GET":
        if subject is not None and subject not in store.modes \
                and not _flag(query, "defaultToGlobal"):
            raise errors.subject_mode_not_found(subject)
        return 200, {"mode": store.mode(subject)}
    if method == "PUT":
        mode = _json_body(body).get("mode")
        store.set_mode(subject, str(mode).upper(), _flag(query, "force"))
        return 200, {"mode": store.mode(subject)}
    if method == "DELETE" and subject is not None:
        return 200, {"mode": store.delete_mode(subject)}
    raise _not_allowed()


def _not_found() -> RegistryError:
    return RegistryError(404, "HTTP 404 Not Found")


def _not_allowed() -> RegistryError:
    return RegistryError(405, "HTTP 405 Method Not Allowed")


def route(path: str) -> list[str]:
    """The path's segments, each percent-decoded (a subject may hold any character)."""
    return [unquote(p) for p in path.strip("/").split("/") if p]


def subject_of(path: str) -> str | None:
    """The subject a request is about (for ACLs), None for a global one."""
    parts = route(path)
    if parts[:1] in (["subjects"], ["config"], ["mode"]) and len(parts) > 1:
        return parts[1]
    if parts[:2] == ["compatibility", "subjects"] and len(parts) > 2:
        return parts[2]
    return None


def access(method: str, path: str) -> tuple[str, str, str] | None:
    """What a request needs under ACLs: (``topic``, name, ``READ``|``WRITE``) for a
    subject's request (the subject's topic: the subject without its ``-key``/``-value``
    suffix, else the subject itself), (``cluster``, ``kafka-cluster``, ``ALTER_CONFIGS``)
    for a change of the global config or mode, None for other reads (schemas by id, the
    subject list, which the listener filters, types, the global config and mode: any
    logged-in user)."""
    subject = subject_of(path)
    parts = route(path)
    reads = method == "GET" or (method == "POST" and (
        parts[:1] == ["compatibility"] or (parts[:1] == ["subjects"] and len(parts) == 2)))
    if subject is None:
        return None if reads else ("cluster", "kafka-cluster", "ALTER_CONFIGS")
    for suffix in ("-key", "-value"):
        if subject.endswith(suffix) and len(subject) > len(suffix):
            subject = subject.removesuffix(suffix)
            break
    return "topic", subject, "READ" if reads else "WRITE"


def handle(store: SchemaStore, method: str, path: str, query: Query, body: bytes) -> Answer:
    try:
        return _dispatch(store, method, route(path), query, body)
    except RegistryError as exc:
        return exc.answer


def _dispatch(store: SchemaStore, method: str, parts: list[str], query: Query,
              body: bytes) -> Answer:
    head, rest = (parts[0], parts[1:]) if parts else ("", [])
    routes: dict[str, Callable[[], Answer]] = {
        "": lambda: (200, {}),
        "subjects": lambda: _subjects(store, method, rest, query, body),
        "schemas": lambda: _schemas(store, method, rest, query),
        "config": lambda: _config(store, method, _one(rest), query, body),
        "mode": lambda: _mode(store, method, _one(rest), query, body),
        "compatibility": lambda: _compatibility_route(store, method, rest, query, body),
    }
    if head not in routes:
        raise _not_found()
    return routes[head]()


def _one(rest: list[str]) -> str | None:
    if len(rest) > 1:
        raise _not_found()
    return rest[0] if rest else None


def _compatibility_route(store: SchemaStore, method: str, rest: list[str], query: Query,
                         body: bytes) -> Answer:
    if method != "POST":
        raise _not_allowed()
    if len(rest) not in (3, 4) or rest[0] != "subjects" or rest[2] != "versions":
        raise _not_found()
    return _compatibility(store, rest[1], rest[3] if len(rest) == 4 else None, query, body)
