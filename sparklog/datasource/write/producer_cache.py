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
  it.
- A transactional producer (its ``transactional.id`` is part of the settings, so it is
  leased only to a later task of the same id) goes back to the cache drained but with its
  transaction left open for the driver to commit; the lease's ``session`` (what
  ``transactional_producer`` keeps with it: its protocol client, the producer id and epoch
  of that transaction) travels with it. Such a producer is never closed (``close`` would
  abort a transaction the driver may still have to commit): evicting or discarding it
  closes its session, and the last reference destroys it (librdkafka sends no EndTxn).
  At most ``MAX_IDLE_TRANSACTIONAL`` of them are kept idle, the longest idle evicted first:
  Spark does not send a partition's tasks to the same worker, so with many partitions an
  id seldom comes back, and each idle producer holds librdkafka's threads and connections.
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
from typing import Any, Protocol

from confluent_kafka import KafkaError, Message, Producer

from sparklog.client.watch import WatchedProducer

DeliveryCallback = Callable[[KafkaError | None, Message], None]
Key = tuple[tuple[str, str], ...]
MAX_IDLE_TRANSACTIONAL = 8
"""Idle transactional producers a worker keeps (a few micro-batches' ids of its tasks)."""


class Session(Protocol):
    """What a lease's owner keeps with a producer across its tasks."""

    def close(self) -> None: ...


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
    transactional: bool
    checked_topics: set[str] = field(default_factory=set)
    expires: float = 0.0
    session: Session | None = None


class Lease:
    """One task's use of a producer: ``release`` when drained, ``discard`` otherwise."""

    def __init__(self, cache: ProducerCache, key: Key, entry: _Entry, timeout_s: float
                 ) -> None:
        self._cache, self._key, self._entry, self._timeout_s = cache, key, entry, timeout_s

    @property
    def producer(self) -> Producer:
        return self._entry.producer

    @property
    def checked_topics(self) -> set[str]:
        return self._entry.checked_topics

    @property
    def session(self) -> Session | None:
        return self._entry.session

    @session.setter
    def session(self, session: Session) -> None:
        self._entry.session = session

    def release(self) -> None:
        """The task drained the producer: keep it for the next task."""
        self._entry.route.target = None
        self._cache.give_back(self._key, self._entry, self._timeout_s)

    def discard(self) -> None:
        """The task failed: the producer is not reused. It drops what it still holds (the
        task is retried whole) and is destroyed with its last reference, which sends no
        EndTxn, so a transactional producer's transaction stays as it is."""
        self._entry.route.target = None
        if self._entry.session is not None:
            self._entry.session.close()
        self._entry.producer.purge()
        self._entry.producer.flush(0)


class ProducerCache:
    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 max_idle_transactional: int = MAX_IDLE_TRANSACTIONAL) -> None:
        self._clock = clock
        self._max_idle_transactional = max_idle_transactional
        self._idle: dict[Key, list[_Entry]] = {}
        self._lock = threading.Condition()
        self._evictor: threading.Thread | None = None
        self._closed = False

    def lease(self, config: Mapping[str, Any], on_delivery: DeliveryCallback, *,
              timeout_s: float) -> Lease:
        """A producer of ``config`` whose delivery reports go to ``on_delivery`` until the
        lease ends: an idle one of the same settings, else a new one."""
        key = tuple(sorted((k, str(v)) for k, v in config.items()))
        entry = None
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                entry = idle.pop()
                if not idle:
                    del self._idle[key]
        if entry is None:
            route = _Route()
            entry = _Entry(WatchedProducer({**config, "on_delivery": route}), route,
                           transactional="transactional.id" in config)
        entry.route.target = on_delivery
        return Lease(self, key, entry, timeout_s)

    def give_back(self, key: Key, entry: _Entry, timeout_s: float) -> None:
        entry.expires = self._clock() + timeout_s
        with self._lock:
            if self._closed:
                _close(entry)
                return
            self._idle.setdefault(key, []).append(entry)
            surplus = self._surplus_transactional() if entry.transactional else None
            if self._evictor is None:
                self._evictor = threading.Thread(target=self._evict, daemon=True,
                                                 name="sparklog-producer-cache")
                self._evictor.start()
            self._lock.notify()
        if surplus is not None:
            _close(surplus)

    def _surplus_transactional(self) -> _Entry | None:
        """The longest idle transactional producer, taken out, when too many are idle."""
        idle = [(e.expires, key, e) for key, entries in self._idle.items() for e in entries
                if e.transactional]
        if len(idle) <= self._max_idle_transactional:
            return None
        _, key, oldest = min(idle, key=lambda found: found[0])
        self._idle[key].remove(oldest)
        if not self._idle[key]:
            del self._idle[key]
        return oldest

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
                _close(entry)

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
            _close(entry)


def _close(entry: _Entry) -> None:
    """Close a drained idle producer; a transactional one is left to its last reference."""
    if entry.session is not None:
        entry.session.close()
    if not entry.transactional:
        entry.producer.close()


PRODUCERS = ProducerCache()
"""This Python worker's cache."""
atexit.register(PRODUCERS.close)
