"""Building kio entities (requests and responses) for whichever version is spoken.

Invariants:
- One description serves every version of an API: fields the version lacks are dropped, as
  Kafka does (a field a version does not have is simply not sent); fields the caller leaves
  out take their schema default.
- Nested arrays of entities may be given as sequences of dicts (built recursively, with the
  same rule) or of entities already built.
- ``Build`` names entity classes of a response as Kafka's schemas name them
  (``b("MetadataResponseTopic", ...)``), resolved in the module of the request's version.
- ``count_error_codes`` finds error codes by kio's field type (``error_code``), in the entity
  and every entity it holds, so it serves every API without a list of their fields.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from functools import cache
from types import NoneType, UnionType
from typing import Any, TypeVar, get_args, get_origin

from sparklog.protocol.codec import response_class
from sparklog.protocol.framing import RequestHeader

T = TypeVar("T")

NO_THROTTLE = timedelta(0)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@cache
def _fields(cls: type) -> dict[str, type | None]:
    """Field name -> the entity class of its items when it is an array of entities."""
    return {f.name: _entity_in(f.type) for f in fields(cls)}  # type: ignore[arg-type]


def _entity_in(annotation: Any) -> type | None:
    """The entity class of ``tuple[Entity, ...]`` (or ``... | None``), else None."""
    if get_origin(annotation) is UnionType:
        annotation = next(a for a in get_args(annotation) if a is not NoneType)
    if get_origin(annotation) is tuple:
        inner = get_args(annotation)[0]
        if hasattr(inner, "__dataclass_fields__"):
            return inner  # type: ignore[no-any-return]
    return None


@cache
def _error_fields(cls: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(fields holding an error code, fields that may hold entities) of an entity class."""
    kinds = [(f.name, f.metadata.get("kafka_type")) for f in fields(cls)]  # type: ignore[arg-type]
    return (tuple(name for name, kind in kinds if kind == "error_code"),
            tuple(name for name, kind in kinds if kind is None))


def count_error_codes(entity: Any, counts: dict[int, int]) -> None:
    """Add each error code of a response entity, and of the entities it holds, to ``counts``
    (Kafka's ``errorCounts``: the top-level code and each topic's or partition's alike)."""
    codes, nested = _error_fields(type(entity))
    for name in codes:
        code = int(getattr(entity, name))
        counts[code] = counts.get(code, 0) + 1
    for name in nested:
        value = getattr(entity, name)
        for child in value if isinstance(value, tuple) else (value,):
            if hasattr(child, "__dataclass_fields__"):
                count_error_codes(child, counts)


def build(cls: type[T], values: Mapping[str, Any]) -> T:
    """An instance of the kio entity ``cls`` from ``values`` (see the module invariants)."""
    known = _fields(cls)
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        if name not in known:
            continue
        entity = known[name]
        if entity is not None and value is not None:
            value = tuple(build(entity, item) if isinstance(item, Mapping) else item
                          for item in value)
        kwargs[name] = value
    return cls(**kwargs)


class Build:
    """``b = Build(header); b("MetadataResponseTopic", name=..., ...); b.response(...)``:
    the response entities of the request's API and version."""

    def __init__(self, header: RequestHeader) -> None:
        self.top = response_class(header.api_key, header.api_version)
        self.module = sys.modules[self.top.__module__]
        self.version = header.api_version

    def has(self, entity: str, field_name: str) -> bool:
        return field_name in _fields(getattr(self.module, entity))

    def __call__(self, entity: str, /, **values: Any) -> Any:
        return build(getattr(self.module, entity), values)

    def response(self, **values: Any) -> Any:
        values.setdefault("throttle_time", NO_THROTTLE)
        return build(self.top, values)


def timestamp_ms(ms: int) -> datetime | None:
    """A Kafka int64 millisecond timestamp as kio's nullable ``datetime_i64`` (None for -1)."""
    if ms < 0:
        return None
    return instant_ms(ms)


def instant_ms(ms: int) -> datetime:
    """A Kafka int64 millisecond timestamp as kio's non-nullable ``datetime_i64`` (-1, "none",
    is the millisecond before the epoch, which kio writes back as -1)."""
    return _EPOCH + timedelta(milliseconds=ms)
