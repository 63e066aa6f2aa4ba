"""Confluent's wire format: magic byte 0, the schema id (4 bytes, big-endian), the body.

Invariants: ``split`` either returns the id and the body (a view, no copy) or raises
``DecodeError`` saying what is wrong with the framing; ``frame`` is its inverse (``prefix``
its first 5 bytes). A Protobuf body starts with its message's indexes (``indexes_prefix``;
read by ``protobuf_decode.read_indexes``).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import pyarrow as pa

MAGIC = 0
HEADER_SIZE = 5
_ID = struct.Struct(">I")


class DecodeError(ValueError):
    """A value that does not decode with the chosen schema (or is not framed)."""


class Decoded(NamedTuple):
    """What a decoder gives for a sequence of values: one row each (null for a null value
    and for a value that did not decode), and why each of those failed, by row."""

    array: pa.Array
    errors: dict[int, str]


def split(value: bytes) -> tuple[int, memoryview]:
    """``(schema id, body)`` of a framed value."""
    if len(value) < HEADER_SIZE:
        raise DecodeError(f"value of {len(value)} bytes is too short for Confluent's wire "
                          "format (magic byte, 4-byte schema id, body)")
    if value[0] != MAGIC:
        raise DecodeError(f"unknown magic byte {value[0]} (Confluent's wire format starts "
                          f"with {MAGIC}): the value was not written by a schema registry "
                          "serializer")
    return _ID.unpack_from(value, 1)[0], memoryview(value)[HEADER_SIZE:]


def prefix(schema_id: int) -> bytes:
    """The 5 bytes before a body encoded with schema ``schema_id``."""
    return bytes([MAGIC]) + _ID.pack(schema_id)


def indexes_prefix(path: tuple[int, ...]) -> bytes:
    """Confluent's Protobuf message indexes of the message at ``path`` in its file (zigzag
    varints: their count, then each), ``[0]`` as the single byte 0 its serializers write."""
    if path == (0,):
        return b"\x00"
    out = bytearray()
    for value in (len(path), *path):
        zigzag = (value << 1) ^ (value >> 63)
        while zigzag > 0x7F:
            out.append(zigzag & 0x7F | 0x80)
            zigzag >>= 7
        out.append(zigzag)
    return bytes(out)


def frame(schema_id: int, body: bytes) -> bytes:
    """``body`` framed with ``schema_id``."""
    return prefix(schema_id) + body


def records_array(records: list, arrow_type: pa.DataType, errors: dict[int, str]) -> pa.Array:
    """Decoded records (Python values) as one array; a record Arrow refuses is nulled and
    its row gets an error."""
    try:
        return pa.array(records, type=arrow_type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    for row, record in enumerate(records):
        try:
            pa.array([record], type=arrow_type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            errors[row] = f"the decoded value does not fit its column type: {exc}"
            records[row] = None
    return pa.array(records, type=arrow_type)
