"""PROTOBUF compatibility: Confluent's rules (its ``ProtobufSchemaDiff``) for whether a
reader with one file reads data written with another.

Messages and enums are matched by name in their scope, fields by number. Incompatible
(reported with Confluent's names and the path): the package changed (PACKAGE_CHANGED), a
message removed (MESSAGE_REMOVED; a map's entry is not a message here), a field's kind
changed between scalar (enums included), message and map (FIELD_KIND_CHANGED), a scalar
changed outside its wire-compatible group (FIELD_SCALAR_KIND_CHANGED: int32, int64, uint32,
uint64, bool and enums; sint32 and sint64; string and bytes; fixed32 and sfixed32; fixed64
and sfixed64; float; double), a message field's type renamed or changed incompatibly
(FIELD_NAMED_TYPE_CHANGED), a required field added or removed (REQUIRED_FIELD_ADDED,
REQUIRED_FIELD_REMOVED), a member of a kept oneof removed (ONEOF_FIELD_REMOVED), and fields
that were independent made mutually exclusive (MULTIPLE_FIELDS_MOVED_TO_ONEOF, or
FIELD_MOVED_TO_EXISTING_ONEOF when one field joins a oneof). Anything else (fields, messages,
enums, enum values and oneofs added or removed, renames, moves) is compatible.

Invariants:
- ``incompatibilities(writer, reader)`` takes the two files built (``built``: the file with
  the files its references give, ``references.protobuf_bundle``) and compares ``writer`` as
  Confluent's "original" with ``reader`` as its "update".
- proto3 ``optional`` fields are not oneof members (their oneof is synthetic).
- A message type met again through a field is compared once per pair (recursive types end).
- A schema the parser cannot build is not checked (``built`` gives None): the registry
  accepts it, as it did before checks existed, rather than refuse a valid file it cannot
  read. Building costs about 2.5 ms for a file of one 10-field message and 250 ms for one of
  a hundred 20-field messages (pure-Python parser), on the broker's loop, once per
  registered version (``ParsedSchema.built`` keeps it).
"""

from __future__ import annotations

from typing import Any

from sparklog.schemas.proto_files import built_file, type_name
from sparklog.schemas.unsupported import UnsupportedSchemaError

_GROUPS = {
    "INT32": "number", "INT64": "number", "UINT32": "number", "UINT64": "number",
    "BOOL": "number", "ENUM": "number", "SINT32": "signed", "SINT64": "signed",
    "STRING": "string", "BYTES": "string", "FIXED32": "fixed32", "SFIXED32": "fixed32",
    "FIXED64": "fixed64", "SFIXED64": "fixed64", "FLOAT": "float", "DOUBLE": "double",
}


def built(bundle: str) -> Any:
    """The built file of a PROTOBUF schema as the registry keeps it for checking; None when
    the parser cannot build it."""
    try:
        return built_file(bundle)
    except UnsupportedSchemaError:
        return None


def incompatibilities(writer: Any, reader: Any) -> list[str]:
    """Why the ``reader`` file cannot read what the ``writer`` file wrote (empty: it can)."""
    diff = _Diff()
    if writer.package != reader.package:
        diff.add("PACKAGE_CHANGED", "#/", f"the package changed from {writer.package or '-'} "
                                          f"to {reader.package or '-'}")
    diff.types(writer.message_types_by_name, reader.message_types_by_name, "#/")
    return diff.found


