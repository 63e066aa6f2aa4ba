# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Records of batch v2 decoded straight into column buffers in Arrow's layout (compiled; the
Spark source wraps them into ``pyarrow`` arrays without copying, and falls back to aiokafka's
decoder when this extension was not built).

Invariants:
- One pass per records section, no Python object per record: each record's offset,
  timestamp (microseconds), timestamp type, key, value and (optionally) headers are
  appended to growable buffers. Records are walked with ``sparklog.record._walk`` (its
  checks: a malformed record raises ``CorruptRecordError``; the columns are then
  unusable, as is the task that was reading them).
- Only records with offsets in [start, until) are appended.
- Buffers follow Arrow's columnar format: validity bitmaps (LSB first, bit set = not null),
  int32 offsets (``rows + 1`` entries, first 0), data; the header column is a list of
  (key utf8, value binary) structs, whose key bytes are NOT checked to be UTF-8 here (the
  caller validates them). ``take`` hands the buffers over and starts new ones, so a buffer
  taken is never written again.
- Timestamps are baseTimestamp + delta, or the batch's maxTimestamp for LogAppendTime,
  times 1000; one that does not fit int64 microseconds is ``CorruptRecordError``.
"""

from cpython.buffer cimport PyBuffer_FillInfo, PyBuffer_Release
from libc.stdint cimport int32_t, int64_t, uint8_t, INT64_MAX, INT64_MIN
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

from sparklog.record._walk cimport RecordView, Section, corrupt, next_in, open_section, read_nullable

from sparklog.record.batch import LOG_APPEND_TIME

cdef enum:
    FIRST_CAPACITY = 4096  # bytes of a new buffer at its first write


cdef class ColumnBuffer:
    """A growable block of memory that exports the buffer protocol (read-only) once taken."""

    cdef char* data
    cdef readonly Py_ssize_t size
    cdef Py_ssize_t capacity

    def __cinit__(self):
        self.data = <char*>malloc(FIRST_CAPACITY)  # never NULL, even when empty
        if self.data == NULL:
            raise MemoryError("column buffer")
        self.capacity = FIRST_CAPACITY

    def __dealloc__(self):
        free(self.data)

    def __getbuffer__(self, Py_buffer* view, int flags):
        PyBuffer_FillInfo(view, self, self.data, self.size, 1, flags)

    def __releasebuffer__(self, Py_buffer* view):
        pass

    cdef inline char* extend(self, Py_ssize_t n) except NULL:
        """Room for ``n`` more bytes at the end: where to write them."""
        cdef Py_ssize_t needed = self.size + n
        cdef Py_ssize_t capacity
        cdef char* grown
        if needed > self.capacity:
            capacity = max(2 * self.capacity, needed)
            grown = <char*>realloc(self.data, capacity)
            if grown == NULL:
                raise MemoryError(f"column buffer of {capacity} bytes")
            self.data, self.capacity = grown, capacity
        cdef char* at = self.data + self.size
        self.size = needed
        return at


cdef class BinaryColumn:
    """A nullable binary (or utf8) column: validity bitmap, int32 offsets, data."""

    cdef readonly ColumnBuffer validity, offsets, data
    cdef readonly Py_ssize_t length, null_count

    def __cinit__(self):
        self.validity, self.offsets, self.data = ColumnBuffer(), ColumnBuffer(), ColumnBuffer()
        (<int32_t*>self.offsets.extend(4))[0] = 0

    cdef inline int append(self, const uint8_t* source, Py_ssize_t size) except -1:
        """Append a value; ``size`` -1 appends a null."""
        cdef Py_ssize_t index = self.length
        if index % 8 == 0:
            self.validity.extend(1)[0] = 0
        if size < 0:
            self.null_count += 1
        else:
            self.validity.data[index // 8] |= <char>(1 << (index % 8))
            if self.data.size + size > 0x7FFFFFFF:
                corrupt("more than 2 GiB of keys or values in one chunk")
            memcpy(self.data.extend(size), source, size)
        (<int32_t*>self.offsets.extend(4))[0] = <int32_t>self.data.size
        self.length += 1
        return 0


cdef class RecordColumns:
    """The columns of the records decoded so far (see the module doc)."""

    cdef readonly bint include_headers
    cdef readonly Py_ssize_t rows
    cdef readonly ColumnBuffer offsets, timestamps, timestamp_types, header_offsets
    cdef readonly BinaryColumn keys, values, header_keys, header_values

    def __cinit__(self, bint include_headers):
        self.include_headers = include_headers
        self._reset()

    cdef void _reset(self):
        self.rows = 0
        self.offsets, self.timestamps = ColumnBuffer(), ColumnBuffer()
        self.timestamp_types = ColumnBuffer()
        self.keys, self.values = BinaryColumn(), BinaryColumn()
        if self.include_headers:
            self.header_offsets = ColumnBuffer()
            (<int32_t*>self.header_offsets.extend(4))[0] = 0
            self.header_keys, self.header_values = BinaryColumn(), BinaryColumn()

    @property
    def data_bytes(self):
        """Bytes of keys and values so far."""
        return self.keys.data.size + self.values.data.size

    def take(self):
        """This chunk's columns (self, frozen: read its buffers); a new chunk starts."""
        cdef RecordColumns taken = RecordColumns.__new__(RecordColumns, self.include_headers)
        taken.rows = self.rows
        taken.offsets, taken.timestamps = self.offsets, self.timestamps
        taken.timestamp_types = self.timestamp_types
        taken.keys, taken.values = self.keys, self.values
        if self.include_headers:
            taken.header_offsets = self.header_offsets
            taken.header_keys, taken.header_values = self.header_keys, self.header_values
        self._reset()
        return taken

    def add(self, section, header, int64_t start, int64_t until):
        """Append the records of the batch ``header`` whose offsets lie in [start, until),
        from its records section ``section`` (decompressed); how many were appended."""
        cdef Py_buffer view
        cdef Section walk
        cdef RecordView record
        cdef const uint8_t* data
        cdef Py_ssize_t before = self.rows, h, at, key_at, key_size, value_at, value_size
        cdef bint log_append_time = header.timestamp_type == LOG_APPEND_TIME
        cdef int32_t kind = header.timestamp_type
        cdef int64_t offset, timestamp
        open_section(section, header, &view, &walk)
        data = walk.data
        timestamp = walk.max_timestamp
        try:
            while next_in(&walk, &record):
                offset = walk.base_offset + record.offset_delta
                if offset < start or offset >= until:
                    continue
                if not log_append_time:
                    timestamp = walk.base_timestamp + record.timestamp_delta
                if timestamp > INT64_MAX // 1000 or timestamp < INT64_MIN // 1000:
                    corrupt(f"record at offset {offset} has timestamp {timestamp}, out of range")
                (<int64_t*>self.offsets.extend(8))[0] = offset
                (<int64_t*>self.timestamps.extend(8))[0] = timestamp * 1000
                (<int32_t*>self.timestamp_types.extend(4))[0] = kind
                self.keys.append(data + record.key, record.key_size)
                self.values.append(data + record.value, record.value_size)
                if self.include_headers:
                    at = record.headers
                    for h in range(record.header_count):
                        read_nullable(data, &at, record.end, &key_at, &key_size, "header key")
                        self.header_keys.append(data + key_at, key_size)
                        read_nullable(data, &at, record.end, &value_at, &value_size,
                                      "header value")
                        self.header_values.append(data + value_at, value_size)
                    (<int32_t*>self.header_offsets.extend(4))[0] = \
                        <int32_t>self.header_keys.length
                self.rows += 1
        finally:
            PyBuffer_Release(&view)
        return self.rows - before
