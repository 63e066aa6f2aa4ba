"""Record batch v2 records: round trips, cross-checks with independent codecs, corruption.

kafka-python's batch code is the independent implementation for uncompressed and gzip batches
(the only codecs it can run here: it needs python-snappy, lz4 and zstandard for the others).
aiokafka's Cython batch code covers snappy, lz4 and zstd (its codecs run on cramjam).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import aiokafka.codec
import cramjam
import crc32c
import kafka.codec
import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaPythonBuilder
from sparklog.record._columns import RecordColumns

from sparklog.errors import CorruptRecordError
from sparklog.record.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CRC_OFFSET,
    HEADER_SIZE,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    BatchHeader,
    complete_batches,
    end_of,
    parse_header,
    set_log_append_time,
    validate_batch,
)
from sparklog.record.compression import CODECS, compress, decompress
from sparklog.record.records import Record, build_batch, decode_records, records_section
from sparklog.storage.offset_map import NativeOffsetMap


def test_kafka_python_has_every_codec() -> None:
    """The dev extra pins kafka-python's codec libraries, so every codec is cross-checked."""
    assert all(has() for has in (kafka.codec.has_gzip, kafka.codec.has_snappy,
                                 kafka.codec.has_lz4, kafka.codec.has_zstd))


nullable_bytes = st.none() | st.binary(max_size=80)
headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=16)), max_size=3)
timestamps = st.integers(min_value=-1, max_value=2**62)


def record_lists(stamps: st.SearchStrategy[int] = timestamps) -> st.SearchStrategy[list]:
    return st.lists(st.tuples(nullable_bytes, nullable_bytes, headers, stamps), max_size=12)


record_specs = record_lists()
base_offsets = st.integers(min_value=0, max_value=2**62)


def expected(specs: list, base_offset: int, deltas: list[int] | None = None) -> list[Record]:
    deltas = list(range(len(specs))) if deltas is None else deltas
    return [
        Record(base_offset + delta, timestamp, key, value, tuple(headers))
        for (key, value, headers, timestamp), delta in zip(specs, deltas, strict=True)
    ]


def decode(batch: bytes) -> list[Record]:
    return decode_records(batch, validate_batch(batch))


def reseal(batch: bytes | bytearray, section: bytes, codec: int | None = None) -> bytes:
    """The batch with another records section (and codec), its length and CRC made right."""
    out = bytearray(batch[:HEADER_SIZE]) + section
    struct.pack_into(">i", out, LENGTH_OFFSET, len(out) - LOG_OVERHEAD)
    if codec is not None:
        (attributes,) = struct.unpack_from(">h", out, ATTRIBUTES_OFFSET)
        struct.pack_into(">h", out, ATTRIBUTES_OFFSET, attributes & ~COMPRESSION_MASK | codec)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c.crc32c(bytes(out[ATTRIBUTES_OFFSET:])))
    return bytes(out)


# -- round trips ------------------------------------------------------------------------------


@given(record_specs, st.sampled_from(CODECS), base_offsets)
def test_build_then_decode_round_trips(specs: list, codec: int, base_offset: int) -> None:
    last_offset_delta = None if specs else 0  # an empty batch needs one
    batch = build_batch(specs, base_offset=base_offset, codec=codec,
                        last_offset_delta=last_offset_delta)
    header = validate_batch(batch, from_producer=bool(specs))
    assert header.record_count == len(specs)
    assert header.compression == codec
    if specs:
        assert header.base_timestamp == specs[0][3]
        assert header.max_timestamp == max(spec[3] for spec in specs)
    assert decode_records(batch, header) == expected(specs, base_offset)


