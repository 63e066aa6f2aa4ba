"""Building kio response objects for whichever version a request came in.

Invariant: handlers name entity classes and fields once, as in Kafka's schemas; ``Build``
drops fields the request's version does not have, so one handler serves every version
(a field that a version lacks is simply not sent, as Kafka does).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from sparklog.protocol.codec import response_class
from sparklog.protocol.framing import RequestHeader

NO_THROTTLE = timedelta(0)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


class Build:
    """``b = Build(header); b("MetadataResponseTopic", name=..., ...); b.response(...)``."""

    def __init__(self, header: RequestHeader) -> None:
        self.top = response_class(header.api_key, header.api_version)
        self.module = sys.modules[self.top.__module__]
        self.version = header.api_version

    def has(self, entity: str, field_name: str) -> bool:
        return field_name in _field_names(getattr(self.module, entity))

    def __call__(self, entity: str, **values: Any) -> Any:
        return _make(getattr(self.module, entity), values)

    def response(self, **values: Any) -> Any:
        values.setdefault("throttle_time", NO_THROTTLE)
        return _make(self.top, values)


def per_partition(build: Build, topics: Any, entity: str,
                  answer: Callable[[str, Any], Any], name_field: str = "name") -> tuple[Any, ...]:
    """One ``entity`` per requested topic, holding ``answer(topic, partition)`` for each of its
    partitions: the shape of every partition-level request (ListOffsets, DeleteRecords...)."""
    out = []
    for topic in topics:
        name = getattr(topic, name_field)
        partitions = tuple(answer(name, p) for p in topic.partitions)
        out.append(build(entity, **{name_field: name, "partitions": partitions}))
    return tuple(out)


def _make(cls: type, values: dict[str, Any]) -> Any:
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def timestamp_ms(ms: int) -> datetime | None:
    """A Kafka int64 millisecond timestamp as kio's ``datetime_i64`` (None for -1)."""
    if ms < 0:
        return None
    return _EPOCH + timedelta(milliseconds=ms)
