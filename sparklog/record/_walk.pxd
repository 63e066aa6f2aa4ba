# cython: language_level=3
"""The records section of a record batch v2, walked in C one record at a time: the shared core
of the compiled decoders (``sparklog.record._columns`` for the Spark source,
``sparklog.storage._offset_map`` for the log cleaner), which ``cimport`` it.

Invariants (those of ``sparklog.record.records.decode_records``):
- No length is trusted. Every varint, key, value and header must end inside its record, a
  record must end exactly where its length prefix says and inside the section, offset
  deltas lie in ``[0, lastOffsetDelta]``, a header key is never null, and varints take at
  most 10 bytes and 64 bits. Any violation raises ``CorruptRecordError``.
- Walking only reads; positions are indexes into the section given, so a caller copies
  key, value or whole record bytes (``start`` to ``end``) as it needs.
- ``next_in`` ends only once the section held exactly ``recordCount`` records and nothing
  more.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyObject_GetBuffer
from libc.stdint cimport int64_t, uint8_t, uint64_t


cdef struct RecordView:
    Py_ssize_t start         # the record's first byte (its length prefix)
    Py_ssize_t end           # the byte after it
    int64_t timestamp_delta
    int64_t offset_delta
    Py_ssize_t key           # position of the key bytes
    Py_ssize_t key_size      # -1: null key
    Py_ssize_t value
    Py_ssize_t value_size    # -1: null value (a tombstone)
    Py_ssize_t headers       # position of the first header (after the count)
    Py_ssize_t header_count


cdef inline int corrupt(str message) except -1:
    """Raise ``CorruptRecordError`` (imported here: a .pxd's module-level imports do not run
    in the modules that cimport it)."""
    from sparklog.errors import CorruptRecordError
    raise CorruptRecordError(message)


cdef inline int read_varint(const uint8_t* data, Py_ssize_t* pos, Py_ssize_t end,
                            int64_t* out) except -1:
    """The zig-zag varint at ``pos[0]``, which must end before ``end``; moves ``pos`` past it."""
    cdef Py_ssize_t p = pos[0]
    cdef uint64_t raw = 0
    cdef uint64_t byte
    cdef int shift = 0
    while True:
        if p >= end:
            corrupt(f"the records section ends inside a record (varint at "
                                     f"byte {pos[0]})")
        byte = data[p]
        p += 1
        if shift == 63 and byte > 1:
            corrupt(f"varint at byte {pos[0]} is longer than 10 bytes"
                                     if byte & 0x80 else
                                     f"varint at byte {pos[0]} overflows 64 bits")
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
    pos[0] = p
    out[0] = <int64_t>((raw >> 1) ^ (0 - (raw & 1)))
    return 0


cdef inline int read_nullable(const uint8_t* data, Py_ssize_t* pos, Py_ssize_t end,
                              Py_ssize_t* at, Py_ssize_t* size, str what) except -1:
    """A varint-length-prefixed nullable byte string that must end by ``end``."""
    cdef int64_t length
    read_varint(data, pos, end, &length)
    if length < -1:
        corrupt(f"{what} has invalid length {length}")
    if length > end - pos[0]:
        corrupt(f"{what} of {length} bytes overruns its record")
    at[0] = pos[0]
    size[0] = <Py_ssize_t>length
    if length > 0:
        pos[0] += <Py_ssize_t>length
    return 0


cdef inline int next_record(const uint8_t* data, Py_ssize_t pos, Py_ssize_t size,
                            int64_t last_offset_delta, Py_ssize_t index,
                            RecordView* record) except -1:
    """Parse the record starting at ``pos`` of a section of ``size`` bytes into ``record``."""
    cdef int64_t length, count
    cdef Py_ssize_t body, end, at, n, i
    record.start = pos
    read_varint(data, &pos, size, &length)
    if length <= 0 or length > size - pos:
        corrupt(f"record {index} has invalid length {length}")
    body = pos
    end = pos + <Py_ssize_t>length
    pos += 1  # attributes: unused
    read_varint(data, &pos, end, &record.timestamp_delta)
    read_varint(data, &pos, end, &record.offset_delta)
    if record.offset_delta < 0 or record.offset_delta > last_offset_delta:
        corrupt(f"record {index} has offset delta {record.offset_delta}")
    read_nullable(data, &pos, end, &record.key, &record.key_size, "key")
    read_nullable(data, &pos, end, &record.value, &record.value_size, "value")
    read_varint(data, &pos, end, &count)
    if count < 0 or 2 * count > end - pos:  # a header takes at least two bytes
        corrupt(f"invalid header count {count}")
    record.headers = pos
    record.header_count = <Py_ssize_t>count
    for i in range(record.header_count):
        read_nullable(data, &pos, end, &at, &n, "header key")
        if n < 0:
            corrupt("null header key")
        read_nullable(data, &pos, end, &at, &n, "header value")
    if pos != end:
        corrupt(
            f"record {index} declares {length} bytes but its fields take {pos - body}")
    record.end = end
    return 0


cdef struct Section:
    const uint8_t* data
    Py_ssize_t size
    Py_ssize_t pos           # where the next record starts
    Py_ssize_t index         # how many records were walked
    Py_ssize_t count         # recordCount
    int64_t base_offset
    int64_t base_timestamp
    int64_t max_timestamp
    int64_t last_offset_delta


cdef inline int open_section(object section, object header, Py_buffer* view,
                             Section* walk) except -1:
    """Start walking the records section ``section`` (any buffer, decompressed) of the batch
    ``header`` (a ``BatchHeader``); the caller releases ``view`` when done."""
    walk.count = header.record_count
    walk.base_offset = header.base_offset
    walk.base_timestamp = header.base_timestamp
    walk.max_timestamp = header.max_timestamp
    walk.last_offset_delta = header.last_offset_delta
    PyObject_GetBuffer(section, view, PyBUF_SIMPLE)
    walk.data = <const uint8_t*>view.buf
    walk.size = view.len
    walk.pos = 0
    walk.index = 0
    return 0


cdef inline int next_in(Section* walk, RecordView* record) except -1:
    """1 and the next record in ``record``, or 0 after the last one, once the section is
    checked to hold exactly ``recordCount`` records and nothing more."""
    if walk.index == walk.count:
        if walk.pos != walk.size:
            corrupt(f"{walk.size - walk.pos} bytes follow the last of {walk.count} records")
        return 0
    next_record(walk.data, walk.pos, walk.size, walk.last_offset_delta, walk.index, record)
    walk.pos = record.end
    walk.index += 1
    return 1
