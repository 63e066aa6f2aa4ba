"""The shape every partition-level response shares (ListOffsets, DeleteRecords,
OffsetForLeaderEpoch...): one entity per requested topic holding one answer per partition.

Invariant: answers keep the request's topic and partition order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparklog.protocol.entities import Build


def per_partition(build: Build, topics: Any, entity: str,
                  answer: Callable[[str, Any], Any], name_field: str = "name") -> tuple[Any, ...]:
    """One ``entity`` per requested topic, holding ``answer(topic, partition)`` for each of its
    partitions."""
    out = []
    for topic in topics:
        name = getattr(topic, name_field)
        partitions = tuple(answer(name, p) for p in topic.partitions)
        out.append(build(entity, **{name_field: name, "partitions": partitions}))
    return tuple(out)
