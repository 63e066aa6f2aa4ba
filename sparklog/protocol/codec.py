"""Request decoding and response encoding with kio (0.6.5) dataclasses.

Invariants:
- The codec reads and writes any (key, version) kio has a schema for, and the old versions
  listed below; any other raises ``UnsupportedVersionError``. Which of them the broker
  serves is the handlers' decision (``sparklog.broker.registry``), checked before decoding.
- No bytes reach kio's native reader before ``body_walk`` has walked them: a count that
  would make kio reserve more memory than the frame could hold is refused before kio sees
  it (kio 0.6.5 aborts the process when that allocation fails). The same walk drops the
  tagged fields a schema does not know, as Kafka ignores them.
- Bytes left over after a request body are ignored, never rejected (librdkafka sends 3
  extra bytes with Metadata v9+ "all topics"). A body that does not decode raises
  ``InvalidRequestError`` and nothing else; so does a null array where the schema does not
  allow one (``body_walk``: kio itself reads it as None, which handlers would trip over).
- ``encode_response`` returns a whole frame: int32 size, the response header for the
  request's (key, version) (correlation id, plus an empty tagged-field section for header
  v1) and the body.
- Readers, writers and classes are built once per (key, version) and cached.
- The client side decodes responses into kio's classes (a response that does not decode
  raises ``MalformedResponseError``, a ``ConnectionError``, and nothing else), except the
  few with a non-nullable ``datetime_i64`` field, whose -1 ("none") kio refuses: those
  fields read as int64 ms.
- kio 0.6.5 has no schema for some old versions we advertise (Kafka 4 dropped them, KIP-896):
  Produce 0-2, Fetch 0-3, ListOffsets 0, OffsetCommit 0-1, OffsetFetch 0, CreateTopics 0-1,
  DeleteTopics 0, OffsetForLeaderEpoch 0-1, DescribeConfigs 0. Those are read and written
  with a wire class derived from the oldest kio version (fields dropped or added as the
  schema changed) and converted to and from that kio class, so handlers only ever see the
  classes kio generates: a Produce v0 request arrives as a kio ``ProduceRequest`` v3 with
  ``transactional_id=None``, and ``response_class(0, 0)`` is kio's v3 ``ProduceResponse``.

How kio 0.6.5 represents values (decoded requests, and what responses must carry):
- Entities are frozen, slotted, keyword-only dataclasses; build a response with keyword
  arguments, e.g. ``response_class(3, 8)(throttle_time=timedelta(0), brokers=(...), ...)``.
  Fields with a schema default may be omitted. Arrays are tuples (None for a null array).
- Strings are ``str``; nullable strings are ``str | None`` (None for length -1). Nominal
  types (``TopicName``, ``GroupId``) are plain ``str`` at run time.
- ``bytes`` fields and the Produce ``records`` field are ``bytes`` (a copy of the frame's
  slice; ``Records`` is a phantom type, not a wrapper), or None when null.
- Integers are plain ``int``: ``i8``/``i16``/``i32``/``i64``/``BrokerId`` are phantom types
  whose call only range-checks and returns the int. Durations (``timedelta_i32`` fields
  such as Produce ``timeout``, Fetch ``max_wait``, every ``throttle_time``) are
  ``datetime.timedelta``, and must be given as one when encoding. ``datetime_i64`` fields
  (Produce ``log_append_time``) are aware ``datetime`` or None for -1.
- Error codes decode as ``kio.schema.errors.ErrorCode`` (an IntEnum, lower-case names). The
  writer calls ``.value``, so a response needs an enum member (kio's ``ErrorCode`` or
  ``sparklog.errors.ErrorCode``), not a bare int.
- A reader is ``entity_reader(T)(buffer, offset) -> (entity, bytes consumed)``; it accepts
  ``bytes`` or ``memoryview`` and refuses writable buffers such as ``bytearray``. A writer is
  ``entity_writer(T)(io, entity)`` (pure Python, many small ``io.write`` calls).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass, make_dataclass
from functools import cache
from types import NoneType, UnionType
from typing import IO, Any, get_args, get_origin

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.api_versions.v0.response import ApiVersion, ApiVersionsResponse
from kio.serial import entity_writer
from kio.serial.errors import SerialError
from kio.serial.readers import Reader
from kio.static.primitive import i32, i64
from kio.static.protocol import RequestPayload, ResponsePayload

from sparklog.errors import ErrorCode, InvalidRequestError, UnsupportedVersionError
from sparklog.protocol.body_walk import checked_reader
from sparklog.protocol.framing import FrameError, RequestHeader, skip_tagged_fields
from sparklog.protocol.versions import (
    ConfigSource,
    api_name,
    request_header_version,
    response_header_version,
)

Writer = Callable[[IO[bytes], Any], None]
Derive = Mapping[str, Callable[[Any], object]]

_I32 = struct.Struct(">i")
_SIZE_AND_CORRELATION = struct.Struct(">ii")
_REQUEST_HEAD = struct.Struct(">ihhih")  # size, api_key, api_version, correlation_id, id length


def decode_request(header: RequestHeader, frame: bytes | memoryview, body_offset: int
                   ) -> RequestPayload:
    """Decode the request body that starts at ``body_offset``; trailing bytes are ignored."""
    read = _request_reader(header.api_key, header.api_version)
    try:
        request, _ = read(frame, body_offset)
    except (SerialError, ValueError, IndexError) as exc:
        # kio raises ValueError for some bad values (BodyError is one)
        raise InvalidRequestError(
            f"{api_name(header.api_key)} v{header.api_version} does not decode: {exc}") from exc
    return request


def response_class(api_key: int, version: int) -> type[ResponsePayload]:
    """The kio dataclass a handler builds to answer ``version`` of ``api_key``."""
    return _response_codec(api_key, version).cls


def encode_response(header: RequestHeader, response: ResponsePayload) -> bytes:
    """The framed response: int32 size, response header, body."""
    codec = _response_codec(header.api_key, header.api_version)
    if type(response) is not codec.cls:
        cls = codec.cls
        raise TypeError(
            f"api {header.api_key} v{header.api_version} is answered with {cls.__module__}."
            f"{cls.__qualname__}, not {type(response).__module__}.{type(response).__qualname__}"
        )
    out = io.BytesIO()
    out.write(_SIZE_AND_CORRELATION.pack(0, header.correlation_id))
    out.write(codec.header_tail)
    codec.write(out, response)
    with out.getbuffer() as view:
        _I32.pack_into(view, 0, len(view) - 4)
    return out.getvalue()


def encode_api_versions_error(correlation_id: int,
                              served: Mapping[int, tuple[int, int]]) -> bytes:
    """ApiVersions v0 answer to an unsupported ApiVersions version: error 35 + the ``served``
    (min, max) version of each api key."""
    response = ApiVersionsResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION,  # type: ignore[arg-type]
        api_keys=tuple(
            ApiVersion(api_key=key, min_version=low, max_version=high)
            for key, (low, high) in served.items()
        ),
    )
    out = io.BytesIO()
    out.write(_SIZE_AND_CORRELATION.pack(0, correlation_id))
    entity_writer(ApiVersionsResponse)(out, response)
    with out.getbuffer() as view:
        _I32.pack_into(view, 0, len(view) - 4)
    return out.getvalue()


# --- the client side: requests out, responses in ------------------------------------------


@dataclass(frozen=True, slots=True)
class _ClientCodec:
    request_cls: type[RequestPayload]
    write: Writer
    read: Reader[ResponsePayload]
    header_tail: bytes  # request header v2: an empty tagged-field section; v1: nothing
    tagged_response_header: bool  # response header v1: tagged fields after the correlation id


@cache
def _client_codec(api_key: int, version: int) -> _ClientCodec:
    request_cls = load_request_schema(api_key, version)
    response_cls = load_response_schema(api_key, version)
    if _has_instant(response_cls):
        response_cls = _wire_class(response_cls, version, _Legacy(version, instants_as_ms=True))
    flexible = request_header_version(api_key, version) == 2
    return _ClientCodec(request_cls, entity_writer(request_cls), checked_reader(response_cls),
                        b"\x00" if flexible else b"",
                        response_header_version(api_key, version) == 1)


def request_class(api_key: int, version: int) -> type[RequestPayload]:
    """The kio dataclass a client builds to send ``version`` of ``api_key``."""
    return _client_codec(api_key, version).request_cls


def encode_request(api_key: int, version: int, correlation_id: int, client_id: bytes,
                   request: RequestPayload) -> bytes:
    """The framed request: int32 size, request header (v1, or v2 for flexible versions),
    body. The versions are kio's (a client speaks the versions a broker offers it)."""
    codec = _client_codec(api_key, version)
    out = io.BytesIO()
    out.write(_REQUEST_HEAD.pack(0, api_key, version, correlation_id, len(client_id)))
    out.write(client_id)
    out.write(codec.header_tail)
    codec.write(out, request)
    with out.getbuffer() as view:
        _I32.pack_into(view, 0, len(view) - 4)
    return out.getvalue()


