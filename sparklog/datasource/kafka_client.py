"""A small synchronous Kafka-protocol client: what the source needs, for any Kafka broker.

It speaks plain Kafka (no sparklog-private API): ApiVersions, Metadata (to find partition
leaders and topics), ListOffsets (earliest, latest, by timestamp) and Fetch (raw record
batches). Requests and responses are kio (0.6) dataclasses; only non-flexible versions are
used (Metadata v1-8, ListOffsets v1-5, Fetch v4-11), which Apache Kafka 3.x and 4.x accept.

Invariants:
- Each request goes to the leader of its partitions, found with Metadata; a retriable error
  (not leader, leader unavailable, unknown topic after a create, timeouts, a dropped
  connection) drops the cached leader and the connection, waits ``retry.backoff`` and
  retries until the ``RetryPolicy`` deadline; then ``KafkaClientError`` is raised, naming
  the broker or partition and the Kafka error.
- The highest version inside our range that the broker advertises is used; a broker outside
  the range is refused with a message naming the API and both ranges.
- Responses on one connection are read in request order (Kafka answers in order), so a
  caller may send the next Fetch before it decodes the previous answer (``prefetch``).
- Nothing here must survive pickling: a ``KafkaClient`` is opened where it is used (driver
  or task) from a ``ClientConfig`` and closed with ``close()`` or a ``with`` block.
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar

from sparklog.datasource.client_config import Address, ClientConfig, RetryPolicy
from sparklog.datasource.offsets import TopicPartition
from sparklog.errors import ErrorCode
from sparklog.protocol.codec import decode_response, encode_request, request_class
from sparklog.protocol.entities import build

log = logging.getLogger(__name__)

T = TypeVar("T")

API_FETCH, API_LIST_OFFSETS, API_METADATA, API_VERSIONS = 1, 2, 3, 18
_RANGES = {API_FETCH: (4, 11), API_LIST_OFFSETS: (1, 5), API_METADATA: (1, 8)}
_API_NAMES = {API_FETCH: "Fetch", API_LIST_OFFSETS: "ListOffsets", API_METADATA: "Metadata"}

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1

_RETRIABLE = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.REPLICA_NOT_AVAILABLE,
})

_SIZE = struct.Struct(">i")

class KafkaClientError(RuntimeError):
    """A request failed for good: the broker, API or partition and the Kafka error named."""


class _RetriableError(Exception):
    """A failure worth retrying after a metadata refresh (wrapped for the retry loop)."""


# -- one connection -------------------------------------------------------------------------


class BrokerConnection:
    """A blocking connection to one broker, with the API versions it was negotiated at."""

    def __init__(self, host: str, port: int, config: ClientConfig) -> None:
        self.address = f"{host}:{port}"
        self._client_id = config.client_id.encode()
        self._sock = socket.create_connection((host, port), timeout=config.request_timeout_s)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._correlation = 0
        self._pending: list[tuple[int, int, int]] = []  # (correlation id, api key, version)
        self.versions = self._negotiate()

    def _negotiate(self) -> dict[int, int]:
        answer = self.request(API_VERSIONS, 0, {})
        if answer.error_code != ErrorCode.NONE:
            raise KafkaClientError(f"broker {self.address}: ApiVersions failed with error "
                                   f"{error_name(answer.error_code)}")
        offered = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        versions = {}
        for key, (low, high) in _RANGES.items():
            theirs = offered.get(key)
            if theirs is None or theirs[1] < low or theirs[0] > high:
                raise KafkaClientError(
                    f"broker {self.address} serves {_API_NAMES[key]} "
                    f"{'not at all' if theirs is None else f'v{theirs[0]}-{theirs[1]}'}; the "
                    f"sparklog source needs a version in v{low}-{high}")
            versions[key] = min(high, theirs[1])
        return versions

    def send(self, api_key: int, version: int, body: Mapping[str, Any]) -> None:
        self._correlation += 1
        request = build(request_class(api_key, version), body)
        self._sock.sendall(encode_request(api_key, version, self._correlation, self._client_id,
                                          request))
        self._pending.append((self._correlation, api_key, version))

    def receive(self) -> Any:
        """The answer to the oldest request sent and not yet received."""
        correlation, api_key, version = self._pending.pop(0)
        (size,) = _SIZE.unpack(self._read_exactly(4))
        frame = self._read_exactly(size)
        (got,) = _SIZE.unpack_from(frame)
        if got != correlation:
            raise ConnectionError(f"broker {self.address} answered correlation id {got}, "
                                  f"expected {correlation}")
        return decode_response(api_key, version, frame)

    def request(self, api_key: int, version: int, body: Mapping[str, Any]) -> Any:
        """Send and read the answer; answers to earlier requests still unread are dropped."""
        self.send(api_key, version, body)
        while len(self._pending) > 1:
            self.receive()
        return self.receive()

    def _read_exactly(self, size: int) -> memoryview:
        buffer = bytearray(size)
        view = memoryview(buffer)
        got = 0
        while got < size:
            n = self._sock.recv_into(view[got:])
            if n == 0:
                raise ConnectionError(f"broker {self.address} closed the connection")
            got += n
        return view.toreadonly()

    def close(self) -> None:
        self._sock.close()


# -- the client -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cluster:
    """What Metadata said: brokers, and each topic's partitions with their leader node."""

    brokers: Mapping[int, Address]
    topics: Mapping[str, Mapping[int, int]]
    internal: frozenset[str] = frozenset()

    def partitions(self, topics: Iterable[str]) -> list[TopicPartition]:
        return sorted(TopicPartition(t, p) for t in topics for p in self.topics.get(t, ()))


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """One partition of a Fetch answer: raw record batches (the last may be cut short)."""

    error_code: int
    high_watermark: int
    records: bytes


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
        answer = self._call(connection, API_METADATA, body)
        brokers = {b.node_id: (b.host, b.port) for b in answer.brokers}
        partitions: dict[str, dict[int, int]] = {}
        internal = set()
        for topic in answer.topics:
            if topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                continue
            if topic.error_code in _RETRIABLE:
                raise _RetriableError(f"Metadata for {topic.name}: "
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

    def leader_address(self, tp: TopicPartition) -> Address:
        if tp not in self._leaders:
            self._metadata([tp.topic])
        if tp not in self._leaders:
            raise _RetriableError(f"no leader known for {tp}")
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
                body = {"replica_id": -1, "isolation_level": 0, "topics": [
                    {"name": name, "partitions": parts} for name, parts in topics.items()]}
                answer = self._call(self._connection(address), API_LIST_OFFSETS, body)
                for topic in answer.topics:
                    for p in topic.partitions:
                        tp = TopicPartition(topic.name, p.partition_index)
                        if p.error_code == ErrorCode.NONE:
                            found[tp] = p.offset
                        elif p.error_code in _RETRIABLE:
                            self._leaders.pop(tp, None)
                            retriable.append(f"{tp}: {error_name(p.error_code)}")
                        else:
                            raise KafkaClientError(f"ListOffsets for {tp} failed: "
                                                   f"{error_name(p.error_code)}")
            if retriable:
                raise _RetriableError("ListOffsets " + ", ".join(retriable))

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
                except _RetriableError as exc:
                    log.info("prefetch for %s failed: %s; retrying", tp, exc)
            else:
                self._drop(pending[3], None)
        return self._retrying(
            lambda: self._receive_fetch(self._send_fetch(tp, offset, max_bytes), tp),
            f"Fetch {tp} at offset {offset}")

    def prefetch(self, tp: TopicPartition, offset: int, max_bytes: int) -> None:
        """Send the Fetch a coming ``fetch(tp, offset, max_bytes)`` will read, so the
        broker works on it while the caller decodes the previous answer."""
        if self._prefetched is not None:
            self._drop(self._prefetched[3], None)
            self._prefetched = None
        try:
            self._prefetched = (tp, offset, max_bytes, self._send_fetch(tp, offset, max_bytes))
        except _RetriableError as exc:
            log.info("prefetch for %s not sent: %s", tp, exc)

    def _send_fetch(self, tp: TopicPartition, offset: int, max_bytes: int) -> BrokerConnection:
        connection = self._connection(self.leader_address(tp))
        config = self.config
        body = {
            "replica_id": -1,
            "max_wait": timedelta(milliseconds=config.fetch_max_wait_ms),
            "min_bytes": config.fetch_min_bytes, "max_bytes": max_bytes,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": tp.topic, "partitions": [{
                "partition": tp.partition, "current_leader_epoch": -1, "fetch_offset": offset,
                "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
            "forgotten_topics_data": [], "rack_id": "",
        }
        try:
            connection.send(API_FETCH, connection.versions[API_FETCH], body)
        except OSError as exc:
            self._drop(connection, tp)
            raise _RetriableError(f"Fetch to {connection.address}: {exc}") from exc
        return connection

    def _receive_fetch(self, connection: BrokerConnection, tp: TopicPartition) -> FetchedPartition:
        try:
            answer = connection.receive()
        except OSError as exc:
            self._drop(connection, tp)
            raise _RetriableError(f"Fetch from {connection.address}: {exc}") from exc
        top_error = getattr(answer, "error_code", ErrorCode.NONE)  # v7+
        if top_error != ErrorCode.NONE:
            raise KafkaClientError(f"Fetch for {tp} failed: {error_name(top_error)}")
        for topic in answer.responses:
            for p in topic.partitions:
                if topic.topic == tp.topic and p.partition_index == tp.partition:
                    if p.error_code in _RETRIABLE:
                        self._leaders.pop(tp, None)
                        raise _RetriableError(f"Fetch for {tp}: {error_name(p.error_code)}")
                    return FetchedPartition(p.error_code, p.high_watermark, p.records or b"")
        raise KafkaClientError(f"broker {connection.address} did not answer for {tp}")

    # -- plumbing ---------------------------------------------------------------------------

    def _retrying(self, attempt: Callable[[], T], what: str) -> T:
        deadline = time.monotonic() + self.retry.timeout_s
        while True:
            try:
                return attempt()
            except _RetriableError as exc:
                if time.monotonic() + self.retry.backoff_s > deadline:
                    raise KafkaClientError(f"{what} still failing after "
                                           f"{self.retry.timeout_s:g} s: {exc}") from exc
                log.info("%s: %s; retrying", what, exc)
                time.sleep(self.retry.backoff_s)

    def _call(self, connection: BrokerConnection, api_key: int, body: Mapping[str, Any]) -> Any:
        if self._prefetched is not None and self._prefetched[3] is connection:
            self._prefetched = None  # the request below reads past (and drops) its answer
        try:
            return connection.request(api_key, connection.versions[api_key], body)
        except OSError as exc:
            self._drop(connection, None)
            raise _RetriableError(f"{_API_NAMES[api_key]} to {connection.address}: {exc}") from exc

    def _drop(self, connection: BrokerConnection, tp: TopicPartition | None) -> None:
        connection.close()
        self._connections = {a: c for a, c in self._connections.items() if c is not connection}
        if tp is not None:
            self._leaders.pop(tp, None)

    def _connection(self, address: Address) -> BrokerConnection:
        connection = self._connections.get(address)
        if connection is None:
            try:
                connection = BrokerConnection(*address, self.config)
            except OSError as exc:
                raise _RetriableError(f"cannot connect to {address[0]}:{address[1]}: "
                                      f"{exc}") from exc
            self._connections[address] = connection
        return connection

    def _bootstrap_connection(self) -> BrokerConnection:
        """Any open connection, else the first bootstrap server that accepts one."""
        if self._connections:
            return next(iter(self._connections.values()))
        errors = []
        for address in self.config.bootstrap:
            try:
                return self._connection(address)
            except _RetriableError as exc:
                errors.append(str(exc))
        raise _RetriableError("no bootstrap server reachable: " + "; ".join(errors))


def error_name(code: int) -> str:
    """Kafka's name of an error code, and the code: ``NOT_LEADER_OR_FOLLOWER (6)``."""
    try:
        return f"{ErrorCode(code).name.upper()} ({code})"
    except ValueError:
        return f"error {code}"
