"""Kafka's record batch codecs (attribute bits 0-2): 1 gzip, 2 snappy, 3 lz4, 4 zstd.

Invariants:
- ``decompress`` returns ``bytes`` or raises ``CorruptRecordError``: a codec id outside 1-4, a
  truncated or garbled payload and a malformed xerial block all surface as that one error,
  never as a cramjam exception.
- No codec reserves memory from a size the payload claims before checking it: a raw
  snappy block claiming more than 22 times its own size is corrupt (zstd and LZ4 check
  their declared content sizes themselves).
- Snappy input may be xerial-framed (Java clients: the 16-byte ``\\x82SNAPPY\\x00`` header,
  then int32 big-endian length + raw snappy blocks) or one raw snappy block (librdkafka);
  ``compress`` writes the xerial framing, which every client reads.
- LZ4 is the LZ4 *frame* format. ``compress`` writes independent blocks (Kafka's Java reader
  rejects linked blocks) and no content checksum; ``decompress`` reads any valid frame.
- zstd is a standard frame, with or without a content size (streaming writers omit it).
- Compression levels are Kafka's defaults (KIP-390): gzip 6, lz4 9, zstd 3.
- ``decompress_bounded`` writes into a buffer of the limit it is given and refuses what
  would overflow it, so what a peer sends cannot expand past that limit in memory (a
  PushTelemetry payload; record batches are bounded by the walk instead).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

import cramjam

from sparklog.errors import CorruptRecordError

Buffer = bytes | bytearray | memoryview

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
CODECS = (NONE, GZIP, SNAPPY, LZ4, ZSTD)

GZIP_LEVEL = 6
LZ4_LEVEL = 9
ZSTD_LEVEL = 3

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # + format version 1, min compatible 1
_XERIAL_BLOCK_SIZE = 32 * 1024  # uncompressed bytes per block, as xerial snappy-java writes
_BLOCK_LENGTH = struct.Struct(">i")
_SNAPPY_MAX_EXPANSION = 22  # a copy element: 3 bytes for 64 (21.3 times)


def _lz4_compress(data: Buffer) -> bytes:
    compressor = cramjam.lz4.Compressor(level=LZ4_LEVEL, content_checksum=False, block_linked=False)
    compressor.compress(data)
    return bytes(compressor.finish())


def _snappy_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_SIZE]))
        parts += (_BLOCK_LENGTH.pack(len(block)), block)
    return b"".join(parts)


def _check_claim(block: memoryview) -> None:
    """Refuse a raw snappy block whose declared length it cannot hold: cramjam reserves that
    much before reading (a 5-byte preamble of 4 GiB ends a process whose allocation fails),
    and no snappy element expands more than 64 bytes from 3."""
    declared = shift = 0
    for position in range(min(len(block), 5)):
        declared |= (block[position] & 0x7F) << shift
        if block[position] < 0x80:
            break
        shift += 7
    if declared > _SNAPPY_MAX_EXPANSION * len(block):
        raise CorruptRecordError(f"snappy block of {len(block)} bytes claims {declared} "
                                 f"uncompressed bytes")


def _snappy_blocks(view: memoryview) -> Iterator[memoryview]:
    """The raw snappy blocks of a payload: xerial-framed, or one raw block."""
    if view[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        yield view
        return
    pos, end = len(_XERIAL_HEADER), len(view)
    if end < pos:
        raise CorruptRecordError(f"xerial snappy header cut short ({end} bytes)")
    while pos < end:
        if end - pos < _BLOCK_LENGTH.size:
            raise CorruptRecordError(f"xerial snappy block length cut short at byte {pos}")
        (length,) = _BLOCK_LENGTH.unpack_from(view, pos)
        pos += _BLOCK_LENGTH.size
        if length < 0 or pos + length > end:
            raise CorruptRecordError(
                f"xerial snappy block of {length} bytes at byte {pos} overruns the payload "
                f"({end} bytes)"
            )
        yield view[pos : pos + length]
        pos += length


def _snappy_raw(block: memoryview) -> bytes:
    _check_claim(block)
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: Buffer) -> bytes:
    return b"".join(map(_snappy_raw, _snappy_blocks(memoryview(data))))


def check_claims(codec: int, data: Buffer) -> None:
    """Raise ``CorruptRecordError`` where ``decompress`` would refuse a claimed size, without
    decompressing: for a decoder of its own (aiokafka's) that trusts those sizes."""
    if codec == SNAPPY:
        for block in _snappy_blocks(memoryview(data)):
            _check_claim(block)


_COMPRESSORS: dict[int, Callable[[Buffer], bytes]] = {
    GZIP: lambda data: bytes(cramjam.gzip.compress(data, level=GZIP_LEVEL)),
    SNAPPY: _snappy_compress,
    LZ4: _lz4_compress,
    ZSTD: lambda data: bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL)),
}
_DECOMPRESSORS: dict[int, Callable[[Buffer], bytes]] = {
    GZIP: lambda data: bytes(cramjam.gzip.decompress(data)),
    SNAPPY: _snappy_decompress,
    LZ4: lambda data: bytes(cramjam.lz4.decompress(data)),
    ZSTD: lambda data: bytes(cramjam.zstd.decompress(data)),
}


def _codec(table: dict[int, Callable[[Buffer], bytes]], codec: int) -> Callable[[Buffer], bytes]:
    try:
        return table[codec]
    except KeyError:
        raise CorruptRecordError(f"unknown compression codec {codec}") from None


def compress(codec: int, data: Buffer) -> bytes:
    """Compress a records section with Kafka codec ``codec`` (1-4)."""
    return _codec(_COMPRESSORS, codec)(data)


def decompress(codec: int, data: Buffer) -> bytes:
    """Decompress a records section written with Kafka codec ``codec`` (1-4)."""
    run = _codec(_DECOMPRESSORS, codec)
    try:
        return run(data)
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(
            f"cannot decompress {len(data)} bytes with codec {codec}: {exc}"
        ) from exc


_BOUNDED: dict[int, Callable[[Buffer, bytearray | memoryview], int]] = {
    GZIP: cramjam.gzip.decompress_into,
    LZ4: cramjam.lz4.decompress_into,
    ZSTD: cramjam.zstd.decompress_into,
}


def _snappy_bounded(data: Buffer, out: bytearray | memoryview) -> int:
    written, view = 0, memoryview(out)
    for block in _snappy_blocks(memoryview(data)):
        _check_claim(block)
        written += cramjam.snappy.decompress_raw_into(block, view[written:])
    return written


def decompress_bounded(codec: int, data: Buffer, limit: int) -> bytes:
    """``data`` (Kafka codec ``codec``, 0 for none) decompressed, at most ``limit`` bytes;
    ``CorruptRecordError`` for more, an unknown codec or a payload that does not decode."""
    if codec == NONE:
        if len(data) > limit:
            raise CorruptRecordError(f"{len(data)} bytes, more than {limit}")
        return bytes(data)
    run = _snappy_bounded if codec == SNAPPY else _codec(_BOUNDED, codec)
    out = bytearray(limit + 1)  # one byte more: filling it means the output is too large
    try:
        written = run(data, out)
    except cramjam.DecompressionError as exc:
        raise CorruptRecordError(
            f"cannot decompress {len(data)} bytes with codec {codec} into {limit} bytes: {exc}"
        ) from exc
    if written > limit:
        raise CorruptRecordError(f"codec {codec} payload decompresses past {limit} bytes")
    return bytes(out[:written])
