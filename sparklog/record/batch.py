"""Record batch v2 (magic 2) headers: parsing, validation and the in-place rewrites a broker makes.

Invariants:
- Only the 61-byte header is parsed; the records section is never decoded here (the append
  path stays O(batches), not O(records)).
- A batch is valid when magic is 2, batchLength covers at least the rest of the header and fits
  in the buffer, and the CRC-32C of bytes [21, end) matches. A producer sends exactly one
  batch per partition, holding ``lastOffsetDelta + 1`` records; a batch read back from disk
  may hold fewer (compaction removes records but keeps lastOffsetDelta), or none (an empty
  batch kept for producer state).
- ``complete_batches`` is the one walk over the batches of a buffer that may end inside one
  (Fetch answers, reads of a log, a follower's appends); ``split_batches`` the strict one
  over what a producer or a log holds, where anything left over is corrupt.
- The broker only ever rewrites baseOffset (bytes 0-7) and partitionLeaderEpoch (12-15), both
  outside the CRC, so a batch is stored and served exactly as the producer sent it. The one
  exception is LogAppendTime, which rewrites attributes and maxTimestamp and recomputes the CRC.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from crc32c import crc32c as _crc32c

from sparklog.errors import CorruptRecordError, InvalidRecordError

HEADER = struct.Struct(">qiiBIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset int64 + batchLength int32: the bytes before the length counts
LENGTH_OFFSET = 8
LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
RECORDS_COUNT_OFFSET = 57
MAGIC_V2 = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1

_CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")


class BatchHeader(NamedTuple):
    """The fixed header of one record batch, and where it sits in its buffer.

    A NamedTuple: parsed on every append and read, and about twice as cheap to build as a
    frozen dataclass; ``_replace`` gives the header of a rewritten batch.
    """

    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    position: int = 0

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def compression_name(self) -> str:
        return _CODEC_NAMES[self.compression] if self.compression < 5 else "unknown"

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def delete_horizon_ms(self) -> int:
        """When the cleaner may drop this batch's tombstones (KIP-534: attribute bit 6 set,
        baseTimestamp holds the horizon); -1 if the batch was never cleaned with one."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_MASK else NO_TIMESTAMP

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (wrapping at int32, as Kafka does); -1 if none."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


_LENGTH = struct.Struct(">i")
_new_tuple = tuple.__new__  # builds a BatchHeader without its Python-level __new__


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at ``pos``; the caller guarantees HEADER_SIZE bytes are there."""
    return _new_tuple(BatchHeader, (*HEADER.unpack_from(buf, pos), pos))


def batch_size(buf: bytes | bytearray | memoryview, pos: int = 0) -> int | None:
    """Bytes the batch at ``pos`` occupies (header included), once its length prefix is in
    ``buf``; None before that."""
    if len(buf) - pos < LOG_OVERHEAD:
        return None
    return _LENGTH.unpack_from(buf, pos + LENGTH_OFFSET)[0] + LOG_OVERHEAD


def check_header(header: BatchHeader, available: int, *, from_producer: bool) -> None:
    """Check a parsed header's framing against the bytes available after its position."""
    magic, length, count, delta = (header.magic, header.batch_length, header.record_count,
                                   header.last_offset_delta)
    if magic != MAGIC_V2:
        raise CorruptRecordError(f"unsupported record batch magic {magic} (need 2)")
    if length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"record batch length {length} is below the header")
    if length + LOG_OVERHEAD > available:
        raise CorruptRecordError(
            f"record batch of {length + LOG_OVERHEAD} bytes at position {header.position} is "
            f"truncated ({available} bytes available)"
        )
    if delta < 0 or count < 0:
        raise CorruptRecordError("negative lastOffsetDelta or record count")
    if count != delta + 1:
        if from_producer:
            raise InvalidRecordError(
                f"record count {count} does not match lastOffsetDelta {delta}"
            )
        if count > delta + 1:
            raise CorruptRecordError("more records than lastOffsetDelta allows")


def crc_matches(buf: bytes | bytearray | memoryview, header: BatchHeader) -> bool:
    start = header.position
    return _crc32c(memoryview(buf)[start + ATTRIBUTES_OFFSET : start + header.size]) == header.crc


