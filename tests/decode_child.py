"""A child process that decodes what its parent sends, for fuzz tests of the decoders of
network input (``test_decoder_fuzz``): if a decoder can be made to end the process, it ends
this one, and the parent sees the signal.

Protocol, on stdin: one message per input, ``kind`` (1 byte: ``q`` a request frame without
its size, ``r`` a response frame of (api key, version) without its size, ``d`` a data record
of the named embedded or internal-topic schema, ``b`` the records of a Fetch answer, read
by the Spark source's decoders, compiled and aiokafka's, and the broker's; ``t`` a
PushTelemetry payload, compressed with the codec its api key names, decoded by the broker
into at most ``TELEMETRY_MAX_BYTES``; ``v`` a produced record batch as validated produce
reads it (``schema_validation.prefixes``: every key's and value's schema-id prefix); ``s``
another broker's schema registry answers to validated produce's lookup of an id (int32
length, the ``/versions`` answer, then the ``/schemas/ids`` answer); ``x`` a registry's
answers to typed columns, a schema and what each of its references is answered with (int32
length, the schema's answer, then the reference's), made to stand alone), int16 api key (or
schema index, or codec), int16 version, int32 length, the bytes. On stdout, per input:
one status byte (``0`` decoded, ``1`` refused with the decoder's own error) and how far
that input raised the process's peak RSS above its resident size before it, in KiB (int64;
the peak is reset before each input through ``/proc/self/clear_refs``, so an earlier
input's peak is not counted against a later one).
Any other exception is written to stderr and ends the process with exit code 3.

Before its first input it builds every reader its parent may ask for, writes ``ready``
and its peak RSS, and limits its address space to what it has plus ``SPARKLOG_FUZZ_AS_MB``
(default 1024): an allocation that asks for more fails, as it would on a host whose memory
ran out, and kio's native reader aborts the process on that.
"""

from __future__ import annotations

import os
import resource
import struct
import sys
import traceback
from collections.abc import Callable
from typing import Any

from kio.index import UnknownEntity, load_response_schema

from sparklog.broker.client_metrics import decode_push
from sparklog.broker.registry import load_handlers, served
from sparklog.broker.schema_registry.ids import RegistryUnavailable, info_of, parse_answer
from sparklog.broker.schema_validation import Field, prefixes
from sparklog.coordinator import consumer_protocol, group_records, txn_records
from sparklog.datasource.read.arrow_records import (
    AiokafkaRecordBuilder,
    ColumnarRecordBuilder,
    RecordBuilder,
)
from sparklog.errors import KafkaError
from sparklog.protocol.codec import MalformedResponseError, decode_request, decode_response
from sparklog.protocol.framing import FrameError, parse_request_header
from sparklog.record.batch import split_batches, validate_produced
from sparklog.record.compression import CODECS
from sparklog.record.records import build_batch, decode_records
from sparklog.schemas.registry_client import (
    RegisteredSchema,
    RegistryError,
    SchemaRegistry,
)
from sparklog.schemas.registry_client import (
    parse_answer as parse_client_answer,
)

_HEAD = struct.Struct(">chhi")
_ANSWER = struct.Struct(">Bq")

DATA_DECODERS: tuple[Callable[[bytes], Any], ...] = (
    consumer_protocol.subscribed_topics,
    consumer_protocol.assigned_partitions,
    group_records.decode_key,
    group_records.decode_offset_value,
    group_records.decode_group_value,
    txn_records.decode_txn_key,
    txn_records.decode_txn_value,
)
"""The data-record decoders fed by 'd' messages, by index (see ``test_decoder_fuzz``)."""

REFUSALS: dict[bytes, tuple[type[BaseException], ...]] = {
    b"q": (FrameError, KafkaError),  # the server closes the connection on either
    b"r": (MalformedResponseError,),
    b"d": (ValueError,),
    b"b": (KafkaError, ValueError),  # CorruptRecordError, a legacy format
    b"t": (ValueError,),  # MalformedMetricsError: PushTelemetry answers INVALID_RECORD
    b"v": (KafkaError,),  # the Produce answer's error; anything else is an internal error
    b"s": (RegistryUnavailable,),  # the batch is refused REQUEST_TIMED_OUT, retriable
    b"x": (RegistryError,),  # the Spark source's load() or task names the registry's fault
}
"""Each kind's own errors: any other exception is a defect, and ends the child."""
TELEMETRY_MAX_BYTES = 64 * 1024
"""The decompressed bound of a fuzzed push (the broker's is ``telemetry.max.bytes``, 1 MiB):
small enough that what the bound lets a tiny compressed input expand to stays within the
parent's growth allowance."""


