"""Fault hooks: make the broker misbehave on purpose, for tests of clients' retry paths.

Modelled on franz-go kfake's ``AddFault``/``ControlKey``: a ``Fault`` matches requests of one
API key, optionally only those naming a topic (and a partition), and acts on the next
``times`` of them:
- ``delay_s``: the request is handled that much later (past a client's timeout, a timeout);
- ``drop``: the connection is closed without an answer (nothing is handled);
- ``error`` with a ``topic``: the matched partitions fail with ``error`` inside the handler,
  as partitions this broker cannot serve do (``Broker.leader_partition`` raises it: nothing is
  appended to, read from or deleted in them); the request's other partitions are served;
- ``error`` with ``lost_answer`` (or without a topic): the request is handled, then its
  answer carries ``error`` instead of the real outcome, in the matched partitions (a Fetch
  partition loses its records) or in the top-level error code of an API without
  partitions. The request took effect: for a Produce this is an acknowledgement lost on the
  way, which an idempotent producer's retry must resolve without a duplicate.

Invariants:
- With no fault added the server pays one attribute test per request.
- A fault acts exactly ``times`` times, then is gone; ``hits`` counts what it did, so a test
  can check that its fault fired. Faults are tried in the order they were added; one fault
  at most acts on a request.
- A request naming topics by id (Fetch v13+, Produce v13) matches a fault on the topic of
  that id (the broker's ``topic_named``).
- Faults are added from any thread (the test's) and consumed on the broker's event loop: one
  lock guards the list.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any

from sparklog.errors import ErrorCode

TopicNamed = Callable[[uuid.UUID], str | None]


def _no_ids(_: uuid.UUID) -> str | None:
    """Without a broker to ask, an id names no topic."""
    return None


_TOPIC_FIELDS = ("name", "topic")
_PARTITION_FIELDS = ("partition_index", "partition", "index")


@dataclass
class Fault:
    api_key: int
    error: ErrorCode | None = None
    topic: str | None = None
    partition: int | None = None
    delay_s: float = 0.0
    drop: bool = False
    lost_answer: bool = False
    times: int = 1
    hits: int = field(default=0, init=False)

    @property
    def refuses_partitions(self) -> bool:
        """Whether the matched partitions fail inside the handler (not rewritten after)."""
        return self.error is not None and self.topic is not None and not self.lost_answer

    def refuses(self, topic: str, partition: int) -> bool:
        return self.refuses_partitions and self._wants(topic, partition)

    def matches(self, api_key: int, request: Any, topic_named: TopicNamed = _no_ids) -> bool:
        if api_key != self.api_key or self.hits >= self.times:
            return False
        if self.topic is None:
            return True
        return any(topic == self.topic and (self.partition is None or partition == self.partition)
                   for topic, partition in named_partitions(request, topic_named=topic_named))

    def rewrite(self, response: Any) -> Any:
        """``response`` with ``error`` in the matched partitions (or at the top), unless the
        fault refused the partitions inside the handler already."""
        if self.error is None or response is None or self.refuses_partitions:
            return response
        rewritten, touched = self._rewrite(response, None)
        if not touched and _has(response, "error_code"):
            rewritten = replace(rewritten, error_code=self.error)
        return rewritten

    def _rewrite(self, entity: Any, topic: str | None) -> tuple[Any, bool]:
        names = {f.name for f in fields(entity)}
        topic = next((getattr(entity, n) for n in _TOPIC_FIELDS
                      if n in names and isinstance(getattr(entity, n), str)), topic)
        changes: dict[str, Any] = {}
        touched = False
        for name in names:
            value = getattr(entity, name)
            if isinstance(value, (tuple, list)) and value and is_dataclass(value[0]):
                items = [self._rewrite(item, topic) for item in value]
                touched |= any(t for _, t in items)
                changes[name] = type(value)(item for item, _ in items)
        partition = next((getattr(entity, n) for n in _PARTITION_FIELDS if n in names), None)
        if isinstance(partition, int) and "error_code" in names and self._wants(topic, partition):
            changes["error_code"] = self.error
            if "records" in names:
                changes["records"] = None
            touched = True
        return (replace(entity, **changes) if changes else entity), touched

    def _wants(self, topic: str | None, partition: int) -> bool:
        return (self.topic is None or topic == self.topic) and (
            self.partition is None or partition == self.partition)


def _has(entity: Any, name: str) -> bool:
    return is_dataclass(entity) and any(f.name == name for f in fields(entity))


def named_partitions(request: Any, topic: str | None = None, *,
                     topic_named: TopicNamed = _no_ids) -> Iterator[tuple[str, int | None]]:
    """(topic, partition) pairs a request names (partition None where it names none); a
    topic named by its id (Fetch v13+, Produce v13, ...) by the name ``topic_named`` gives."""
    if not is_dataclass(request):
        return
    names = [f.name for f in fields(request)]
    topic_id = getattr(request, "topic_id", None) if "topic_id" in names else None
    topic = next((getattr(request, n) for n in _TOPIC_FIELDS
                  if n in names and isinstance(getattr(request, n), str)),
                 topic_named(topic_id) if isinstance(topic_id, uuid.UUID) else None) or topic
    partition = next((getattr(request, n) for n in _PARTITION_FIELDS
                      if n in names and isinstance(getattr(request, n), int)), None)
    nested = False
    for name in names:
        value = getattr(request, name)
        if isinstance(value, tuple) and value:
            if is_dataclass(value[0]):
                nested = True
                for item in value:
                    yield from named_partitions(item, topic, topic_named=topic_named)
            elif topic is not None and isinstance(value[0], int) and "partition" in name:
                nested = True
                yield from ((topic, p) for p in value)
    if topic is not None and (partition is not None or not nested):
        yield topic, partition


class Faults:
    """The faults of one broker (see the module invariants)."""

    def __init__(self, topic_named: TopicNamed = _no_ids) -> None:
        self._topic_named = topic_named
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self.armed = False

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self._faults.append(fault)
            self.armed = True
        return fault

    def clear(self) -> None:
        with self._lock:
            self._faults = []
            self.armed = False

    def take(self, api_key: int, request: Any) -> Fault | None:
        """The fault that acts on this request (counted as a hit), if any."""
        with self._lock:
            for fault in self._faults:
                if fault.matches(api_key, request, self._topic_named):
                    fault.hits += 1
                    self._faults = [f for f in self._faults if f.hits < f.times]
                    self.armed = bool(self._faults)
                    return fault
        return None
