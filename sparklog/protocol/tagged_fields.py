"""Dropping the tagged fields a schema does not know from a flexible request body (KIP-482):
Kafka skips unknown tags, kio's reader refuses them.

Invariants:
- ``without_unknown_tags(cls, body, offset)`` walks the body as ``cls`` (a kio entity
  class) lays it out and returns the same bytes minus every tagged field whose tag ``cls``
  (or the nested entity it appears in) does not declare; the count of each tagged-field
  section is rewritten. Everything else is copied byte for byte, so known fields decode to
  the values they had.
- Only flexible entities have tagged-field sections; a non-flexible one is copied whole.
  Known tagged fields are copied as they are (the unknown tags inside a known tagged
  struct stay).
- A body this walk cannot read raises ``ValueError`` (the caller's decode error).
"""

from __future__ import annotations

import io
from dataclasses import fields
from typing import Any

from kio._kio_native import (
    get_field_reader,
    read_compact_array_length,
    read_int8,
    read_int32,
    read_unsigned_varint,
)
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.serial.writers import write_unsigned_varint
from kio.static.primitive import uvarint


def without_unknown_tags(cls: type[Any], body: bytes, offset: int) -> bytes:
    """The body from ``offset`` with the unknown tagged fields left out."""
    out = bytearray()
    _copy_entity(cls, memoryview(body), offset, out)
    return bytes(out)


def _copy_entity(cls: type[Any], buffer: memoryview, offset: int, out: bytearray) -> int:
    flexible = bool(getattr(cls, "__flexible__", False))
    known_tags = set()
    for field in fields(cls):
        tag = get_field_tag(field)
        if tag is not None:
            known_tags.add(tag)
            continue
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            read = read_compact_array_length if flexible else read_int32
            length, size = read(buffer, offset)
            out += buffer[offset:offset + size]
            offset += size
            for _ in range(max(length or 0, 0)):
                offset = _copy_entity(kind.type_, buffer, offset, out)
            continue
        if isinstance(kind, EntityField):
            if is_optional(field):  # a presence byte: -1 null, 1 present
                present, size = read_int8(buffer, offset)
                out += buffer[offset:offset + size]
                offset += size
                if present < 0:
                    continue
            offset = _copy_entity(kind.type_, buffer, offset, out)
            continue
        _, size = get_field_reader(cls, field, False, False)(buffer, offset)
        out += buffer[offset:offset + size]
        offset += size
    if not flexible:
        return offset
    count, size = read_unsigned_varint(buffer, offset)
    offset += size
    kept = bytearray()
    kept_count = 0
    for _ in range(count):
        start = offset
        tag, size = read_unsigned_varint(buffer, offset)
        offset += size
        length, size = read_unsigned_varint(buffer, offset)
        offset += size + length
        if offset > len(buffer):
            raise ValueError("a tagged field runs past the end of the request")
        if tag in known_tags:
            kept += buffer[start:offset]
            kept_count += 1
    count_bytes = io.BytesIO()
    write_unsigned_varint(count_bytes, uvarint(kept_count))
    out += count_bytes.getvalue() + kept
    return offset
