"""A registered schema with references, made to stand alone: the referenced schemas' types
written into it, so every reader of schema text (Arrow types, decoders, the sink's fit
check) takes it unchanged.

Confluent's references (``{"name", "subject", "version"}``) name, for AVRO, the full name of
a named type another subject's version defines; for JSON Schema, the document a ``"$ref":
NAME`` (or ``NAME#/pointer``) points at; for PROTOBUF, the path the file imports. A
referenced schema may have references of its own.

Invariants:
- ``referenced`` walks the references depth first, a referenced schema before its referrer,
  each (subject, version) once and at most ``MAX_DEPTH`` deep (the registry's own bound), so
  a cycle or a deep chain is a ``SchemaReferenceError``, never a recursion past Python's stack.
- AVRO (``inline_avro``): each named type a reference defines (nested ones too) is written
  at its first use, in the order an Avro parser defines names (depth first, fields in
  order), with its namespace explicit (``""`` for the null namespace) so the enclosing
  namespace cannot change its full name; later uses, and a nested definition met again
  inside another written type, stay names, so no name is defined twice. A name is resolved
  as fastavro (and so confluent-kafka's serializers) resolve it: a short name in the
  enclosing namespace. Names found nowhere are left for the parser to refuse.
- JSON (``inline_json``): each referenced document goes under the root's ``$defs`` at its
  reference name; ``$ref``s to it and the local ``$ref``s inside it are rewritten to point
  there, so ``#`` pointers keep meaning what they meant in their own document.
- PROTOBUF (``protobuf_bundle``): a file cannot take in another's types, so the file and
  the files its references give (import path, text; dependencies first; protobuf's
  well-known types left out, the descriptor pool builds those itself) travel as one JSON
  text that ``protobuf_types`` reads.
- Pure functions of the texts: no registry call here but through ``fetch``. Whatever the
  texts hold, what escapes is a ``SchemaReferenceError`` (a document nested past Python's
  stack too).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 32
AVRO_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes",
                             "string"})
PROTOBUF_WELL_KNOWN = "google/protobuf/"
_NAMED = frozenset({"record", "error", "enum", "fixed"})


class SchemaReferenceError(ValueError):
    """The references cannot be resolved or written into the schema."""


@dataclass(frozen=True)
class SchemaReference:
    name: str
    subject: str
    version: int

    @classmethod
    def of(cls, answer: Any) -> SchemaReference:
        """From the registry's JSON (``{"name", "subject", "version"}``)."""
        try:
            return cls(str(answer["name"]), str(answer["subject"]), int(answer["version"]))
        except (KeyError, TypeError, ValueError, OverflowError):
            raise SchemaReferenceError(f"a malformed schema reference: {answer!r}") from None


@dataclass(frozen=True)
class Referenced:
    """A referenced schema as the registry gave it."""
    reference: SchemaReference
    schema_type: str
    schema: str


Fetch = Callable[[SchemaReference], tuple[str, str, Sequence[SchemaReference]]]
"""A reference -> its (schema type, schema text, own references)."""


def referenced(references: Sequence[SchemaReference], fetch: Fetch,
               depth: int = 0) -> list[Referenced]:
    """``references`` and theirs, depth first, each (subject, version) once."""
    if depth >= MAX_DEPTH:
        raise SchemaReferenceError(f"schema references nested more than {MAX_DEPTH} deep")
    out: list[Referenced] = []
    for ref in references:
        schema_type, text, own = fetch(ref)
        for found in [*referenced(own, fetch, depth + 1), Referenced(ref, schema_type, text)]:
            if all((f.reference.subject, f.reference.version) !=
                   (found.reference.subject, found.reference.version) for f in out):
                out.append(found)
    return out


def standalone(schema_type: str, text: str, references: Sequence[SchemaReference],
               fetch: Fetch) -> str:
    """``text`` with its references' types written in (unchanged when it has none)."""
    if schema_type == "PROTOBUF":  # the pool builds these itself: not asked of the registry
        references = [r for r in references if not r.name.startswith(PROTOBUF_WELL_KNOWN)]
    if not references:
        return text
    if schema_type not in ("AVRO", "JSON", "PROTOBUF"):
        raise SchemaReferenceError(f"a {schema_type} schema with references")
    found = referenced(references, fetch)
    try:
        if schema_type == "AVRO":
            return inline_avro(text, [r.schema for r in found])
        if schema_type == "JSON":
            return inline_json(text, {r.reference.name: r.schema for r in found})
        return protobuf_bundle(text, [(r.reference.name, r.schema) for r in found])
    except RecursionError:
        raise SchemaReferenceError("a schema nested too deep to follow its references") from None


# -- PROTOBUF -------------------------------------------------------------------------------


def protobuf_bundle(text: str, imports: Sequence[tuple[str, str]]) -> str:
    """A Protobuf file and the files it imports (import path, schema text), dependencies
    first, as one text (JSON: neither ``.proto`` text nor base64 starts with ``{``);
    protobuf's well-known types are left out, every descriptor pool builds them."""
    return json.dumps({"protobuf": text, "imports": [
        [name, body] for name, body in imports if not name.startswith(PROTOBUF_WELL_KNOWN)]})


