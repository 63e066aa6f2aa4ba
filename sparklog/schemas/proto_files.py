"""Protobuf schema text as built descriptors: a file given as ``.proto`` text or as
confluent-kafka's base64 ``FileDescriptorProto``, alone or in ``references.protobuf_bundle``
with the files it imports, built in a descriptor pool of its own; a message of it by name.

Invariants:
- No Arrow here (the broker's registry builds files with it to check compatibility, the
  sink's driver checks a message fits its rows).
- Imports are built before their importer, each once: a file the bundle gives, else one of
  protobuf's well-known types; any other import, or an import cycle, is an
  ``UnsupportedSchemaError`` naming the file and the import. Type names are resolved by the
  pool, by scope, as protoc resolves them.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from sparklog.schemas.references import PROTOBUF_WELL_KNOWN
from sparklog.schemas.unsupported import UnsupportedSchemaError

TIMESTAMP = "google.protobuf.Timestamp"


def built_file(schema: str) -> Any:
    """The ``FileDescriptor`` of ``schema`` (its ``pool`` holds its imports)."""
    from google.protobuf import descriptor_pool

    from sparklog.schemas.references import SchemaReferenceError, protobuf_unbundle

    try:
        text, imports = protobuf_unbundle(schema)
    except SchemaReferenceError as exc:
        raise UnsupportedSchemaError(str(exc)) from None
    files = {name: file_proto(body, name) for name, body in imports}
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(file: Any) -> Any:
        for dependency in file.dependency:
            if dependency in added:
                continue
            if dependency in files:
                add(files.pop(dependency))
            elif dependency.startswith(PROTOBUF_WELL_KNOWN):
                _add_well_known(pool, dependency)
                added.add(dependency)
            else:
                raise UnsupportedSchemaError(
                    f"the Protobuf schema {file.name} imports {dependency}, which none of "
                    "its schema references gives" + (" (an import cycle)" if imports else ""))
        try:
            built = pool.Add(file)
        except TypeError as exc:
            raise UnsupportedSchemaError(f"the Protobuf schema {file.name} does not build: "
                                         f"{exc}") from None
        added.add(file.name)
        return built

    return add(file_proto(text, None))


def message_descriptor(schema: str, message: str | None = None) -> Any:
    """The descriptor of ``message`` (default: the first) of the file ``schema`` (a file, or
    ``references.protobuf_bundle``'s file with the files it imports)."""
    file = built_file(schema)
    if not file.message_types_by_name:
        raise UnsupportedSchemaError("the Protobuf schema has no message")
    if message is None:
        return next(iter(file.message_types_by_name.values()))
    for name in (message, f"{file.package}.{message}" if file.package else message):
        try:
            found = file.pool.FindMessageTypeByName(name)
        except KeyError:
            continue
        if found.file.name == file.name:
            return found
    raise UnsupportedSchemaError(f"the Protobuf schema has no message {message!r}")


def type_name(field: Any) -> str:
    """A field's type as protobuf names it (``INT32``, ``STRING``, ``MESSAGE``, ...)."""
    return next(name.removeprefix("TYPE_") for name in dir(field)
                if name.startswith("TYPE_") and getattr(field, name) == field.type)


def file_proto(schema: str, name: str | None) -> Any:
    """The ``FileDescriptorProto`` of base64 (confluent-kafka's form) or ``.proto`` text;
    named ``name`` when given (an import path)."""
    from google.protobuf import descriptor_pb2

    try:
        serialized = base64.b64decode(schema, validate=True)
    except (binascii.Error, ValueError):  # not base64: .proto text
        from sparklog.schemas.proto_text import file_descriptor

        proto = file_descriptor(schema)
    else:
        try:
            proto = descriptor_pb2.FileDescriptorProto.FromString(serialized)
        except Exception as exc:  # protobuf's DecodeError
            raise UnsupportedSchemaError(f"the Protobuf schema is base64 but not a "
                                         f"FileDescriptorProto: {exc}") from None
    if name is not None:
        proto.name = name
    return proto


def _add_well_known(pool: object, name: str) -> None:
    # importing the well-known types' modules adds their files to the default pool
    from google.protobuf import (  # noqa: F401
        any_pb2,
        descriptor_pb2,
        descriptor_pool,
        duration_pb2,
        struct_pb2,
        timestamp_pb2,
        wrappers_pb2,
    )

    try:
        known = descriptor_pool.Default().FindFileByName(name)
    except KeyError:
        raise UnsupportedSchemaError(f"the Protobuf schema imports {name}, not a well-known "
                                     "type known here") from None
    proto = descriptor_pb2.FileDescriptorProto()
    known.CopyToProto(proto)
    pool.Add(proto)  # type: ignore[attr-defined]
