"""Fuzzing every decoder of network input in a child process (``decode_child.py``): nothing a
peer sends may end the process or make it reserve memory out of proportion to what it sent.

Covers:
- mutated request frames of every served (API, version), flexible ones included, through
  the broker's own header parser and ``decode_request``;
- mutated response frames of every (API, version) a client of ours reads
  (``decode_response``: followers, the marker channel, the protocol client, the Spark
  source, the CLI);
- mutated records of the embedded protocols and internal topics (``data_records``);
- garbled record batches (headers included; or the records only, with the CRC made right
  again so the damage reaches the record walker) through the Spark source's decoders
  (compiled and aiokafka's) and the broker's;
- produced record batches (their records garbled, the CRC made right again) as validated
  produce reads their keys' and values' schema ids, and another broker's schema registry
  answers (mutated JSON) to its lookup of an id;
- PushTelemetry payloads (KIP-714: OTLP ``MetricsData``, compressed with each codec or
  not) through the broker's decompression and decoder, mutated in the protobuf or in the
  compressed bytes;
- the 58-byte Metadata v12 request that made kio 0.6.5's native reader abort the broker.

The child limits its own address space (``decode_child``), so an allocation kio would
trust a count for fails there and aborts it, whatever the host's overcommit; the test fails
on any death by a signal, any exception other than the decoder's own refusal, and a peak
RSS that grew past ``64 x`` the input plus 32 MiB. Each example starts from a valid
encoding of a kio entity (hypothesis strategies kio registers), so mutations land in the
structure, not only in noise, and a failure shrinks to a small frame.
"""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from decode_child import DATA_DECODERS, TELEMETRY_MAX_BYTES, has_schema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_writer
from kio.serial.writers import write_unsigned_varint
from kio.static.primitive import Records, uvarint
from opentelemetry.proto.metrics.v1.metrics_pb2 import MetricsData
from test_records import record_specs, reseal

from sparklog.broker.registry import load_handlers, served
from sparklog.protocol.versions import request_header_version, response_header_version
from sparklog.record.batch import HEADER_SIZE
from sparklog.record.compression import CODECS, compress
from sparklog.record.records import build_batch

CHILD = Path(__file__).with_name("decode_child.py")
_HEAD = struct.Struct(">chhi")
_ANSWER = struct.Struct(">Bq")

st.register_type_strategy(Records, st.binary(max_size=300).map(Records))

# The request that aborted the broker (issue 26): Metadata v12 whose topics array claims
# 24,350,279,303 elements.
ABORTING_METADATA_V12 = bytes.fromhex(
    "0003000c000004b900047465737400888d8fdb5ad39479fddbcdc05cbafe90"
    "bbc57cdeb0e2311f57595608f9bbd17fffffff835b574c58e0")

# Byte runs that read as huge counts: an unsigned varint of 2**32 - 1 (a compact array of
# 4 billion elements), int32 2**31 - 1 (a legacy array), int16 32767.
HUGE = (b"\xff\xff\xff\xff\x0f", b"\x7f\xff\xff\xff", b"\x7f\xff", b"\x80\x80\x80\x80\x08")


class ChildDied(AssertionError):
    pass


class DecodeChild:
    """The decoding child, restarted after it died (so hypothesis can shrink a failure)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, str(CHILD)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        ready = proc.stdout.read(5 + _ANSWER.size)
        assert ready[:5] == b"ready", proc.stderr.read().decode() if proc.stderr else ""
        return proc

    def decode(self, kind: bytes, key: int, version: int, data: bytes) -> tuple[int, int]:
        """(status, how far this input raised the peak RSS, KiB)."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(_HEAD.pack(kind, key, version, len(data)) + data)
            proc.stdin.flush()
            answer = proc.stdout.read(_ANSWER.size)
        except BrokenPipeError:
            answer = b""
        if len(answer) < _ANSWER.size:
            code = proc.wait(timeout=30)
            error = proc.stderr.read().decode(errors="replace")[-3000:] if proc.stderr else ""
            self.proc = None
            raise ChildDied(f"the decoder's process ended (exit {code}, a negative code is "
                            f"a signal) on {kind!r} api {key} v{version}, {len(data)} bytes "
                            f"{data[:120].hex()}\n{error}")
        return _ANSWER.unpack(answer)  # type: ignore[no-any-return]

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def child() -> Iterator[DecodeChild]:
    decoder = DecodeChild()
    yield decoder
    decoder.close()