def _status_kib(name: str) -> int:
    """A figure of this process's /proc status, in KiB (``VmHWM``: peak RSS)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    raise LookupError(name)


def _reset_peak() -> int:
    """Reset the peak RSS to the resident size (Linux's ``clear_refs`` 5); that size, KiB."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")
    return _status_kib("VmRSS")


def _read_records(data: bytes) -> None:
    """Each decoder on its own: one refusing must not keep the others from the bytes."""
    refused = None
    for read in (_columnar, _aiokafka, _broker):
        try:
            read(data)
        except REFUSALS[b"b"] as exc:
            refused = exc
    if refused is not None:
        raise refused


def _spark_source(builder: RecordBuilder, data: bytes) -> None:
    for _ in builder.add(data, 0, 2**62):
        pass
    builder.build()


def _columnar(data: bytes) -> None:
    _spark_source(ColumnarRecordBuilder("fuzz", 0, include_headers=True), data)


def _aiokafka(data: bytes) -> None:
    _spark_source(AiokafkaRecordBuilder("fuzz", 0, include_headers=True), data)


def _broker(data: bytes) -> None:
    for header in split_batches(data):
        decode_records(data, header)


def _validated(data: bytes) -> None:
    header = validate_produced(data)
    for column in prefixes(data, header, (Field("key", None), Field("value", None))):
        column.where(dict.fromkeys(column.distinct(), "refused"))


def _registry_answers(data: bytes) -> None:
    (size,) = struct.unpack_from(">i", data) if len(data) >= 4 else (0,)
    versions = parse_answer("fuzz", data[4:4 + max(size, 0)])
    info_of("fuzz", versions, parse_answer("fuzz", data[4 + max(size, 0):]))


class _Answering(SchemaRegistry):
    """sparklog's registry client, every request answered with the same bytes."""

    def __init__(self, answer: bytes) -> None:
        super().__init__("http://fuzz")
        self.answer = answer

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        return parse_client_answer(self.url, self.answer)


def _typed_registry_answers(data: bytes) -> None:
    (size,) = struct.unpack_from(">i", data) if len(data) >= 4 else (0,)
    schema = RegisteredSchema.of(parse_client_answer("fuzz", data[4:4 + max(size, 0)]), 1)
    _Answering(data[4 + max(size, 0):]).standalone(schema)


def _decode(kind: bytes, key: int, version: int, data: bytes) -> None:
    if kind == b"v":
        _validated(data)
    elif kind == b"s":
        _registry_answers(data)
    elif kind == b"x":
        _typed_registry_answers(data)
    elif kind == b"b":
        _read_records(data)
    elif kind == b"q":
        header, offset = parse_request_header(data)
        decode_request(header, data, offset)
    elif kind == b"r":
        decode_response(key, version, data)
    elif kind == b"t":
        decode_push(key, data, TELEMETRY_MAX_BYTES)
    else:
        DATA_DECODERS[key](data)


def _warm_up() -> None:
    """Build every reader once (kio compiles its schemas, the walk its plans), so memory
    measured later is what decoding costs, not what importing costs."""
    for key, (low, high) in served().items():
        for version in range(low, high + 1):
            kinds = (b"q", b"r") if has_schema(load_response_schema, key, version) else (b"q",)
            for kind in kinds:
                data = struct.pack(">hhih", key, version, 0, -1) if kind == b"q" else b""
                try:
                    _decode(kind, key, version, data)
                except REFUSALS[kind]:
                    pass
    for codec in CODECS:
        try:
            _decode(b"t", codec, 0, b"")
        except REFUSALS[b"t"]:
            pass
    _validated(build_batch([(b"\0\0\0\0\1k", b"\0\0\0\0\1v", [], 0)]))  # Arrow loaded
    versions = b'[{"subject": "s"}]'
    _registry_answers(struct.pack(">i", len(versions)) + versions + b'{"schema": "\\"int\\""}')


def has_schema(load: Callable[[int, int], type], key: int, version: int) -> bool:
    """Whether kio has a class of this version (``load``: kio's request or response
    loader); clients ask only for versions it has."""
    try:
        load(key, version)
    except UnknownEntity:
        return False
    return True


def main() -> int:
    load_handlers()
    _warm_up()
    budget = int(os.environ.get("SPARKLOG_FUZZ_AS_MB", "1024")) * 1024 * 1024
    limit = _status_kib("VmSize") * 1024 + budget
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    out, stdin = sys.stdout.buffer, sys.stdin.buffer
    out.write(b"ready" + _ANSWER.pack(0, 0))
    out.flush()
    while True:
        head = stdin.read(_HEAD.size)
        if len(head) < _HEAD.size:
            return 0
        kind, key, version, length = _HEAD.unpack(head)
        data = stdin.read(length)
        before_kib = _reset_peak()
        try:
            _decode(kind, key, version, data)
            status = 0
        except REFUSALS[kind]:
            status = 1
        except BaseException:
            traceback.print_exc()
            return 3
        out.write(_ANSWER.pack(status, _status_kib("VmHWM") - before_kib))
        out.flush()


if __name__ == "__main__":
    sys.exit(main())
