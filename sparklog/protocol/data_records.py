"""Kafka's versioned data records (message schemas of ``"type": "data"``) as kio entities.

Kafka keeps records of this form in its internal topics (``__consumer_offsets`` keys and
values, later ``__transaction_state``) and embeds others in protocol fields (a consumer's
subscription in JoinGroup metadata): an int16 version, then that version's fields.

A ``DataSchema`` says, as Kafka's JSON does, which fields each version has (``versions``),
from which version a string is nullable, and which structs arrays hold; ``entity(version)``
makes the kio dataclass of one version, so kio's native reader and writer serve them.

Invariants:
- Versions from ``flexible_from`` are flexible (compact strings and arrays, a tagged-field
  section: the transaction log's value v1, KIP-848's consumer group records, whose unknown
  tagged fields are dropped on reading); a field with a ``tag`` lives in that section
  (written only when it differs from its ``default``, as Kafka writes tagged fields), so
  older readers skip it; a tagged ``single`` struct (one struct, not an array: a consumer
  group member's ClassicMemberMetadata) is absent when None.
- ``encode`` writes the version the caller names, ``decode`` reads any version the schema
  describes and raises ``ValueError`` for anything else or for bytes that do not
  decode (never another error), so callers handle one exception for bad data.
- With ``read_newer`` a version above the newest described is read by the newest one's
  fields (Kafka's forward compatibility for embedded protocols: newer fields come last).
- Trailing bytes after the fields of a version are ignored, as Kafka's readers do.
- Bytes reach kio's native reader only through ``body_walk`` (see ``codec``).
"""

from __future__ import annotations

import io
import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, make_dataclass
from functools import cache
from typing import Any, ClassVar

from kio.serial import entity_writer
from kio.serial.errors import SerialError
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i64

from sparklog.protocol.body_walk import checked_reader

_VERSION = struct.Struct(">h")
_PRIMITIVES: dict[str, Any] = {"int8": i8, "int16": i16, "int32": i32, "int64": i64,
                               "bool": bool, "string": str, "bytes": bytes,
                               "uuid": uuid.UUID}


@dataclass(frozen=True)
class Field:
    """One field as Kafka's JSON gives it: ``kafka_type`` is a primitive type name, or
    ``"[]"`` + a primitive for an array of them; ``struct`` makes it an array of structs."""

    name: str
    kafka_type: str = ""
    first: int = 0
    last: int | None = None
    nullable_from: int | None = None
    struct: DataSchema | None = None
    tag: int | None = None
    default: Any = None
    single: bool = False
    """With ``struct``: one (nullable) struct rather than an array of them."""

    def in_version(self, version: int) -> bool:
        return self.first <= version and (self.last is None or version <= self.last)

    def annotation(self, version: int) -> Any:
        if self.struct is not None and self.single:
            return self.struct.entity(version)  # tagged: absent is its default, None
        if self.struct is not None:
            base: Any = tuple[self.struct.entity(version), ...]  # type: ignore[name-defined]
        elif self.kafka_type.startswith("[]"):
            base = tuple[_PRIMITIVES[self.kafka_type[2:]], ...]  # type: ignore[misc]
        else:
            base = _PRIMITIVES[self.kafka_type]
        nullable = self.nullable_from is not None and version >= self.nullable_from
        return base | None if nullable else base

    def spec(self, version: int) -> tuple[str, Any, Any]:
        if self.struct is not None and self.tag is not None:
            return self.name, self.annotation(version), field(
                metadata={"tag": self.tag}, default=self.default)
        if self.struct is not None:
            return self.name, self.annotation(version), field()
        kafka_type = self.kafka_type.removeprefix("[]")
        if self.tag is not None:
            return self.name, self.annotation(version), field(
                metadata={"kafka_type": kafka_type, "tag": self.tag}, default=self.default)
        return self.name, self.annotation(version), field(metadata={"kafka_type": kafka_type})


@dataclass(frozen=True)
class DataSchema:
    """A record (or a struct of one) and the versions described (flexible from
    ``flexible_from``; None: none is)."""

    name: str
    fields: tuple[Field, ...]
    newest: int = 0
    flexible_from: int | None = None

    def entity(self, version: int) -> type:
        return _entity(self, version)


@cache
def _entity(schema: DataSchema, version: int) -> type:
    fields = [f for f in schema.fields if f.in_version(version)]
    specs = [f.spec(version) for f in fields if f.tag is None]
    specs += [f.spec(version) for f in fields if f.tag is not None]  # defaults come last
    flexible = schema.flexible_from is not None and version >= schema.flexible_from
    namespace: dict[str, Any] = {"__type__": EntityType.data, "__version__": i16(version),
                                 "__flexible__": flexible}
    cls = make_dataclass(schema.name, specs, namespace=namespace, frozen=True, slots=True,
                         kw_only=True)
    for name in ("__type__", "__version__", "__flexible__"):
        cls.__annotations__[name] = ClassVar
    return cls


def encode(schema: DataSchema, version: int, values: Mapping[str, Any]) -> bytes:
    """int16 ``version`` and the fields of that version taken from ``values`` (nested
    structs as sequences of dicts); keys the version lacks are ignored."""
    cls = schema.entity(version)
    out = io.BytesIO()
    out.write(_VERSION.pack(version))
    entity_writer(cls)(out, _build(schema, version, values))
    return out.getvalue()


def _build(schema: DataSchema, version: int, values: Mapping[str, Any]) -> Any:
    kwargs: dict[str, Any] = {}
    for f in schema.fields:
        if not f.in_version(version):
            continue
        value = values[f.name] if f.tag is None else values.get(f.name, f.default)
        if f.struct is not None and f.single and value is not None:
            value = _build(f.struct, version, value)
        elif f.struct is not None and value is not None:
            value = tuple(_build(f.struct, version, item) for item in value)
        kwargs[f.name] = value
    return schema.entity(version)(**kwargs)


def decode(schema: DataSchema, data: bytes, *, read_newer: bool = False) -> tuple[int, Any]:
    """(version, entity) of a record of ``schema`` (see the module invariants)."""
    if len(data) < _VERSION.size:
        raise ValueError(f"{schema.name}: {len(data)} bytes hold no version")
    (version,) = _VERSION.unpack_from(data)
    read_as = version
    if version > schema.newest and read_newer:
        read_as = schema.newest
    elif not 0 <= version <= schema.newest:
        raise ValueError(f"{schema.name}: unknown version {version}")
    try:
        entity, _ = checked_reader(schema.entity(read_as))(data, _VERSION.size)
    except (SerialError, ValueError) as exc:
        raise ValueError(f"{schema.name} v{version}: {exc}") from None
    return version, entity