@given(
    st.lists(st.integers(min_value=0, max_value=10_000), unique=True, max_size=10).map(sorted),
    st.integers(min_value=0, max_value=50), st.sampled_from(CODECS), st.data(),
)
def test_offset_gaps_are_kept(deltas: list[int], slack: int, codec: int, data) -> None:
    specs = [data.draw(st.tuples(nullable_bytes, nullable_bytes, headers, timestamps))
             for _ in deltas]
    last = (deltas[-1] if deltas else 0) + slack
    batch = build_batch(specs, base_offset=100, codec=codec, offset_deltas=deltas,
                        last_offset_delta=last)
    header = validate_batch(batch)
    assert (header.last_offset_delta, header.record_count) == (last, len(deltas))
    assert decode_records(batch, header) == expected(specs, 100, deltas)


def test_producer_fields_and_flags_are_written() -> None:
    batch = build_batch(
        [(b"k", b"v", [], 5)], base_offset=42, producer_id=9, producer_epoch=3, base_sequence=17,
        transactional=True, is_control=True, partition_leader_epoch=4,
    )
    header = validate_batch(batch)
    assert (header.base_offset, header.producer_id, header.producer_epoch,
            header.base_sequence, header.leader_epoch) == (42, 9, 3, 17, 4)
    assert header.is_transactional and header.is_control


def test_log_append_time_gives_every_record_the_max_timestamp() -> None:
    specs = [(b"a", b"1", [], 10), (b"b", b"2", [], 30), (b"c", b"3", [], 20)]
    batch = build_batch(specs, timestamp_type=1)
    assert [r.timestamp for r in decode(batch)] == [30, 30, 30]
    appended = bytearray(build_batch(specs))
    set_log_append_time(appended, parse_header(appended), 1_000)
    assert [r.timestamp for r in decode(bytes(appended))] == [1_000] * 3


def test_empty_batch_has_no_records_section() -> None:
    for codec in CODECS:
        batch = build_batch([], codec=codec, last_offset_delta=4, producer_id=1)
        header = validate_batch(batch)
        assert header.size == HEADER_SIZE and header.max_timestamp == -1
        assert decode_records(batch, header) == []


def test_decode_reads_a_batch_inside_a_larger_buffer() -> None:
    first = build_batch([(b"a", b"1", [], 1)], base_offset=0)
    second = build_batch([(b"b", b"2", [("h", None)], 2)], base_offset=1, codec=3)
    buf = memoryview(first + second)
    header = validate_batch(buf, len(first))
    assert decode_records(buf, header) == [Record(1, 2, b"b", b"2", (("h", None),))]


@pytest.mark.parametrize(
    ("specs", "kwargs"),
    [
        ([], {}),
        ([(b"k", b"v", [], 1)], {"offset_deltas": [0, 1]}),
        ([(b"k", b"v", [], 1)] * 2, {"offset_deltas": [3, 3]}),
        ([(b"k", b"v", [], 1)], {"offset_deltas": [-1]}),
        ([(b"k", b"v", [], 1)], {"offset_deltas": [5], "last_offset_delta": 4}),
        ([(b"k", b"v", [], 1)], {"codec": 5}),
        ([], {"codec": 8, "last_offset_delta": 0}),
    ],
)
def test_build_batch_rejects_bad_arguments(specs: list, kwargs: dict) -> None:
    with pytest.raises(ValueError):
        build_batch(specs, **kwargs)


# -- cross-checks with independent implementations --------------------------------------------


def independent_decode(batch_class: type, batch: bytes) -> list[Record]:
    parsed = batch_class(batch)
    assert parsed.validate_crc()
    return [Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in parsed]


def independent_build(builder_class: type, specs: list, codec: int) -> bytes:
    builder = builder_class(2, codec, 0, -1, -1, -1, 2**30)
    for delta, (key, value, record_headers, timestamp) in enumerate(specs):
        assert builder.append(delta, timestamp, key, value, list(record_headers)) is not None
    return bytes(builder.build())


@given(record_specs.filter(bool), st.sampled_from(CODECS), base_offsets)
def test_kafka_python_decodes_our_batches(specs: list, codec: int, base_offset: int) -> None:
    batch = build_batch(specs, base_offset=base_offset, codec=codec)
    assert independent_decode(KafkaPythonBatch, batch) == expected(specs, base_offset)