class MalformedResponseError(ConnectionError):
    """A response that does not decode as its request's answer: the connection it came on
    cannot be trusted (callers drop it and retry, as with any broken connection)."""


def decode_response(api_key: int, version: int, frame: bytes | memoryview
                    ) -> ResponsePayload:
    """The response in ``frame`` (a frame's bytes after its size: the correlation id first,
    which the caller checks); raises ``MalformedResponseError`` for bytes that do not
    decode, and nothing else whatever they are.

    Kio's class, except where the response has a non-nullable ``datetime_i64`` field (such
    as DescribeTransactions' ``transaction_start_time``): Kafka sends -1 there for "none",
    which kio refuses to read, so those responses decode into a derived class of the same
    shape whose instant fields are int64 milliseconds (-1 included)."""
    codec = _client_codec(api_key, version)
    try:
        offset = skip_tagged_fields(frame, 4) if codec.tagged_response_header else 4
        response, _ = codec.read(frame, offset)
    except (SerialError, ValueError, IndexError, FrameError) as exc:
        raise MalformedResponseError(f"api {api_key} v{version} answer: {exc}") from None
    return response


# --- versions kio lacks ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Extra:
    """A field only the old version has: ``name`` goes right after ``entity.after``."""

    entity: str
    after: str
    name: str
    kafka_type: str
    type_: Any
    default: object

    def as_field(self) -> Any:
        return field(default=self.default, metadata={"kafka_type": self.kafka_type})