def _check(child: DecodeChild, kind: bytes, key: int, version: int, data: bytes) -> int:
    status, growth_kib = child.decode(kind, key, version, data)
    bound_kib = (64 * len(data) + (32 << 20)) // 1024
    assert growth_kib <= bound_kib, (
        f"decoding {len(data)} bytes ({kind!r} api {key} v{version}) raised peak RSS by "
        f"{growth_kib} KiB")
    return status


def _served_pairs() -> list[tuple[int, int]]:
    load_handlers()
    return [(key, version) for key, (low, high) in served().items()
            for version in range(low, high + 1)]


SERVED = _served_pairs()


RESPONSES = [(k, v) for k, v in SERVED if has_schema(load_response_schema, k, v)]


def _oldest_schema(load: Callable[[int, int], type], key: int, version: int) -> type:
    """kio's class of ``version``, or of the oldest version it has (Kafka 4 dropped some
    old versions: their bytes are close enough to seed mutations)."""
    while not has_schema(load, key, version):
        version += 1
    return load(key, version)


def _encode(cls: type, entity: object) -> bytes:
    out = io.BytesIO()
    entity_writer(cls)(out, entity)
    return out.getvalue()


@st.composite
def _mutated(draw: st.DrawFn, data: bytes, start: int) -> bytes:
    """``data`` with one to four edits after ``start``: a byte overwritten, a huge count
    written over or inserted, a cut."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        position = draw(st.integers(start, len(out)))
        edit = draw(st.sampled_from(("byte", "overwrite", "insert", "cut")))
        if edit == "byte":
            out[position:position + 1] = bytes([draw(st.sampled_from((0, 1, 0x7F, 0x80, 0xFF))
                                                     | st.integers(0, 255))])
        elif edit == "cut":
            del out[position:]
        else:
            huge = draw(st.sampled_from(HUGE))
            end = position + len(huge) if edit == "overwrite" else position
            out[position:end] = huge
    return bytes(out)


def _request_frame(key: int, version: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", key, version, 7, 4) + b"fuzz"
    if request_header_version(key, version) == 2:
        header += b"\x00"
    return header + body


def _response_frame(key: int, version: int, body: bytes) -> bytes:
    header = struct.pack(">i", 7)
    if response_header_version(key, version) == 1:
        header += b"\x00"
    return header + body


FUZZ = settings(max_examples=1000, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FUZZ
@given(data=st.data())
def test_no_request_frame_ends_or_bloats_the_broker_decoder(child: DecodeChild,
                                                             data: st.DataObject) -> None:
    key, version = data.draw(st.sampled_from(SERVED))
    cls = _oldest_schema(load_request_schema, key, version)
    frame = _request_frame(key, version, _encode(cls, data.draw(st.from_type(cls))))
    _check(child, b"q", key, version, data.draw(_mutated(frame, 10)))


@FUZZ
@given(data=st.data())
def test_no_response_frame_ends_or_bloats_a_client_decoder(child: DecodeChild,
                                                            data: st.DataObject) -> None:
    key, version = data.draw(st.sampled_from(RESPONSES))
    cls = load_response_schema(key, version)
    frame = _response_frame(key, version, _encode(cls, data.draw(st.from_type(cls))))
    _check(child, b"r", key, version, data.draw(_mutated(frame, 4)))


@FUZZ
@given(decoder=st.integers(0, len(DATA_DECODERS) - 1), version=st.integers(0, 3),
       body=st.binary(max_size=200), data=st.data())
def test_no_data_record_ends_or_bloats_its_decoder(child: DecodeChild, decoder: int,
                                                   version: int, body: bytes,
                                                   data: st.DataObject) -> None:
    record = data.draw(_mutated(struct.pack(">h", version) + body, 2))
    _check(child, b"d", decoder, 0, record)


@FUZZ
@given(specs=record_specs.filter(bool), codec=st.sampled_from(CODECS), data=st.data())
def test_no_record_batch_ends_or_bloats_the_record_decoders(child: DecodeChild, specs: list,
                                                            codec: int,
                                                            data: st.DataObject) -> None:
    batch = build_batch(specs, codec=codec)
    if data.draw(st.booleans()):  # the section, its length and CRC made right again
        batch = reseal(batch, data.draw(_mutated(batch[HEADER_SIZE:], 0)))
    else:  # the header too (the readers walk the framing; only the broker checks CRCs)
        batch = data.draw(_mutated(batch, 0))
    _check(child, b"b", 0, 0, batch * data.draw(st.integers(1, 2)))


@FUZZ
@given(specs=record_specs.filter(bool), codec=st.sampled_from(CODECS), data=st.data())
def test_no_produced_batch_ends_or_bloats_validated_produce(child: DecodeChild, specs: list,
                                                          codec: int,
                                                          data: st.DataObject) -> None:
    """Only a KafkaError may come out (Produce answers it); the producer's CRC is checked
    first, so the garbling is resealed to reach the record decoders."""
    batch = build_batch(specs, codec=codec)
    _check(child, b"v", 0, 0, reseal(batch, data.draw(_mutated(batch[HEADER_SIZE:], 0))))


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.sampled_from(["subject", "schema", "schemaType",
                                                        "version", "id", "x"]), inner,
                                       max_size=4), max_leaves=20)


@FUZZ
@given(versions=_JSON, schema=_JSON, data=st.data())
def test_no_registry_answer_ends_validated_produce(child: DecodeChild, versions: object,
                                                   schema: object, data: st.DataObject) -> None:
    """Another broker's registry answers, mutated: refused as RegistryUnavailable (the
    batch fails closed) or read; nested deeper than the JSON parser goes, too."""
    first = json.dumps(versions).encode()
    second = data.draw(_mutated(json.dumps(schema).encode(), 0)) if data.draw(
        st.booleans()) else b"[" * 10_000
    _check(child, b"s", 0, 0, struct.pack(">i", len(first)) + first + second)


_SCHEMA_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from(
        ["record", "enum", "fixed", "array", "map", "int", "A", "a.B", "#/x", "r", "r#/x"]),
    lambda inner: st.lists(inner, max_size=3) | st.fixed_dictionaries(
        {"type": inner}, optional={
            "name": inner, "namespace": inner, "items": inner, "values": inner, "$ref": inner,
            "$defs": inner, "properties": inner,
            "fields": inner | st.lists(st.fixed_dictionaries({"name": st.just("f"),
                                                               "type": inner}), max_size=3)}),
    max_leaves=30)
"""Avro- and JSON-Schema-shaped documents, every object with a ``type``."""
_SCHEMA_TEXT = st.integers(0, 9).flatmap(
    lambda n: st.just('{"type":' * 5_000) if n == 0 else _SCHEMA_JSON.map(json.dumps))
_REGISTRY_ANSWER = st.fixed_dictionaries({
    "id": st.integers(), "version": st.integers() | st.none(),
    "schemaType": st.sampled_from(["AVRO", "JSON", "PROTOBUF", "X"]),
    "schema": _SCHEMA_TEXT,
    "references": st.lists(st.fixed_dictionaries({
        "name": st.sampled_from(["A", "a.B", "r", "google/protobuf/t.proto"]),
        "subject": st.text(max_size=3), "version": st.integers(-1, 3)}), max_size=3)})


@FUZZ
@given(schema=_REGISTRY_ANSWER, data=st.data(),
       referenced=_REGISTRY_ANSWER.map(lambda answer: {**answer, "references": []})
       | _REGISTRY_ANSWER)  # a reference's own references: answered alike, a cycle
def test_no_registry_answer_ends_a_typed_column_lookup(child: DecodeChild, schema: object,
                                                       referenced: object,
                                                       data: st.DataObject) -> None:
    """A registry's answers to typed columns (a schema with references, each reference
    answered alike), mutated: a RegistryError naming the fault, or a schema standing
    alone."""
    first = json.dumps(schema).encode()
    if data.draw(st.booleans()):
        first = data.draw(_mutated(first, 0))
    second = data.draw(st.sampled_from([json.dumps(referenced).encode(), b"[" * 10_000]))
    _check(child, b"x", 0, 0, struct.pack(">i", len(first)) + first + second)


def test_the_aborting_metadata_request_is_refused(child: DecodeChild) -> None:
    """Issue 26's reproduction: refused by the decoder (the connection closes), and the
    process lives. Run it against a new kio before adopting it."""
    assert _check(child, b"q", 3, 12, ABORTING_METADATA_V12) == 1
    assert _check(child, b"q", 3, 12, _request_frame(3, 12, b"\x01\x00\x00\x00")) == 0


@pytest.mark.parametrize("huge", HUGE)
@pytest.mark.parametrize(("key", "version"), [(3, 12), (3, 8), (1, 11), (0, 8), (19, 4)])
def test_a_huge_count_at_the_first_array_is_refused(child: DecodeChild, key: int,
                                                    version: int, huge: bytes) -> None:
    """Metadata (flexible and not), Fetch, Produce and CreateTopics with a huge count where
    their first array's count is."""
    first_array = {(3, 12): 0, (3, 8): 0, (1, 11): 25, (0, 8): 8, (19, 4): 0}[(key, version)]
    body = b"\x00" * first_array + huge + b"\x00" * 16
    assert _check(child, b"q", key, version, _request_frame(key, version, body)) == 1