@given(record_specs.filter(bool), st.sampled_from(CODECS))
def test_we_decode_kafka_python_batches(specs: list, codec: int) -> None:
    assert decode(independent_build(KafkaPythonBuilder, specs, codec)) == expected(specs, 0)


@given(record_specs.filter(bool), st.sampled_from(CODECS), base_offsets)
def test_aiokafka_decodes_our_batches(specs: list, codec: int, base_offset: int) -> None:
    batch = build_batch(specs, base_offset=base_offset, codec=codec)
    assert independent_decode(AioBatch, batch) == expected(specs, base_offset)


# aiokafka's builder writes a first timestamp of -1 as 0: give it none.
@given(record_lists(timestamps.filter(lambda t: t >= 0)).filter(bool),
       st.sampled_from(CODECS))
def test_we_decode_aiokafka_batches(specs: list, codec: int) -> None:
    assert decode(independent_build(AioBuilder, specs, codec)) == expected(specs, 0)


# -- compression ------------------------------------------------------------------------------


@given(st.binary(max_size=100_000), st.sampled_from(CODECS[1:]))
@settings(max_examples=30)
def test_compress_round_trips(data: bytes, codec: int) -> None:
    assert decompress(codec, compress(codec, data)) == data


def test_snappy_reads_xerial_framing_and_raw_blocks() -> None:
    data = bytes(range(256)) * 600  # > 32 KiB: several xerial blocks
    ours = compress(2, data)
    assert ours.startswith(b"\x82SNAPPY\x00")
    independent = aiokafka.codec.snappy_encode(data, xerial_compatible=True, xerial_blocksize=4096)
    raw = bytes(cramjam.snappy.compress_raw(data))
    for payload in (ours, independent, raw, memoryview(raw)):
        assert decompress(2, payload) == data


def test_raw_snappy_batch_from_librdkafka_decodes() -> None:
    specs = [(b"k", b"v" * 50, [("h", b"x")], 7)] * 3
    plain = build_batch(specs)
    raw = bytes(cramjam.snappy.compress_raw(plain[HEADER_SIZE:]))
    assert decode(reseal(plain, raw, codec=2)) == expected(specs, 0)


def test_zstd_frame_without_content_size_decodes() -> None:
    compressor = cramjam.zstd.Compressor()
    compressor.compress(b"streamed" * 1000)
    assert decompress(4, bytes(compressor.finish())) == b"streamed" * 1000


def test_lz4_writes_independent_blocks_without_content_checksum() -> None:
    flags = compress(3, b"x" * 1000)[4]  # the FLG byte after the 4-byte frame magic
    assert flags & 0x20 and not flags & 0x04


@pytest.mark.parametrize("codec", [-1, 0, 5, 7])
def test_unknown_codec_is_corrupt(codec: int) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"data")
    with pytest.raises(CorruptRecordError):
        compress(codec, b"data")


@pytest.mark.parametrize("codec", CODECS[1:])
@pytest.mark.parametrize("keep", [0.5, 0.9, 5, 0])
def test_truncated_payload_is_corrupt(codec: int, keep: float) -> None:
    payload = compress(codec, bytes(range(256)) * 200)
    with pytest.raises(CorruptRecordError):
        decompress(codec, payload[: int(len(payload) * keep) if keep < 1 else keep])


