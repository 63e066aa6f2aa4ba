"""The transaction coordinator's markers in a cluster (Kafka's TransactionMarkerChannelManager):
each marker goes to the broker that leads its partition, wherever it is.

Invariants:
- A transaction's partitions are grouped by their current leader (the ``ReplicaManager``'s
  view, which ZooKeeper's watches keep fresh); each leader gets one WriteTxnMarkers
  request with all of them, the leaders in parallel; a partition this broker leads is
  written here directly (``markers.write_marker``), without a connection to itself.
- One connection per broker, one request at a time on it (requests of concurrent
  transactions to the same broker wait their turn); a connection that fails or does not
  answer within ``REQUEST_TIMEOUT_S`` is closed and opened again for the next request.
- ``write`` returns only once every marker is written (the leader answered NONE, which in
  a cluster means its high watermark passed the marker) or given up (``markers.GIVEN_UP``:
  the partition is gone, or a newer producer or coordinator ended it). Anything else (no
  live leader, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, a dead
  broker) is retried after ``RETRY_BACKOFF_S`` with the leaders as then known; the
  coordinator cancels the call when it stops coordinating the transaction.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from typing import TYPE_CHECKING

from sparklog.broker.markers import GIVEN_UP, log_marker_error, write_marker
from sparklog.broker.replica_fetcher import LeaderConnection
from sparklog.cluster.layout import NO_LEADER, BrokerInfo
from sparklog.errors import ErrorCode
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from sparklog.broker.replication import ReplicaManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

WRITE_TXN_MARKERS_VERSION = 1
REQUEST_TIMEOUT_S = 15.0
RETRY_BACKOFF_S = 0.1


class MarkerChannel:
    def __init__(self, manager: ReplicaManager) -> None:
        self.manager = manager
        self._connections: dict[int, tuple[BrokerInfo, LeaderConnection]] = {}
        self._turns: dict[int, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def write(self, partitions: list[TopicPartition], producer_id: int,
                    producer_epoch: int, commit: bool, coordinator_epoch: int) -> None:
        """Write the markers of one transaction into every partition (see the module)."""
        pending = set(partitions)
        while True:
            by_leader = self._by_leader(pending)
            answers = await asyncio.gather(*(
                self._send(leader, tps, producer_id, producer_epoch, commit, coordinator_epoch)
                for leader, tps in by_leader.items()))
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

    async def _send(self, leader: int, partitions: list[TopicPartition], producer_id: int,
                    producer_epoch: int, commit: bool, coordinator_epoch: int
                    ) -> dict[TopicPartition, ErrorCode]:
        """One leader's markers: each partition's error (NETWORK_EXCEPTION when the
        request did not get through)."""
        if leader == self.manager.broker_id:
            codes = await asyncio.gather(*(
                write_marker(self.manager.broker, tp, producer_id, producer_epoch, commit,
                             coordinator_epoch) for tp in partitions))
            return dict(zip(partitions, codes, strict=True))
        topics: dict[str, list[int]] = defaultdict(list)
        for topic, partition in partitions:
            topics[topic].append(partition)
        body = {"markers": [{
            "producer_id": producer_id, "producer_epoch": producer_epoch,
            "transaction_result": commit, "coordinator_epoch": coordinator_epoch,
            "topics": [{"name": t, "partition_indexes": tuple(ps)} for t, ps in topics.items()]}]}
        async with self._turns[leader]:
            try:
                connection = await self._connection(leader)
                response = await asyncio.wait_for(connection.request(
                    ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body),
                    REQUEST_TIMEOUT_S)
            except (OSError, EOFError, asyncio.IncompleteReadError, TimeoutError) as exc:
                log.info("WriteTxnMarkers to broker %d failed (%s)", leader, exc or
                         type(exc).__name__)
                self._close(leader)
                return dict.fromkeys(partitions, ErrorCode.NETWORK_EXCEPTION)
        answered = {(t.name, p.partition_index): ErrorCode(p.error_code)
                    for marker in response.markers for t in marker.topics for p in t.partitions}
        return {tp: answered.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in partitions}

    async def _connection(self, broker_id: int) -> LeaderConnection:
        info = self.manager.live.get(broker_id)
        if info is None:
            raise OSError(f"broker {broker_id} is not alive")
        known = self._connections.get(broker_id)
        if known is not None and known[0] == info:
            return known[1]
        self._close(broker_id)
        connection = await LeaderConnection.open(
            info.host, info.port, f"sparklog-txn-markers-{self.manager.broker_id}")
        self._connections[broker_id] = (info, connection)
        return connection

    def _close(self, broker_id: int) -> None:
        known = self._connections.pop(broker_id, None)
        if known is not None:
            known[1].close()

    def close(self) -> None:
        for broker_id in list(self._connections):
            self._close(broker_id)