def validate_batch(
    buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None,
    *, from_producer: bool = False,
) -> BatchHeader:
    """Parse and fully validate (framing and CRC) the batch at ``pos``."""
    end = len(buf) if end is None else end
    if end - pos < HEADER_SIZE:
        raise CorruptRecordError(f"{end - pos} bytes left at position {pos}: not a batch header")
    header = parse_header(buf, pos)
    check_header(header, end - pos, from_producer=from_producer)
    if not crc_matches(buf, header):
        raise CorruptRecordError(f"record batch at position {pos} fails its CRC-32C check")
    return header


def complete_batches(buf: bytes | bytearray | memoryview, position: int = 0
                     ) -> Iterator[BatchHeader]:
    """The headers of the complete batches in ``buf`` from ``position``, in order, as Kafka's
    ``ByteBufferLogInputStream.nextBatch`` reads them: a cut-short last batch (a Fetch answer
    or a read may end inside one) ends the walk, and the caller resumes at
    ``end_of(last header)``. Only each header's framing is read, not its CRC or records; a
    length below the header's own ends the walk with ``CorruptRecordError`` (the walk could
    not advance past it)."""
    size = len(buf)
    while position + HEADER_SIZE <= size:
        header = parse_header(buf, position)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptRecordError(f"record batch length {header.batch_length} at position "
                                     f"{position} is below the header")
        end = position + header.size
        if end > size:
            return
        yield header
        position = end


def end_of(header: BatchHeader | None) -> int:
    """The position after the batch of ``header`` (0 for None: nothing was complete)."""
    return 0 if header is None else header.position + header.size


def split_batches(buf: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """Validate every batch of a records blob; any trailing garbage is corrupt."""
    headers = []
    pos, end = 0, len(buf)
    while pos < end:
        header = validate_batch(buf, pos, end)
        headers.append(header)
        pos += header.batch_length + LOG_OVERHEAD
    return headers


def validate_produced(records: bytes | bytearray | memoryview) -> BatchHeader:
    """Validate the records a producer sent for one partition. As in Kafka, every batch must
    be intact (CORRUPT_MESSAGE otherwise) and there must be exactly one (magic 2 produce
    requests carry one batch per partition; INVALID_RECORD otherwise)."""
    if not len(records):
        raise InvalidRecordError("produce request carries no record batch")
    header = validate_batch(records, from_producer=True)
    if header.batch_length + LOG_OVERHEAD != len(records):
        split_batches(records)  # trailing garbage or a corrupt batch is reported as such
        raise InvalidRecordError("produce request carries more than one record batch for a "
                                 "partition (magic 2 allows one)")
    return header


_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch: bytes 0-15

Buffer = bytes | bytearray | memoryview


def prepare_append(
    records: Buffer, header: BatchHeader, base_offset: int, leader_epoch: int,
    append_time: int = -1,
) -> tuple[list[Buffer], BatchHeader]:
    """The buffers to write for the one batch ``records`` (validated as ``header``) with
    offsets from ``base_offset`` assigned, and its rewritten header.

    Without LogAppendTime nothing is copied: the batch becomes a new 16-byte prefix
    (baseOffset, batchLength, leader epoch; all outside the CRC) and a view of the rest of the
    producer's bytes, for ``os.writev``. With LogAppendTime (``append_time`` >= 0) the batch is
    copied once, stamped and resealed (see ``set_log_append_time``).
    """
    if append_time < 0:
        prefix = _PREFIX.pack(base_offset, header[1], leader_epoch)
        assigned = _new_tuple(BatchHeader, (base_offset, header[1], leader_epoch, *header[3:]))
        return [prefix, memoryview(records)[LEADER_EPOCH_OFFSET + 4:]], assigned
    data = bytearray(records)
    _PREFIX.pack_into(data, 0, base_offset, header.batch_length, leader_epoch)
    set_log_append_time(data, header, append_time)
    return [data], parse_header(data)


def set_log_append_time(buf: bytearray, header: BatchHeader, now_ms: int) -> None:
    """Mark the batch LogAppendTime with ``now_ms`` as its max timestamp and reseal the CRC."""
    pos = header.position
    attributes = (header.attributes & ~TIMESTAMP_TYPE_MASK) | TIMESTAMP_TYPE_MASK
    struct.pack_into(">h", buf, pos + ATTRIBUTES_OFFSET, attributes)
    struct.pack_into(">q", buf, pos + MAX_TIMESTAMP_OFFSET, now_ms)
    crc = _crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + header.size])
    struct.pack_into(">I", buf, pos + CRC_OFFSET, crc)