def test_the_cheapest_elements_cost_a_bounded_multiple_of_their_bytes(
        child: DecodeChild) -> None:
    """The most objects per byte a served request can ask for: DescribeUserScramCredentials
    v0 with 400,000 users of two bytes each (an empty compact string, no tags), each a
    Python object once decoded. Peak RSS grows by less than 64 times the frame."""
    users = 400_000
    count = io.BytesIO()
    write_unsigned_varint(count, uvarint(users + 1))  # a compact array's count
    frame = _request_frame(50, 0, count.getvalue() + b"\x01\x00" * users + b"\x00")
    status, growth_kib = child.decode(b"q", 50, 0, frame)
    assert status == 0
    assert growth_kib * 1024 < 64 * len(frame)  # measured: about 32 times


_NAMES = st.text(st.characters(codec="utf-8"), max_size=40)


@st.composite
def _metrics_data(draw: st.DrawFn) -> bytes:
    """An OTLP MetricsData with gauges, sums and histograms, attributes of every kind."""
    data = MetricsData()
    for _ in range(draw(st.integers(0, 2))):
        scope = data.resource_metrics.add().scope_metrics.add()
        for _ in range(draw(st.integers(0, 4))):
            metric = scope.metrics.add(name=draw(_NAMES), unit=draw(_NAMES))
            kind = draw(st.sampled_from(("gauge", "sum", "histogram", "summary", None)))
            if kind is None:
                continue
            body = getattr(metric, kind)
            for _ in range(draw(st.integers(0, 3))):
                point = body.data_points.add(time_unix_nano=draw(st.integers(0, 2**64 - 1)))
                if kind in ("gauge", "sum"):
                    point.as_double = draw(st.floats())
                else:
                    point.count, point.sum = draw(st.integers(0, 2**64 - 1)), draw(st.floats())
                for _ in range(draw(st.integers(0, 3))):
                    value = point.attributes.add(key=draw(_NAMES)).value
                    choice = draw(st.sampled_from(("string", "int", "bool", "array")))
                    if choice == "string":
                        value.string_value = draw(_NAMES)
                    elif choice == "int":
                        value.int_value = draw(st.integers(-(2**63), 2**63 - 1))
                    elif choice == "bool":
                        value.bool_value = draw(st.booleans())
                    else:
                        value.array_value.values.add(double_value=draw(st.floats()))
    return data.SerializeToString()


