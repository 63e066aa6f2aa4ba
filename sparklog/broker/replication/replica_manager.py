"""The replica manager: this broker's partitions and their roles, a single node or a cluster.

One ``ReplicaManager`` always exists (Kafka's ``ReplicaManager``). It hears the cluster's
metadata from its store (``store``): ZooKeeper's ``ClusterSession`` (live brokers, topic
assignments, partition states the controller writes) when ``zookeeper.connect`` is set,
else ``local_store.LocalStore``, a one-broker cluster kept in the data directory. Every
partition is a ``partition.Partition``, which plays the role the state gives this broker:
leader (serves clients, tracks followers, owns the high watermark and the ISR) or follower
(a ``replica_fetcher`` task copies the leader's log). Handlers never ask which store it is.

Invariants:
- Everything here runs on the event loop: ZooKeeper callbacks (kazoo threads) are handed
  over with ``call_soon_threadsafe`` (the local store's, made on the loop, apply at once),
  blocking ZooKeeper calls run in the default executor (``call``).
- A partition state whose controller epoch is below the newest one this broker saw for
  that partition is ignored (a deposed controller's decision).
- Appends to a partition this broker leads go through ``produce``, ``append_marker`` and,
  for the coordinators' internal topics, ``appended``: the partition's high watermark,
  ISR and waiting requests are kept there (``partition.py``). A leader shrinks the ISR of a
  lagging follower and grows it for one caught up by compare-and-set on the state znode (the
  controller does the same when brokers die).
- Becoming leader records the new epoch's start offset in the leader-epoch cache; becoming
  follower cancels the old fetcher and starts one for the new leader (truncation first).
- A request for a partition this broker does not lead gets NOT_LEADER_OR_FOLLOWER (or
  LEADER_NOT_AVAILABLE while it has no leader, UNKNOWN_TOPIC_OR_PARTITION for one that
  does not exist), so clients refresh their metadata (``leader_partition``).
- ``stop`` is a controlled shutdown (``controlled.shutdown.enable``): the broker
  deregisters, the controller moves its leaderships to other ISR members (the state znodes
  say so), and only then does it leave; without ZooKeeper it leaves after the timeout
  (as Kafka does once its controlled-shutdown retries are spent).
- ``__consumer_offsets`` and ``__transaction_state`` are replicated topics
  (``offsets.topic.replication.factor``; ``transaction.state.log.replication.factor`` and
  ``.min.isr``), each created on the first FindCoordinator of its kind once enough brokers
  live (on a single node they exist from the first start): the group and transaction
  coordinators serve the groups and transactional ids of the partitions this broker leads
  (loaded on becoming leader, the leader epoch being the transaction coordinator's epoch,
  unloaded on losing it), FindCoordinator names the leader of the key's partition, and a
  coordinator's write is answered once the ISR has it. Loads that come together are logged
  as one line (``coordinator_loads``).
- Transaction markers are appended by the partition's leader as acks=all appends
  (``append_marker``): min.insync.replicas applies, and the call returns once the high
  watermark passed the marker.
- In a cluster, SCRAM credentials and ACLs are ZooKeeper's (``BrokerSecurity.join_cluster``,
  loaded before the broker registers as started), not the data directory's; so are
  client-metrics subscriptions (``client_metrics.join_cluster``) and dynamic broker configs
  (``dynamic_configs.join_cluster``: ``/config/brokers/<id>`` and ``<default>``).
- A topic's config is the store's (ZooKeeper's ``/config/topics/<t>``): ``set_topic_config``
  writes it there (with Kafka's change notification), and every broker applies what the
  store holds to its local logs when a notification names the topic and whenever the
  topic's assignment is read (at start-up too), so every broker serves the same config;
  the controller's broker then asks it for a pass (a partition offline until unclean
  election was enabled gets a leader at once, as in Kafka).
- ElectLeaders is answered by the controller only (``elect_leaders``: None elsewhere, for
  NOT_CONTROLLER), after the election, once this broker's own view shows each new leader
  (REQUEST_TIMED_OUT for one that did not show within the request's timeout), as Kafka's
  controller broker answers it.
- Logs follow the assignment: a broker keeps every topic's metadata (partition count,
  configs, id: Metadata and DescribeConfigs answer for any topic), but a log only for the
  partitions it is a replica of, created when it is added to a partition's replicas (then it
  takes the role the partition's state gives it) and deleted when it is removed (fetcher
  stopped, waiting requests answered NOT_LEADER_OR_FOLLOWER, group and transaction
  coordinator state unloaded, files removed).
- A topic deleted from the store is deleted here; a local topic whose id differs from the
  cluster's (deleted and created again while this broker was away) is deleted and created
  anew; at start-up, local non-internal topics the cluster no longer has are deleted.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from sparklog.broker.replication.coordinator_loads import CoordinatorLoads
from sparklog.broker.replication.delayed_fetch import FetchWaiters
from sparklog.broker.replication.departures import Departures
from sparklog.broker.replication.inter_broker import InterBrokerSecurity
from sparklog.broker.replication.local_store import LocalStore
from sparklog.broker.replication.marker_channel import MarkerChannel
from sparklog.broker.replication.markers import MARKER_REPLICATION_TIMEOUT_MS
from sparklog.broker.replication.partition import Partition
from sparklog.broker.replication.replica_fetcher import follow
from sparklog.broker.replication.txn_verification import TxnVerifier
from sparklog.broker.security.broker_security import BrokerSecurity
from sparklog.cluster.assignment import assign_replicas, check_assignment
from sparklog.cluster.controller import ControllerConfig, FencedError
from sparklog.cluster.layout import (
    NO_LEADER,
    BrokerInfo,
    Endpoint,
    PartitionState,
    TopicAssignment,
)
from sparklog.cluster.session import ClusterSession
from sparklog.coordinator.group_coordinator import GroupCoordinator
from sparklog.coordinator.group_records import OFFSETS_TOPIC
from sparklog.coordinator.txn_coordinator import TransactionCoordinator
from sparklog.coordinator.txn_records import TRANSACTION_TOPIC
from sparklog.errors import ErrorCode, KafkaError
from sparklog.record.control import ControlType
from sparklog.storage.config import LogConfig
from sparklog.storage.log import AppendInfo
from sparklog.storage.log_manager import LogManager

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
T = TypeVar("T")


class Settings(Protocol):
    """The broker's configuration as the replica manager reads it (``config.BrokerConfig``)."""

    @property
    def zookeeper_connect(self) -> str | None: ...
    def get(self, key: str) -> str: ...
    def get_int(self, key: str) -> int: ...
    def get_bool(self, key: str) -> bool: ...