def protobuf_unbundle(schema: str) -> tuple[str, list[tuple[str, str]]]:
    """``protobuf_bundle``'s file and imports; a plain file has no imports."""
    if not schema.lstrip().startswith("{"):
        return schema, []
    bundle = _loads(schema)
    try:
        imports = [(str(name), str(text)) for name, text in bundle["imports"]]
        return str(bundle["protobuf"]), imports
    except (KeyError, TypeError, ValueError):
        raise SchemaReferenceError("a Protobuf schema that is JSON but not sparklog's bundle "
                                   "of a file and its imports") from None


# -- AVRO -----------------------------------------------------------------------------------


def _full_name(schema: dict, namespace: str | None) -> str:
    name = str(schema.get("name", ""))
    if "." in name:
        return name
    space = schema.get("namespace", namespace)
    return f"{space}.{name}" if space else name


def _kind(schema: dict) -> str | None:
    kind = schema.get("type")
    return kind if isinstance(kind, str) else None


def _fields(schema: dict) -> list[dict]:
    """A record's fields (what is not a field object is left to the parser to refuse)."""
    fields = schema.get("fields") if _kind(schema) in ("record", "error") else None
    return [f for f in fields if isinstance(f, dict)] if isinstance(fields, list) else []


def inline_avro(text: str, referenced_texts: Sequence[str]) -> str:
    """The Avro schema ``text`` standing alone (see the module's invariants)."""
    pool: dict[str, Any] = {}
    for doc in map(_loads, referenced_texts):
        _named_types(doc, None, pool)
    return json.dumps(_AvroInliner(pool).write(_loads(text), None))


def _named_types(schema: Any, namespace: str | None, pool: dict[str, Any]) -> None:
    """Every named type ``schema`` defines, nested ones too, by full name, each with its
    namespace made explicit (the first definition of a name wins, as in a parser)."""
    if isinstance(schema, list):
        for branch in schema:
            _named_types(branch, namespace, pool)
        return
    if not isinstance(schema, dict):
        return
    kind = _kind(schema)
    if kind in _NAMED:
        full = _full_name(schema, namespace)
        space, _, short = full.rpartition(".")
        pool.setdefault(full, {**schema, "name": short, "namespace": space})
        for field in _fields(schema):
            _named_types(field.get("type"), space or None, pool)
    elif kind in ("array", "map"):
        _named_types(schema.get("items" if kind == "array" else "values"), namespace, pool)
    elif kind is None:
        _named_types(schema.get("type"), namespace, pool)


class _AvroInliner:
    def __init__(self, pool: dict[str, Any]) -> None:
        self.pool = pool
        self.defined: set[str] = set()

    def write(self, schema: Any, namespace: str | None) -> Any:
        if isinstance(schema, str):
            return self._name(schema, namespace)
        if isinstance(schema, list):
            return [self.write(branch, namespace) for branch in schema]
        if not isinstance(schema, dict):
            return schema
        kind = _kind(schema)
        if kind in _NAMED:
            full = _full_name(schema, namespace)
            if full in self.defined:  # a referenced type already written out: its name
                return full
            self.defined.add(full)
            if kind not in ("record", "error"):
                return schema
            inner, fields = full.rpartition(".")[0] or None, schema.get("fields")
            if not isinstance(fields, list):
                return schema
            return {**schema, "fields": [
                {**f, "type": self.write(f.get("type"), inner)} if isinstance(f, dict) else f
                for f in fields]}
        if kind == "array":
            return {**schema, "items": self.write(schema.get("items"), namespace)}
        if kind == "map":
            return {**schema, "values": self.write(schema.get("values"), namespace)}
        return {**schema, "type": self.write(schema.get("type"), namespace)}

    def _name(self, name: str, namespace: str | None) -> Any:
        if name in AVRO_PRIMITIVES:
            return name
        full = name if "." in name or not namespace else f"{namespace}.{name}"
        if full in self.defined or full not in self.pool:
            return name
        return self.write(self.pool[full], full.rpartition(".")[0] or None)


# -- JSON Schema ----------------------------------------------------------------------------


def _pointer_token(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def inline_json(text: str, documents: dict[str, str]) -> str:
    """The JSON Schema ``text`` standing alone (see the module's invariants)."""
    root = _loads(text)
    if not isinstance(root, dict):
        return text

    def rewrite(node: Any, base: str | None) -> Any:
        if isinstance(node, list):
            return [rewrite(item, base) for item in node]
        if not isinstance(node, dict):
            return node
        out = {key: rewrite(value, base) for key, value in node.items()}
        ref = node.get("$ref")
        if isinstance(ref, str):
            target, _, pointer = ref.partition("#")
            if not target and base is not None:
                out["$ref"] = f"#/$defs/{_pointer_token(base)}{pointer}"
            elif target in documents:
                out["$ref"] = f"#/$defs/{_pointer_token(target)}{pointer}"
        return out

    rewritten = rewrite(root, None)
    own = rewritten.get("$defs")
    own = own if isinstance(own, dict) else {}
    inlined = {name: rewrite(_loads(doc), name) for name, doc in documents.items()}
    clash = set(inlined) & set(own)
    if clash:
        raise SchemaReferenceError(f"the schema's $defs already hold {sorted(clash)[0]!r}, "
                                   "the name of one of its references")
    return json.dumps({**rewritten, "$defs": {**own, **inlined}})


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise SchemaReferenceError(f"a schema that is not JSON: {exc}") from None
