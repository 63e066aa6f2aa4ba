"""The broker's state: one owner of the logs, producer ids, fetch waiters and the node address.

Invariants:
- Every request handler reaches state only through ``Broker``; all of it is touched from the
  event loop thread, so handlers need no locks.
- Without ``zookeeper.connect`` this is a single-node cluster: the node is the leader of
  every partition with leader epoch ``LEADER_EPOCH``, the only replica and the only in-sync
  replica; the high watermark is the log end offset (nothing is acknowledged before it is
  in the log). With it, ``cluster`` (``replication.replica_manager.ReplicaManager``)
  says who leads what, and handlers ask it first; ``get_log`` of a partition without a replica here
  answers what Kafka answers (NOT_LEADER_OR_FOLLOWER, or UNKNOWN_TOPIC_OR_PARTITION).
- Producer ids are handed out from blocks whose end is persisted before any id of the block
  is used, so ids are never reused across restarts; in a cluster the blocks come from
  ZooKeeper's ``/latest_producer_id_block`` (compare-and-set), unique across brokers, fetched
  in the default executor (never on the event loop), one fetch at a time.
- ``notify_append`` wakes every fetch waiting on that partition; waiting fetches register
  futures and never poll.
- The group and transaction coordinators are started before the first request is served
  (a single node replays every partition of ``__consumer_offsets`` and
  ``__transaction_state`` then; in a cluster each partition is loaded when this broker
  becomes its leader), and stopped before the logs close.
- The transaction coordinator's markers are written here directly on a single node, and
  through the cluster's ``MarkerChannel`` (to every partition's leader) in a cluster; its
  writes to ``__transaction_state`` wait for the ISR there (``TXN_REPLICATION_TIMEOUT_S``).
- ``host`` and ``port`` (what Metadata and FindCoordinator name) are the advertised address
  of the listener the current request came in on (``ADVERTISED``, set per connection by the
  server), as in Kafka; outside a request, the first listener's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING

from sparklog.broker.config import BrokerConfig
from sparklog.broker.fault_hooks import ACTIVE, Faults
from sparklog.broker.internal_topics import LogTopic
from sparklog.broker.replication.markers import local_marker_writer
from sparklog.broker.security.broker_security import BrokerSecurity
from sparklog.coordinator.group_coordinator import GroupConfig, GroupCoordinator
from sparklog.coordinator.group_records import OFFSETS_TOPIC
from sparklog.coordinator.offsets_store import OffsetsStore
from sparklog.coordinator.txn_coordinator import TransactionCoordinator, TxnConfig
from sparklog.coordinator.txn_records import TRANSACTION_TOPIC
from sparklog.errors import ErrorCode, KafkaError, UnknownTopicOrPartitionError
from sparklog.storage.checkpoint import write_atomically
from sparklog.storage.log import PartitionLog
from sparklog.storage.log_manager import LogManager, TopicMetadata

if TYPE_CHECKING:
    from sparklog.broker.replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

LEADER_EPOCH = 0
PRODUCER_ID_BLOCK = 1000
PRODUCER_ID_FILE = "producer-id-block"
TXN_REPLICATION_TIMEOUT_S = 5.0
"""How long a write to ``__transaction_state`` may wait for the ISR (then the request is
answered COORDINATOR_NOT_AVAILABLE and retried by the client)."""

TopicPartition = tuple[str, int]

ADVERTISED: ContextVar[tuple[str, int] | None] = ContextVar("advertised", default=None)
"""The advertised (host, port) of the listener of the connection a handler serves."""


class ProducerIdManager:
    """Allocates producer ids in persisted blocks (Kafka's AllocateProducerIds, locally)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / PRODUCER_ID_FILE
        self._next = int(self.path.read_text()) if self.path.exists() else 0
        self._block_end = self._next
        self._refill = asyncio.Lock()
        # in a cluster: takes the next block from ZooKeeper, (start, end), unique cluster-wide
        # (a blocking call: run in the default executor)
        self.allocate_block: Callable[[int], tuple[int, int]] | None = None

    async def next_id(self) -> int:
        while self._next >= self._block_end:
            async with self._refill:
                if self._next < self._block_end:
                    break  # another caller refilled meanwhile
                if self.allocate_block is not None:
                    self._next, self._block_end = await asyncio.get_running_loop(
                    ).run_in_executor(None, self.allocate_block, PRODUCER_ID_BLOCK)
                else:
                    self._block_end = self._next + PRODUCER_ID_BLOCK
                    write_atomically(self.path, str(self._block_end).encode())
        pid = self._next
        self._next += 1
        return pid


class Broker:
    def __init__(self, config: BrokerConfig, data_dir: Path,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.data_dir = data_dir
        self.logs = LogManager(data_dir, config.props, clock)
        self.producer_ids = ProducerIdManager(data_dir)
        self.node_id = config.broker_id
        # set (by the runner) when zookeeper.connect is: this broker's replicas in a cluster
        self.cluster: ReplicaManager | None = None
        # listener name -> advertised (host, port), in the order of ``listeners`` (the runner
        # fills it in as each listener starts)
        self.advertised: dict[str, tuple[str, int]] = {}
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = defaultdict(set)
        self.faults = Faults()
        self.security = BrokerSecurity(config.props, data_dir)
        offsets_topic = LogTopic(
            self.logs, OFFSETS_TOPIC, config.get_int("offsets.topic.num.partitions"),
            {"segment.bytes": config.get_int("offsets.topic.segment.bytes")},
            self.partition_leader_epoch, self.notify_append)
        group_config = GroupConfig.from_props(config.props)
        self.coordinator = GroupCoordinator(
            group_config, OffsetsStore(offsets_topic, group_config.load_buffer_bytes),
            self.partition_count, self.now_ms)
        self.txn_coordinator = TransactionCoordinator(
            TxnConfig.from_props(config.props),
            LogTopic(self.logs, TRANSACTION_TOPIC,
                     config.get_int("transaction.state.log.num.partitions"),
                     {"segment.bytes": config.get_int("transaction.state.log.segment.bytes"),
                      "min.insync.replicas": config.get_int("transaction.state.log.min.isr")},
                     self.partition_leader_epoch, self.notify_append),
            self._txn_state_replicated, self.producer_ids.next_id, self.partition_count,
            lambda group: (OFFSETS_TOPIC, self.coordinator.store.partition_for(group)),
            self._write_markers, self.now_ms)
        self._local_markers = local_marker_writer(self)

    @property
    def host(self) -> str:
        return self._address()[0]

    @property
    def port(self) -> int:
        return self._address()[1]

    def _address(self) -> tuple[str, int]:
        return ADVERTISED.get() or next(iter(self.advertised.values()))

    @property
    def cluster_id(self) -> str:
        """The data directory's, or in a cluster ZooKeeper's ``/cluster/id``."""
        if self.cluster is not None and self.cluster.session is not None:
            return self.cluster.session.cluster_id
        return self.logs.cluster_id

    def now_ms(self) -> int:
        return self.logs.now_ms()

    # -- topics --------------------------------------------------------------------------
    def partition_count(self, topic: str) -> int:
        """Partitions of ``topic``; 0 when it does not exist."""
        found = self.logs.topics.get(topic)
        return 0 if found is None else found.partitions

    def get_log(self, topic: str, partition: int) -> PartitionLog:
        """The log of a partition this broker serves to clients (a fault hook may refuse
        it: see ``fault_hooks``)."""
        refused = self.refused(topic, partition)
        if refused is not None:
            raise KafkaError(f"{topic}-{partition} refused by a fault hook", refused)
        if self.cluster is not None and (topic, partition) not in self.logs.logs:
            self.cluster.leader_replica(topic, partition)  # raises what a client should see
        return self.logs.get_log(topic, partition)

    @staticmethod
    def refused(topic: str, partition: int) -> ErrorCode | None:
        """The error a fault hook makes this partition fail with in the current request."""
        fault = ACTIVE.get()
        if fault is not None and fault.refuses(topic, partition):
            return fault.error
        return None

    def topic(self, name: str, *, auto_create: bool = False) -> TopicMetadata:
        """The topic, auto-created (num.partitions) when allowed and asked for."""
        found = self.logs.topics.get(name)
        if found is not None:
            return found
        if auto_create and self.config.get_bool("auto.create.topics.enable"):
            return self.logs.create_topic(name, self.config.get_int("num.partitions"))
        raise UnknownTopicOrPartitionError(f"unknown topic {name}")

    # -- fetch long poll -----------------------------------------------------------------
    def notify_append(self, tp: TopicPartition) -> None:
        for future in self._waiters.pop(tp, ()):
            if not future.done():
                future.set_result(None)

    async def wait_for_append(self, tps: Iterable[TopicPartition], timeout_s: float) -> None:
        """Return when any of ``tps`` gets an append, or after ``timeout_s``."""
        if timeout_s <= 0:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(tps)
        for tp in keys:
            self._waiters[tp].add(future)
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError:
            pass
        finally:
            for tp in keys:
                waiters = self._waiters.get(tp)
                if waiters is not None:
                    waiters.discard(future)
                    if not waiters:
                        del self._waiters[tp]

    def partition_leader_epoch(self, tp: TopicPartition) -> int:
        """The leader epoch this node writes ``tp`` in (a cluster's, else the single one)."""
        if self.cluster is not None:
            replica = self.cluster.partitions.get(tp)
            if replica is not None:
                return replica.leader_epoch
        return LEADER_EPOCH

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def leader_epoch(self) -> int:
        """The epoch this node leads its partitions in (a single node: always the first)."""
        return LEADER_EPOCH

    # -- the transaction coordinator's writes ----------------------------------------------
    async def _txn_state_replicated(self, partition: int) -> ErrorCode:
        if self.cluster is None:
            return ErrorCode.NONE
        return await self.cluster.internal_replicated(TRANSACTION_TOPIC, partition,
                                                      TXN_REPLICATION_TIMEOUT_S)

    async def _write_markers(self, partitions: list[TopicPartition], producer_id: int,
                             producer_epoch: int, commit: bool, coordinator_epoch: int) -> None:
        write = self._local_markers if self.cluster is None else self.cluster.markers.write
        await write(partitions, producer_id, producer_epoch, commit, coordinator_epoch)

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Load what must be in memory before serving (on the event loop); in a cluster the
        coordinators load their partitions as this broker comes to lead them."""
        single_node = self.config.zookeeper_connect is None
        self.coordinator.start(load_all=single_node)
        self.txn_coordinator.start(load_all=single_node)

    def close(self) -> None:
        self.txn_coordinator.stop()
        self.coordinator.stop()
        self.logs.close()
