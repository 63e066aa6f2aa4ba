"""``.proto`` text as a ``FileDescriptorProto``, parsed by ``proto-schema-parser``.

What Confluent's registry and the Java serializer store for a PROTOBUF schema. The parser
gives an AST; this module builds the descriptor protoc would (messages, nested messages and
enums, scalar / message / enum fields with their labels, maps as ``...Entry`` messages,
oneofs, proto3 ``optional`` as its synthetic oneof), leaving type names as written: the
descriptor pool resolves them by scope, as protoc does. Options, reserved ranges,
extensions and services are ignored: they do not change how a message reads.

Invariants: ``file_descriptor`` raises ``UnsupportedSchemaError`` for text that does not
parse, at its first syntax error (nothing is printed; no partial file is made of the rest);
it does no I/O.
"""

from __future__ import annotations

from typing import Any

from antlr4.error.ErrorListener import ErrorListener

from sparklog.schemas.unsupported import UnsupportedSchemaError

_SCALARS = ("double", "float", "int64", "uint64", "int32", "fixed64", "fixed32", "bool",
            "string", "bytes", "uint32", "sfixed32", "sfixed64", "sint32", "sint64")


def file_descriptor(text: str) -> Any:
    """The ``FileDescriptorProto`` of the ``.proto`` file ``text``."""
    from google.protobuf import descriptor_pb2
    from proto_schema_parser import ast
    from proto_schema_parser.parser import Parser

    try:
        parsed = Parser(setup_lexer=_strict, setup_parser=_strict).parse(text)
    except Exception as exc:  # the ANTLR parser's errors have no common base
        raise UnsupportedSchemaError(f"the Protobuf schema does not parse as .proto text: "
                                     f"{exc}") from None
    proto = descriptor_pb2.FileDescriptorProto(name="schema.proto",
                                               syntax=parsed.syntax or "proto2")
    for element in parsed.file_elements:
        if isinstance(element, ast.Package):
            proto.package = element.name
        elif isinstance(element, ast.Import):
            proto.dependency.append(element.name)
        elif isinstance(element, ast.Message):
            _message(proto.message_type.add(), element, proto.syntax == "proto3")
        elif isinstance(element, ast.Enum):
            _enum(proto.enum_type.add(), element)
    return proto


class _Raise(ErrorListener):  # type: ignore[misc]
    def syntaxError(self, recognizer: Any, offendingSymbol: Any, line: int, column: int,
                    msg: str, e: Any) -> None:
        raise ValueError(f"line {line}:{column} {msg}")


def _strict(recognizer: Any) -> None:
    """The first syntax error raises (ANTLR's default prints it to stderr and parses on,
    giving a file that is not the one written)."""
    recognizer.removeErrorListeners()
    recognizer.addErrorListener(_Raise())


def _message(target: Any, message: Any, proto3: bool) -> None:
    from proto_schema_parser import ast

    target.name = message.name
    for element in message.elements:
        if isinstance(element, ast.Field):
            _field(target, element, proto3, None)
        elif isinstance(element, ast.MapField):
            _map(target, element)
        elif isinstance(element, ast.OneOf):
            index = len(target.oneof_decl)
            target.oneof_decl.add(name=element.name)
            for field in element.elements:
                if isinstance(field, ast.Field):
                    _field(target, field, proto3, index)
        elif isinstance(element, ast.Message):
            _message(target.nested_type.add(), element, proto3)
        elif isinstance(element, ast.Enum):
            _enum(target.enum_type.add(), element)
    # synthetic oneofs come after the real ones, as protoc orders them
    for field in target.field:
        if field.proto3_optional:
            field.oneof_index = len(target.oneof_decl)
            target.oneof_decl.add(name=f"_{field.name}")


def _field(target: Any, field: Any, proto3: bool, oneof: int | None) -> None:
    from google.protobuf.descriptor_pb2 import FieldDescriptorProto as F
    from proto_schema_parser.ast import FieldCardinality

    added = target.field.add(name=field.name, number=field.number, json_name=_json(field.name))
    _set_type(added, field.type)
    cardinality = field.cardinality
    added.label = (F.LABEL_REPEATED if cardinality == FieldCardinality.REPEATED
                   else F.LABEL_REQUIRED if cardinality == FieldCardinality.REQUIRED
                   else F.LABEL_OPTIONAL)
    if oneof is not None:
        added.oneof_index = oneof
    elif proto3 and cardinality == FieldCardinality.OPTIONAL:
        added.proto3_optional = True


def _map(target: Any, field: Any) -> None:
    from google.protobuf.descriptor_pb2 import FieldDescriptorProto as F

    entry = target.nested_type.add(name="".join(
        part[:1].upper() + part[1:] for part in field.name.split("_")) + "Entry")
    entry.options.map_entry = True
    for name, number, kind in (("key", 1, field.key_type), ("value", 2, field.value_type)):
        _set_type(entry.field.add(name=name, number=number, label=F.LABEL_OPTIONAL,
                                  json_name=name), kind)
    target.field.add(name=field.name, number=field.number, label=F.LABEL_REPEATED,
                     type_name=entry.name, json_name=_json(field.name))


def _set_type(field: Any, kind: str) -> None:
    from google.protobuf.descriptor_pb2 import FieldDescriptorProto as F

    if kind in _SCALARS:
        field.type = getattr(F, f"TYPE_{kind.upper()}")
    else:
        field.type_name = kind  # a message or enum, resolved by the pool


def _enum(target: Any, enum: Any) -> None:
    from proto_schema_parser import ast

    target.name = enum.name
    for value in enum.elements:
        if isinstance(value, ast.EnumValue):
            target.value.add(name=value.name, number=value.number)


def _json(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)
