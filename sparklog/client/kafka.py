"""A small synchronous Kafka-protocol client, for any Kafka broker: leader routing and retries.

It speaks plain Kafka (no sparklog-private API): Metadata (to find partition leaders and
topics), ListOffsets (earliest, latest, by timestamp) and Fetch (raw record batches), each on
a ``BrokerConnection`` to the broker that must answer it.

Invariants:
- Each request goes to the leader of its partitions, found with Metadata; a retriable error
  (not leader, leader unavailable, unknown topic after a create, timeouts, a dropped
  connection) drops the cached leader and the connection, waits ``retry.backoff`` and
  retries until the ``RetryPolicy`` deadline; then ``KafkaClientError`` is raised, naming
  the broker or partition and the Kafka error. One line is logged for a run of retries (at
  INFO, the rest at DEBUG), naming the request once. A broker that refuses a connection or drops
  one loses every leadership cached for it, so a dead leader's partitions are looked up
  again (in a cluster, until the controller has elected their new leaders).
- A client no broker has answered yet (and given no leader hints) that finds no bootstrap
  server accepting a connection fails after ``RetryPolicy.bootstrap_timeout_s`` with
  ``KafkaClientError`` naming every address and why; a connection that opens but breaks
  before its first answer is probed (``failures.mismatch_at``): a listener speaking another
  security protocol, or a TLS certificate the client does not trust, is a
  ``ConnectionFailure`` at once, never retried.
- ``prefetch`` sends the Fetch a coming ``fetch`` will read, so the broker works while the
  caller decodes the previous answer; any other request on that connection drops it.
- Nothing here must survive pickling: a ``KafkaClient`` is opened where it is used (driver
  or task) from a ``ClientConfig`` and closed with ``close()`` or a ``with`` block.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar

from sparklog.client.cluster import Cluster, TopicPartition
from sparklog.client.connection import BrokerConnection
from sparklog.client.errors import (
    COORDINATOR_RETRIABLE,
    RETRIABLE,
    KafkaClientError,
    RetriableError,
)
from sparklog.client.failures import refused_for_good
from sparklog.client.settings import BOOTSTRAP_TIMEOUT_S, Address, ClientConfig, RetryPolicy
from sparklog.errors import ErrorCode, error_name
from sparklog.protocol.versions import ApiKey, CoordinatorType, IsolationLevel, api_name

log = logging.getLogger(__name__)

T = TypeVar("T")

EARLIEST_TIMESTAMP = -2
"""ListOffsets' timestamp for the log start offset."""
LATEST_TIMESTAMP = -1
"""ListOffsets' timestamp for the log end offset (the high watermark)."""


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """One partition of a Fetch answer: raw record batches (the last may be cut short)."""

    error_code: int
    high_watermark: int
    records: bytes
    last_stable_offset: int = -1
    aborted: tuple[tuple[int, int], ...] = ()
    """(producer id, first offset) of the transactions aborted in the range (read_committed)."""

    @property
    def readable_end(self) -> int:
        """Where the records a consumer of this isolation may read end."""
        return self.last_stable_offset if self.last_stable_offset >= 0 else self.high_watermark