@FUZZ
@given(payload=_metrics_data(), codec=st.sampled_from(CODECS), inside=st.booleans(),
       data=st.data())
def test_no_telemetry_push_ends_or_bloats_the_broker(child: DecodeChild, payload: bytes,
                                                     codec: int, inside: bool,
                                                     data: st.DataObject) -> None:
    """``inside``: the protobuf is mutated, then compressed (the damage reaches the OTLP
    decoder); else the compressed bytes are (the damage reaches the codec)."""
    if inside:
        payload = data.draw(_mutated(payload, 0))
    pushed = compress(codec, payload) if codec else payload
    if not inside:
        pushed = data.draw(_mutated(pushed, 0))
    _check(child, b"t", codec, 0, pushed)


@pytest.mark.parametrize("codec", CODECS)
def test_a_telemetry_bomb_is_refused(child: DecodeChild, codec: int) -> None:
    """Ten times the decompressed bound of empty messages, the most objects per byte:
    refused before the decoder, whatever the codec."""
    bomb = b"\x0a\x00" * (5 * TELEMETRY_MAX_BYTES)
    assert _check(child, b"t", codec, 0, compress(codec, bomb) if codec else bomb) == 1
    within = b"\x0a\x00" * (TELEMETRY_MAX_BYTES // 2)  # exactly the bound: decoded
    assert _check(child, b"t", codec, 0, compress(codec, within) if codec else within) == 0
