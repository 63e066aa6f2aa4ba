"""The log cleaner's key -> latest offset map, bounded by a memory budget.

``new_offset_map`` gives the compiled map (``sparklog.storage._offset_map``: 24-byte slots,
keyed SipHash-128 digests, records walked in C) when the extension was built, else
``OffsetMap``, the pure Python one below. Both answer the same two questions per batch:
``add_keys`` (map every keyed record) and ``retained`` (which records stay, as a
``sparklog.record.records.Retained``), so the cleaner has one code path.

Invariants:
- Keys are stored as 16-byte digests (Kafka's SkimpyOffsetMap stores 16-byte MD5 digests),
  so an entry's size does not depend on the key's. Two keys with the same digest would
  merge; at 2^-128 per pair that is never expected.
- ``capacity`` is ``memory_bytes * load_factor // ENTRY_BYTES``, where ``ENTRY_BYTES`` is
  what one entry costs (here: a CPython dict entry measured with tracemalloc; compiled: one
  slot). The cleaner stops adding batches before ``len`` could pass it, so the map never
  holds more than ``capacity`` entries plus one batch's records.
- Offsets are added in increasing order, so each key maps to its latest offset.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

from sparklog.record.batch import BatchHeader
from sparklog.record.records import Buffer, Retained, decode_section

try:
    from sparklog.storage._offset_map import SLOT_BYTES, NativeOffsetMap
except ImportError:  # the extension was not built: the pure Python map serves
    NativeOffsetMap = None
    SLOT_BYTES = 0

PYTHON_ENTRY_BYTES = 160
"""CPython cost of one entry (measured ~137-153 bytes: a 16-byte bytes object, an int and a
dict slot with its growth slack)."""
ENTRY_BYTES = SLOT_BYTES or PYTHON_ENTRY_BYTES
"""What one entry of the map ``new_offset_map`` gives costs."""
DIGEST_BYTES = 16
LOAD_FACTOR = 0.9  # Kafka's log.cleaner.io.buffer.load.factor


class KeyOffsets(Protocol):
    """What the cleaner needs of an offset map."""

    capacity: int

    def __len__(self) -> int: ...

    def clear(self) -> None: ...

    def has_room_for(self, records: int) -> bool: ...

    def add_keys(self, section: Buffer, header: BatchHeader) -> None: ...

    def retained(self, section: Buffer, header: BatchHeader,
                 drop_tombstones: bool) -> Retained: ...


def new_offset_map(memory_bytes: int, load_factor: float = LOAD_FACTOR) -> KeyOffsets:
    """The compiled map if it was built, else the pure Python one."""
    if NativeOffsetMap is not None:
        return NativeOffsetMap(memory_bytes, load_factor)
    return OffsetMap(memory_bytes, load_factor)


def key_digest(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=DIGEST_BYTES).digest()


class OffsetMap:
    """The pure Python map: a dict of BLAKE2b digests (the fallback of the compiled one)."""

    def __init__(self, memory_bytes: int, load_factor: float = LOAD_FACTOR) -> None:
        self.capacity = max(1, int(memory_bytes * load_factor) // PYTHON_ENTRY_BYTES)
        self._offsets: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._offsets)

    def clear(self) -> None:
        self._offsets = {}

    def has_room_for(self, records: int) -> bool:
        """Whether ``records`` more keys, all new in the worst case, still fit."""
        return len(self._offsets) + records <= self.capacity

    def add_keys(self, section: Buffer, header: BatchHeader) -> None:
        """Put the offset of every keyed record of the batch (records section ``section``)."""
        offsets = self._offsets
        for record in decode_section(bytes(section), header):
            if record.key is not None:
                offsets[key_digest(record.key)] = record.offset

    def retained(self, section: Buffer, header: BatchHeader, drop_tombstones: bool) -> Retained:
        """Records with a key whose latest offset is not above theirs, minus tombstones when
        ``drop_tombstones``."""
        spans: list[int] = []
        records = decode_section(bytes(section), header, spans)
        latest = self._offsets.get
        kept_spans: list[int] = []
        kept = 0
        tombstones = False
        max_delta: int | None = None
        for index, record in enumerate(records):
            if (record.key is None or (drop_tombstones and record.value is None)
                    or record.offset < latest(key_digest(record.key), -1)):
                continue
            kept += 1
            tombstones |= record.value is None
            delta = record.timestamp - header.base_timestamp
            max_delta = delta if max_delta is None else max(max_delta, delta)
            start, end = spans[2 * index], spans[2 * index + 1]
            if kept_spans and kept_spans[-1] == start:
                kept_spans[-1] = end
            else:
                kept_spans += (start, end)
        return Retained(len(records), kept, tombstones, max_delta or 0, kept_spans)