@pytest.mark.parametrize(
    "payload",
    [b"\x82SNAPPY\x00\x00\x00", b"\x82SNAPPY\x00" + bytes(8) + b"\x00\x00\x01",
     b"\x82SNAPPY\x00" + bytes(8) + b"\x7f\xff\xff\xff\x00", b"\xff\xff\xff\xff\xff"],
)
def test_malformed_snappy_is_corrupt(payload: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(2, payload)


@given(st.binary(max_size=200), st.sampled_from(CODECS[1:]))
def test_garbage_payload_is_corrupt_or_decodes(data: bytes, codec: int) -> None:
    """Garbage is CorruptRecordError; what does decompress (a tiny valid frame, say) is plain
    bytes that survive a round trip through the codec."""
    try:
        out = decompress(codec, data)
    except CorruptRecordError:
        return
    assert type(out) is bytes
    assert decompress(codec, compress(codec, out)) == out


# -- corruption -------------------------------------------------------------------------------


@given(record_specs.filter(bool), st.data())
def test_flipped_byte_in_records_fails_the_crc(specs: list, data) -> None:
    batch = bytearray(build_batch(specs))
    position = data.draw(st.integers(min_value=HEADER_SIZE, max_value=len(batch) - 1))
    batch[position] ^= data.draw(st.integers(min_value=1, max_value=255))
    with pytest.raises(CorruptRecordError):
        validate_batch(batch)


@given(record_specs.filter(bool), st.sampled_from(CODECS), st.data())
@settings(max_examples=300)
def test_resealed_garbled_records_are_corrupt_or_decode(specs: list, codec: int, data) -> None:
    """With the CRC made to match, damage must surface as CorruptRecordError, never a crash."""
    batch = build_batch(specs, codec=codec)
    section = bytearray(batch[HEADER_SIZE:])
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        position = data.draw(st.integers(min_value=0, max_value=len(section) - 1))
        section[position] ^= data.draw(st.integers(min_value=1, max_value=255))
    cut = data.draw(st.integers(min_value=0, max_value=len(section)))
    garbled = reseal(batch, bytes(section[:cut]))
    try:
        records = decode(garbled)
    except CorruptRecordError:
        return
    # What does decode still obeys the decoder's invariants: exactly recordCount records,
    # offsets inside the batch, fields of the right types.
    header = validate_batch(garbled)
    assert len(records) == header.record_count
    for record in records:
        assert header.base_offset <= record.offset <= header.last_offset
        assert record.key is None or type(record.key) is bytes
        assert record.value is None or type(record.value) is bytes
        assert all(type(k) is str and (v is None or type(v) is bytes) for k, v in record.headers)


@pytest.mark.parametrize("codec", CODECS[1:])
def test_truncated_compressed_batch_is_corrupt(codec: int) -> None:
    batch = build_batch([(b"key", bytes(range(256)) * 4, [], 1)] * 20, codec=codec)
    with pytest.raises(CorruptRecordError):
        decode(reseal(batch, batch[HEADER_SIZE:-10]))


def with_record_count(batch: bytes, count: int) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">i", out, RECORDS_COUNT_OFFSET, count)
    return reseal(out, batch[HEADER_SIZE:])


def framed(body: bytes) -> bytes:
    """A record: its length as a one-byte zig-zag varint (bodies under 64 bytes), then body."""
    return bytes([2 * len(body)]) + body


ONE_RECORD = build_batch([(b"k", b"v", [], 1)])
TWO_RECORDS_IN_SIX_OFFSETS = build_batch([(b"k", b"v", [], 1)] * 2, last_offset_delta=5)
# attributes, timestamp delta, offset delta, key length 1 + "k", value length 1 + "v", headers
RECORD_BODY = b"\x00\x00\x00\x02k\x02v\x00"
BEFORE_HEADERS = RECORD_BODY[:-1]


def map_keys(batch: bytes, header: BatchHeader) -> int:
    """Keys mapped by the log cleaner's compiled offset map (it walks records in C)."""
    offset_map = NativeOffsetMap(1 << 10, 0.9)
    offset_map.add_keys(records_section(batch, header), header)
    return len(offset_map)


