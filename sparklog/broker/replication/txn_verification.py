"""A partition leader's questions to the transaction coordinator before it appends a
transactional batch (Kafka's ``AddPartitionsToTxnManager``, KIP-890).

Invariants:
- ``verify`` asks the coordinator of the transactional id whether partitions are in the
  producer's ongoing transaction (``add=False``: AddPartitionsToTxn v5 ``verify_only``,
  KIP-890 part 1) or adds them to it (``add=True``: a transaction.version 2 client's
  implicit add, KIP-890 part 2), and answers each partition's error as the coordinator
  gave it. A coordinator on this broker is called directly; another is sent
  AddPartitionsToTxn v5 over the inter-broker listener (one connection per broker, one
  request at a time on it, abandoned after ``REQUEST_TIMEOUT_S``). No live coordinator is
  COORDINATOR_NOT_AVAILABLE; a request that did not get through NETWORK_EXCEPTION.
- ``client_error`` translates an answer into what the asking request's client knows, as
  Kafka's ReplicaManager and AddPartitionsToTxnManager do: PRODUCER_FENCED is
  INVALID_PRODUCER_EPOCH; TRANSACTION_ABORTABLE is INVALID_TXN_STATE for a client that
  predates it; a refused CLUSTER_ACTION is INVALID_TXN_STATE; the retriable coordinator
  errors (CONCURRENT_TRANSACTIONS, NETWORK_EXCEPTION, COORDINATOR_LOAD_IN_PROGRESS,
  COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR) become the caller's retriable error (Produce:
  NOT_ENOUGH_REPLICAS, which every producer retries without a metadata refresh).
- Nothing here decides an append: the log refuses an unverified transactional batch
  (``storage.producer_state``); this only asks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

from sparklog.broker.replication.inter_broker import InterBrokerSecurity, LeaderConnection
from sparklog.cluster.layout import BrokerInfo
from sparklog.coordinator.txn_records import TV_2
from sparklog.errors import ErrorCode
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from sparklog.coordinator.txn_coordinator import TransactionCoordinator

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
ADD_PARTITIONS_TO_TXN_VERSION = 5
REQUEST_TIMEOUT_S = 10.0
RETRIABLE = frozenset({ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NETWORK_EXCEPTION,
                       ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                       ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR})


class ReplicaManager(Protocol):
    broker_id: int
    inter_broker: InterBrokerSecurity | None

    @property
    def local_txn_coordinator(self) -> TransactionCoordinator: ...

    async def txn_coordinator(self, transactional_id: str) -> BrokerInfo | None: ...


def client_error(error: ErrorCode, *, abortable_known: bool,
                 retriable_as: ErrorCode = ErrorCode.NOT_ENOUGH_REPLICAS) -> ErrorCode:
    """A verification's answer as the asking client knows it (see the module)."""
    if error == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if error == ErrorCode.TRANSACTION_ABORTABLE and not abortable_known:
        return ErrorCode.INVALID_TXN_STATE
    if error == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
        return ErrorCode.INVALID_TXN_STATE
    if error in RETRIABLE:
        return retriable_as
    return error


class TxnVerifier:
    def __init__(self, manager: ReplicaManager) -> None:
        self.manager = manager
        self._connections: dict[int, tuple[BrokerInfo, LeaderConnection]] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Iterable[TopicPartition], *, add: bool
                     ) -> dict[TopicPartition, ErrorCode]:
        """Each partition's answer from the id's coordinator (see the module)."""
        wanted = list(dict.fromkeys(partitions))
        info = await self.manager.txn_coordinator(transactional_id)
        if info is None:
            return dict.fromkeys(wanted, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if info.broker_id == self.manager.broker_id:
            coordinator = self.manager.local_txn_coordinator
            if add:
                return await coordinator.add_partitions(transactional_id, producer_id,
                                                        producer_epoch, wanted, TV_2)
            return coordinator.verify_partitions(transactional_id, producer_id,
                                                 producer_epoch, wanted)
        topics: dict[str, list[int]] = {}
        for topic, partition in wanted:
            topics.setdefault(topic, []).append(partition)
        body = {"transactions": [{
            "transactional_id": transactional_id, "producer_id": producer_id,
            "producer_epoch": producer_epoch, "verify_only": not add,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}]}
        try:
            response = await self._request(info, body)
        except (OSError, EOFError, asyncio.IncompleteReadError, TimeoutError) as exc:
            log.info("AddPartitionsToTxn to broker %d failed (%s)", info.broker_id,
                     exc or type(exc).__name__)
            self._close(info.broker_id)
            return dict.fromkeys(wanted, ErrorCode.NETWORK_EXCEPTION)
        if response.error_code != ErrorCode.NONE:
            return dict.fromkeys(wanted, ErrorCode(response.error_code))
        found = {(t.name, p.partition_index): ErrorCode(p.partition_error_code)
                 for result in response.results_by_transaction for t in result.topic_results
                 for p in t.results_by_partition}
        return {tp: found.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in wanted}

    async def _request(self, info: BrokerInfo, body: dict[str, Any]) -> Any:
        lock = self._locks.setdefault(info.broker_id, asyncio.Lock())
        async with lock:
            known = self._connections.get(info.broker_id)
            if known is None or known[0] != info:
                self._close(info.broker_id)
                security = self.manager.inter_broker
                endpoint = None if security is None else info.endpoint(security.listener)
                if security is None or endpoint is None:
                    raise OSError(f"broker {info.broker_id} has no inter-broker endpoint")
                connection = await asyncio.wait_for(LeaderConnection.open(
                    endpoint.host, endpoint.port,
                    f"sparklog-txn-verification-{self.manager.broker_id}", security),
                    REQUEST_TIMEOUT_S)
                known = self._connections[info.broker_id] = (info, connection)
            return await asyncio.wait_for(known[1].request(
                ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_TO_TXN_VERSION, body),
                REQUEST_TIMEOUT_S)

    def _close(self, broker_id: int) -> None:
        known = self._connections.pop(broker_id, None)
        if known is not None:
            known[1].close()

    def close(self) -> None:
        for broker_id in list(self._connections):
            self._close(broker_id)