class ZooKeeperView(Protocol):
    """Broker state that is ZooKeeper's in a cluster (``client_metrics``,
    ``dynamic_configs``)."""

    async def join_cluster(self, zk: Any) -> None: ...  # the session's KazooClient
    def leave_cluster(self) -> None: ...


class BrokerCore(Protocol):
    """What the replica manager uses of the broker that owns it (``state.Broker``)."""

    node_id: int
    config: Settings
    logs: LogManager
    security: BrokerSecurity
    client_metrics: ZooKeeperView
    dynamic_configs: ZooKeeperView
    coordinator: GroupCoordinator
    txn_coordinator: TransactionCoordinator


def _now_ms() -> int:
    return int(time.time() * 1000)


class ReplicaManager:
    def __init__(self, broker: BrokerCore, inter_broker: InterBrokerSecurity | None) -> None:
        self.broker = broker
        self.inter_broker = inter_broker
        """How this broker's fetchers reach and log in to the leaders (None: no other
        broker to reach, a single node)."""
        self.broker_id = broker.node_id
        config = broker.config
        self.lag_ms = config.get_int("replica.lag.time.max.ms")
        self.fetch_wait_ms = config.get_int("replica.fetch.wait.max.ms")
        self.fetch_max_bytes = config.get_int("replica.fetch.max.bytes")
        self.live: dict[int, BrokerInfo] = {}
        self.departures = Departures()  # Metadata lists a broker a little after it left
        self.controller_id = -1
        self.assignments: dict[str, dict[int, tuple[int, ...]]] = {}
        self.partitions: dict[TopicPartition, Partition] = {}
        self.store: ClusterSession | LocalStore | None = None
        self.fetch_waiters = FetchWaiters()
        self._pruned = False  # local topics the cluster no longer has were deleted
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = -1
        self._isr_task: asyncio.Task[None] | None = None
        self._writes: set[asyncio.Future[None]] = set()
        self.markers = MarkerChannel(self)  # the transaction coordinator's markers
        self.txn_verification = TxnVerifier(self)  # a leader's questions to coordinators
        self._loads = CoordinatorLoads(lambda: (
            f"{len(broker.coordinator.groups)} groups, "
            f"{len(broker.txn_coordinator.transactions)} transactional ids"))

    @property
    def has_peers(self) -> bool:
        """Whether other brokers may share this broker's partitions (a cluster)."""
        return self.inter_broker is not None

    @property
    def cluster_id(self) -> str:
        return self.store.cluster_id if self.store is not None else self.broker.logs.cluster_id

    # -- life ----------------------------------------------------------------------------
    async def start(self, endpoints: tuple[Endpoint, ...],
                    metrics_url: str | None = None) -> None:
        """Join the cluster (ZooKeeper's, or this node's own), registered with every
        advertised listener (``endpoints``) and the status page's URL (``metrics_url``)."""
        config = self.broker.config
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        me = BrokerInfo(self.broker_id, endpoints, config.get("broker.rack") or None,
                        metrics_url)
        connect = config.zookeeper_connect
        if connect is None:
            self.store = LocalStore(self.broker.logs, me, self)
            self.store.start()
        else:
            rebalance = config.get_bool("auto.leader.rebalance.enable")
            controller = ControllerConfig(
                self._unclean,
                config.get_int("leader.imbalance.check.interval.seconds") if rebalance
                else None)
            session = self.store = ClusterSession(
                connect, config.get_int("zookeeper.session.timeout.ms"), me, self, controller,
                self.broker.logs.cluster_id)
            await self._loop.run_in_executor(None, session.start)
            await self.broker.security.join_cluster(session.zk)
            await self.broker.client_metrics.join_cluster(session.zk)
            await self.broker.dynamic_configs.join_cluster(session.zk)
            log.info("broker %d joined the cluster at %s", self.broker_id, connect)
        self._isr_task = asyncio.create_task(self._shrink_isr_forever())

    async def stop(self, timeout_s: float = 10) -> None:
        """Controlled shutdown: deregister, wait (up to ``timeout_s``) until the controller
        moved every partition this broker leads to another in-sync replica, then leave."""
        store = self.store
        if store is not None and self.broker.config.get_bool("controlled.shutdown.enable"):
            if await self.call(store.deregister, timeout_s):
                await self.wait_for(lambda: not any(
                    p.leader == self.broker_id and len(p.isr) > 1
                    for p in self.partitions.values()), timeout_s)
            else:
                log.warning("controlled shutdown skipped: ZooKeeper did not answer within "
                            "%.0f s; leaderships move when this broker's session expires",
                            timeout_s)
        if self._isr_task is not None:
            self._isr_task.cancel()
        for partition in self.partitions.values():
            partition.make_follower()
        self.broker.security.leave_cluster()
        self.broker.client_metrics.leave_cluster()
        self.broker.dynamic_configs.leave_cluster()
        self.markers.close()
        self.txn_verification.close()
        if store is not None:
            await self.call(store.close)

    def _unclean(self, topic: str) -> bool:
        """``unclean.leader.election.enable`` of ``topic`` (the controller's thread asks)."""
        found = self.broker.logs.topics.get(topic)
        config = found.config if found is not None else \
            LogConfig.of({}, self.broker.logs.topic_defaults)
        return bool(config.get("unclean.leader.election.enable"))

    async def call(self, call: Callable[..., T], *args: Any) -> T:
        """Run a call of the store: ZooKeeper's block, so they run in the default executor."""
        if self.store is not None and not self.store.blocking:
            return call(*args)
        assert self._loop is not None
        return await self._loop.run_in_executor(None, call, *args)

    def now_ms(self) -> int:
        return self.broker.logs.now_ms()

    async def allocate_producer_ids(self, size: int) -> tuple[int, int]:
        """The next block of producer ids, unique in the cluster (and across restarts)."""
        assert self.store is not None
        return await self.call(self.store.allocate_producer_ids, size)

    # -- what the store says (kazoo threads, or the loop for the local store) ------------
    def _soon(self, action: Callable[..., None], *args: Any) -> None:
        if threading.get_ident() == self._loop_thread:
            action(*args)
            return
        assert self._loop is not None
        self._loop.call_soon_threadsafe(action, *args)

    def brokers(self, live: dict[int, BrokerInfo]) -> None:
        self._soon(self._set_live, live)

    def topic_names(self, names: set[str]) -> None:
        self._soon(self._prune, names)

    def controller(self, broker_id: int) -> None:
        self._soon(setattr, self, "controller_id", broker_id)

    def topic(self, name: str, assignment: TopicAssignment | None,
              config: dict[str, str]) -> None:
        self._soon(self._set_topic, name, assignment, config)

    def topic_config(self, name: str, config: dict[str, str]) -> None:
        self._soon(self._set_topic_config, name, config)

    def partition_state(self, topic: str, partition: int, state: PartitionState | None) -> None:
        if state is not None:
            self._soon(self._apply_state, topic, partition, state)

    # -- applying it (event loop) --------------------------------------------------------
    def _set_live(self, live: dict[int, BrokerInfo]) -> None:
        self.departures.update(self.live, live)
        self.live = live

    def listed_brokers(self) -> dict[int, BrokerInfo]:
        """The brokers Metadata lists (``departures.py``)."""
        return self.departures.listed(self.live)

    def _prune(self, names: set[str]) -> None:
        """Once, on the first list of topics: delete local topics the cluster no longer
        has (deleted while this broker was away). Internal topics are left alone."""
        if self._pruned:
            return
        self._pruned = True
        for name, topic in list(self.broker.logs.topics.items()):
            if name not in names and not topic.internal:
                log.warning("topic %s is not in the cluster any more: deleting its logs", name)
                self._drop_topic(name)

    def _set_topic(self, name: str, assignment: TopicAssignment | None,
                   config: dict[str, str]) -> None:
        if assignment is None:
            self._drop_topic(name)
            return
        partitions = assignment.partitions
        logs = self.broker.logs
        local = logs.topics.get(name)
        if local is not None and assignment.topic_id not in (None, local.topic_id):
            log.warning("topic %s here is an earlier topic of that name (id %s, the cluster's "
                        "is %s): deleting its logs", name, local.topic_id, assignment.topic_id)
            self._drop_topic(name)
            local = None
        self.assignments[name] = partitions
        if local is None:
            logs.create_topic(name, len(partitions), config, topic_id=assignment.topic_id,
                              internal=name in (OFFSETS_TOPIC, TRANSACTION_TOPIC), local=())
        else:
            self._set_topic_config(name, config)
            if local.partitions < len(partitions):
                logs.create_partitions(name, len(partitions), local=())
        for index, replicas in sorted(partitions.items()):
            partition = self._partition(name, index)
            partition.replicas = replicas
            if self.broker_id in replicas:
                self._add_local(partition)
            else:
                self._remove_local(partition)

    def _drop_topic(self, name: str) -> None:
        """The topic is gone from the cluster: stop its replicas, then delete its logs and
        metadata at once (one metadata write, not one per partition)."""
        self.assignments.pop(name, None)
        dropped = [self.partitions.pop(tp) for tp in [tp for tp in self.partitions
                                                      if tp[0] == name]]
        for partition in dropped:
            self._stop_replica(partition)
        if name in self.broker.logs.topics:
            self.broker.logs.delete_topic(name)
        for partition in dropped:
            self.fetch_waiters.wake(partition.tp)  # fetches waiting on it answer now

    def _add_local(self, partition: Partition) -> None:
        """This broker became a replica: create the log and take the state's role."""
        if partition.local:
            return
        partition.attach(self.broker.logs.open_partition(partition.topic, partition.partition))
        if partition.state is not None:
            if partition.leader == self.broker_id:
                self._become_leader(partition)
            else:
                self._become_follower(partition)

    def _remove_local(self, partition: Partition) -> None:
        """This broker is no longer a replica: stop every role, then delete the log (if
        there is one: a log from before the broker joined, or an earlier assignment)."""
        self._stop_replica(partition)
        if partition.tp in self.broker.logs.logs:
            self.broker.logs.delete_partition(*partition.tp)
            self.fetch_waiters.wake(partition.tp)  # fetches waiting on it answer now

    def _stop_replica(self, partition: Partition) -> None:
        partition.detach()
        self._unload_coordinators(partition)

    def _set_topic_config(self, name: str, config: dict[str, str]) -> None:
        """Apply the topic config the store holds to the local logs (when it differs)."""
        local = self.broker.logs.topics.get(name)
        if local is None or local.overrides_raw == config:
            return
        try:
            self.broker.logs.set_topic_config(name, config)
        except KafkaError as exc:  # written by a broker that validated it: should not happen
            log.warning("topic %s: config %s from ZooKeeper not applied: %s", name, config, exc)
            return
        controller = self.store.controller if self.store is not None else None
        if controller is not None and controller.active:
            controller.wake()  # e.g. unclean.leader.election.enable now on: elect at once

    async def set_topic_config(self, name: str, config: dict[str, str]) -> None:
        """Write the topic's config overrides (already validated) to the store for every
        broker, and apply them here at once."""
        assert self.store is not None
        await self.call(self.store.write_topic_config, name, config)
        self._set_topic_config(name, config)

    def _partition(self, topic: str, index: int) -> Partition:
        partition = self.partitions.get((topic, index))
        if partition is None:
            partition = Partition(topic, index, self.broker_id, self.fetch_waiters.wake)
            self.partitions[(topic, index)] = partition
        return partition

    def _apply_state(self, topic: str, index: int, state: PartitionState) -> None:
        if topic not in self.assignments:
            return
        partition = self._partition(topic, index)
        if state.controller_epoch < partition.controller_epoch:
            log.info("%s: ignoring a state from controller epoch %d (seen %d)", partition.name,
                     state.controller_epoch, partition.controller_epoch)
            return
        partition.controller_epoch = state.controller_epoch
        old, partition.state = partition.state, state
        changed = old is None or (old.leader, old.leader_epoch) != (state.leader,
                                                                   state.leader_epoch)
        if not partition.local:  # the cluster's view only; a role once a replica is here
            return
        if state.leader == self.broker_id:
            if changed:
                self._become_leader(partition)
            partition.maybe_increment_leader_hw()
        elif changed:
            self._become_follower(partition)

    def _become_leader(self, partition: Partition) -> None:
        partition.make_leader(_now_ms())
        if self.has_peers:
            log.info("%s: leader in epoch %d, isr %s", partition.name, partition.leader_epoch,
                     list(partition.isr))
        if partition.topic == OFFSETS_TOPIC:
            self.broker.coordinator.load(partition.partition)
        elif partition.topic == TRANSACTION_TOPIC:
            self.broker.txn_coordinator.load(partition.partition, partition.leader_epoch)
        else:
            return
        self._loads.loaded(partition.topic)

    def _become_follower(self, partition: Partition) -> None:
        partition.make_follower()
        self._unload_coordinators(partition)
        if partition.leader != NO_LEADER and self.broker_id in partition.replicas:
            log.info("%s: following broker %d in epoch %d", partition.name, partition.leader,
                     partition.leader_epoch)
            partition.fetcher = asyncio.create_task(follow(self, partition))

    def _unload_coordinators(self, partition: Partition) -> None:
        """This broker stops leading the partition: a coordinator loaded from it unloads."""
        group, txn = self.broker.coordinator, self.broker.txn_coordinator
        if partition.topic == OFFSETS_TOPIC and partition.partition in group.loaded:
            group.unload(partition.partition)
        if partition.topic == TRANSACTION_TOPIC and partition.partition in txn.loaded:
            txn.unload(partition.partition)

    # -- the leader's side ---------------------------------------------------------------
    def leader_partition(self, topic: str, index: int) -> Partition:
        """The partition if this broker leads it, else the error a client should see."""
        partition = self.partitions.get((topic, index))
        if partition is None or topic not in self.assignments:
            raise KafkaError(f"unknown partition {topic}-{index}",
                             ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if partition.is_leader:
            return partition
        if partition.leader == NO_LEADER:
            raise KafkaError(f"{partition.name} has no leader", ErrorCode.LEADER_NOT_AVAILABLE)
        raise KafkaError(f"broker {self.broker_id} is not the leader of {partition.name} "
                         f"(broker {partition.leader} is)", ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def follower_fetched(self, partition: Partition, follower: int, fetch_offset: int) -> None:
        """A follower's Fetch at ``fetch_offset`` (its log end): track it, maybe grow the ISR
        (not for a broker shutting down: it is no longer live)."""
        grown = partition.update_follower_fetch_state(follower, fetch_offset, _now_ms(),
                                                      follower in self.live)
        if grown is not None:
            self._write_isr(partition, grown)

    async def _shrink_isr_forever(self) -> None:
        while True:
            await asyncio.sleep(max(self.lag_ms / 4000, 0.05))
            now = _now_ms()
            for partition in list(self.partitions.values()):
                if len(partition.isr) < 2 or not partition.is_leader or partition.isr_write:
                    continue
                laggards = partition.laggards(now, self.lag_ms)
                if laggards:
                    log.warning("%s: shrinking the ISR: %s lag more than %d ms", partition.name,
                                sorted(laggards), self.lag_ms)
                    self._write_isr(partition, tuple(m for m in partition.isr
                                                     if m not in laggards))

    def _write_isr(self, partition: Partition, isr: tuple[int, ...]) -> None:
        """Compare-and-set the state znode with a new ISR (one write in flight per partition)."""
        state, store = partition.state, self.store
        if state is None or partition.isr_write or store is None:
            return
        new = PartitionState(state.leader, state.leader_epoch, isr, state.controller_epoch,
                             state.zk_version)
        partition.isr_write = True

        async def write() -> None:
            try:
                version = await self.call(store.write_state, partition.topic,
                                          partition.partition, new)
            finally:
                partition.isr_write = False
            if version is not None and partition.state is state:
                partition.state = PartitionState(new.leader, new.leader_epoch, new.isr,
                                                 new.controller_epoch, version)
                log.info("%s: isr now %s", partition.name, list(isr))
                partition.maybe_increment_leader_hw()

        task = asyncio.ensure_future(write())
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    # -- appends -------------------------------------------------------------------------
    async def write_marker(self, tp: TopicPartition, producer_id: int, producer_epoch: int,
                           commit: bool, coordinator_epoch: int) -> ErrorCode:
        """Append one transaction marker as the partition's leader, acks=all (Kafka's too);
        the error code a WriteTxnMarkers response carries for it (``markers.py``)."""
        topic, index = tp
        kind = ControlType.COMMIT if commit else ControlType.ABORT
        try:
            info = self.leader_partition(topic, index).append_marker_to_leader(
                kind, producer_id, producer_epoch, coordinator_epoch, self.now_ms(),
                MARKER_REPLICATION_TIMEOUT_MS)
            if not isinstance(info, AppendInfo):
                await info
        except KafkaError as exc:
            return exc.code
        if topic == OFFSETS_TOPIC:
            self.broker.coordinator.complete_txn(index, producer_id, commit)
        return ErrorCode.NONE

    def appended(self, tp: TopicPartition) -> None:
        """A coordinator appended to its internal topic's partition (which this broker
        leads): the high watermark follows, waiting fetches wake."""
        partition = self.partitions.get(tp)
        if partition is not None:
            partition.appended()

    async def wait_for_append(self, tps: Iterable[TopicPartition], timeout_s: float) -> None:
        """Return when any of ``tps`` gets data (a long poll), or after ``timeout_s``."""
        await self.fetch_waiters.wait(tps, timeout_s)

    def leader_epoch(self, tp: TopicPartition) -> int:
        """The leader epoch this broker writes ``tp`` in (-1 without a state)."""
        partition = self.partitions.get(tp)
        return -1 if partition is None else partition.leader_epoch

    # -- the coordinators' partitions ------------------------------------------------------
    async def group_coordinator(self, group: str) -> BrokerInfo | None:
        """The live broker leading ``group``'s ``__consumer_offsets`` partition; None while
        there is none (the topic is created here on first use, as Kafka does)."""
        config, store = self.broker.config, self.broker.coordinator.store
        return await self._coordinator(
            OFFSETS_TOPIC, store.partition_for(group), store.partitions,
            config.get_int("offsets.topic.replication.factor"),
            {"segment.bytes": config.get("offsets.topic.segment.bytes")})

    @property
    def local_txn_coordinator(self) -> TransactionCoordinator:
        """This broker's transaction coordinator (serving the ids of the partitions it leads)."""
        return self.broker.txn_coordinator

    async def txn_coordinator(self, transactional_id: str) -> BrokerInfo | None:
        """The live broker leading ``transactional_id``'s ``__transaction_state`` partition;
        None while there is none (the topic is created here on first use)."""
        config, txn = self.broker.config, self.broker.txn_coordinator
        return await self._coordinator(
            TRANSACTION_TOPIC, txn.partition_of(transactional_id), txn.topic.partitions,
            config.get_int("transaction.state.log.replication.factor"),
            {"segment.bytes": config.get("transaction.state.log.segment.bytes"),
             "min.insync.replicas": config.get("transaction.state.log.min.isr")})

    async def _coordinator(self, topic: str, index: int, partitions: int,
                           replication_factor: int, config: dict[str, str]
                           ) -> BrokerInfo | None:
        if topic not in self.assignments:
            try:
                await self.create_topic(topic, partitions, replication_factor,
                                        {"cleanup.policy": "compact", **config})
            except KafkaError as exc:  # too few brokers yet, or another broker created it
                log.info("%s not created: %s", topic, exc)
            return None
        partition = self.partitions.get((topic, index))
        return None if partition is None else self.live.get(partition.leader)

    async def offsets_replicated(self, group: str, timeout_s: float) -> ErrorCode:
        """After a commit to ``group``'s partition: wait until the ISR has it (a committed
        offset must survive the coordinator's death); errors in a coordinator's terms."""
        code = await self.internal_replicated(
            OFFSETS_TOPIC, self.broker.coordinator.store.partition_for(group), timeout_s)
        return {ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE
                }.get(code, code)

    async def internal_replicated(self, topic: str, index: int, timeout_s: float
                                  ) -> ErrorCode:
        """Wait until the ISR has everything this leader appended to ``topic-index``
        (as acks=all: NOT_ENOUGH_REPLICAS_AFTER_APPEND below ``min.insync.replicas``)."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return await partition.internal_replicated(timeout_s)

    # -- topics --------------------------------------------------------------------------
    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           config: dict[str, str], timeout_s: float = 0,
                           manual: dict[int, tuple[int, ...]] | None = None,
                           validate_only: bool = False) -> None:
        """Write a new topic's assignment (``manual``, else round robin over the live
        brokers) to the store; the controller elects its leaders, which this waits up to
        ``timeout_s`` to hear of (Kafka's CreateTopics does too). ``validate_only`` checks
        the assignment and writes nothing."""
        racks = {b: info.rack for b, info in self.live.items()}
        replicas = assign_replicas(racks, partitions, replication_factor) if manual is None \
            else check_assignment(racks, manual, len(next(iter(manual.values()))))
        if validate_only:
            return
        assignment = TopicAssignment(replicas, uuid.uuid4().hex)
        assert self.store is not None
        if not await self.call(self.store.create_topic, name, assignment, config):
            raise KafkaError(f"topic {name!r} already exists", ErrorCode.TOPIC_ALREADY_EXISTS)
        await self.wait_for(lambda: self.led(name, range(partitions)), timeout_s)

    async def update_topic(self, name: str,
                           change: Callable[[TopicAssignment], TopicAssignment | None],
                           ) -> TopicAssignment | None:
        """Compare-and-set ``name``'s assignment to what ``change`` makes of it (None: write
        nothing; it may raise to refuse); UNKNOWN_TOPIC_OR_PARTITION without the topic."""
        assert self.store is not None
        return await self.call(self.store.update_topic, name, change)

    async def read_topics(self, names: list[str]) -> dict[str, TopicAssignment]:
        """The assignments of ``names`` as the store has them now (missing ones left out)."""
        assert self.store is not None
        return await self.call(self.store.read_topics, names)

    def led(self, topic: str, partitions: Iterable[int]) -> bool:
        """True once each of ``partitions`` of ``topic`` has a leader (as this broker hears)."""
        return all((r := self.partitions.get((topic, p))) is not None and r.leader != NO_LEADER
                   for p in partitions)

    async def wait_for(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Wait (up to ``timeout_s``) until ``condition`` holds; whether it does."""
        assert self._loop is not None
        deadline = self._loop.time() + timeout_s
        while not condition():
            if self._loop.time() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    # -- ElectLeaders ----------------------------------------------------------------------
    async def elect_leaders(self, partitions: list[TopicPartition] | None, election: int,
                            timeout_s: float) -> dict[TopicPartition, ErrorCode] | None:
        """Run the election when this broker is the controller (None otherwise) and answer
        each partition's code once this broker sees its new leader (module invariants)."""
        controller = self.store.controller if self.store is not None else None
        if controller is None or not controller.active:
            return None
        try:
            outcomes = await self.call(controller.elect_leaders, partitions, election)
        except FencedError:
            return None
        elected = {tp: s.leader_epoch for tp, s in outcomes.items()
                   if isinstance(s, PartitionState)}

        def shown(tp: TopicPartition) -> bool:
            partition = self.partitions.get(tp)
            return partition is not None and partition.leader_epoch >= elected[tp]

        await self.wait_for(lambda: all(shown(tp) for tp in elected), timeout_s)
        return {tp: outcome if isinstance(outcome, ErrorCode) else
                ErrorCode.NONE if shown(tp) else ErrorCode.REQUEST_TIMED_OUT
                for tp, outcome in outcomes.items()}