class _Diff:
    def __init__(self) -> None:
        self.found: list[str] = []
        self.compared: set[tuple[str, str]] = set()

    def add(self, kind: str, path: str, description: str) -> None:
        self.found.append(f"{{errorType:'{kind}', description:'{description}', "
                          f"additionalInfo:'{path}'}}")

    def types(self, old: Any, new: Any, path: str) -> None:
        for name, message in old.items():
            if message.GetOptions().map_entry:  # a map field's, compared with the field
                continue
            if name not in new:
                self.add("MESSAGE_REMOVED", path + name,
                         f"the message {message.full_name} was removed")
            else:
                self.message(message, new[name], path + name + "/")

    def message(self, old: Any, new: Any, path: str) -> None:
        if (old.full_name, new.full_name) in self.compared:
            return
        self.compared.add((old.full_name, new.full_name))
        old_oneof, new_oneof = _oneof_of(old), _oneof_of(new)
        old_fields = {f.number: f for f in old.fields}
        new_fields = {f.number: f for f in new.fields}
        deleted = {name for name in set(old_oneof.values()) - set(new_oneof.values())
                   if not any(n in new_fields for n, o in old_oneof.items() if o == name)}
        for name in dict.fromkeys(new_oneof.values()):
            groups, moved_in = set(), 0
            for number in (n for n, o in new_oneof.items() if o == name):
                if number in old_oneof:
                    groups.add(f"oneof:{old_oneof[number]}")
                elif number in old_fields:
                    groups.add(f"field:{number}")
                    moved_in += 1
            if len(groups) > 1:
                kind = ("MULTIPLE_FIELDS_MOVED_TO_ONEOF" if moved_in > 1
                        else "FIELD_MOVED_TO_EXISTING_ONEOF")
                self.add(kind, path + name, f"fields that were independent are now in the "
                                            f"oneof {name}")
        for number in sorted(old_fields.keys() | new_fields.keys()):
            was, now = old_fields.get(number), new_fields.get(number)
            where = path + str(number)
            if now is None:
                assert was is not None
                if number in old_oneof and old_oneof[number] not in deleted:
                    self.add("ONEOF_FIELD_REMOVED", where, f"the field {was.name} was removed "
                                                           f"from the oneof {old_oneof[number]}")
                elif was.is_required:
                    self.add("REQUIRED_FIELD_REMOVED", where,
                             f"the required field {was.name} was removed")
            elif was is None:
                if number not in new_oneof and now.is_required:
                    self.add("REQUIRED_FIELD_ADDED", where,
                             f"the required field {now.name} was added")
            else:
                self.field_type(was, now, where)
        self.types(old.nested_types_by_name, new.nested_types_by_name, path)

    def field_type(self, old: Any, new: Any, path: str) -> None:
        old_kind, new_kind = _kind(old), _kind(new)
        if old_kind != new_kind:
            self.add("FIELD_KIND_CHANGED", path, f"the field {new.name} changed from a "
                                                 f"{old_kind} to a {new_kind}")
        elif old_kind == "map":
            for key in ("key", "value"):
                self.field_type(old.message_type.fields_by_name[key],
                                new.message_type.fields_by_name[key], path)
        elif old_kind == "scalar":
            if _group(old) != _group(new):
                self.add("FIELD_SCALAR_KIND_CHANGED", path,
                         f"the field {new.name} changed from {type_name(old)} to "
                         f"{type_name(new)}")
        elif _local_name(old.message_type) != _local_name(new.message_type):
            self.add("FIELD_NAMED_TYPE_CHANGED", path,
                     f"the field {new.name} changed from {old.message_type.full_name} to "
                     f"{new.message_type.full_name}")
        else:
            before = len(self.found)
            self.message(old.message_type, new.message_type, path + "/")
            if len(self.found) > before:
                self.add("FIELD_NAMED_TYPE_CHANGED", path,
                         f"the type {new.message_type.full_name} of the field {new.name} "
                         "changed incompatibly")


def _oneof_of(message: Any) -> dict[int, str]:
    """Field number -> its real (not proto3 ``optional``'s synthetic) oneof."""
    from google.protobuf import descriptor_pb2

    proto = descriptor_pb2.DescriptorProto()
    message.CopyToProto(proto)
    synthetic = {f.oneof_index for f in proto.field if f.proto3_optional}
    return {f.number: f.containing_oneof.name for f in message.fields
            if f.containing_oneof is not None and f.containing_oneof.index not in synthetic}


def _kind(field: Any) -> str:
    if field.message_type is None:
        return "scalar"
    return "map" if field.message_type.GetOptions().map_entry else "message"


def _group(field: Any) -> str:
    return _GROUPS[type_name(field)]


def _local_name(message: Any) -> str:
    package = message.file.package
    return message.full_name[len(package) + 1:] if package else message.full_name
