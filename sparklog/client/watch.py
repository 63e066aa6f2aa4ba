"""librdkafka's side of ``sparklog.client.failures``: confluent-kafka clients that end within
a fraction of a second on a refused login or a protocol mismatch, with its one line.

Invariants:
- ``FailureWatch`` is a librdkafka ``error_cb`` that records the first ``ConnectionFailure``
  (``failure``): an ``_AUTHENTICATION`` error is one at once; a transport or TLS error
  (``_TRANSPORT``, ``_SSL``, ``_ALL_BROKERS_DOWN``) runs ``diagnose`` (at most once per
  ``PROBE_INTERVAL_S``), which finds one only when a listener speaks another protocol than
  the client or refuses its login (sparklog's own connection tries it), so a broker that
  went away is retried as librdkafka does. The callback never raises: an exception raised
  into confluent-kafka surfaces only when its whole wait has passed, and keeps the client
  alive through its traceback.
- ``WatchedProducer`` and ``WatchedConsumer`` wait (``flush``, ``poll``, ``consume``) in
  slices of ``SLICE_S`` and raise the recorded failure after each, so it ends the wait
  within one slice (a record, a served callback or an empty queue ends it as before).
  Their ``list_topics`` serves no callback: it waits in slices of ``METADATA_SLICE_S`` and
  diagnoses between them (a slice that ends in a dropped connection or in its own timeout
  is followed by the next, until the caller's timeout). An ``AdminClient`` serves its
  callbacks only in ``poll``, so ``connected_admin`` polls until the cluster first answers
  (``ADMIN_WAIT_S`` at most).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, ClusterMetadata

from sparklog.client.connection import BrokerConnection
from sparklog.client.errors import KafkaClientError
from sparklog.client.failures import (
    PROBE_TIMEOUT_S,
    ConnectionFailure,
    authentication_failed,
    mismatch_at,
)
from sparklog.client.rdkafka_log import admin_client, routed, watched_routing
from sparklog.client.settings import ClientConfig, ClientSecurity, SettingsError, parse_bootstrap

SLICE_S = 0.2
METADATA_SLICE_S = 0.5
PROBE_INTERVAL_S = 5.0
ADMIN_WAIT_S = 30.0
"""How long ``connected_admin`` waits for a first answer (the tools' request timeout)."""

_CONNECTION_ERRORS = frozenset({KafkaError._TRANSPORT, KafkaError._SSL,
                                KafkaError._ALL_BROKERS_DOWN})
_SLICE_ENDS = frozenset({KafkaError._TRANSPORT, KafkaError._TIMED_OUT})
"""How a ``list_topics`` slice ends without an answer: the connection dropped, or the slice
passed first (librdkafka's reconnect backoff can outlast a slice on a loaded machine)."""
_BROKER = re.compile(r"^\w+://([^/\s]+)/")


class FailureWatch:
    """librdkafka's ``error_cb`` for a client of ``config`` (its librdkafka settings):
    records a refused login or a protocol mismatch as a ``ConnectionFailure``."""

    def __init__(self, config: Mapping[str, object]) -> None:
        self._login_checked = True
        """Whether sparklog's own connection can try this login (``diagnose``)."""
        try:
            self.security = ClientSecurity.from_settings(config)
        except SettingsError:  # settings librdkafka knows and sparklog's client does not
            self._login_checked = False
            self.security = ClientSecurity(
                str(config.get("security.protocol", "PLAINTEXT")).upper(),
                str(config.get("sasl.mechanism", config.get("sasl.mechanisms", ""))).upper(),
                str(config.get("sasl.username", "")) or None)
        try:
            self.bootstrap = parse_bootstrap(str(config.get("bootstrap.servers", "")))
        except SettingsError:
            self.bootstrap = ()
        self._probed_at = -PROBE_INTERVAL_S
        self.failure: ConnectionFailure | None = None
        """The first failure seen (the callback records it; ``check`` raises it)."""

    def __call__(self, error: KafkaError) -> None:
        if self.failure is None:
            self.failure = self._failure_of(error)

    def _failure_of(self, error: KafkaError) -> ConnectionFailure | None:
        if error.code() == KafkaError._AUTHENTICATION:
            text = error.str()
            found = _BROKER.match(text)
            address = found.group(1) if found else self.bootstrap_text
            reason = re.sub(r"\s*\(after \d+ms in state \w+\)$", "",
                            text.partition("authentication error: ")[2] or text)
            return authentication_failed(address, self.security, reason)
        if error.code() in _CONNECTION_ERRORS:
            try:
                self.diagnose()
            except ConnectionFailure as failure:
                return failure
        return None

    def check(self) -> None:
        """Raise the failure seen, if any (a fresh exception each time: the recorded one
        keeps no traceback, so no client is kept alive by it)."""
        if self.failure is not None:
            raise ConnectionFailure(*self.failure.args)

    def diagnose(self) -> None:
        """Raise ``ConnectionFailure`` if a bootstrap server's listener speaks another
        protocol than the client or refuses its login (at most once per
        ``PROBE_INTERVAL_S``; a server that does not answer proves nothing)."""
        now = time.monotonic()
        if now - self._probed_at < PROBE_INTERVAL_S:
            return
        self._probed_at = now
        failure = mismatch_at(self.bootstrap, self.security)
        if failure is not None:
            raise failure
        if not (self.security.sasl and self._login_checked):
            return
        config = ClientConfig(self.bootstrap, request_timeout_s=PROBE_TIMEOUT_S,
                              security=self.security)
        for address in self.bootstrap:
            try:
                BrokerConnection(*address, config).close()
                return
            except ConnectionFailure:
                raise
            except (OSError, KafkaClientError):
                continue

    @property
    def bootstrap_text(self) -> str:
        return ",".join(f"{host}:{port}" for host, port in self.bootstrap)


def watched(config: Mapping[str, object]) -> dict[str, object]:
    """``config`` with a ``FailureWatch`` as its ``error_cb`` (unless one is set)."""
    return {"error_cb": FailureWatch(config), **watched_routing(config)}


class _Watched:
    """What the watched producer and consumer share: the watch, a diagnosed metadata wait."""

    def __init__(self, config: Mapping[str, object]) -> None:
        settings = watched(config)
        error_cb = settings["error_cb"]
        self._watch = error_cb if isinstance(error_cb, FailureWatch) else FailureWatch(config)
        super().__init__(settings)  # type: ignore[call-arg]

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> ClusterMetadata:
        """confluent-kafka's, diagnosed between slices of ``METADATA_SLICE_S``."""
        failed = None
        for wait in _slices(timeout, METADATA_SLICE_S):
            try:
                return super().list_topics(topic, timeout=max(0.001, wait))  # type: ignore[misc]
            except KafkaException as exc:
                if exc.args[0].code() not in _SLICE_ENDS:
                    raise
                failed = exc
                self._watch.diagnose()
        assert failed is not None
        raise failed


def _slices(timeout: float | None, size: float = SLICE_S) -> Iterator[float]:
    """Waits of at most ``size`` adding up to ``timeout`` (None or negative: forever)."""
    forever = timeout is None or timeout < 0
    deadline = time.monotonic() + (0.0 if forever else float(timeout))  # type: ignore[arg-type]
    while True:
        left = size if forever else deadline - time.monotonic()
        yield max(0.0, min(size, left))
        if not forever and time.monotonic() >= deadline:
            return


class WatchedProducer(_Watched, Producer):
    """confluent-kafka's ``Producer`` with a ``FailureWatch`` whose failure ends a
    ``flush`` or ``poll`` within ``SLICE_S``."""

    def flush(self, timeout: float | None = None) -> int:
        left = len(self)
        for wait in _slices(timeout):
            left = super().flush(wait)
            self._watch.check()
            if not left:
                break
        return left

    def poll(self, timeout: float | None = None) -> int:
        served = 0
        for wait in _slices(timeout):
            served = super().poll(wait)
            self._watch.check()
            if served:
                break
        return served


class WatchedConsumer(_Watched, Consumer):
    """confluent-kafka's ``Consumer`` with a ``FailureWatch`` whose failure ends a
    ``poll`` or ``consume`` within ``SLICE_S``."""

    def poll(self, timeout: float | None = None) -> Message | None:
        for wait in _slices(timeout):
            message = super().poll(wait)
            self._watch.check()
            if message is not None:
                return message
        return None

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        for wait in _slices(timeout):
            messages = super().consume(num_messages, wait)
            self._watch.check()
            if messages:
                return messages
        return []


def connected_admin(config: Mapping[str, object], wait_s: float = ADMIN_WAIT_S
                    ) -> AdminClient:
    """An ``AdminClient`` of ``config`` once the cluster answered it: a refused login or a
    protocol mismatch raises ``ConnectionFailure`` within seconds, no answer in ``wait_s``
    a ``KafkaClientError`` naming the bootstrap servers."""
    watch = FailureWatch(config)
    admin = admin_client({"error_cb": watch, **watched_routing(routed(config))})
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=METADATA_SLICE_S)
            return admin
        except KafkaException:
            admin.poll(0)
            if watch.failure is not None:
                break
    del admin  # destroyed now, not kept alive by the traceback
    watch.check()
    raise KafkaClientError(f"no broker answered at bootstrap servers {watch.bootstrap_text} "
                           f"within {wait_s:g} s")
