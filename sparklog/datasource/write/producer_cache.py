"""Producers kept across the write tasks and micro-batches one Python worker runs (Spark's
``CachedKafkaProducer``): a task of a later micro-batch reuses its predecessor's connections,
metadata and producer id instead of paying for a new producer.

Invariants:
- A producer is leased to one task at a time. ``lease`` hands an idle producer of the same
  settings (the librdkafka configuration, compared whole) or makes one; ``Lease.release``
  returns it only after its task drained it (``flush`` left nothing queued or in flight), so
  a producer taken from the cache has no record of an earlier task in flight and every
  delivery report a task sees is about its own records (the reports go to the collector of
  the current lease).
- ``Lease.discard`` never returns a producer: a task that failed (records may be in flight),
  or whose records failed delivery (the idempotent producer may be in a fatal state), drops
  it. Transactional producers are never cached, and never closed (``close`` would abort the
  transaction the driver is to commit): the last reference destroys them.
- An idle producer is closed once it has been idle for its lease's timeout (Spark's
  ``spark.kafka.producer.cache.timeout``, default 10 minutes), by a daemon thread that
  sleeps until the earliest expiry, and when the worker exits (``atexit``).
- The topics a task checked exist (one metadata request each) stay checked for the
  producer's later tasks.
- Thread-safe: the lock guards the idle lists; producers are closed outside it.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from sparklog.client.watch import WatchedProducer

DeliveryCallback = Callable[[KafkaError | None, Message], None]
Key = tuple[tuple[str, str], ...]


class _Route:
    """librdkafka's delivery callback of one producer: forwards to the current lease's."""

    def __init__(self) -> None:
        self.target: DeliveryCallback | None = None

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if self.target is not None:
            self.target(error, message)


@dataclass
class _Entry:
    producer: Producer
    route: _Route
    checked_topics: set[str] = field(default_factory=set)
    expires: float = 0.0


class Lease:
    """One task's use of a producer: ``release`` when drained, ``discard`` otherwise."""

    def __init__(self, cache: ProducerCache | None, key: Key, entry: _Entry,
                 timeout_s: float) -> None:
        self._cache, self._key, self._entry, self._timeout_s = cache, key, entry, timeout_s

    @property
    def producer(self) -> Producer:
        return self._entry.producer

    @property
    def checked_topics(self) -> set[str]:
        return self._entry.checked_topics

    def release(self) -> None:
        """The task drained the producer: keep it for the next task (when cached)."""
        self._entry.route.target = None
        if self._cache is not None:
            self._cache.give_back(self._key, self._entry, self._timeout_s)

    def discard(self) -> None:
        """The task failed: the producer is not reused. A cached one drops what it still
        holds (the task is retried whole); it is destroyed with its last reference, which
        sends no EndTxn, so a transactional producer's transaction stays as it is."""
        self._entry.route.target = None
        if self._cache is not None:
            self._entry.producer.purge()
            self._entry.producer.flush(0)


class ProducerCache:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._idle: dict[Key, list[_Entry]] = {}
        self._lock = threading.Condition()
        self._evictor: threading.Thread | None = None
        self._closed = False

    def lease(self, config: Mapping[str, Any], on_delivery: DeliveryCallback, *,
              cached: bool = True, timeout_s: float) -> Lease:
        """A producer of ``config`` whose delivery reports go to ``on_delivery`` until the
        lease ends; ``cached=False`` makes a fresh one that is never kept."""
        key = tuple(sorted((k, str(v)) for k, v in config.items()))
        entry = None
        if cached:
            with self._lock:
                idle = self._idle.get(key)
                if idle:
                    entry = idle.pop()
                    if not idle:
                        del self._idle[key]
        if entry is None:
            route = _Route()
            entry = _Entry(WatchedProducer({**config, "on_delivery": route}), route)
        entry.route.target = on_delivery
        return Lease(self if cached else None, key, entry, timeout_s)

    def give_back(self, key: Key, entry: _Entry, timeout_s: float) -> None:
        entry.expires = self._clock() + timeout_s
        with self._lock:
            if self._closed:
                _close(entry.producer)
                return
            self._idle.setdefault(key, []).append(entry)
            if self._evictor is None:
                self._evictor = threading.Thread(target=self._evict, daemon=True,
                                                 name="sparklog-producer-cache")
                self._evictor.start()
            self._lock.notify()

    def idle_count(self) -> int:
        with self._lock:
            return sum(map(len, self._idle.values()))

    def _evict(self) -> None:
        """Close idle producers as they expire (the daemon thread's loop)."""
        while True:
            with self._lock:
                expired = self._take_expired(self._clock())
                if not expired:
                    earliest = min((e.expires for idle in self._idle.values() for e in idle),
                                   default=None)
                    self._lock.wait(None if earliest is None
                                    else max(0.0, earliest - self._clock()))
                    continue
            for entry in expired:
                _close(entry.producer)

    def _take_expired(self, now: float) -> list[_Entry]:
        expired = []
        for key in list(self._idle):
            keep = [e for e in self._idle[key] if e.expires > now]
            expired += [e for e in self._idle[key] if e.expires <= now]
            if keep:
                self._idle[key] = keep
            else:
                del self._idle[key]
        return expired

    def close(self) -> None:
        """Close every idle producer (the worker is exiting); later returns close too."""
        with self._lock:
            self._closed = True
            idle = [e for entries in self._idle.values() for e in entries]
            self._idle.clear()
        for entry in idle:
            _close(entry.producer)


def _close(producer: Producer) -> None:
    """Close a drained idle producer (nothing to flush, no transaction)."""
    producer.close()


PRODUCERS = ProducerCache()
"""This Python worker's cache."""
atexit.register(PRODUCERS.close)