@dataclass(frozen=True, slots=True)
class _Legacy:
    """How an old version differs from ``base``, the oldest version kio has a schema for.

    Field references are ``"EntityClassName.field_name"``. ``derive`` computes a field of the
    target entity from the source entity: response fields only the old version has, and
    request fields the base class needs but has no default for.
    """

    base: int
    drop: frozenset[str] = frozenset()
    extras: tuple[_Extra, ...] = ()
    derive: Derive = field(default_factory=dict)
    instants_as_ms: bool = False  # non-nullable datetime_i64 fields read as int64 ms

    @property
    def same_wire_format(self) -> bool:
        return not (self.drop or self.extras or self.derive or self.instants_as_ms)


def _drop(*names: str) -> frozenset[str]:
    return frozenset(names)


_PRODUCE_V0_2 = _Legacy(3, _drop("ProduceRequest.transactional_id"))
_FETCH_V0_2 = _Legacy(4, _drop("FetchRequest.max_bytes", "FetchRequest.isolation_level"))
_OFFSET_FOR_LEADER_EPOCH_V0_1 = _Legacy(2, _drop("OffsetForLeaderPartition.current_leader_epoch"))

_LEGACY_REQUESTS: dict[tuple[int, int], _Legacy] = {
    (0, 0): _PRODUCE_V0_2,
    (0, 1): _PRODUCE_V0_2,
    (0, 2): _PRODUCE_V0_2,
    (1, 0): _FETCH_V0_2,
    (1, 1): _FETCH_V0_2,
    (1, 2): _FETCH_V0_2,
    (1, 3): _Legacy(4, _drop("FetchRequest.isolation_level")),
    (2, 0): _Legacy(
        1,
        extras=(_Extra("ListOffsetsPartition", "timestamp", "max_num_offsets", "int32", i32, 1),),
    ),
    (8, 0): _Legacy(
        2,
        _drop(
            "OffsetCommitRequest.generation_id_or_member_epoch",
            "OffsetCommitRequest.member_id",
            "OffsetCommitRequest.retention_time",
        ),
        derive={"OffsetCommitRequest.member_id": lambda _: ""},
    ),
    (8, 1): _Legacy(
        2,
        _drop("OffsetCommitRequest.retention_time"),
        extras=(
            _Extra(
                "OffsetCommitRequestPartition",
                "committed_offset",
                "commit_timestamp",
                "int64",
                i64,
                -1,
            ),
        ),
    ),
    (9, 0): _Legacy(1),
    (19, 0): _Legacy(2, _drop("CreateTopicsRequest.validate_only")),
    (19, 1): _Legacy(2),
    (20, 0): _Legacy(1),
    (23, 0): _OFFSET_FOR_LEADER_EPOCH_V0_1,
    (23, 1): _OFFSET_FOR_LEADER_EPOCH_V0_1,
    (32, 0): _Legacy(1, _drop("DescribeConfigsRequest.include_synonyms")),
}

