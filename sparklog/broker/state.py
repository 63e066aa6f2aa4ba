"""The broker's state: one owner of the logs, the replica manager, producer ids and addresses.

Invariants:
- Every request handler reaches state only through ``Broker``; all of it is touched from the
  event loop thread, so handlers need no locks.
- The broker has one shape: ``replicas`` (``replication.replica_manager.ReplicaManager``)
  always exists and says who leads what, whether the cluster is ZooKeeper's or, without
  ``zookeeper.connect``, this node alone (the leader of every partition in epoch 0, the
  only replica and the only in-sync replica). Handlers reach a partition through
  ``leader_partition``, which answers what Kafka answers for one this broker does not
  lead (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION) and what
  a fault hook makes it answer.
- Producer ids are handed out from blocks whose end is persisted before any id of the block
  is used, so ids are never reused across restarts: the store's blocks (ZooKeeper's
  ``/latest_producer_id_block`` by compare-and-set, unique across brokers, in the default
  executor; a single node's ``producer-id-block`` file), one fetch at a time.
- ``quotas`` enforces the client quotas ``security`` keeps (``quotas.QuotaManager``): the
  handlers and the server ask it per request, at one set lookup while no quota is set.
- The group and transaction coordinators are started before the replica manager, which
  loads each partition of ``__consumer_offsets`` and ``__transaction_state`` as this broker
  becomes its leader (a single node: all of them before the first request is served), and
  stopped before the logs close. Their markers go through the replica manager's
  ``MarkerChannel`` (to every partition's leader, this broker included); their writes to
  ``__transaction_state`` wait for the ISR (``TXN_REPLICATION_TIMEOUT_S``).
- With ``schema.registry.listeners`` set on a single node, ``schemas_topic`` is
  ``_schemas`` (one partition, compacted, internal), the schema registry's store
  (``schema_registry``, created with the other internal topics); else None (a cluster
  creates it through the replica manager: ``schema_host``). ``schema_validation`` checks
  the batches of topics with Confluent's schema validation configs against it, once the
  runner attached the started registry (before: refused, retriable).
- ``client_metrics`` keeps the telemetry subscriptions and what clients push (KIP-714):
  the configured subscriptions are the store's (the data directory's, or ZooKeeper's once
  the replica manager joined a cluster) and outlive a restart; the clients and what they
  pushed are in memory only.
- ``dynamic_configs`` keeps the dynamic broker configs (this broker's and the cluster-wide
  default), the data directory's or ZooKeeper's, and hands the topic defaults they make to
  the log manager.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from sparklog.broker.client_metrics import ClientMetricsManager
from sparklog.broker.config import BrokerConfig
from sparklog.broker.dynamic_config import DynamicBrokerConfigs
from sparklog.broker.fault_hooks import Faults
from sparklog.broker.internal_topics import LogTopic
from sparklog.broker.quotas import QuotaManager
from sparklog.broker.replication.inter_broker import InterBrokerSecurity
from sparklog.broker.replication.partition import Partition
from sparklog.broker.replication.replica_manager import ReplicaManager
from sparklog.broker.request_context import current, current_session
from sparklog.broker.schema_registry.records import TOPIC as SCHEMAS_TOPIC
from sparklog.broker.schema_validation import SchemaValidation
from sparklog.broker.security.broker_security import BrokerSecurity
from sparklog.cluster.layout import Endpoint
from sparklog.coordinator.consumer_group_coordinator import ConsumerGroupConfig
from sparklog.coordinator.group_coordinator import GroupConfig, GroupCoordinator
from sparklog.coordinator.group_records import OFFSETS_TOPIC
from sparklog.coordinator.offsets_store import OffsetsStore
from sparklog.coordinator.txn_coordinator import TransactionCoordinator, TxnConfig
from sparklog.coordinator.txn_records import TRANSACTION_TOPIC
from sparklog.errors import ErrorCode, KafkaError
from sparklog.storage.log_manager import LogManager

PRODUCER_ID_BLOCK = 1000
TXN_REPLICATION_TIMEOUT_S = 5.0
"""How long a write to ``__transaction_state`` may wait for the ISR (then the request is
answered COORDINATOR_NOT_AVAILABLE and retried by the client)."""

TopicPartition = tuple[str, int]


class ProducerIdManager:
    """Hands out producer ids from blocks of ``PRODUCER_ID_BLOCK`` (Kafka's
    AllocateProducerIds): ``allocate_block(size)`` gives the next block [start, end)."""

    def __init__(self, allocate_block: Callable[[int], Awaitable[tuple[int, int]]]) -> None:
        self._allocate_block = allocate_block
        self._next = self._block_end = 0
        self._refill = asyncio.Lock()

    async def next_id(self) -> int:
        while self._next >= self._block_end:
            async with self._refill:
                if self._next < self._block_end:
                    break  # another caller refilled meanwhile
                self._next, self._block_end = await self._allocate_block(PRODUCER_ID_BLOCK)
        pid = self._next
        self._next += 1
        return pid


class Broker:
    def __init__(self, config: BrokerConfig, data_dir: Path,
                 clock: Callable[[], float] = time.time,
                 inter_broker: InterBrokerSecurity | None = None) -> None:
        self.config = config
        self.data_dir = data_dir
        self.logs = LogManager(data_dir, config.props, clock)
        self.node_id = config.broker_id
        self.replicas = ReplicaManager(self, inter_broker)
        self.producer_ids = ProducerIdManager(self.replicas.allocate_producer_ids)
        # listener name -> advertised (host, port), in the order of ``listeners`` (the runner
        # fills it in as each listener starts)
        self.advertised: dict[str, tuple[str, int]] = {}
        self.faults = Faults(self.topic_named)
        self.client_metrics = ClientMetricsManager.from_props(config.props, self.now_ms,
                                                                 data_dir)
        self.dynamic_configs = DynamicBrokerConfigs(
            self.node_id, config.props, config.explicit, self.logs.set_topic_defaults, data_dir)
        self.security = BrokerSecurity(config.props, data_dir, current_session)
        self.quotas = QuotaManager(self.security, config.props)
        offsets_topic = LogTopic(
            self.logs, OFFSETS_TOPIC, config.get_int("offsets.topic.num.partitions"),
            {"segment.bytes": config.get_int("offsets.topic.segment.bytes")},
            self.replicas.leader_epoch, self.replicas.appended)
        group_config = GroupConfig.from_props(config.props)
        self.coordinator = GroupCoordinator(
            group_config, OffsetsStore(offsets_topic, group_config.load_buffer_bytes),
            self, self.now_ms, ConsumerGroupConfig.from_props(config.props))
        self.txn_coordinator = TransactionCoordinator(
            TxnConfig.from_props(config.props),
            LogTopic(self.logs, TRANSACTION_TOPIC,
                     config.get_int("transaction.state.log.num.partitions"),
                     {"segment.bytes": config.get_int("transaction.state.log.segment.bytes"),
                      "min.insync.replicas": config.get_int("transaction.state.log.min.isr")},
                     self.replicas.leader_epoch, self.replicas.appended),
            self._txn_state_replicated, self.producer_ids.next_id, self.partition_count,
            lambda group: (OFFSETS_TOPIC, self.coordinator.store.partition_for(group)),
            self.replicas.markers.write, self.now_ms)
        self.schemas_topic = None if config.schema_registry_listener() is None \
            or config.zookeeper_connect else LogTopic(
            self.logs, SCHEMAS_TOPIC, 1, {}, self.replicas.leader_epoch, self.replicas.appended)
        self.schema_validation = SchemaValidation(
            config.schema_registry_listener() is not None,
            (inter_broker.username, inter_broker.password)
            if inter_broker is not None and inter_broker.sasl else None)

    @property
    def cluster_id(self) -> str:
        """The store's: ZooKeeper's ``/cluster/id``, or the data directory's."""
        return self.replicas.cluster_id

    def now_ms(self) -> int:
        return self.logs.now_ms()

    # -- topics --------------------------------------------------------------------------
    def partition_count(self, topic: str) -> int:
        """Partitions of ``topic``; 0 when it does not exist."""
        found = self.logs.topics.get(topic)
        return 0 if found is None else found.partitions

    def topic_names(self) -> Iterable[str]:
        return self.logs.topics.keys()

    def topic_id(self, topic: str) -> uuid.UUID | None:
        """The topic's id (stable for its life, in ZooKeeper's topic znode or the data
        directory's ``topics.json``); None when it does not exist."""
        found = self.logs.topics.get(topic)
        return None if found is None else uuid.UUID(hex=found.topic_id)

    def topic_named(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic whose id is ``topic_id`` (None: no such topic, as Kafka's
        UNKNOWN_TOPIC_ID)."""
        found = self.logs.topic_by_id(topic_id.hex)
        return None if found is None else found.name

    def listed_endpoints(self, listener: str | None, *, live_only: bool = False
                         ) -> dict[int, tuple[Endpoint, str | None]]:
        """Each broker Metadata lists (the live ones, and for a few seconds one that just
        left; with ``live_only`` the live ones alone, as DescribeCluster lists them) with its
        endpoint on ``listener`` and its rack; brokers without that listener are left out,
        as Kafka does."""
        brokers = self.replicas.live if live_only else self.replicas.listed_brokers()
        return {b: (endpoint, info.rack) for b, info in brokers.items()
                if (endpoint := info.endpoint(listener)) is not None}

    def current_leader(self, topic: str, partition: int) -> tuple[int, int] | None:
        """The partition's leader and leader epoch as this broker knows them (KIP-951:
        what a NOT_LEADER_OR_FOLLOWER answer tells the client), None when it has none."""
        found = self.replicas.partitions.get((topic, partition))
        if found is None or found.leader < 0:
            return None
        return found.leader, found.leader_epoch

    def leader_partition(self, topic: str, partition: int) -> Partition:
        """The partition this broker leads, to serve to clients (a fault hook may refuse
        it: see ``fault_hooks``)."""
        refused = self.refused(topic, partition)
        if refused is not None:
            raise KafkaError(f"{topic}-{partition} refused by a fault hook", refused)
        return self.replicas.leader_partition(topic, partition)

    @staticmethod
    def refused(topic: str, partition: int) -> ErrorCode | None:
        """The error a fault hook makes this partition fail with in the current request."""
        context = current()
        fault = None if context is None else context.fault
        if fault is not None and fault.refuses(topic, partition):
            return fault.error
        return None

    # -- the transaction coordinator's writes ----------------------------------------------
    async def _txn_state_replicated(self, partition: int) -> ErrorCode:
        return await self.replicas.internal_replicated(TRANSACTION_TOPIC, partition,
                                                       TXN_REPLICATION_TIMEOUT_S)

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Start the coordinators (on the event loop); they load their partitions as the
        replica manager makes this broker their leader."""
        self.coordinator.start()
        self.txn_coordinator.start()

    def close(self) -> None:
        self.txn_coordinator.stop()
        self.coordinator.stop()
        self.logs.close()
