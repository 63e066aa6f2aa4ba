"""Client quota enforcement: Kafka's ``ClientQuotaManager`` for produce bytes, fetch bytes
and request handler time, per (user principal, client id).

Invariants (Kafka's rules, ``quota.window.num`` samples of ``quota.window.size.seconds``):
- The quota of a request is, per key, the most specific entity that sets that key, in
  Kafka's order: /users/<user>/clients/<client-id>, /users/<user>/clients/<default>,
  /users/<user>, /users/<default>/clients/<client-id>,
  /users/<default>/clients/<default>, /users/<default>, /clients/<client-id>,
  /clients/<default>. The user is the principal's name (``ANONYMOUS`` without
  authentication). Connections whose quota comes from the same entity share one rate:
  a user-level quota is shared by every client id of the user, a client-id level one
  (also the defaults) is each client id's own.
- A rate is a sampled rate: ``quota.window.num`` samples, each started by the first record
  after the last one is ``quota.window.size.seconds`` old; it is the total of the samples
  not older than all of them divided by the time since the oldest one's start, counted as
  at least ``quota.window.num - 1`` windows. A record that takes it above the quota gives
  a throttle time, ``(rate - quota) / quota * window``, at most the whole window
  (``quota.window.num * quota.window.size.seconds``): the time it takes to fall back under.
- A throttled request's response carries the throttle time (``throttle_time_ms``) and its
  connection reads no further request for that long (``Session.muted_until``, KIP-219);
  the client also backs off.
- With no quota set for a key, ``enabled(key)`` is one set lookup and nothing else runs:
  no sensor, no lookup, no clock read.
- Everything runs on the event loop thread, like the rest of ``Broker``.
"""

from __future__ import annotations

import time
from collections.abc import Coroutine, Generator, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from sparklog.broker.request_context import current_session
from sparklog.broker.security.broker_security import BrokerSecurity
from sparklog.broker.security.client_quotas import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    Entity,
)
from sparklog.broker.security.session import Session
from sparklog.protocol.fetch_response import FetchResponse

QUOTA_TYPES = {PRODUCER_BYTE_RATE: "Produce", CONSUMER_BYTE_RATE: "Fetch",
               REQUEST_PERCENTAGE: "Request"}
"""Quota key -> Kafka's metrics group of its sensors (``kafka.server:type=Produce,...``)."""


class Rate:
    """Kafka's ``Rate`` over a ``SampledStat``: see the module invariants."""

    __slots__ = ("_count", "_samples", "_window", "throttle_ms_total", "throttled")

    def __init__(self, window_s: float, count: int) -> None:
        self._window = window_s
        self._count = count
        self._samples: list[list[float]] = []  # [start, value], oldest first
        self.throttle_ms_total = 0
        self.throttled = 0
        """Requests given a throttle time (for ``throttle-time``'s average)."""

    def record(self, value: float, now: float) -> None:
        samples = self._samples
        if not samples or now - samples[-1][0] >= self._window:
            samples.append([now, 0.0])
            if len(samples) > self._count:
                del samples[0]
        samples[-1][1] += value

    def _purge(self, now: float) -> None:
        expired = now - self._count * self._window
        while self._samples and self._samples[0][0] <= expired:
            del self._samples[0]

    def window_size(self, now: float) -> float:
        """The time the rate divides by: since the oldest sample's start, at least
        ``count - 1`` whole windows, and never below a millisecond (as Kafka's)."""
        elapsed = now - self._samples[0][0] if self._samples else 0.0
        full = int(elapsed / self._window)
        if full < self._count - 1:
            elapsed += (self._count - 1 - full) * self._window
        return max(elapsed, 0.001)

    def rate(self, now: float) -> float:
        self._purge(now)
        return sum(value for _, value in self._samples) / self.window_size(now)

    def throttle_ms(self, bound: float, now: float) -> int:
        """The time to fall back under ``bound`` (0: under it)."""
        rate = self.rate(now)
        if rate <= bound:
            return 0
        longest = self._count * self._window * 1000
        if bound <= 0:
            return int(longest)
        return int(min(round((rate - bound) / bound * self.window_size(now) * 1000), longest))


@dataclass(frozen=True, slots=True)
class QuotaSensor:
    """One rate being enforced, for metrics: Kafka's ``kafka.server:type=<group>,user=..,
    client-id=..`` ``byte-rate`` (``request-time`` for Request) and ``throttle-time``."""

    group: str
    user: str
    client_id: str
    quota: float
    rate: float
    throttle_time_avg_ms: float


