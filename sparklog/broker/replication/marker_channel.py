"""The transaction coordinator's markers (Kafka's TransactionMarkerChannelManager): each marker
goes to the broker that leads its partition, wherever it is (a single node: itself).

Invariants:
- A transaction's partitions are grouped by their current leader (the ``ReplicaManager``'s
  view, which ZooKeeper's watches keep fresh), the leaders served in parallel; a partition
  this broker leads is written here directly (``ReplicaManager.write_marker``), without a
  connection to itself; ``fault_point("txn_marker_written", n)`` follows the n-th of those
  written, so a crash test can stop the broker between two markers.
- Connections go to each broker's endpoint of the inter-broker listener, logged in as that
  listener asks (``inter_broker``), as the replica fetcher's do; with an authorizer the
  leader requires CLUSTER_ACTION of this broker's principal for WriteTxnMarkers.
- One connection per broker and one request in flight on it: the markers of every
  transaction waiting for a broker (several transactions completing at once) go together
  in its next WriteTxnMarkers request, one entry per transaction, answered in order.
- A request is abandoned (its connection closed, opened again for the next) when the
  connection fails, when the broker leaves the live brokers or changes address, or after
  ``REQUEST_TIMEOUT_S``: a dead or stopped leader never holds a transaction longer than
  ZooKeeper takes to notice it.
- ``write`` returns only once every marker is written (the leader answered NONE, which in
  a cluster means its high watermark passed the marker) or given up (``markers.GIVEN_UP``:
  the partition is gone, or a newer producer or coordinator ended it). Anything else (no
  live leader, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, a dead
  broker) is retried after ``RETRY_BACKOFF_S`` with the leaders as then known; the
  coordinator cancels the call when it stops coordinating the transaction.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import defaultdict
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sparklog.broker.replication.inter_broker import InterBrokerSecurity, LeaderConnection
from sparklog.broker.replication.markers import GIVEN_UP, log_marker_error
from sparklog.cluster.layout import NO_LEADER, BrokerInfo
from sparklog.errors import ErrorCode
from sparklog.faults import fault_point
from sparklog.protocol.versions import ApiKey

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
Answer = dict[TopicPartition, ErrorCode]

WRITE_TXN_MARKERS_VERSION = 1
REQUEST_TIMEOUT_S = 30.0  # Kafka's request.timeout.ms
LIVENESS_CHECK_S = 0.2
RETRY_BACKOFF_S = 0.1


class Leader(Protocol):
    @property
    def leader(self) -> int: ...


class ReplicaManager(Protocol):
    """What the channel uses of the replica manager that owns it."""

    broker_id: int
    live: dict[int, BrokerInfo]
    inter_broker: InterBrokerSecurity | None
    assignments: dict[str, dict[int, tuple[int, ...]]]

    @property
    def partitions(self) -> Mapping[TopicPartition, Leader]: ...

    async def write_marker(self, tp: TopicPartition, producer_id: int, producer_epoch: int,
                           commit: bool, coordinator_epoch: int) -> ErrorCode: ...


@dataclass
class _Marker:
    """One transaction's markers for one broker, waiting to be sent."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: list[TopicPartition]
    answer: asyncio.Future[Answer] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())

    def entry(self) -> dict[str, Any]:
        topics: dict[str, list[int]] = defaultdict(list)
        for topic, partition in self.partitions:
            topics[topic].append(partition)
        return {"producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
                "transaction_result": self.commit, "coordinator_epoch": self.coordinator_epoch,
                "topics": [{"name": t, "partition_indexes": tuple(ps)}
                           for t, ps in topics.items()]}


