"""Protobuf schemas as Arrow types, mapped as Spark's ``from_protobuf`` reads them.

A schema is a Protobuf file: the base64 ``FileDescriptorProto`` that confluent-kafka's
``ProtobufSerializer`` registers (and sparklog's registry serves as sent), or ``.proto``
text (what Confluent's registry and the Java serializer store), parsed by ``proto_text``.
The message read is the file's first message, or the one named (full name,
or the name within the file's package, nested ones as ``Outer.Inner``).

The mapping (spark-protobuf's ``SchemaConverters`` with its default options): int32,
sint32, sfixed32 and uint32 -> int32 (IntegerType; uint32 wraps above 2^31 - 1 as Spark's
Java int does); int64, sint64, sfixed64 and uint64 -> int64 (LongType; uint64 wraps above
2^63 - 1, Spark's default, not ``upcast.unsigned.ints``' decimal(20,0)); float; double;
bool; string; bytes -> binary; enum -> string (the value's name); message -> struct;
``google.protobuf.Timestamp`` -> timestamp[us, UTC] (TimestampType); repeated -> list;
map -> map. Imports are Protobuf's well-known types or files the schema's references give
(``references.protobuf_bundle``). Refused (``UnsupportedSchemaError``): recursive messages,
other imports.

Invariants:
- Every field is nullable; a message field that is absent is null, an absent scalar reads
  as its default (as protobuf's parser gives it), a repeated or map field as empty.
- List items are named ``element``, as ``pyspark``'s ``to_arrow_type`` names them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from sparklog.schemas.avro_types import UnsupportedSchemaError
from sparklog.schemas.proto_files import TIMESTAMP, message_descriptor

if TYPE_CHECKING:
    from google.protobuf.descriptor import Descriptor, FieldDescriptor



def message_indexes(descriptor: Descriptor) -> tuple[int, ...]:
    """Where ``descriptor`` is in its file, as Confluent's message indexes say it."""
    path: list[int] = []
    current = descriptor
    while current.containing_type is not None:
        parent = current.containing_type
        path.append(list(parent.nested_types).index(current))
        current = parent
    path.append(list(current.file.message_types_by_name).index(current.name))
    return tuple(reversed(path))


def arrow_type(schema: str, message: str | None = None) -> pa.DataType:
    """The Arrow struct type of ``message`` (default: the first) of ``schema``."""
    return message_type(message_descriptor(schema, message), ())


def message_type(descriptor: Descriptor, seen: tuple[str, ...]) -> pa.DataType:
    if descriptor.full_name == TIMESTAMP:
        return pa.timestamp("us", tz="UTC")
    if descriptor.full_name in seen:
        raise UnsupportedSchemaError(f"message {descriptor.full_name} is recursive; Spark "
                                     "types cannot hold recursive structures")
    inner = (*seen, descriptor.full_name)
    return pa.struct([pa.field(field.name, field_type(field, inner))
                      for field in descriptor.fields])


def field_type(field: FieldDescriptor, seen: tuple[str, ...]) -> pa.DataType:
    if is_map(field):
        key, value = field.message_type.fields
        return pa.map_(_single_type(key, seen), _single_type(value, seen))
    kind = _single_type(field, seen)
    if _is_repeated(field):
        return pa.list_(pa.field("element", kind))
    return kind


def is_map(field: FieldDescriptor) -> bool:
    return (_is_repeated(field) and field.message_type is not None
            and field.message_type.GetOptions().map_entry)


def _is_repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


def _single_type(field: FieldDescriptor, seen: tuple[str, ...]) -> pa.DataType:
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.type in (F.TYPE_MESSAGE, F.TYPE_GROUP):
        return message_type(field.message_type, seen)
    return {
        F.TYPE_INT32: pa.int32(), F.TYPE_SINT32: pa.int32(), F.TYPE_SFIXED32: pa.int32(),
        F.TYPE_UINT32: pa.int32(), F.TYPE_FIXED32: pa.int32(),
        F.TYPE_INT64: pa.int64(), F.TYPE_SINT64: pa.int64(), F.TYPE_SFIXED64: pa.int64(),
        F.TYPE_UINT64: pa.int64(), F.TYPE_FIXED64: pa.int64(),
        F.TYPE_FLOAT: pa.float32(), F.TYPE_DOUBLE: pa.float64(), F.TYPE_BOOL: pa.bool_(),
        F.TYPE_STRING: pa.string(), F.TYPE_BYTES: pa.binary(), F.TYPE_ENUM: pa.string(),
    }[field.type]
