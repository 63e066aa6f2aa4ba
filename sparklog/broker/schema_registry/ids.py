"""What validated produce (``broker.schema_validation``) needs to know of a schema id: the
live subjects it is registered under and its record name, read from the store on the
broker that leads ``_schemas`` or over HTTP from that broker's registry.

Invariants:
- An id is known only while a live (not soft-deleted) version of some subject has it, as
  ``GET /schemas/ids/{id}/versions`` lists them; an id without one is ``None``.
- A schema's record name is what Confluent's ``RecordNameStrategy`` names its subject by:
  AVRO the top-level type's full name (a record, enum or fixed with its namespace; a
  primitive's type name), JSON Schema its ``title``, PROTOBUF the first message's full
  name (with the file's package); None when it has none.
- ``fetch`` runs on a thread (it blocks): an answer that is not the registry's (not JSON,
  nested past the parser, of another shape: ``parse_answer``, ``info_of``) is
  ``RegistryUnavailable``, never taken as "unknown id", so a validation fails closed.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from base64 import b64encode
from dataclasses import dataclass
from typing import Any

from sparklog.broker.schema_registry.errors import RegistryError
from sparklog.broker.schema_registry.forwarding import CONTENT_TYPE
from sparklog.broker.schema_registry.store import SchemaStore

SCHEMA_NOT_FOUND = 40403
_PACKAGE = re.compile(r"^\s*package\s+([\w.]+)\s*;", re.MULTILINE)
_MESSAGE = re.compile(r"^\s*message\s+(\w+)", re.MULTILINE)
_AVRO_NAMED = ("record", "enum", "fixed")


@dataclass(frozen=True, slots=True)
class SchemaIdInfo:
    name: str | None
    subjects: frozenset[str]


class RegistryUnavailable(Exception):
    """The registry did not answer whether an id exists (unreachable, or an error)."""


def record_name(schema_type: str, text: str) -> str | None:
    """The schema's record name (module invariants)."""
    if schema_type == "PROTOBUF":
        message = _MESSAGE.search(text)
        if message is None:
            return None
        package = _PACKAGE.search(text)
        return f"{package.group(1)}.{message.group(1)}" if package else message.group(1)
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if schema_type == "JSON":
        title = document.get("title") if isinstance(document, dict) else None
        return title if isinstance(title, str) else None
    if isinstance(document, str):
        return document
    if not isinstance(document, dict) or not isinstance(document.get("type"), str):
        return None
    kind, name = document["type"], document.get("name")
    if kind not in _AVRO_NAMED:
        return kind
    if not isinstance(name, str):
        return None
    namespace = document.get("namespace")
    return f"{namespace}.{name}" if "." not in name and isinstance(namespace, str) \
        and namespace else name


def from_store(store: SchemaStore, schema_id: int) -> SchemaIdInfo | None:
    """The id as the leader's store holds it."""
    try:
        live = store.usages(schema_id, deleted=False)
    except RegistryError:
        return None
    if not live:
        return None
    entry = store.entry_of_id(schema_id)
    return SchemaIdInfo(record_name(entry.schema_type, entry.schema),
                        frozenset(e.subject for e in live))


def fetch(url: str, schema_id: int, credentials: tuple[str, str] | None,
          timeout_s: float) -> SchemaIdInfo | None:
    """The id as the registry at ``url`` answers it (blocking: run it on a thread)."""
    versions = _get(url, f"/schemas/ids/{schema_id}/versions", credentials, timeout_s)
    if versions is None or not versions:
        return None
    schema = _get(url, f"/schemas/ids/{schema_id}", credentials, timeout_s)
    if schema is None:  # hard-deleted in between
        return None
    return info_of(url, versions, schema)


def info_of(url: str, versions: Any, schema: Any) -> SchemaIdInfo:
    """The id from the registry's two answers (another broker's: anything may come)."""
    try:
        subjects = frozenset(v["subject"] for v in versions)
        return SchemaIdInfo(record_name(schema.get("schemaType") or "AVRO", schema["schema"]),
                            subjects)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise RegistryUnavailable(f"unexpected answer from {url}: {exc}") from None


def parse_answer(url: str, body: bytes) -> Any:
    """An answer's JSON (a nesting too deep for the parser is no answer either)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise RegistryUnavailable(f"{url}: {type(exc).__name__}: {exc}") from None


def _get(url: str, path: str, credentials: tuple[str, str] | None, timeout_s: float) -> Any:
    """The JSON answer; None for Confluent's 40403 (no such schema)."""
    headers = {"Accept": CONTENT_TYPE}
    if credentials is not None:
        headers["Authorization"] = "Basic " + b64encode(":".join(credentials).encode()).decode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url + path, headers=headers),
                                    timeout=timeout_s) as answer:
            body = answer.read()
    except urllib.error.HTTPError as exc:
        try:
            body = json.loads(exc.read())
        except (ValueError, RecursionError):
            body = None
        if exc.code == 404 and isinstance(body, dict) \
                and body.get("error_code") == SCHEMA_NOT_FOUND:
            return None
        raise RegistryUnavailable(f"{url}{path} answered HTTP {exc.code}: {body}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise RegistryUnavailable(f"{url}{path}: {exc}") from None
    return parse_answer(url + path, body)