class MarkerChannel:
    def __init__(self, manager: ReplicaManager) -> None:
        self.manager = manager
        self._connections: dict[int, tuple[BrokerInfo, LeaderConnection]] = {}
        self._queues: dict[int, list[_Marker]] = {}
        self._senders: dict[int, asyncio.Task[None]] = {}

    async def write(self, partitions: list[TopicPartition], producer_id: int,
                    producer_epoch: int, commit: bool, coordinator_epoch: int) -> None:
        """Write the markers of one transaction into every partition (see the module)."""
        pending = set(partitions)
        while True:
            answers = await asyncio.gather(*(
                self._send(leader, _Marker(producer_id, producer_epoch, commit,
                                           coordinator_epoch, tps))
                for leader, tps in self._by_leader(pending).items()))
            for answer in answers:
                for tp, error in answer.items():
                    if error == ErrorCode.NONE or error in GIVEN_UP:
                        pending.discard(tp)
                    if error in GIVEN_UP:
                        log_marker_error(tp, producer_id, producer_epoch, error)
            if not pending:
                return
            log.info("markers of producer %d: %d partition(s) left, retrying", producer_id,
                     len(pending))
            await asyncio.sleep(RETRY_BACKOFF_S)

    def _by_leader(self, pending: set[TopicPartition]) -> dict[int, list[TopicPartition]]:
        """The partitions of ``pending`` by live leader (those without one wait a round;
        those of a deleted topic are dropped from ``pending``)."""
        manager = self.manager
        found: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in sorted(pending):
            if tp[0] not in manager.assignments:
                log_marker_error(tp, -1, -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                pending.discard(tp)
                continue
            replica = manager.partitions.get(tp)
            leader = NO_LEADER if replica is None else replica.leader
            if leader == manager.broker_id or leader in manager.live:
                found[leader].append(tp)
        return found

    async def _send(self, leader: int, marker: _Marker) -> Answer:
        """One leader's markers of a transaction: each partition's error
        (NETWORK_EXCEPTION when the request did not get through)."""
        if leader == self.manager.broker_id:
            written = itertools.count()

            async def write(tp: TopicPartition) -> ErrorCode:
                code = await self.manager.write_marker(tp, marker.producer_id,
                                                       marker.producer_epoch, marker.commit,
                                                       marker.coordinator_epoch)
                fault_point("txn_marker_written", next(written))
                return code

            codes = await asyncio.gather(*(write(tp) for tp in marker.partitions))
            return dict(zip(marker.partitions, codes, strict=True))
        self._queues.setdefault(leader, []).append(marker)
        if leader not in self._senders:
            self._senders[leader] = asyncio.ensure_future(self._drain(leader))
        return await marker.answer

    async def _drain(self, broker_id: int) -> None:
        """Send what waits for ``broker_id``, one request at a time, until nothing does."""
        batch: list[_Marker] = []
        try:
            while batch := [m for m in self._queues.pop(broker_id, []) if not m.answer.done()]:
                answers = await self._request(broker_id, batch)
                for marker, answer in zip(batch, answers, strict=True):
                    if not marker.answer.done():
                        marker.answer.set_result(answer)
        finally:
            del self._senders[broker_id]
            for marker in batch:  # cancelled (the channel closed) in the middle of a request
                marker.answer.cancel()

    async def _request(self, broker_id: int, batch: list[_Marker]) -> list[Answer]:
        body = {"markers": [marker.entry() for marker in batch]}
        log.debug("WriteTxnMarkers to broker %d: %d transaction(s)", broker_id, len(batch))
        try:
            info, connection = await self._connection(broker_id)
            response = await self._answer(broker_id, info, connection.request(
                ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body))
        except (OSError, EOFError, asyncio.IncompleteReadError, TimeoutError) as exc:
            log.info("WriteTxnMarkers to broker %d failed (%s)", broker_id,
                     exc or type(exc).__name__)
            self._close(broker_id)
            return [dict.fromkeys(m.partitions, ErrorCode.NETWORK_EXCEPTION) for m in batch]
        answers = []
        for n, marker in enumerate(batch):
            result = response.markers[n] if n < len(response.markers) else None
            found = {} if result is None else {
                (t.name, p.partition_index): ErrorCode(p.error_code)
                for t in result.topics for p in t.partitions}
            answers.append({tp: found.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
                            for tp in marker.partitions})
        return answers

    async def _answer(self, broker_id: int, info: BrokerInfo, request: Awaitable[Any]) -> Any:
        """``request``'s answer, unless the broker stops being the live ``info`` first or
        ``REQUEST_TIMEOUT_S`` passes (TimeoutError)."""
        task = asyncio.ensure_future(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + REQUEST_TIMEOUT_S
        try:
            while not task.done():
                await asyncio.wait({task}, timeout=LIVENESS_CHECK_S)
                if not task.done() and (self.manager.live.get(broker_id) != info
                                        or loop.time() > deadline):
                    raise TimeoutError(f"broker {broker_id} left or did not answer")
            return task.result()
        finally:
            task.cancel()

    async def _connection(self, broker_id: int) -> tuple[BrokerInfo, LeaderConnection]:
        info = self.manager.live.get(broker_id)
        if info is None:
            raise OSError(f"broker {broker_id} is not alive")
        known = self._connections.get(broker_id)
        if known is not None and known[0] == info:
            return known
        self._close(broker_id)
        security = self.manager.inter_broker
        assert security is not None  # another broker's leader: a cluster broker
        endpoint = info.endpoint(security.listener)
        if endpoint is None:
            raise OSError(f"broker {broker_id} has no {security.listener} listener")
        connection = await LeaderConnection.open(
            endpoint.host, endpoint.port, f"sparklog-txn-markers-{self.manager.broker_id}",
            security)
        self._connections[broker_id] = (info, connection)
        return info, connection

    def _close(self, broker_id: int) -> None:
        known = self._connections.pop(broker_id, None)
        if known is not None:
            known[1].close()

    def close(self) -> None:
        for queue in self._queues.values():
            for marker in queue:
                marker.answer.cancel()
        self._queues.clear()
        for sender in list(self._senders.values()):
            sender.cancel()
        for broker_id in list(self._connections):
            self._close(broker_id)
