"""Fetch responses v0-v18 encoded without copying record data.

Invariants:
- ``encode_fetch_response`` returns the frame as parts to send in order: ``bytes`` with
  ``transport.write``, ``FileRegion`` with ``os.sendfile``. The first part starts with the
  int32 frame size and the response header (v0: the correlation id alone); the size counts
  every later part, a FileRegion by its ``length``.
- Record data is never copied: ``bytes`` records become a part of their own and segment
  files are referenced by ``FileRegion``. Empty records (``None``, ``b""`` or a zero-length
  region) are sent as a zero-length record set, as Apache Kafka does, never as null.
- Field order and presence per version follow Kafka's ``FetchResponse.json``: per partition
  partition_index, error_code, high_watermark, last_stable_offset (v4+), log_start_offset
  (v5+), aborted_transactions (v4+, an array, empty rather than null),
  preferred_read_replica (v11+, always -1), records; before the topics throttle_time_ms (v1+),
  error_code and session_id (v7+).
- From v12 (flexible, KIP-482): the response header carries an empty tagged-field section,
  arrays are compact (uvarint count + 1), the topic name is a compact string (v12) or the
  topic id's 16 bytes (v13+), the records length is a uvarint (length + 1) written just
  before the file region, and every structure ends with its tagged fields: a partition's
  ``current_leader`` (tag 1) when it has one, the response's ``node_endpoints`` (tag 0,
  v16+) when there are any (KIP-951), nothing else.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

MAX_VERSION = 18
FIRST_FLEXIBLE = 12
FIRST_TOPIC_ID = 13
FIRST_NODE_ENDPOINTS = 16

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ERROR_AND_SESSION = struct.Struct(">hi")
_ABORTED = struct.Struct(">qq")
_NO_PREFERRED_READ_REPLICA = _I32.pack(-1)
_PARTITION_HEAD_V0 = struct.Struct(">ihq")  # partition_index, error_code, high_watermark
_PARTITION_HEAD_V4 = struct.Struct(">ihqq")  # + last_stable_offset
_PARTITION_HEAD_V5 = struct.Struct(">ihqqq")  # + log_start_offset
_LEADER = struct.Struct(">iib")  # leader id, leader epoch, no tagged fields
_CURRENT_LEADER_TAG = 1
_NODE_ENDPOINTS_TAG = 0


@dataclass(frozen=True, slots=True)
class FileRegion:
    """``length`` bytes of the open file ``fd`` from ``position``, to send with sendfile;
    ``owner`` is whatever keeps ``fd`` open until the region is sent (a segment's
    descriptor object, which closes it when the last reference goes)."""

    fd: int
    position: int
    length: int
    owner: object = None


@dataclass(frozen=True, slots=True)
class FetchPartition:
    """One partition of a Fetch response; fields a version lacks are not sent."""

    partition_index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: FileRegion | bytes | None = None
    aborted_transactions: Sequence[tuple[int, int]] = ()  # (producer_id, first_offset)
    current_leader: tuple[int, int] | None = None  # (leader id, epoch): KIP-951, v12+


@dataclass(frozen=True, slots=True)
class FetchTopic:
    topic: str
    partitions: Sequence[FetchPartition]
    topic_id: uuid.UUID | None = None  # what v13+ send instead of the name


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    """A broker a ``current_leader`` names, at the request's listener (v16+)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class FetchResponse:
    """A Fetch answer before encoding: what the Fetch handler returns (the broker's fault
    hooks may rewrite it like any response entity)."""

    topics: Sequence[FetchTopic]
    error_code: int = 0
    session_id: int = 0
    throttle_ms: int = 0
    node_endpoints: Sequence[NodeEndpoint] = ()