class KafkaClient:
    """Routes requests to partition leaders; opens connections lazily, retries per policy.

    ``leader_hints`` maps a partition to a broker address the caller already knows (from the
    driver's metadata), so an executor task can fetch without a Metadata round trip first.
    """

    def __init__(self, config: ClientConfig, retry: RetryPolicy,
                 leader_hints: Mapping[TopicPartition, Address] | None = None) -> None:
        self.config = config
        self.retry = retry
        self._connections: dict[Address, BrokerConnection] = {}
        self._leaders: dict[TopicPartition, Address] = dict(leader_hints or {})
        self._prefetched: tuple[TopicPartition, int, int, BrokerConnection] | None = None
        self._answered = bool(leader_hints)
        """A broker of this cluster answered (or the caller knows its brokers)."""
        self._unanswered_since: float | None = None

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._prefetched = None
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    # -- metadata ---------------------------------------------------------------------------

    def metadata(self, topics: Sequence[str] | None) -> Cluster:
        """Brokers and partitions of ``topics`` (None: every topic); topics never created."""
        return self._retrying(lambda: self._metadata(topics), "Metadata")

    def _metadata(self, topics: Sequence[str] | None) -> Cluster:
        connection = self._bootstrap_connection()
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False}
        answer = self._call(connection, ApiKey.METADATA, body)
        brokers = {b.node_id: (b.host, b.port) for b in answer.brokers}
        partitions: dict[str, dict[int, int]] = {}
        internal = set()
        for topic in answer.topics:
            if topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                continue
            if topic.error_code in RETRIABLE:
                raise RetriableError(f"Metadata for {topic.name}: "
                                      f"{error_name(topic.error_code)}")
            if topic.error_code != ErrorCode.NONE:
                raise KafkaClientError(f"Metadata for topic {topic.name} failed: "
                                       f"{error_name(topic.error_code)}")
            partitions[topic.name] = {p.partition_index: p.leader_id for p in topic.partitions}
            if topic.is_internal:
                internal.add(topic.name)
            for p in topic.partitions:
                if p.leader_id in brokers:
                    self._leaders[TopicPartition(topic.name, p.partition_index)] = (
                        brokers[p.leader_id])
        return Cluster(brokers, partitions, frozenset(internal))

    # -- coordinators -----------------------------------------------------------------------

    def coordinator_request(self, key: str, key_type: CoordinatorType, api_key: ApiKey,
                            body: Mapping[str, Any], error: Callable[[Any], int]) -> Any:
        """Send ``body`` to the coordinator of ``key`` (FindCoordinator first) and return the
        answer; ``error(answer)`` gives its error code, and the coordinator errors
        (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS,
        CONCURRENT_TRANSACTIONS) are retried with a fresh lookup until the deadline."""
        def attempt() -> Any:
            _, address = self._coordinator(key, key_type)
            answer = self._call(self._connection(address), api_key, body)
            code = error(answer)
            if code in COORDINATOR_RETRIABLE:
                raise RetriableError(error_name(code))
            return answer

        return self._retrying(attempt, f"{api_name(api_key)} for {key!r}")

    def coordinator(self, key: str, key_type: CoordinatorType) -> tuple[int, Address]:
        """The node id and address of ``key``'s coordinator (FindCoordinator)."""
        return self._retrying(lambda: self._coordinator(key, key_type), "FindCoordinator")

    def _coordinator(self, key: str, key_type: CoordinatorType) -> tuple[int, Address]:
        body = {"key": key, "key_type": key_type}
        answer = self._call(self._bootstrap_connection(), ApiKey.FIND_COORDINATOR, body)
        if answer.error_code in COORDINATOR_RETRIABLE:
            raise RetriableError(f"FindCoordinator for {key!r}: {error_name(answer.error_code)}")
        if answer.error_code != ErrorCode.NONE:
            raise KafkaClientError(f"FindCoordinator for {key!r} failed: "
                                   f"{error_name(answer.error_code)}")
        return answer.node_id, (answer.host, answer.port)

    def admin_request(self, api_key: ApiKey, body: Mapping[str, Any]) -> Any:
        """An admin request any broker answers (the cluster's, as Kafka's admin client's
        least loaded node): sent to the lowest broker id the cluster lists."""
        brokers = self.metadata([]).brokers
        return self.broker_request(brokers[min(brokers)], api_key, body)

    def broker_request(self, address: Address, api_key: ApiKey, body: Mapping[str, Any]) -> Any:
        """Send ``body`` to the broker at ``address`` and return the answer."""
        return self._retrying(lambda: self._call(self._connection(address), api_key, body),
                              f"{api_name(api_key)} to {address[0]}:{address[1]}")

    def leader_request(self, tp: TopicPartition, api_key: ApiKey,
                       body: Mapping[str, Any]) -> Any:
        """Send ``body`` to the leader of ``tp`` and return the answer (one try per leader
        lookup; errors inside the answer are the caller's to read)."""
        return self._retrying(lambda: self._call(self._connection(self.leader_address(tp)),
                                                 api_key, body), f"{api_name(api_key)} {tp}")

    def leader_address(self, tp: TopicPartition) -> Address:
        if tp not in self._leaders:
            self._metadata([tp.topic])
        if tp not in self._leaders:
            raise RetriableError(f"no leader known for {tp}")
        return self._leaders[tp]

    # -- offsets ----------------------------------------------------------------------------

    def list_offsets(self, wanted: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Per partition, the offset ListOffsets gives for a timestamp (or
        EARLIEST_TIMESTAMP / LATEST_TIMESTAMP): -1 when no record is that recent."""
        found: dict[TopicPartition, int] = {}

        def attempt() -> None:
            by_leader: dict[Address, list[TopicPartition]] = {}
            for tp in sorted(wanted.keys() - found.keys()):
                by_leader.setdefault(self.leader_address(tp), []).append(tp)
            retriable = []
            for address, tps in by_leader.items():
                topics: dict[str, list[dict[str, int]]] = {}
                for tp in tps:
                    topics.setdefault(tp.topic, []).append(
                        {"partition_index": tp.partition, "current_leader_epoch": -1,
                         "timestamp": wanted[tp]})
                body = {"replica_id": -1, "isolation_level": self.config.isolation_level,
                        "topics": [
                    {"name": name, "partitions": parts} for name, parts in topics.items()]}
                answer = self._call(self._connection(address), ApiKey.LIST_OFFSETS, body)
                for topic in answer.topics:
                    for p in topic.partitions:
                        tp = TopicPartition(topic.name, p.partition_index)
                        if p.error_code == ErrorCode.NONE:
                            found[tp] = p.offset
                        elif p.error_code in RETRIABLE:
                            self._leaders.pop(tp, None)
                            retriable.append(f"{tp}: {error_name(p.error_code)}")
                        else:
                            raise KafkaClientError(f"ListOffsets for {tp} failed: "
                                                   f"{error_name(p.error_code)}")
            if retriable:
                raise RetriableError("ListOffsets " + ", ".join(retriable))

        self._retrying(attempt, "ListOffsets")
        return found

    def offsets_at(self, tps: Iterable[TopicPartition], timestamp: int) -> dict[TopicPartition,
                                                                              int]:
        """EARLIEST_TIMESTAMP or LATEST_TIMESTAMP offsets of ``tps``."""
        return self.list_offsets(dict.fromkeys(tps, timestamp))

    # -- fetch ------------------------------------------------------------------------------

    def fetch(self, tp: TopicPartition, offset: int, max_bytes: int) -> FetchedPartition:
        """One partition's Fetch answer at ``offset``, with retries.

        If ``prefetch`` sent exactly this request, its answer is read instead of sending
        another; a prefetch for something else is dropped (with its connection).
        """
        pending, self._prefetched = self._prefetched, None
        if pending is not None:
            if pending[:3] == (tp, offset, max_bytes):
                try:
                    return self._receive_fetch(pending[3], tp)
                except RetriableError as exc:
                    log.info("prefetch for %s failed: %s; retrying", tp, exc)
            else:
                self._drop(pending[3])
        return self._retrying(
            lambda: self._receive_fetch(self._send_fetch(tp, offset, max_bytes), tp),
            f"Fetch {tp} at offset {offset}")

    def prefetch(self, tp: TopicPartition, offset: int, max_bytes: int) -> None:
        """Send the Fetch a coming ``fetch(tp, offset, max_bytes)`` will read, so the
        broker works on it while the caller decodes the previous answer."""
        if self._prefetched is not None:
            self._drop(self._prefetched[3])
            self._prefetched = None
        try:
            self._prefetched = (tp, offset, max_bytes, self._send_fetch(tp, offset, max_bytes))
        except RetriableError as exc:
            log.info("prefetch for %s not sent: %s", tp, exc)

    def _send_fetch(self, tp: TopicPartition, offset: int, max_bytes: int) -> BrokerConnection:
        connection = self._connection(self.leader_address(tp))
        config = self.config
        body = {
            "replica_id": -1,
            "max_wait": timedelta(milliseconds=config.fetch_max_wait_ms),
            "min_bytes": config.fetch_min_bytes, "max_bytes": max_bytes,
            "isolation_level": config.isolation_level, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": tp.topic, "partitions": [{
                "partition": tp.partition, "current_leader_epoch": -1, "fetch_offset": offset,
                "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": "",
        }
        try:
            connection.send(ApiKey.FETCH, connection.versions[ApiKey.FETCH], body)
        except OSError as exc:
            self._failed(connection)
            raise RetriableError(f"Fetch to {connection.address}: {exc}") from exc
        return connection

    def _receive_fetch(self, connection: BrokerConnection, tp: TopicPartition) -> FetchedPartition:
        try:
            answer = connection.receive()
        except OSError as exc:
            self._failed(connection)
            raise RetriableError(f"Fetch from {connection.address}: {exc}") from exc
        top_error = getattr(answer, "error_code", ErrorCode.NONE)  # v7+
        if top_error != ErrorCode.NONE:
            raise KafkaClientError(f"Fetch for {tp} failed: {error_name(top_error)}")
        for topic in answer.responses:
            for p in topic.partitions:
                if topic.topic == tp.topic and p.partition_index == tp.partition:
                    if p.error_code in RETRIABLE:
                        self._leaders.pop(tp, None)
                        raise RetriableError(f"Fetch for {tp}: {error_name(p.error_code)}")
                    committed = self.config.isolation_level == IsolationLevel.READ_COMMITTED
                    return FetchedPartition(
                        p.error_code, p.high_watermark, p.records or b"",
                        p.last_stable_offset if committed else -1,
                        tuple((a.producer_id, a.first_offset)
                              for a in p.aborted_transactions or ()))
        raise KafkaClientError(f"broker {connection.address} did not answer for {tp}")

    # -- plumbing ---------------------------------------------------------------------------

    def _retrying(self, attempt: Callable[[], T], what: str) -> T:
        """``attempt()`` until it succeeds, retrying a ``RetriableError`` until the policy's
        timeout; the first retry is logged at INFO, the ones after it at DEBUG."""
        deadline = time.monotonic() + self.retry.timeout_s
        level = logging.INFO
        while True:
            try:
                return attempt()
            except RetriableError as exc:
                if time.monotonic() + self.retry.backoff_s > deadline:
                    raise KafkaClientError(f"{what} still failing after "
                                           f"{self.retry.timeout_s:g} s: {exc}") from exc
                log.log(level, "%s: %s; retrying for up to %g s", what, exc,
                        self.retry.timeout_s)
                level = logging.DEBUG
                time.sleep(self.retry.backoff_s)

    def _call(self, connection: BrokerConnection, api_key: int, body: Mapping[str, Any]) -> Any:
        if api_key not in connection.versions:
            raise KafkaClientError(f"broker {connection.address} does not serve "
                                   f"{api_name(api_key)}")
        if self._prefetched is not None and self._prefetched[3] is connection:
            self._prefetched = None  # the request below reads past (and drops) its answer
        try:
            return connection.request(api_key, connection.versions[api_key], body)
        except OSError as exc:
            self._failed(connection)
            if connection.answers == 1:  # only ApiVersions: a SASL listener, no login?
                host, _, port = connection.address.rpartition(":")
                self._refuse_for_good((host, int(port)), exc)
            raise RetriableError(f"{api_name(api_key)} to {connection.address}: {exc}") from exc

    def _drop(self, connection: BrokerConnection) -> None:
        connection.close()
        self._connections = {a: c for a, c in self._connections.items() if c is not connection}

    def _failed(self, connection: BrokerConnection) -> None:
        """The connection broke: drop it and whatever was learnt of its broker."""
        for address in [a for a, c in self._connections.items() if c is connection]:
            self._unreachable(address)
        self._drop(connection)

    def _unreachable(self, address: Address) -> None:
        """Nothing answers at ``address``: forget the leaderships cached there, so the next
        attempt asks Metadata who leads now (a dead leader's partitions move elsewhere)."""
        self._leaders = {tp: a for tp, a in self._leaders.items() if a != address}

    def _connection(self, address: Address) -> BrokerConnection:
        connection = self._connections.get(address)
        if connection is None:
            try:
                connection = BrokerConnection(*address, self.config)
            except OSError as exc:
                self._refuse_for_good(address, exc)
                self._unreachable(address)
                raise RetriableError(f"cannot connect to {address[0]}:{address[1]}: "
                                      f"{exc}") from exc
            self._connections[address] = connection
            self._answered = True
        return connection

    def _refuse_for_good(self, address: Address, exc: OSError) -> None:
        failure = refused_for_good(address, exc, self.config.security)
        if failure is not None:
            raise failure from None

    def _bootstrap_connection(self) -> BrokerConnection:
        """Any open connection, else the first bootstrap server that accepts one."""
        if self._connections:
            return next(iter(self._connections.values()))
        errors = []
        for address in self.config.bootstrap:
            try:
                return self._connection(address)
            except RetriableError as exc:
                errors.append(str(exc))
        message = "no bootstrap server reachable: " + "; ".join(errors)
        patience = self.retry.bootstrap_timeout_s
        if not self._answered and patience is not None:
            now = time.monotonic()
            if self._unanswered_since is None:
                self._unanswered_since = now
            if now - self._unanswered_since >= patience:
                raise KafkaClientError(f"no broker answered at bootstrap servers "
                                       f"{self.config.servers} within {patience:g} s: "
                                       + "; ".join(errors))
        raise RetriableError(message)


def check_bootstrap(config: ClientConfig, timeout_s: float = BOOTSTRAP_TIMEOUT_S) -> None:
    """Fail unless a bootstrap server of ``config`` answers Metadata (logged in as
    ``config.security`` says) within ``timeout_s``: ``KafkaClientError`` naming the servers,
    or ``ConnectionFailure`` for a refused login or a protocol mismatch."""
    patience = RetryPolicy(max(timeout_s, config.request_timeout_s), config.retry_backoff_s,
                           bootstrap_timeout_s=timeout_s)
    with KafkaClient(config, patience) as client:
        client.metadata([])
