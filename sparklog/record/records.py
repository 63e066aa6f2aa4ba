"""The records inside a record batch v2: decoding them, and building whole batches.

Invariants:
- ``decode_records`` trusts no length. Every varint, key, value and header is bounds-checked,
  each record must end exactly where its length prefix says, offset deltas must lie in
  ``[0, lastOffsetDelta]``, and the records section must hold exactly ``recordCount`` records
  and nothing after them. Any violation raises ``CorruptRecordError``, never another error.
- It checks the batch framing (``check_header``) but not the CRC: callers validate batches
  with ``sparklog.record.batch.validate_batch`` before decoding them.
- Offsets are absolute (baseOffset + offsetDelta). Timestamps are baseTimestamp + delta, except
  in a LogAppendTime batch, where every record carries the batch maxTimestamp.
- ``build_batch`` returns a complete batch that ``validate_batch`` accepts: exact batchLength,
  CRC-32C sealed. baseTimestamp is the first record's timestamp (as Kafka's producers write
  it) unless a delete horizon is given, maxTimestamp the largest; an empty batch has no
  records section and timestamps -1.
- Varints and varlongs are zig-zag encoded, at most 10 bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import NamedTuple

import crc32c

from sparklog.errors import CorruptRecordError
from sparklog.record.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    check_header,
)
from sparklog.record.compression import CODECS, compress, decompress

Buffer = bytes | bytearray | memoryview
Header = tuple[str, bytes | None]
RecordSpec = tuple[bytes | None, bytes | None, Sequence[Header], int]
"""What ``build_batch`` takes per record: (key, value, headers, timestamp)."""

_MAX_VARINT_SHIFT = 63  # a 10th byte carries bits 63+; an 11th is malformed
_NULL_LENGTH = b"\x01"  # zig-zag varint -1: a null key, value or header value
_ONE_BYTE_VARINTS = [bytes((n,)) for n in range(0x80)]
_CRC = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class Record:
    """One record with its absolute offset and effective timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


# -- decoding ---------------------------------------------------------------------------------


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The zig-zag varint at ``pos`` and the position after it (IndexError past the end)."""
    byte = data[pos]
    if byte < 0x80:  # one byte: values -64..63, the common case
        return (byte >> 1) ^ -(byte & 1), pos + 1
    raw, shift = byte & 0x7F, 7
    while True:
        pos += 1
        byte = data[pos]
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos + 1
        shift += 7
        if shift > _MAX_VARINT_SHIFT:
            raise CorruptRecordError(f"varint at byte {pos} is longer than 10 bytes")


def _read_bytes(data: bytes, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    """A varint-length-prefixed nullable byte string that must end by ``end``."""
    size = data[pos]
    if size < 0x80:  # inline the one-byte case: lengths up to 63 bytes
        size, pos = (size >> 1) ^ -(size & 1), pos + 1
    else:
        size, pos = _read_varint(data, pos)
    stop = pos + size
    if size < 0:
        if size == -1:
            return None, pos
        raise CorruptRecordError(f"{what} has invalid length {size}")
    if stop > end:
        raise CorruptRecordError(f"{what} of {size} bytes overruns its record")
    return data[pos:stop], stop


def _read_headers(data: bytes, pos: int, end: int) -> tuple[tuple[Header, ...], int]:
    count, pos = _read_varint(data, pos)
    if count < 0 or 2 * count > end - pos:  # a header takes at least two bytes
        raise CorruptRecordError(f"invalid header count {count}")
    headers = []
    for _ in range(count):
        key, pos = _read_bytes(data, pos, end, "header key")
        if key is None:
            raise CorruptRecordError("null header key")
        value, pos = _read_bytes(data, pos, end, "header value")
        headers.append((key.decode("utf-8"), value))
    return tuple(headers), pos


def _decode_section(data: bytes, header: BatchHeader,
                    spans: list[int] | None = None) -> list[Record]:
    """Decode ``header.record_count`` records filling ``data`` exactly (IndexError if short);
    with ``spans``, append each record's first and after-last byte positions to it."""
    base_offset, base_timestamp = header.base_offset, header.base_timestamp
    log_append_time = header.timestamp_type == LOG_APPEND_TIME
    last_delta, size, pos = header.last_offset_delta, len(data), 0
    records = []
    for index in range(header.record_count):
        first = pos
        length, start = _read_varint(data, pos)
        end = start + length
        if length <= 0 or end > size:
            raise CorruptRecordError(f"record {index} has invalid length {length}")
        timestamp_delta, pos = _read_varint(data, start + 1)  # + 1: skip the unused attributes
        offset_delta, pos = _read_varint(data, pos)
        if not 0 <= offset_delta <= last_delta:
            raise CorruptRecordError(f"record {index} has offset delta {offset_delta}")
        key, pos = _read_bytes(data, pos, end, "key")
        value, pos = _read_bytes(data, pos, end, "value")
        if data[pos] == 0:  # no headers, the common case
            headers, pos = (), pos + 1
        else:
            headers, pos = _read_headers(data, pos, end)
        if pos != end:
            raise CorruptRecordError(
                f"record {index} declares {length} bytes but its fields take {pos - start}"
            )
        timestamp = header.max_timestamp if log_append_time else base_timestamp + timestamp_delta
        if spans is not None:
            spans += (first, end)
        records.append(Record(base_offset + offset_delta, timestamp, key, value, headers))
    if pos != size:
        raise CorruptRecordError(
            f"{size - pos} bytes follow the last of {header.record_count} records"
        )
    return records