_FETCH_RESPONSE_V1_3 = _Legacy(
    4, _drop("PartitionData.last_stable_offset", "PartitionData.aborted_transactions")
)

_LEGACY_RESPONSES: dict[tuple[int, int], _Legacy] = {
    (0, 0): _Legacy(
        3, _drop("ProduceResponse.throttle_time", "PartitionProduceResponse.log_append_time")
    ),
    (0, 1): _Legacy(3, _drop("PartitionProduceResponse.log_append_time")),
    (0, 2): _Legacy(3),
    (1, 0): _Legacy(4, _FETCH_RESPONSE_V1_3.drop | {"FetchResponse.throttle_time"}),
    (1, 1): _FETCH_RESPONSE_V1_3,
    (1, 2): _FETCH_RESPONSE_V1_3,
    (1, 3): _FETCH_RESPONSE_V1_3,
    (2, 0): _Legacy(
        1,
        _drop("ListOffsetsPartitionResponse.timestamp", "ListOffsetsPartitionResponse.offset"),
        extras=(
            _Extra(
                "ListOffsetsPartitionResponse",
                "error_code",
                "old_style_offsets",
                "int64",
                tuple[i64, ...],
                (),
            ),
        ),
        derive={
            "ListOffsetsPartitionResponse.old_style_offsets": (
                lambda p: (p.offset,) if p.offset >= 0 else ()
            )
        },
    ),
    (8, 0): _Legacy(2),
    (8, 1): _Legacy(2),
    (9, 0): _Legacy(1),
    (19, 0): _Legacy(
        2, _drop("CreateTopicsResponse.throttle_time", "CreatableTopicResult.error_message")
    ),
    (19, 1): _Legacy(2, _drop("CreateTopicsResponse.throttle_time")),
    (20, 0): _Legacy(1, _drop("DeleteTopicsResponse.throttle_time")),
    (23, 0): _Legacy(
        2, _drop("OffsetForLeaderEpochResponse.throttle_time", "EpochEndOffset.leader_epoch")
    ),
    (23, 1): _Legacy(2, _drop("OffsetForLeaderEpochResponse.throttle_time")),
    (32, 0): _Legacy(
        1,
        _drop(
            "DescribeConfigsResourceResult.config_source",
            "DescribeConfigsResourceResult.synonyms",
        ),
        extras=(
            _Extra("DescribeConfigsResourceResult", "read_only", "is_default", "bool", bool, False),
        ),
        derive={
            "DescribeConfigsResourceResult.is_default": (
                lambda c: c.config_source == ConfigSource.DEFAULT_CONFIG
            )
        },
    ),
}


# --- cached readers and writers ------------------------------------------------------------


def _schema(load: Callable[[int, int], type], api_key: int, version: int) -> type:
    try:
        return load(api_key, version)
    except (UnknownAPIKey, UnknownEntity):
        raise UnsupportedVersionError(f"api {api_key} v{version} has no codec") from None


@cache
def _request_reader(api_key: int, version: int) -> Reader[RequestPayload]:
    legacy = _LEGACY_REQUESTS.get((api_key, version))
    if legacy is None:
        return checked_reader(_schema(load_request_schema, api_key, version))
    canonical = load_request_schema(api_key, legacy.base)
    if legacy.same_wire_format:
        return checked_reader(canonical)
    read_wire = checked_reader(_wire_class(canonical, version, legacy))

    def read_legacy(buffer: bytes, offset: int) -> tuple[RequestPayload, int]:
        wire, size = read_wire(buffer, offset)
        return _convert(wire, canonical, legacy.derive), size

    return read_legacy


@dataclass(frozen=True, slots=True)
class _ResponseCodec:
    cls: type[ResponsePayload]
    write: Writer
    header_tail: bytes  # response header v1: an empty tagged-field section; v0: nothing


@cache
def _response_codec(api_key: int, version: int) -> _ResponseCodec:
    cls, write = _response_writer(api_key, version)
    header_tail = b"\x00" if response_header_version(api_key, version) == 1 else b""
    return _ResponseCodec(cls, write, header_tail)


