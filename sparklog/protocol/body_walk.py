"""Walking a message body the way kio's native reader will read it, before it does: the
bounds check that keeps hostile bytes from ending the process, and the removal of tagged
fields the schema does not know (KIP-482: Kafka skips them, kio refuses them).

kio 0.6.5's native reader reserves memory for an array from the element count on the wire
(``Vec::with_capacity``: a compact array's unsigned varint or a legacy int32) before reading
an element. A count of billions in a 58-byte frame asks for hundreds of gigabytes, and the
allocation failure aborts the process: no ``except`` can catch it. So every body is walked
first, here, in Python, by a plan compiled once per kio entity class from the same field
classification kio's reader is built from.

Invariants:
- ``walk(cls, buffer, offset)`` follows the layout kio reads for ``cls``: inline fields in
  declaration order, a nullable entity's int8 marker, compact (flexible) or int16/int32
  (legacy) lengths, arrays whose count is an unsigned varint (minus one) or an int32, and
  the tagged-field section of each flexible entity, where a known tag is read as its field
  (as kio reads it, ignoring the declared size) and an unknown one is skipped by its size.
- It raises ``BodyError`` (a ``ValueError``) where kio would also fail (a length or count
  runs past the end of the buffer, a varint longer than five bytes), where an array's count
  is larger than the bytes left (every element takes at least one byte, so kio would fail
  there too, after reserving the memory), and where an array the schema does not let be
  null is null (kio reads that as None, which the code reading it would trip over). It
  refuses no other body kio would read.
- So a body that passes holds no array whose count exceeds its own size: what kio then
  reserves is at most a small multiple of the buffer (pointers of 8 bytes per element, and
  the Python objects of elements that each took at least one byte of it).
- ``without_unknown_tags(cls, buffer, offset)`` is the body from ``offset`` minus the unknown
  tagged fields (each section's count rewritten), everything else byte for byte (the
  declared size of a known tagged struct that held one stays: kio reads by the schema);
  it walks the same plan, so what kio then reads was checked.
- The walk allocates nothing per element and costs a few microseconds for a typical
  request; plans are built once per class and cached.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from dataclasses import fields
from functools import cache
from typing import Any

from kio.serial import entity_reader
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.serial.writers import write_unsigned_varint
from kio.static.primitive import uvarint

from sparklog.protocol.framing import FrameError, read_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# Step kinds: a step is (kind, argument).
_FIXED = 0  # argument: a byte count
_COMPACT = 1  # compact string or bytes: unsigned varint length + 1 (0: null)
_STRING16 = 2  # int16 length (-1: null)
_BYTES32 = 3  # int32 length (-1: null)
_ENTITY = 4  # argument: the entity's plan
_NULLABLE_ENTITY = 5  # argument: the entity's plan, after an int8 marker (-1: null)
_COMPACT_ARRAY = 6  # argument: (the element's step, nullable)
_ARRAY32 = 7  # argument: (the element's step, nullable)

_FIXED_SIZES = {
    "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8,
    "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16,
}

Step = tuple[int, Any]
Reader = Callable[[Any, int], tuple[Any, int]]


class BodyError(ValueError):
    """The body cannot be what its schema says: the reader must not be given it."""


class Plan:
    """How to walk one entity class: its inline steps, and for a flexible one the steps of
    its known tags."""

    __slots__ = ("flexible", "steps", "tags")

    def __init__(self, steps: tuple[Step, ...], flexible: bool, tags: dict[int, Step]) -> None:
        self.steps = steps
        self.flexible = flexible
        self.tags = tags


@cache
def plan(cls: type) -> Plan:
    """The plan of a kio entity class (or a dataclass built the same way)."""
    flexible = bool(getattr(cls, "__flexible__", False))
    steps: list[Step] = []
    tags: dict[int, Step] = {}
    for field in fields(cls):
        tag = get_field_tag(field)
        step = _field_step(field, flexible)
        if tag is not None:
            tags[int(tag)] = step
        elif step[0] == _FIXED and steps and steps[-1][0] == _FIXED:
            steps[-1] = (_FIXED, steps[-1][1] + step[1])  # one step for a run of fixed fields
        else:
            steps.append(step)
    return Plan(tuple(steps), flexible, tags)


def _field_step(field: Any, flexible: bool) -> Step:
    kind = classify_field(field)
    if isinstance(kind, EntityTupleField):
        element: Step = (_ENTITY, plan(kind.type_))
    elif isinstance(kind, EntityField):
        return (_NULLABLE_ENTITY if is_optional(field) else _ENTITY, plan(kind.type_))
    else:
        element = _primitive_step(get_schema_field_type(field), flexible)
        if not isinstance(kind, PrimitiveTupleField):
            return element
    return (_COMPACT_ARRAY if flexible else _ARRAY32, (element, is_optional(field)))


def _primitive_step(kafka_type: str, flexible: bool) -> Step:
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        return (_FIXED, size)
    if kafka_type not in ("string", "bytes", "records"):
        raise TypeError(f"no walk for kafka type {kafka_type!r}")
    if flexible:
        return (_COMPACT, None)
    return (_STRING16, None) if kafka_type == "string" else (_BYTES32, None)


def walk(cls: type, buffer: bytes | memoryview, offset: int) -> int:
    """The offset after the body of ``cls`` at ``offset``; ``BodyError`` if kio must not read
    it (see the module invariants)."""
    return _Walk(buffer, None).body(plan(cls), offset)


def without_unknown_tags(cls: type, buffer: bytes | memoryview, offset: int) -> bytes | None:
    """The body at ``offset`` without the tagged fields ``cls`` does not know, or None when
    it has none (read it as it is); ``BodyError`` as ``walk``."""
    cuts: list[tuple[int, int, bytes]] = []
    _Walk(buffer, cuts).body(plan(cls), offset)
    if not cuts:
        return None
    cuts.sort()
    view = memoryview(buffer)
    out = bytearray()
    position = offset
    for start, end, replacement in cuts:
        out += view[position:start]
        out += replacement
        position = end
    out += view[position:]
    return bytes(out)


class _Walk:
    """One walk over ``buffer``; ``cuts`` (when given) collects the edits that drop unknown
    tags, as (start, end, replacement): each unknown tagged field (replaced by nothing) and
    the count of each section that held one. They never overlap (an unknown field is not
    walked into; a known one is kept whole, edits inside it included)."""

    __slots__ = ("buffer", "cuts", "end")

    def __init__(self, buffer: bytes | memoryview,
                 cuts: list[tuple[int, int, bytes]] | None) -> None:
        self.buffer = buffer
        self.end = len(buffer)
        self.cuts = cuts

    def body(self, plan: Plan, offset: int) -> int:
        try:
            offset = self.entity(plan, offset)
        except FrameError as exc:  # a varint (``read_uvarint``) past the end or too long
            raise BodyError(str(exc)) from None
        if offset > self.end:
            raise BodyError(f"the body runs past its end ({offset} > {self.end})")
        return offset

    def entity(self, plan: Plan, offset: int) -> int:
        for kind, argument in plan.steps:
            if kind == _FIXED:
                offset += argument
            else:
                offset = self.step(kind, argument, offset)
        if plan.flexible:
            offset = self.tagged_fields(plan, offset)
        return offset

    def step(self, kind: int, argument: Any, offset: int) -> int:
        """The offset after one field; one past the end is caught by the next read, or by
        the check at the end of the walk (kio fails there too)."""
        if kind == _COMPACT:
            length, offset = read_uvarint(self.buffer, offset)
            return offset + length - 1 if length else offset
        if kind == _ENTITY:
            return self.entity(argument, offset)
        if kind == _COMPACT_ARRAY:
            count, offset = read_uvarint(self.buffer, offset)
            return self.array(argument, count - 1, offset)
        if kind == _FIXED:
            return offset + argument
        if kind == _ARRAY32:
            return self.array(argument, self.int(_I32, offset), offset + 4)
        if kind == _STRING16:
            return offset + 2 + max(self.int(_I16, offset), 0)
        if kind == _BYTES32:
            return offset + 4 + max(self.int(_I32, offset), 0)
        # _NULLABLE_ENTITY
        if offset >= self.end:
            raise BodyError("a nullable struct's marker is past the end of the body")
        if self.buffer[offset] == 0xFF:  # int8 -1: null
            return offset + 1
        return self.entity(argument, offset + 1)

    def array(self, argument: tuple[Step, bool], count: int, offset: int) -> int:
        element, nullable = argument
        if count <= 0:  # null, empty, or a negative count kio refuses itself
            if count == -1 and not nullable:
                raise BodyError("a non-nullable array is null")
            return offset
        if count > self.end - offset:  # also when a field before ran past the end
            raise BodyError(f"an array of {count} elements in {self.end - offset} bytes")
        kind, argument = element
        if kind == _FIXED:  # checked at the end of the walk, as any fixed field
            return offset + count * argument
        step = self.step
        for _ in range(count):
            offset = step(kind, argument, offset)
        return offset

    def tagged_fields(self, plan: Plan, offset: int) -> int:
        start = offset
        count, offset = read_uvarint(self.buffer, offset)
        if count > self.end - offset:
            raise BodyError(f"{count} tagged fields in {self.end - offset} bytes")
        count_end = offset
        kept = 0
        for _ in range(count):
            field_start = offset
            tag, offset = read_uvarint(self.buffer, offset)
            size, offset = read_uvarint(self.buffer, offset)
            known = plan.tags.get(tag)
            if known is None:
                offset += size
                if self.cuts is not None:
                    self.cuts.append((field_start, offset, b""))
            else:  # read as kio reads it: by its schema (the declared size is not used)
                offset = self.step(*known, offset)
                kept += 1
        if self.cuts is not None and kept < count:
            count_bytes = io.BytesIO()
            write_unsigned_varint(count_bytes, uvarint(kept))
            self.cuts.append((start, count_end, count_bytes.getvalue()))
        return offset

    def int(self, form: struct.Struct, offset: int) -> int:
        if offset + form.size > self.end:
            raise BodyError("a length runs past the end of the body")
        return form.unpack_from(self.buffer, offset)[0]


@cache
def checked_reader(cls: type) -> Reader:
    """kio's reader of ``cls``, given only bodies the walk passed, with unknown tagged fields
    dropped first: the one way network bytes reach kio's native reader. (The size it
    returns is that of the body kio read, without the dropped tags.)"""
    read = entity_reader(cls)

    def read_checked(buffer: Any, offset: int) -> tuple[Any, int]:
        body = without_unknown_tags(cls, buffer, offset)
        if body is None:
            return read(buffer, offset)
        return read(body, 0)

    return read_checked