def encode_fetch_response(correlation_id: int, version: int,
                          response: FetchResponse) -> list[bytes | FileRegion]:
    """The framed Fetch response as parts to send in order (see the module invariants)."""
    topics, throttle_ms = response.topics, response.throttle_ms
    error_code, session_id = response.error_code, response.session_id
    if not 0 <= version <= MAX_VERSION:
        raise ValueError(f"Fetch v{version} is not encoded here (v0-v{MAX_VERSION})")
    flexible = version >= FIRST_FLEXIBLE
    count = _compact_count if flexible else _I32.pack
    chunk = bytearray(8)  # frame size (patched at the end), correlation id
    _I32.pack_into(chunk, 4, correlation_id)
    if flexible:
        chunk += NO_TAGGED_FIELDS  # response header v1
    if version >= 1:
        chunk += _I32.pack(throttle_ms)
    if version >= 7:
        chunk += _ERROR_AND_SESSION.pack(error_code, session_id)
    chunk += count(len(topics))
    parts: list[bytearray | bytes | FileRegion] = [chunk]
    for fetch_topic in topics:
        partitions = fetch_topic.partitions
        if version >= FIRST_TOPIC_ID:
            chunk += (fetch_topic.topic_id or _ZERO_UUID).bytes
        else:
            encoded_name = fetch_topic.topic.encode()
            chunk += _uvarint(len(encoded_name) + 1) if flexible else _I16.pack(len(encoded_name))
            chunk += encoded_name
        chunk += count(len(partitions))
        for partition in partitions:
            _encode_partition_fields(chunk, version, partition)
            records = partition.records
            length = 0 if records is None else _records_length(records)
            chunk += _uvarint(length + 1) if flexible else _I32.pack(length)
            if records is not None and length:
                chunk = bytearray()
                parts += (records, chunk)
            if flexible:
                _encode_partition_tags(chunk, partition)
        if flexible:
            chunk += NO_TAGGED_FIELDS  # the topic's
    if flexible:
        _encode_response_tags(chunk, version, response.node_endpoints)
    return _finish(parts)


def _encode_partition_fields(chunk: bytearray, version: int, partition: FetchPartition) -> None:
    """Everything of a partition before its records."""
    p = partition
    if version >= 5:
        chunk += _PARTITION_HEAD_V5.pack(
            p.partition_index,
            p.error_code,
            p.high_watermark,
            p.last_stable_offset,
            p.log_start_offset,
        )
    elif version == 4:
        chunk += _PARTITION_HEAD_V4.pack(
            p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset
        )
    else:
        chunk += _PARTITION_HEAD_V0.pack(p.partition_index, p.error_code, p.high_watermark)
    if version >= FIRST_FLEXIBLE:
        chunk += _compact_count(len(p.aborted_transactions))
        for producer_id, first_offset in p.aborted_transactions:
            chunk += _ABORTED.pack(producer_id, first_offset)
            chunk += NO_TAGGED_FIELDS
    elif version >= 4:
        chunk += _I32.pack(len(p.aborted_transactions))
        for producer_id, first_offset in p.aborted_transactions:
            chunk += _ABORTED.pack(producer_id, first_offset)
    if version >= 11:
        chunk += _NO_PREFERRED_READ_REPLICA


def _encode_partition_tags(chunk: bytearray, partition: FetchPartition) -> None:
    """A flexible partition's tagged fields: its current leader when it has one."""
    if partition.current_leader is None:
        chunk += NO_TAGGED_FIELDS
        return
    chunk += _uvarint(1) + _uvarint(_CURRENT_LEADER_TAG) + _uvarint(_LEADER.size)
    chunk += _LEADER.pack(*partition.current_leader, 0)


def _encode_response_tags(chunk: bytearray, version: int,
                          endpoints: Sequence[NodeEndpoint]) -> None:
    """The response's tagged fields: the endpoints of the leaders named (v16+)."""
    if version < FIRST_NODE_ENDPOINTS or not endpoints:
        chunk += NO_TAGGED_FIELDS
        return
    field = bytearray(_compact_count(len(endpoints)))
    for endpoint in endpoints:
        field += _I32.pack(endpoint.node_id)
        field += _compact_string(endpoint.host)
        field += _I32.pack(endpoint.port)
        field += _compact_string(endpoint.rack)
        field += NO_TAGGED_FIELDS
    chunk += _uvarint(1) + _uvarint(_NODE_ENDPOINTS_TAG) + _uvarint(len(field))
    chunk += field


NO_TAGGED_FIELDS = b"\x00"
_ZERO_UUID = uuid.UUID(int=0)


def _uvarint(value: int) -> bytes:
    """Kafka's unsigned varint."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _compact_count(count: int) -> bytes:
    return _uvarint(count + 1)


def _compact_string(text: str | None) -> bytes:
    if text is None:
        return _uvarint(0)
    encoded = text.encode()
    return _uvarint(len(encoded) + 1) + encoded


def _records_length(records: FileRegion | bytes) -> int:
    if isinstance(records, FileRegion):
        return records.length
    return len(records)


def _finish(parts: list[bytearray | bytes | FileRegion]) -> list[bytes | FileRegion]:
    """Patch the frame size into the first part and freeze the metadata chunks."""
    if not parts[-1]:
        parts.pop()
    size = sum(part.length if isinstance(part, FileRegion) else len(part) for part in parts)
    head = parts[0]
    assert isinstance(head, bytearray)
    _I32.pack_into(head, 0, size - 4)
    return [bytes(part) if isinstance(part, bytearray) else part for part in parts]