def _response_writer(api_key: int, version: int) -> tuple[type[ResponsePayload], Writer]:
    legacy = _LEGACY_RESPONSES.get((api_key, version))
    if legacy is None:
        cls = _schema(load_response_schema, api_key, version)
        return cls, entity_writer(cls)
    canonical = load_response_schema(api_key, legacy.base)
    if legacy.same_wire_format:
        return canonical, entity_writer(canonical)
    wire_class = _wire_class(canonical, version, legacy)
    write_wire = entity_writer(wire_class)

    def write_legacy(out: IO[bytes], response: ResponsePayload) -> None:
        write_wire(out, _convert(response, wire_class, legacy.derive))

    return canonical, write_legacy


# --- deriving wire classes and converting between them ---------------------------------------


def _wire_class(canonical: type, version: int, legacy: _Legacy) -> type:
    """A kio-compatible dataclass tree for ``version``, derived from ``canonical``'s."""
    built: dict[type, type] = {}

    def build(cls: type) -> type:
        if cls not in built:
            built[cls] = _derive_entity(cls, version, legacy, build)
        return built[cls]

    wire = build(canonical)
    known = {f"{cls.__name__}.{f.name}" for cls in built for f in fields(cls)}
    known |= {f"{extra.entity}.{extra.name}" for extra in legacy.extras}
    named = legacy.drop | legacy.derive.keys() | {f"{e.entity}.{e.after}" for e in legacy.extras}
    if named - known:
        raise ValueError(f"legacy schema names unknown fields: {sorted(named - known)}")
    return wire


def _is_instant(f: Any) -> bool:
    return f.metadata.get("kafka_type") == "datetime_i64" and get_origin(f.type) is not UnionType


@cache
def _has_instant(cls: type) -> bool:
    """Whether ``cls`` or an entity in it has a non-nullable ``datetime_i64`` field."""
    for f in fields(cls):
        if _is_instant(f):
            return True
        for inner in (f.type, *get_args(f.type)):
            if is_dataclass(inner) and _has_instant(inner):  # type: ignore[arg-type]
                return True
    return False


def _derive_entity(cls: type, version: int, legacy: _Legacy, build: Callable[[type], type]) -> type:
    specs: list[tuple[str, Any, Any]] = []
    for f in fields(cls):
        if legacy.instants_as_ms and _is_instant(f):
            specs.append((f.name, int, field(metadata={**f.metadata, "kafka_type": "int64"})))
        elif f"{cls.__name__}.{f.name}" not in legacy.drop:
            copied = field(
                default=f.default, default_factory=f.default_factory, metadata=f.metadata
            )
            specs.append((f.name, _swap_entities(f.type, build), copied))
        specs.extend(
            (extra.name, extra.type_, extra.as_field())
            for extra in legacy.extras
            if extra.entity == cls.__name__ and extra.after == f.name
        )
    namespace = {
        name: getattr(cls, name)
        for name in ("__type__", "__flexible__", "__api_key__", "__header_schema__")
    }
    namespace["__version__"] = version
    return make_dataclass(
        cls.__name__, specs, namespace=namespace, frozen=True, slots=True, kw_only=True
    )


def _swap_entities(annotation: Any, build: Callable[[type], type]) -> Any:
    """``annotation`` with every entity class in it replaced by ``build(entity)``."""
    if is_dataclass(annotation):
        return build(annotation)  # type: ignore[arg-type]
    origin = get_origin(annotation)
    if origin is tuple:
        return tuple[_swap_entities(get_args(annotation)[0], build), ...]  # type: ignore[misc]
    if origin is UnionType:
        first, second = get_args(annotation)
        return _swap_entities(first, build) | _swap_entities(second, build)
    return annotation


def _convert(entity: Any, target: type, derive: Derive) -> Any:
    """Copy ``entity`` into ``target``: shared fields, derived ones, else target defaults."""
    values: dict[str, object] = {}
    for f in fields(target):
        derived = derive.get(f"{target.__name__}.{f.name}")
        if derived is not None:
            values[f.name] = derived(entity)
        elif hasattr(entity, f.name):
            values[f.name] = _convert_value(getattr(entity, f.name), f.type, derive)
    return target(**values)


def _convert_value(value: Any, annotation: Any, derive: Derive) -> Any:
    if value is None:
        return None
    if is_dataclass(annotation):
        return _convert(value, annotation, derive)  # type: ignore[arg-type]
    origin = get_origin(annotation)
    if origin is tuple:
        inner = get_args(annotation)[0]
        return tuple(_convert_value(item, inner, derive) for item in value)
    if origin is UnionType:
        (inner,) = (arg for arg in get_args(annotation) if arg is not NoneType)
        return _convert_value(value, inner, derive)
    return value
