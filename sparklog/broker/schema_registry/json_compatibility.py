"""JSON Schema compatibility: can a reader schema accept every document a writer schema
accepts? A subset of Confluent's JSON Schema rules, on the keywords Kafka data uses.

Rules (each violation is reported by Confluent's name for it):
- TYPE_CHANGED / TYPE_NARROWED: the reader's ``type`` must allow every type the writer's
  allows (``number`` covers ``integer``; no ``type`` allows anything); a writer's ``number``
  read as ``integer`` is TYPE_NARROWED.
- Objects: a property the writer has and the reader lacks is fine on an open reader (its
  ``additionalProperties`` not false) and PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL on a
  closed one; a property the reader adds is PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL when the
  writer is open (it may have written that name with any value), and on a closed writer
  REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL when the reader requires it without a
  default (an optional one is fine); ADDITIONAL_PROPERTIES_REMOVED when the reader closes
  what the writer left open; REQUIRED_ATTRIBUTE_ADDED for a shared property the reader
  requires and the writer did not; shared properties are checked recursively.
- Arrays: ``items`` recursively. Enums: ENUM_ARRAY_NARROWED when the reader drops a value.
- Bounds: MAX_LENGTH_DECREASED, MIN_LENGTH_INCREASED, MAXIMUM_DECREASED,
  MINIMUM_INCREASED, MAX_ITEMS_DECREASED, MIN_ITEMS_INCREASED.
- ``"$ref": NAME`` resolves to the reference named NAME, and ``#/definitions/X`` or
  ``#/$defs/X`` within the same document; a boolean schema ``true`` accepts anything and
  ``false`` nothing. Combinators (oneOf, anyOf, allOf) are compared as a whole: a change
  in them is reported as COMBINED_TYPE_CHANGED.
"""

from __future__ import annotations

from typing import Any

_BOUNDS = (("maxLength", "MAX_LENGTH_DECREASED", -1), ("minLength", "MIN_LENGTH_INCREASED", 1),
           ("maximum", "MAXIMUM_DECREASED", -1), ("minimum", "MINIMUM_INCREASED", 1),
           ("maxItems", "MAX_ITEMS_DECREASED", -1), ("minItems", "MIN_ITEMS_INCREASED", 1))
MAX_DEPTH = 64


class _Side:
    def __init__(self, root: Any, referenced: dict[str, Any]) -> None:
        self.root, self.referenced = root, referenced

    def deref(self, schema: Any) -> Any:
        for _ in range(MAX_DEPTH):
            if not isinstance(schema, dict) or not isinstance(schema.get("$ref"), str):
                return schema
            ref = schema["$ref"]
            if ref in self.referenced:
                schema = self.referenced[ref]
            elif ref.startswith("#/"):
                schema = self.root
                for part in ref[2:].split("/"):
                    schema = schema.get(part) if isinstance(schema, dict) else None
            else:
                return {}
        return {}


def json_incompatibilities(reader: Any, writer: Any, reader_refs: dict[str, Any],
                           writer_refs: dict[str, Any]) -> list[str]:
    found: list[str] = []
    _compare(_Side(reader, reader_refs), _Side(writer, writer_refs), reader, writer, "#/",
             found, 0)
    return found


def _types(schema: dict[str, Any]) -> set[str] | None:
    kind = schema.get("type")
    if kind is None:
        return None
    return {kind} if isinstance(kind, str) else {str(k) for k in kind}


def _compare(rs: _Side, ws: _Side, reader: Any, writer: Any, path: str, found: list[str],
             depth: int) -> None:
    reader, writer = rs.deref(reader), ws.deref(writer)
    if depth > MAX_DEPTH or reader is True or reader == {} or writer is False:
        return
    if reader is False or writer is True or not isinstance(reader, dict) \
            or not isinstance(writer, dict):
        if reader != writer:
            found.append(f"TYPE_CHANGED at {path}")
        return
    r_types, w_types = _types(reader), _types(writer)
    if r_types is not None:
        allowed = r_types | ({"integer"} if "number" in r_types else set())
        if w_types is None or not w_types <= allowed:
            narrowed = w_types is not None and w_types - allowed <= {"number"} \
                and "integer" in r_types
            found.append(f"{'TYPE_NARROWED' if narrowed else 'TYPE_CHANGED'} at {path}")
            return
    for keyword in ("oneOf", "anyOf", "allOf"):
        if reader.get(keyword) != writer.get(keyword):
            found.append(f"COMBINED_TYPE_CHANGED at {path}{keyword}")
    if "enum" in reader and not set(map(repr, writer.get("enum", [None]))) <= set(
            map(repr, reader["enum"])):
        found.append(f"ENUM_ARRAY_NARROWED at {path}enum")
    for keyword, name, sign in _BOUNDS:
        r, w = reader.get(keyword), writer.get(keyword)
        if isinstance(r, (int, float)) and (not isinstance(w, (int, float)) or (r - w) * sign > 0):
            found.append(f"{name} at {path}{keyword}")
    if "items" in reader or "items" in writer:
        _compare(rs, ws, reader.get("items", {}), writer.get("items", {}), f"{path}items/",
                 found, depth + 1)
    _compare_objects(rs, ws, reader, writer, path, found, depth)


def _open(schema: dict[str, Any]) -> bool:
    return schema.get("additionalProperties", True) is not False


def _compare_objects(rs: _Side, ws: _Side, reader: dict[str, Any], writer: dict[str, Any],
                     path: str, found: list[str], depth: int) -> None:
    r_props = reader.get("properties") or {}
    w_props = writer.get("properties") or {}
    if not isinstance(r_props, dict) or not isinstance(w_props, dict):
        return
    r_required = set(reader.get("required") or ())
    w_required = set(writer.get("required") or ())
    if _open(writer) and not _open(reader):
        found.append(f"ADDITIONAL_PROPERTIES_REMOVED at {path}additionalProperties")
    for name in w_props.keys() - r_props.keys():
        if not _open(reader):
            found.append(f"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL at {path}properties/{name}")
    for name in r_props.keys() - w_props.keys():
        if _open(writer):
            found.append(f"PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL at {path}properties/{name}")
        elif name in r_required and "default" not in (rs.deref(r_props[name]) or {}):
            found.append(f"REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL at "
                         f"{path}properties/{name}")
    for name in r_props.keys() & w_props.keys():
        if name in r_required and name not in w_required:
            found.append(f"REQUIRED_ATTRIBUTE_ADDED at {path}required/{name}")
        _compare(rs, ws, r_props[name], w_props[name], f"{path}properties/{name}/", found,
                 depth + 1)
