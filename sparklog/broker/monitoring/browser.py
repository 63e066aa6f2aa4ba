"""The status page's message browser: one bounded, read-only page of a partition's records.

Invariants:
- A page starts at an offset or at a time (the first record whose timestamp is at or after
  it, as ListOffsets finds it through the time index), clamped into [log start, high
  watermark), and holds at most ``limit`` records (1 to ``MAX_RECORDS``), all below the high
  watermark: what a read_uncommitted consumer may read (on a follower, the high watermark
  its leader last told it). ``next_offset`` is where the following page starts.
- Each read of the log is at most ``READ_BYTES`` (more only to take in one whole batch
  larger than that), and a page reads at most ``MAX_READS`` times, so a page costs the
  broker's loop a bounded time whatever the partition holds. Control batches (transaction
  markers) are skipped.
- Keys, values and header values are shown as text, never markup: valid UTF-8 that parses
  as a JSON object or array is pretty-printed (``kind`` "json"); other UTF-8 without control
  characters as it is ("text"); anything else escaped byte by byte as a Python bytes
  literal shows it (``\\x00``, ``\\n``; "binary"); a missing one is "null". A shown form
  longer than ``SHOWN_CHARS`` is cut (``truncated``).
- Runs on the broker's event loop, which owns the logs; returns frozen data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

from sparklog.errors import KafkaError
from sparklog.record.batch import batch_size, complete_batches
from sparklog.record.records import decode_records
from sparklog.storage.log import PartitionLog

MAX_RECORDS = 100
DEFAULT_RECORDS = 20
READ_BYTES = 1 << 20
MAX_READS = 8
SHOWN_CHARS = 16_384
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


class HighWatermark(Protocol):
    @property
    def high_watermark(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Shown:
    text: str
    kind: str  # json, text, binary or null
    size: int  # bytes (-1: null)
    truncated: bool


@dataclass(frozen=True, slots=True)
class BrowsedRecord:
    offset: int
    timestamp: int
    timestamp_type: str
    key: Shown
    value: Shown
    headers: tuple[tuple[str, Shown], ...]


@dataclass(frozen=True, slots=True)
class MessagePage:
    topic: str
    partition: int
    log_start_offset: int
    high_watermark: int
    start_offset: int  # where this page started looking
    next_offset: int
    records: tuple[BrowsedRecord, ...]


def browse(log: PartitionLog, replica: HighWatermark, topic: str, partition: int, *,
           offset: int | None = None, timestamp: int | None = None,
           limit: int = DEFAULT_RECORDS) -> MessagePage:
    """A page of records of ``log`` from ``offset`` or ``timestamp`` (the log start when
    neither is given)."""
    limit = min(max(limit, 1), MAX_RECORDS)
    end = min(replica.high_watermark, log.log_end_offset)
    if timestamp is not None:
        found = log.offset_for_timestamp(timestamp)
        offset = end if found is None else found[0]
    start = min(max(offset if offset is not None else 0, log.log_start_offset), end)
    records: list[BrowsedRecord] = []
    position = start
    for _ in range(MAX_READS):
        if position >= end or len(records) >= limit:
            break
        position = _read_into(log, position, end, limit, records)
    return MessagePage(topic, partition, log.log_start_offset, end, start, position,
                       tuple(records))


def _read_into(log: PartitionLog, position: int, end: int, limit: int,
               records: list[BrowsedRecord]) -> int:
    """Append the records of one read from ``position``; the offset to read next."""
    found = log.read(position, READ_BYTES, end)
    if found is None:
        return end
    data = found.read()
    headers = list(complete_batches(data))
    if not headers:  # one batch larger than a read
        size = batch_size(data)
        if size is None:
            raise KafkaError(f"no whole batch at offset {position} of {log}")
        found = log.read(position, size, end)
        assert found is not None
        data = found.read()
        headers = list(complete_batches(data))
    for header in headers:
        if not header.is_control:
            for record in decode_records(data, header):
                if position <= record.offset < end and len(records) < limit:
                    records.append(BrowsedRecord(
                        record.offset, record.timestamp,
                        TIMESTAMP_TYPES[header.timestamp_type], show(record.key),
                        show(record.value),
                        tuple((name, show(value)) for name, value in record.headers)))
                    if len(records) == limit:
                        return record.offset + 1
        position = header.next_offset
    return min(position, end)


def show(data: bytes | None) -> Shown:
    """``data`` as the page shows it (see the module invariants)."""
    if data is None:
        return Shown("null", "null", -1, False)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return _cut(_escaped(data), "binary", len(data))
    if text.lstrip()[:1] in ("{", "["):
        try:
            return _cut(json.dumps(json.loads(text), indent=2, ensure_ascii=False), "json",
                        len(data))
        except ValueError:
            pass
    if any((c < " " and c not in "\t\n\r") or c == "\x7f" for c in text):
        return _cut(_escaped(data), "binary", len(data))
    return _cut(text, "text", len(data))


def _escaped(data: bytes) -> str:
    """The bytes as Python writes a bytes literal, without its b'' around them."""
    return repr(data)[2:-1]


def _cut(text: str, kind: str, size: int) -> Shown:
    if len(text) > SHOWN_CHARS:
        return Shown(text[:SHOWN_CHARS], kind, size, True)
    return Shown(text, kind, size, False)