def records_section(buf: Buffer, header: BatchHeader) -> bytes | memoryview:
    """The batch's records section: a view into ``buf`` when uncompressed, else the
    decompressed bytes; framing checked, CRC not."""
    check_header(header, len(buf) - header.position, from_producer=False)
    section = memoryview(buf)[header.position + HEADER_SIZE : header.position + header.size]
    if header.compression == 0 or (not section and header.record_count == 0):
        return section
    return decompress(header.compression, section)


def decode_section(section: bytes, header: BatchHeader,
                   spans: list[int] | None = None) -> list[Record]:
    """Decode the records of the batch ``header`` from its (decompressed) records section;
    with ``spans``, each record's first and after-last byte positions are appended to it."""
    try:
        return _decode_section(section, header, spans)
    except IndexError:
        raise CorruptRecordError(
            f"records section of the batch at position {header.position} ends inside a record"
        ) from None
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"header key is not UTF-8: {exc}") from None


def decode_records(buf: Buffer, header: BatchHeader) -> list[Record]:
    """Decode the records of the batch ``header`` describes (it sits in ``buf`` at its position)."""
    return decode_section(bytes(records_section(buf, header)), header)


# -- encoding ---------------------------------------------------------------------------------


def _varint(value: int) -> bytes:
    """Zig-zag varint/varlong encoding of a signed 64-bit ``value``."""
    raw = (value << 1) ^ (value >> 63)
    if raw < 0x80:
        return _ONE_BYTE_VARINTS[raw]
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _nullable(data: bytes | None) -> bytes:
    return _NULL_LENGTH if data is None else _varint(len(data)) + data


def _encode_record(
    key: bytes | None, value: bytes | None, headers: Sequence[Header],
    timestamp_delta: int, offset_delta: int,
) -> bytes:
    parts = [b"\x00", _varint(timestamp_delta), _varint(offset_delta), _nullable(key),
             _nullable(value), _varint(len(headers))]
    for header_key, header_value in headers:
        parts += (_nullable(header_key.encode("utf-8")), _nullable(header_value))
    body = b"".join(parts)
    return _varint(len(body)) + body


def _offset_deltas(
    count: int, offset_deltas: Sequence[int] | None, last_offset_delta: int | None
) -> tuple[Sequence[int], int]:
    """Check the caller's offset deltas (default 0..count-1) and settle lastOffsetDelta."""
    deltas = range(count) if offset_deltas is None else offset_deltas
    if len(deltas) != count:
        raise ValueError(f"{len(deltas)} offset deltas for {count} records")
    if count and (deltas[0] < 0 or any(b <= a for a, b in pairwise(deltas))):
        raise ValueError("offset deltas must increase strictly from 0 or more")
    if last_offset_delta is None:
        if not count:
            raise ValueError("an empty batch needs last_offset_delta")
        return deltas, deltas[-1]
    if last_offset_delta < (deltas[-1] if count else 0):
        raise ValueError(f"last_offset_delta {last_offset_delta} is below the last offset delta")
    return deltas, last_offset_delta


def _attributes(
    codec: int, timestamp_type: int, transactional: bool, is_control: bool,
    has_delete_horizon: bool,
) -> int:
    return (
        codec
        | (TIMESTAMP_TYPE_MASK if timestamp_type == LOG_APPEND_TIME else 0)
        | (TRANSACTIONAL_MASK if transactional else 0)
        | (CONTROL_MASK if is_control else 0)
        | (DELETE_HORIZON_MASK if has_delete_horizon else 0)
    )