def decode_columns(batch: bytes, header: BatchHeader) -> int:
    """Rows decoded by the Spark source's compiled columnar decoder."""
    return RecordColumns(True).add(records_section(batch, header), header, 0, 1 << 62)


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        (with_record_count(TWO_RECORDS_IN_SIX_OFFSETS, 3), "ends inside a record"),
        (with_record_count(TWO_RECORDS_IN_SIX_OFFSETS, 1), "follow the last"),
        (reseal(ONE_RECORD, framed(RECORD_BODY + b"\x00")), "declares 9 bytes but .* take 8"),
        (reseal(ONE_RECORD, b"\x7f" + RECORD_BODY), "invalid length -64"),
        (reseal(ONE_RECORD, framed(b"\x00\x00\x02\x02k\x02v\x00")), "offset delta 1"),
        (reseal(ONE_RECORD, framed(b"\x00\x00\x00\x03k\x02v\x00")), "key has invalid length -2"),
        (reseal(ONE_RECORD, framed(b"\x00\x00\x00\x14k\x02v\x00")), "key of 10 bytes overruns"),
        (reseal(ONE_RECORD, framed(b"\x00" + b"\xff" * 10 + b"\x01\x00\x02k\x02v\x00")),
         "longer than 10 bytes"),
        (reseal(ONE_RECORD, framed(BEFORE_HEADERS + b"\x02\x02\xff\x01")), "not UTF-8"),
        (reseal(ONE_RECORD, framed(BEFORE_HEADERS + b"\x02\x01\x01")), "null header key"),
        (reseal(ONE_RECORD, framed(BEFORE_HEADERS + b"\x7e")), "invalid header count 63"),
        (ONE_RECORD[:-1], "truncated"),
    ],
)
@pytest.mark.parametrize("decoder", [decode_records, map_keys, decode_columns])
def test_malformed_records_are_named(batch: bytes, message: str,
                                     decoder: Callable[[bytes, BatchHeader], object]) -> None:
    if message == "not UTF-8" and decoder is not decode_records:
        # header keys are not decoded there: the map ignores them, the source's builder
        # validates a chunk's keys at once (tests/test_arrow_decoders.py)
        assert decoder(batch, parse_header(batch)) == 1
        return
    with pytest.raises(CorruptRecordError, match=message):
        decoder(batch, parse_header(batch))


def test_well_formed_hand_written_record_decodes() -> None:
    """The fixture the malformed cases above start from is itself valid."""
    assert decode(reseal(ONE_RECORD, framed(RECORD_BODY))) == [Record(0, 1, b"k", b"v")]


# -- walking the batches of a buffer ------------------------------------------------------------


@given(st.lists(record_specs.filter(bool), min_size=1, max_size=4), st.data())
def test_complete_batches_are_the_whole_ones_before_a_cut(batches: list, data) -> None:
    """Any concatenation of batches, cut anywhere: the walk yields exactly the batches that
    end before the cut, at their positions, and ``end_of`` the last is where the cut one
    (or nothing) begins."""
    built = [build_batch(specs, base_offset=1000 * i) for i, specs in enumerate(batches)]
    blob = b"".join(built)
    cut = data.draw(st.integers(0, len(blob)))
    ends = [sum(map(len, built[:i + 1])) for i in range(len(built))]
    whole = [end for end in ends if end <= cut]
    headers = list(complete_batches(blob[:cut]))
    assert [end_of(h) for h in headers] == whole
    assert [h.base_offset for h in headers] == [1000 * i for i in range(len(whole))]
    assert end_of(headers[-1] if headers else None) == (whole[-1] if whole else 0)


@pytest.mark.parametrize("length", [-12, -1, 0, HEADER_SIZE - LOG_OVERHEAD - 1])
def test_a_length_the_walk_cannot_advance_by_is_corrupt(length: int) -> None:
    """A batch length below the header's own would leave the walk where it is (or send it
    back): corrupt, never a loop."""
    batch = bytearray(build_batch([(b"k", b"v", [], 1)]))
    struct.pack_into(">i", batch, LENGTH_OFFSET, length)
    with pytest.raises(CorruptRecordError, match="below the header"):
        list(complete_batches(bytes(batch) * 2))