class QuotaManager:
    """The quotas of ``security.quotas`` enforced on this broker's requests."""

    def __init__(self, security: BrokerSecurity, props: Mapping[str, str]) -> None:
        self._security = security
        self._window_s = max(1.0, float(props.get("quota.window.size.seconds", "1")))
        self._samples = max(1, int(props.get("quota.window.num", "11")))
        self._rates: dict[tuple[str, str, str], Rate] = {}
        self._found: dict[tuple[str, str, str], tuple[float, str, str] | None] = {}
        self._generation = -1
        self._quotas: dict[tuple[str, str, str], float] = {}

    def enabled(self, key: str) -> bool:
        """Whether some entity sets ``key`` (without, nothing is measured)."""
        return key in self._security.quotas.keys_in_use

    def record(self, key: str, client_id: str | None, value: float) -> int:
        """Count ``value`` towards the current request's ``key`` quota; the throttle time
        (ms), and the connection muted for it when not 0."""
        session = current_session()
        found = self._quota(key, _user(session), client_id or "")
        if found is None:
            return 0
        bound, user_tag, client_tag = found
        sensor = (key, user_tag, client_tag)
        rate = self._rates.get(sensor)
        if rate is None:
            rate = self._rates[sensor] = Rate(self._window_s, self._samples)
        self._quotas[sensor] = bound
        now = time.monotonic()
        rate.record(value, now)
        throttle = rate.throttle_ms(bound, now)
        if throttle:
            rate.throttle_ms_total += throttle
            rate.throttled += 1
            if session is not None:
                session.muted_until = max(session.muted_until, now + throttle / 1000)
        return throttle

    def unrecord(self, key: str, client_id: str | None, value: float) -> None:
        """Take back a ``record`` whose answer carries nothing (a throttled Fetch)."""
        found = self._quota(key, _user(current_session()), client_id or "")
        if found is not None and (rate := self._rates.get((key, *found[1:]))) is not None:
            rate.record(-value, time.monotonic())

    def window_bytes(self, key: str, client_id: str | None, limit: int) -> int:
        """``limit``, or less: what the ``key`` quota allows over the windows a rate counts
        at least (Kafka's ``getMaxValueInQuotaWindow``), so one answer cannot exceed it."""
        found = self._quota(key, _user(current_session()), client_id or "")
        if found is None:
            return limit
        return int(min(limit, found[0] * (self._samples - 1) * self._window_s))

    def request_time(self, client_id: str | None, seconds: float) -> int:
        """Count a request's handler time towards ``request_percentage`` (a percentage of
        one thread: 1 s is 100); the throttle time (ms)."""
        return self.record(REQUEST_PERCENTAGE, client_id, seconds * 100)

    def _quota(self, key: str, user: str, client_id: str) -> tuple[float, str, str] | None:
        """(quota, user tag, client-id tag) of the most specific entity setting ``key``."""
        store = self._security.quotas
        if store.generation != self._generation:
            self._found.clear()
            self._generation = store.generation
        wanted = (key, user, client_id)
        if wanted in self._found:
            return self._found[wanted]
        found = None
        for quota_entity in _precedence(user, client_id):
            value = store.get(quota_entity).get(key)
            if value is not None:
                names = dict(quota_entity)
                found = (value, user if USER in names else "",
                         client_id if CLIENT_ID in names else "")
                break
        self._found[wanted] = found
        return found

    def sensors(self) -> Iterator[QuotaSensor]:
        """Every rate measured so far, with its current value."""
        now = time.monotonic()
        for (key, user, client_id), rate in sorted(self._rates.items()):
            yield QuotaSensor(QUOTA_TYPES[key], user, client_id, self._quotas[key, user, client_id],
                              rate.rate(now), rate.throttle_ms_total / rate.throttled
                              if rate.throttled else 0.0)


def _user(session: Session | None) -> str:
    """The quota user of a connection: its principal's name (``ANONYMOUS`` without
    authentication), as Kafka's ``KafkaPrincipal.getName``."""
    return "" if session is None else session.principal.partition(":")[2]


def _precedence(user: str, client_id: str) -> tuple[Entity, ...]:
    """Kafka's eight entities a (user, client id) may take its quota from, most specific
    first."""
    return (((CLIENT_ID, client_id), (USER, user)), ((CLIENT_ID, None), (USER, user)),
            ((USER, user),), ((CLIENT_ID, client_id), (USER, None)),
            ((CLIENT_ID, None), (USER, None)), ((USER, None),), ((CLIENT_ID, client_id),),
            ((CLIENT_ID, None),))


class BusyTime:
    """Awaits a coroutine and measures the time it ran (``busy``, seconds): the sum of its
    steps on the loop, not the time it was suspended (a long poll, a wait for the ISR).
    Kafka's request quota counts a request handler thread's time the same way."""

    def __init__(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        self._coroutine = coroutine
        self.busy = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coroutine, sent, thrown = self._coroutine, None, None
        while True:
            started = time.perf_counter()
            try:
                awaited = coroutine.send(sent) if thrown is None else coroutine.throw(thrown)
            except StopIteration as finished:
                self.busy += time.perf_counter() - started
                return finished.value
            self.busy += time.perf_counter() - started
            try:
                sent, thrown = (yield awaited), None
            except BaseException as exc:  # a cancellation reaches the coroutine
                sent, thrown = None, exc


def with_throttle(result: Any, throttle_ms: int) -> Any:
    """``result`` (a response) carrying at least ``throttle_ms`` as its throttle time."""
    if isinstance(result, FetchResponse):
        return result if result.throttle_ms >= throttle_ms else replace(
            result, throttle_ms=throttle_ms)
    current = getattr(result, "throttle_time", None)
    if current is None or current >= timedelta(milliseconds=throttle_ms):
        return result
    return replace(result, throttle_time=timedelta(milliseconds=throttle_ms))