def build_batch(
    records: Sequence[RecordSpec],
    *,
    base_offset: int = 0,
    codec: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_type: int = 0,
    transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
    last_offset_delta: int | None = None,
    offset_deltas: Sequence[int] | None = None,
    delete_horizon_ms: int = NO_TIMESTAMP,
) -> bytes:
    """Encode a complete v2 batch of ``(key, value, headers, timestamp)`` records.

    ``offset_deltas`` keeps gaps (a compacted batch); ``last_offset_delta`` may then exceed the
    last of them, and must be given for an empty batch. With ``timestamp_type=1``
    (LogAppendTime) maxTimestamp is still the largest record timestamp: the broker stamps its
    own time with ``sparklog.record.batch.set_log_append_time``. A ``delete_horizon_ms`` >= 0
    (the log cleaner's, KIP-534) sets attribute bit 6 and becomes baseTimestamp; record
    timestamps stay exact, their deltas are taken from it.
    """
    if codec not in CODECS:
        raise ValueError(f"unknown compression codec {codec}")
    deltas, last_delta = _offset_deltas(len(records), offset_deltas, last_offset_delta)
    timestamps = [timestamp for *_, timestamp in records]
    has_horizon = delete_horizon_ms >= 0
    if has_horizon:
        base_timestamp = delete_horizon_ms
    else:
        base_timestamp = timestamps[0] if records else NO_TIMESTAMP
    body = b"".join(
        _encode_record(key, value, headers, timestamp - base_timestamp, delta)
        for (key, value, headers, timestamp), delta in zip(records, deltas, strict=True)
    )
    if codec and body:
        body = compress(codec, body)
    batch = bytearray(HEADER.pack(
        base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), partition_leader_epoch, MAGIC_V2,
        0, _attributes(codec, timestamp_type, transactional, is_control, has_horizon), last_delta,
        base_timestamp, max(timestamps, default=NO_TIMESTAMP), producer_id, producer_epoch,
        base_sequence, len(records),
    ))
    batch += body
    _CRC.pack_into(batch, CRC_OFFSET, crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


# -- rewriting a batch with some of its records ------------------------------------------------


class Retained(NamedTuple):
    """Which records of a batch stay (the log cleaner's verdict on one batch).

    ``spans`` are [start, end) byte ranges of the decompressed records section, flattened
    (start0, end0, start1, ...), in order, adjacent records merged; ``max_timestamp_delta``
    is the largest timestamp delta among the kept records (0 if none; CreateTime batches
    only read it)."""

    records: int
    kept: int
    tombstones: bool
    max_timestamp_delta: int
    spans: list[int]


def splice_batch(header: BatchHeader, section: Buffer, retained: Retained,
                 delete_horizon_ms: int = NO_TIMESTAMP) -> bytes:
    """The batch ``header`` keeping only the records ``retained`` names (at least one), their
    bytes copied from the decompressed ``section`` as they are.

    Everything else of the header stays (baseOffset, lastOffsetDelta, codec, flags, producer
    fields, leader epoch), so offset and timestamp deltas stay valid; maxTimestamp becomes
    the kept records' largest (a LogAppendTime batch keeps its own). A ``delete_horizon_ms``
    >= 0 (the log cleaner's, KIP-534) becomes baseTimestamp with attribute bit 6, and each
    kept record is re-encoded with its timestamp delta taken from it (timestamps stay exact).
    """
    spans = retained.spans
    view = memoryview(section)
    base_timestamp = header.base_timestamp
    attributes = header.attributes
    if delete_horizon_ms >= 0:
        data = bytes(section)
        body = b"".join(_rebased(data, spans[i], spans[i + 1], header.base_timestamp,
                                 delete_horizon_ms) for i in range(0, len(spans), 2))
        base_timestamp, attributes = delete_horizon_ms, attributes | DELETE_HORIZON_MASK
    else:
        body = b"".join(view[spans[i] : spans[i + 1]] for i in range(0, len(spans), 2))
    if header.timestamp_type == LOG_APPEND_TIME:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = header.base_timestamp + retained.max_timestamp_delta
    if header.compression:
        body = compress(header.compression, body)
    batch = bytearray(HEADER.pack(
        header.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), header.leader_epoch,
        MAGIC_V2, 0, attributes, header.last_offset_delta, base_timestamp, max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence, retained.kept,
    ))
    batch += body
    _CRC.pack_into(batch, CRC_OFFSET, crc32c.crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def _rebased(data: bytes, start: int, end: int, old_base: int, new_base: int) -> bytes:
    """The records in ``data[start:end]`` with their timestamp deltas moved from
    ``old_base`` to ``new_base``; the rest of each record is copied."""
    out = []
    pos = start
    while pos < end:
        length, first = _read_varint(data, pos)
        record_end = first + length
        delta, after = _read_varint(data, first + 1)  # + 1: the unused attributes byte
        body = b"".join((data[first : first + 1], _varint(old_base + delta - new_base),
                         data[after:record_end]))
        out += (_varint(len(body)), body)
        pos = record_end
    return b"".join(out)
