# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The log cleaner's offset map in C (compiled; ``sparklog.storage.offset_map`` falls back to
its pure Python map when this extension was not built).

Invariants:
- An open-addressing table in Kafka's SkimpyOffsetMap layout: a 16-byte key digest and an
  int64 offset per 24-byte slot (offset -1: empty), linear probing. It starts small and
  doubles whenever it would be more than half full, up to ``memory_bytes // 24`` slots
  (so a small clean touches little memory); it holds at most
  ``capacity`` = that x load factor entries (the cleaner asks ``has_room_for`` before each
  batch), except that a first batch larger than that is taken whole: the table is then
  grown past the budget by that batch, never left full. ``clear`` shrinks it back.
- Digests are SipHash-2-4 with 128-bit output, keyed with 16 random bytes per map: two keys
  share a digest with probability 2^-128, and nobody can pick keys that collide without the
  map's secret key (a collision would merge two keys' histories).
- Records are walked with ``sparklog.record._walk`` (its checks: any malformed record raises
  ``CorruptRecordError``); no Python object is made per record.
"""

import os

from cpython.buffer cimport PyBuffer_Release
from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc

from sparklog.record._walk cimport RecordView, Section, next_in, open_section

from sparklog.record.records import Retained

SLOT_BYTES = 24
FIRST_SLOTS = 1 << 12  # 96 KiB: a small clean stays in the cache; the table doubles as needed


cdef struct Slot:
    uint64_t digest0
    uint64_t digest1
    int64_t offset


cdef inline uint64_t _rotl(uint64_t x, int b) noexcept nogil:
    return (x << b) | (x >> (64 - b))


cdef inline uint64_t _load64(const uint8_t* p) noexcept nogil:
    """Eight bytes, little-endian (SipHash's word order)."""
    return (<uint64_t>p[0] | (<uint64_t>p[1] << 8) | (<uint64_t>p[2] << 16)
            | (<uint64_t>p[3] << 24) | (<uint64_t>p[4] << 32) | (<uint64_t>p[5] << 40)
            | (<uint64_t>p[6] << 48) | (<uint64_t>p[7] << 56))


cdef struct SipState:
    uint64_t v0
    uint64_t v1
    uint64_t v2
    uint64_t v3


cdef inline void _rounds(SipState* s, int n) noexcept nogil:
    cdef int i
    for i in range(n):
        s.v0 += s.v1
        s.v1 = _rotl(s.v1, 13)
        s.v1 ^= s.v0
        s.v0 = _rotl(s.v0, 32)
        s.v2 += s.v3
        s.v3 = _rotl(s.v3, 16)
        s.v3 ^= s.v2
        s.v0 += s.v3
        s.v3 = _rotl(s.v3, 21)
        s.v3 ^= s.v0
        s.v2 += s.v1
        s.v1 = _rotl(s.v1, 17)
        s.v1 ^= s.v2
        s.v2 = _rotl(s.v2, 32)


cdef inline void _siphash128(uint64_t k0, uint64_t k1, const uint8_t* data, Py_ssize_t size,
                             uint64_t* out0, uint64_t* out1) noexcept nogil:
    """SipHash-2-4, 128-bit output (the reference's ``outlen == 16`` variant)."""
    cdef SipState s
    cdef Py_ssize_t full = size - size % 8
    cdef Py_ssize_t i
    cdef uint64_t m
    cdef uint64_t last = (<uint64_t>size) << 56
    s.v0 = 0x736f6d6570736575ULL ^ k0
    s.v1 = 0x646f72616e646f6dULL ^ k1 ^ 0xee
    s.v2 = 0x6c7967656e657261ULL ^ k0
    s.v3 = 0x7465646279746573ULL ^ k1
    for i in range(0, full, 8):
        m = _load64(data + i)
        s.v3 ^= m
        _rounds(&s, 2)
        s.v0 ^= m
    for i in range(size - full):
        last |= (<uint64_t>data[full + i]) << (8 * i)
    s.v3 ^= last
    _rounds(&s, 2)
    s.v0 ^= last
    s.v2 ^= 0xee
    _rounds(&s, 4)
    out0[0] = s.v0 ^ s.v1 ^ s.v2 ^ s.v3
    s.v1 ^= 0xdd
    _rounds(&s, 4)
    out1[0] = s.v0 ^ s.v1 ^ s.v2 ^ s.v3


cdef class NativeOffsetMap:
    """Key -> latest offset for the records of a log's dirty section (see the module doc)."""

    cdef Slot* slots
    cdef Py_ssize_t slot_count
    cdef Py_ssize_t max_slots
    cdef Py_ssize_t entries
    cdef readonly Py_ssize_t capacity
    cdef uint64_t k0, k1

    def __cinit__(self, Py_ssize_t memory_bytes, double load_factor):
        self.max_slots = max(2, memory_bytes // sizeof(Slot))
        self.capacity = max(1, min(self.max_slots - 1,
                                   <Py_ssize_t>(self.max_slots * load_factor)))
        secret = os.urandom(16)
        self.k0 = _load64(secret)
        self.k1 = _load64(<const uint8_t*>secret + 8)
        self.clear()

    def __dealloc__(self):
        free(self.slots)

    def __len__(self):
        return self.entries

    def clear(self):
        """Forget every key (the table shrinks back to its first size)."""
        self._resize(min(self.max_slots, FIRST_SLOTS), keep=False)
        self.entries = 0

    def has_room_for(self, Py_ssize_t records):
        """Whether ``records`` more keys, all new in the worst case, still fit."""
        return self.entries + records <= self.capacity

    cdef int _make_room(self, Py_ssize_t records) except -1:
        """Grow the table so ``records`` more keys keep it at most half full (up to the
        memory budget), and never full (a first batch larger than the budget is taken)."""
        cdef Py_ssize_t needed = self.entries + records
        if 2 * needed > self.slot_count and self.slot_count < self.max_slots:
            self._resize(min(self.max_slots, max(2 * self.slot_count, 2 * needed)), keep=True)
        if needed >= self.slot_count:
            self._resize(needed + 1, keep=True)
        return 0

    cdef int _resize(self, Py_ssize_t slot_count, bint keep) except -1:
        """A table of ``slot_count`` empty slots, rehashing the entries when ``keep``."""
        cdef Slot* old = self.slots
        cdef Py_ssize_t old_count = self.slot_count if old != NULL else 0, i, j
        cdef Slot* new = <Slot*>malloc(slot_count * sizeof(Slot))
        if new == NULL:
            raise MemoryError(f"offset map of {slot_count} slots")
        for i in range(slot_count):
            new[i].offset = -1
        if keep:
            for i in range(old_count):
                if old[i].offset >= 0:
                    j = <Py_ssize_t>(old[i].digest0 % <uint64_t>slot_count)
                    while new[j].offset >= 0:
                        j = j + 1 if j + 1 < slot_count else 0
                    new[j] = old[i]
        self.slots, self.slot_count = new, slot_count
        free(old)
        return 0

    cdef Slot* _slot(self, const uint8_t* key, Py_ssize_t size, Slot* digest) noexcept nogil:
        """The slot holding the key's digest, or the empty slot where it would go (the
        digest is left in ``digest``, for an insert)."""
        _siphash128(self.k0, self.k1, key, size, &digest.digest0, &digest.digest1)
        cdef Py_ssize_t i = <Py_ssize_t>(digest.digest0 % <uint64_t>self.slot_count)
        cdef Slot* slot
        while True:
            slot = &self.slots[i]
            if slot.offset < 0 or (slot.digest0 == digest.digest0
                                   and slot.digest1 == digest.digest1):
                return slot
            i += 1
            if i == self.slot_count:
                i = 0

    def add_keys(self, section, header):
        """Put the offset of every keyed record of the batch ``header`` (records section
        ``section``, decompressed); offsets must come in increasing order across calls."""
        cdef Py_buffer view
        cdef Section walk
        cdef RecordView record
        cdef Slot* slot
        cdef Slot digest
        self._make_room(header.record_count)
        open_section(section, header, &view, &walk)
        try:
            while next_in(&walk, &record):
                if record.key_size < 0:
                    continue
                slot = self._slot(walk.data + record.key, record.key_size, &digest)
                if slot.offset < 0:
                    slot.digest0, slot.digest1 = digest.digest0, digest.digest1
                    self.entries += 1
                slot.offset = walk.base_offset + record.offset_delta
        finally:
            PyBuffer_Release(&view)

    def retained(self, section, header, bint drop_tombstones):
        """Which records of the batch stay: those with a key whose latest offset in the map
        is not above theirs (absent keys count as -1), minus tombstones when
        ``drop_tombstones``; as a ``sparklog.record.records.Retained``."""
        cdef Py_buffer view
        cdef Section walk
        cdef RecordView record
        cdef Slot* slot
        cdef Slot digest
        cdef Py_ssize_t kept = 0
        cdef Py_ssize_t span_start = -1, span_end = -1
        cdef int64_t offset, max_delta = 0
        cdef bint tombstones = False, first = True
        spans = []
        open_section(section, header, &view, &walk)
        try:
            while next_in(&walk, &record):
                if record.key_size < 0 or (drop_tombstones and record.value_size < 0):
                    continue
                offset = walk.base_offset + record.offset_delta
                slot = self._slot(walk.data + record.key, record.key_size, &digest)
                if offset < slot.offset:  # an empty slot's offset is -1: the key is absent
                    continue
                kept += 1
                tombstones |= record.value_size < 0
                if first or record.timestamp_delta > max_delta:
                    max_delta = record.timestamp_delta
                    first = False
                if record.start == span_end:
                    span_end = record.end
                else:
                    if span_start >= 0:
                        spans += (span_start, span_end)
                    span_start, span_end = record.start, record.end
        finally:
            PyBuffer_Release(&view)
        if span_start >= 0:
            spans += (span_start, span_end)
        return Retained(walk.count, kept, tombstones, max_delta, spans)
