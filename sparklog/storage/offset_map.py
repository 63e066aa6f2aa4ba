"""The log cleaner's key -> latest offset map, bounded by a memory budget.

Invariants:
- Keys are stored as 16-byte BLAKE2b digests (Kafka's SkimpyOffsetMap stores 16-byte MD5
  digests), so an entry's size does not depend on the key's. Two keys with the same digest
  would merge; at 2^-128 per pair that is never expected.
- ``capacity`` is ``memory_bytes * load_factor // ENTRY_BYTES``, where ``ENTRY_BYTES`` is
  what one entry costs in CPython (digest object, offset int, dict slot with its growth
  slack; measured with tracemalloc). The cleaner stops adding batches before ``len`` could
  pass it, so the map never holds more than ``capacity`` entries plus one batch's records.
- Offsets are put in increasing order, so each key maps to its latest offset.
"""

from __future__ import annotations

import hashlib

ENTRY_BYTES = 160
"""CPython cost of one entry (measured ~137-153 bytes: a 16-byte bytes object, an int and a
dict slot); Kafka's open-addressing slot costs 24 bytes, a pure Python one would cost
interpretation time on every probe instead."""
DIGEST_BYTES = 16
LOAD_FACTOR = 0.9  # Kafka's log.cleaner.io.buffer.load.factor


def key_digest(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=DIGEST_BYTES).digest()


class OffsetMap:
    def __init__(self, memory_bytes: int, load_factor: float = LOAD_FACTOR) -> None:
        self.capacity = max(1, int(memory_bytes * load_factor) // ENTRY_BYTES)
        self._offsets: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._offsets)

    def clear(self) -> None:
        self._offsets = {}

    def put(self, digest: bytes, offset: int) -> None:
        """Record ``offset`` for the key of ``digest``; offsets must come in increasing order."""
        self._offsets[digest] = offset

    def get(self, digest: bytes) -> int:
        """The latest offset put for the key of ``digest``, or -1."""
        return self._offsets.get(digest, -1)

    def has_room_for(self, records: int) -> bool:
        """Whether ``records`` more keys, all new in the worst case, still fit."""
        return len(self._offsets) + records <= self.capacity
