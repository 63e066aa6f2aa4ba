"""Replication: this broker's replicas in a ZooKeeper cluster (``zookeeper.connect`` set).

The ``ReplicaManager`` hears the cluster through a ``ClusterSession`` (live brokers, topic
assignments, partition states the controller writes) and plays, per partition, the role
the state gives it: leader (serves clients, tracks followers, owns the high watermark and
the ISR) or follower (a ``replica_fetcher`` task copies the leader's log).

Invariants:
- Everything here runs on the event loop: ZooKeeper callbacks (kazoo threads) are handed
  over with ``call_soon_threadsafe``, blocking ZooKeeper writes run in the default executor.
- A partition state whose controller epoch is below the newest one this broker saw for
  that partition is ignored (a deposed controller's decision).
- Leader: the high watermark is the smallest log end offset over the ISR (the leader's own
  and each follower's last fetch offset) and never moves back; consumers read below it
  (``fetch.py``), followers up to the log end. A follower behind the leader's log end that
  has not reached it for ``replica.lag.time.max.ms`` leaves the ISR (an idle partition
  shrinks nothing, as in Kafka); a live (registered) one that reaches the high watermark
  joins it again (a broker in its controlled shutdown does not); the leader writes either
  change by compare-and-set on the state znode (the controller does the same when brokers
  die).
- acks=all: fewer ISR members than ``min.insync.replicas`` refuses the batch before the
  append (NOT_ENOUGH_REPLICAS); after it the request waits (a purgatory of futures, woken
  by high-watermark moves) until the high watermark passes the batch, answering
  NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below the minimum meanwhile,
  REQUEST_TIMED_OUT after the request's timeout, NOT_LEADER_OR_FOLLOWER if leadership went.
- Becoming leader records the new epoch's start offset in the leader-epoch cache; becoming
  follower cancels the old fetcher and starts one for the new leader (truncation first).
- A request for a partition this broker does not lead gets NOT_LEADER_OR_FOLLOWER (or
  LEADER_NOT_AVAILABLE while it has no leader), so clients refresh their metadata.
- ``stop`` is a controlled shutdown (``controlled.shutdown.enable``): the broker
  deregisters, the controller moves its leaderships to other ISR members (the state znodes
  say so), and only then does it leave; without ZooKeeper it leaves after the timeout
  (as Kafka does once its controlled-shutdown retries are spent).
- ``__consumer_offsets`` and ``__transaction_state`` are replicated topics
  (``offsets.topic.replication.factor``; ``transaction.state.log.replication.factor`` and
  ``.min.isr``), each created on the first FindCoordinator of its kind once enough brokers
  live: the group and transaction coordinators serve the groups and transactional ids of
  the partitions this broker leads (loaded on becoming leader, the leader epoch being the
  transaction coordinator's epoch, unloaded on losing it), FindCoordinator names the
  leader of the key's partition, and a coordinator's write is answered once the ISR has it.
- Transaction markers are appended by the partition's leader as acks=all appends
  (``append_marker``): min.insync.replicas applies, and the call returns once the high
  watermark passed the marker.
- SCRAM credentials and ACLs are the cluster's, in ZooKeeper (``BrokerSecurity.join_cluster``,
  loaded before the broker registers as started), not the data directory's.
- A topic's config is ZooKeeper's (``/config/topics/<t>``): ``set_topic_config`` writes it
  there (with Kafka's change notification), and every broker applies what ZooKeeper holds
  to its local logs when a notification names the topic and whenever the topic's
  assignment is read (at start-up too), so every broker serves the same config; the
  controller's broker then asks it for a pass (a partition offline until unclean election
  was enabled gets a leader at once, as in Kafka).
- ElectLeaders is answered by the controller only (``elect_leaders``: None elsewhere, for
  NOT_CONTROLLER), after the election, once this broker's own view shows each new leader
  (REQUEST_TIMED_OUT for one that did not show within the request's timeout), as Kafka's
  controller broker answers it.
- Logs follow the assignment: a broker keeps every topic's metadata (partition count,
  configs, id: Metadata and DescribeConfigs answer for any topic), but a log only for the
  partitions it is a replica of, created when it is added to a partition's replicas (then it
  takes the role the partition's state gives it) and deleted when it is removed (fetcher
  stopped, waiting requests answered NOT_LEADER_OR_FOLLOWER, group and transaction
  coordinator state unloaded, files removed). A data request for a partition without a
  log here is answered as Kafka answers it: NOT_LEADER_OR_FOLLOWER (``leader_replica``).
- A topic deleted from ZooKeeper is deleted here; a local topic whose id differs from the
  cluster's (deleted and created again while this broker was away) is deleted and created
  anew; at start-up, local non-internal topics the cluster no longer has are deleted.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from sparklog.broker.replication.departures import Departures
from sparklog.broker.replication.inter_broker import InterBrokerSecurity
from sparklog.broker.replication.marker_channel import MarkerChannel
from sparklog.broker.replication.replica_fetcher import follow
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
from sparklog.coordinator.group_records import OFFSETS_TOPIC
from sparklog.coordinator.txn_records import TRANSACTION_TOPIC
from sparklog.errors import ErrorCode, KafkaError
from sparklog.record.control import ControlType
from sparklog.storage.config import LogConfig
from sparklog.storage.leader_epochs import LeaderEpochCache
from sparklog.storage.log import AppendInfo, PartitionLog

if TYPE_CHECKING:
    from sparklog.broker.state import Broker

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
T = TypeVar("T")


@dataclass
class Replica:
    """One partition as this broker sees it."""

    topic: str
    partition: int
    local_epochs: LeaderEpochCache | None = None  # set while this broker has the log
    replicas: tuple[int, ...] = ()
    state: PartitionState | None = None
    controller_epoch: int = -1
    high_watermark: int = 0
    follower_leo: dict[int, int] = field(default_factory=dict)
    caught_up_ms: dict[int, int] = field(default_factory=dict)
    last_fetch: dict[int, tuple[int, int]] = field(default_factory=dict)  # (time, leader LEO)
    waiters: list[tuple[int, asyncio.Future[ErrorCode]]] = field(default_factory=list)
    fetcher: asyncio.Task[None] | None = None
    isr_write: bool = False

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def local(self) -> bool:
        """True while this broker is one of the partition's replicas (it has the log)."""
        return self.local_epochs is not None

    @property
    def epochs(self) -> LeaderEpochCache:
        if self.local_epochs is None:
            raise KafkaError(f"no replica of {self.name} here",
                             ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return self.local_epochs

    @property
    def leader(self) -> int:
        return self.state.leader if self.state is not None else NO_LEADER

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch if self.state is not None else -1

    @property
    def isr(self) -> tuple[int, ...]:
        return self.state.isr if self.state is not None else ()


def _now_ms() -> int:
    return int(time.time() * 1000)


class ReplicaManager:
    def __init__(self, broker: Broker, inter_broker: InterBrokerSecurity) -> None:
        self.broker = broker
        self.inter_broker = inter_broker
        """How this broker's fetchers reach and log in to the leaders."""
        self.broker_id = broker.node_id
        config = broker.config
        self.lag_ms = config.get_int("replica.lag.time.max.ms")
        self.fetch_wait_ms = config.get_int("replica.fetch.wait.max.ms")
        self.fetch_max_bytes = config.get_int("replica.fetch.max.bytes")
        self.live: dict[int, BrokerInfo] = {}
        self.departures = Departures()  # Metadata lists a broker a little after it left
        self.controller_id = -1
        self.assignments: dict[str, dict[int, tuple[int, ...]]] = {}
        self.partitions: dict[TopicPartition, Replica] = {}
        self.session: ClusterSession | None = None
        self._pruned = False  # local topics the cluster no longer has were deleted
        self._loop: asyncio.AbstractEventLoop | None = None
        self._isr_task: asyncio.Task[None] | None = None
        self._writes: set[asyncio.Future[None]] = set()
        self.markers = MarkerChannel(self)  # the transaction coordinator's markers

    # -- life ----------------------------------------------------------------------------
    async def start(self, endpoints: tuple[Endpoint, ...]) -> None:
        """Join the cluster, registered with every advertised listener (``endpoints``)."""
        config = self.broker.config
        connect = config.zookeeper_connect
        assert connect is not None
        self._loop = asyncio.get_running_loop()
        me = BrokerInfo(self.broker_id, endpoints, config.get("broker.rack") or None)
        rebalance = config.get_bool("auto.leader.rebalance.enable")
        controller = ControllerConfig(
            self._unclean,
            config.get_int("leader.imbalance.check.interval.seconds") if rebalance else None)
        self.session = ClusterSession(connect, config.get_int("zookeeper.session.timeout.ms"),
                                      me, self, controller, self.broker.logs.cluster_id)
        await self._loop.run_in_executor(None, self.session.start)
        await self.broker.security.join_cluster(self.session.zk)
        # a ZooKeeper round trip once per block of ids (1000), in the executor
        self.broker.producer_ids.allocate_block = self.session.allocate_producer_ids
        self._isr_task = asyncio.create_task(self._shrink_isr_forever())
        log.info("broker %d joined the cluster at %s", self.broker_id, connect)

    async def stop(self, timeout_s: float = 10) -> None:
        """Controlled shutdown: deregister, wait (up to ``timeout_s``) until the controller
        moved every partition this broker leads to another in-sync replica, then leave."""
        assert self._loop is not None
        if self.session is not None and \
                self.broker.config.get_bool("controlled.shutdown.enable"):
            if await self._loop.run_in_executor(None, self.session.deregister, timeout_s):
                await self.wait_for(lambda: not any(
                    r.leader == self.broker_id and len(r.isr) > 1
                    for r in self.partitions.values()), timeout_s)
            else:
                log.warning("controlled shutdown skipped: ZooKeeper did not answer within "
                            "%.0f s; leaderships move when this broker's session expires",
                            timeout_s)
        if self._isr_task is not None:
            self._isr_task.cancel()
        for replica in self.partitions.values():
            self._stop_fetcher(replica)
            self._release(replica, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self.broker.security.leave_cluster()
        self.markers.close()
        if self.session is not None and self._loop is not None:
            await self._loop.run_in_executor(None, self.session.close)

    def _unclean(self, topic: str) -> bool:
        """``unclean.leader.election.enable`` of ``topic`` (the controller's thread asks)."""
        found = self.broker.logs.topics.get(topic)
        config = found.config if found is not None else \
            LogConfig.of({}, self.broker.logs.topic_defaults)
        return bool(config.get("unclean.leader.election.enable"))

    # -- what ZooKeeper says (kazoo threads) ---------------------------------------------
    def _soon(self, action: Callable[..., None], *args: Any) -> None:
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
        for partition, replicas in sorted(partitions.items()):
            replica = self._replica(name, partition)
            replica.replicas = replicas
            if self.broker_id in replicas:
                self._add_local(replica)
            else:
                self._remove_local(replica)

    def _drop_topic(self, name: str) -> None:
        """The topic is gone from the cluster: drop its replicas, then its metadata."""
        self.assignments.pop(name, None)
        for tp in [tp for tp in self.partitions if tp[0] == name]:
            self._remove_local(self.partitions.pop(tp))
        if name in self.broker.logs.topics:
            self.broker.logs.delete_topic(name)

    def _add_local(self, replica: Replica) -> None:
        """This broker became a replica: create the log and take the state's role."""
        if replica.local:
            return
        partition_log = self.broker.logs.open_partition(replica.topic, replica.partition)
        replica.local_epochs = LeaderEpochCache(partition_log.directory)
        replica.high_watermark = 0
        if replica.state is not None:
            if replica.leader == self.broker_id:
                self._become_leader(replica)
                self._advance_high_watermark(replica)
            else:
                self._become_follower(replica)

    def _remove_local(self, replica: Replica) -> None:
        """This broker is no longer a replica: stop every role, then delete the log (if
        there is one: a log from before the broker joined, or an earlier assignment)."""
        tp = (replica.topic, replica.partition)
        self._stop_fetcher(replica)
        self._release(replica, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self._unload_coordinators(replica)
        replica.local_epochs = None
        replica.follower_leo, replica.last_fetch, replica.caught_up_ms = {}, {}, {}
        if tp in self.broker.logs.logs:
            self.broker.logs.delete_partition(*tp)
            self.broker.notify_append(tp)  # fetches waiting on it answer now

    def _set_topic_config(self, name: str, config: dict[str, str]) -> None:
        """Apply the topic config ZooKeeper holds to the local logs (when it differs)."""
        local = self.broker.logs.topics.get(name)
        if local is None or local.overrides_raw == config:
            return
        try:
            self.broker.logs.set_topic_config(name, config)
        except KafkaError as exc:  # written by a broker that validated it: should not happen
            log.warning("topic %s: config %s from ZooKeeper not applied: %s", name, config, exc)
            return
        controller = self.session.controller if self.session is not None else None
        if controller is not None and controller.active:
            controller.wake()  # e.g. unclean.leader.election.enable now on: elect at once

    async def set_topic_config(self, name: str, config: dict[str, str]) -> None:
        """Write the topic's config overrides (already validated) to ZooKeeper for every
        broker, and apply them here at once."""
        assert self._loop is not None and self.session is not None
        await self._loop.run_in_executor(None, self.session.write_topic_config, name, config)
        self._set_topic_config(name, config)

    def _replica(self, topic: str, partition: int) -> Replica:
        replica = self.partitions.get((topic, partition))
        if replica is None:
            replica = Replica(topic, partition)
            self.partitions[(topic, partition)] = replica
        return replica

    def log(self, replica: Replica) -> PartitionLog:
        return self.broker.logs.get_log(replica.topic, replica.partition)

    def _apply_state(self, topic: str, partition: int, state: PartitionState) -> None:
        if topic not in self.assignments:
            return
        replica = self._replica(topic, partition)
        if state.controller_epoch < replica.controller_epoch:
            log.info("%s: ignoring a state from controller epoch %d (seen %d)", replica.name,
                     state.controller_epoch, replica.controller_epoch)
            return
        replica.controller_epoch = state.controller_epoch
        old, replica.state = replica.state, state
        changed = old is None or (old.leader, old.leader_epoch) != (state.leader,
                                                                   state.leader_epoch)
        if not replica.local:  # the cluster's view only; a role once a replica is here
            return
        if state.leader == self.broker_id:
            if changed:
                self._become_leader(replica)
            self._advance_high_watermark(replica)
        elif changed:
            self._become_follower(replica)

    def _become_leader(self, replica: Replica) -> None:
        self._stop_fetcher(replica)
        partition_log = self.log(replica)
        replica.epochs.assign(replica.leader_epoch, partition_log.log_end_offset)
        now = _now_ms()
        replica.follower_leo, replica.last_fetch = {}, {}
        replica.caught_up_ms = dict.fromkeys(replica.replicas, now)
        replica.high_watermark = min(replica.high_watermark, partition_log.log_end_offset)
        log.info("%s: leader in epoch %d, isr %s", replica.name, replica.leader_epoch,
                 list(replica.isr))
        if replica.topic == OFFSETS_TOPIC:
            self.broker.coordinator.load(replica.partition)
        elif replica.topic == TRANSACTION_TOPIC:
            self.broker.txn_coordinator.load(replica.partition, replica.leader_epoch)

    def _become_follower(self, replica: Replica) -> None:
        self._stop_fetcher(replica)
        self._release(replica, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self._unload_coordinators(replica)
        if replica.leader != NO_LEADER and self.broker_id in replica.replicas:
            log.info("%s: following broker %d in epoch %d", replica.name, replica.leader,
                     replica.leader_epoch)
            replica.fetcher = asyncio.create_task(follow(self, replica))

    def _unload_coordinators(self, replica: Replica) -> None:
        """This broker stops leading the replica: a coordinator loaded from it unloads."""
        if replica.topic == OFFSETS_TOPIC and replica.partition in self.broker.coordinator.loaded:
            self.broker.coordinator.unload(replica.partition)
        txn = self.broker.txn_coordinator
        if replica.topic == TRANSACTION_TOPIC and replica.partition in txn.loaded:
            txn.unload(replica.partition)

    @staticmethod
    def _stop_fetcher(replica: Replica) -> None:
        if replica.fetcher is not None:
            replica.fetcher.cancel()
            replica.fetcher = None

    # -- leader's bookkeeping ------------------------------------------------------------
    def leader_replica(self, topic: str, partition: int) -> Replica:
        """The partition if this broker leads it, else the error a client should see."""
        replica = self.partitions.get((topic, partition))
        if replica is None or topic not in self.assignments:
            raise KafkaError(f"unknown partition {topic}-{partition}",
                             ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if replica.leader == self.broker_id and replica.local:
            return replica
        if replica.leader == NO_LEADER:
            raise KafkaError(f"{replica.name} has no leader", ErrorCode.LEADER_NOT_AVAILABLE)
        raise KafkaError(f"broker {self.broker_id} is not the leader of {replica.name} "
                         f"(broker {replica.leader} is)", ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def follower_fetched(self, replica: Replica, follower: int, fetch_offset: int) -> None:
        """A follower's Fetch at ``fetch_offset`` (its log end): track it, maybe grow the ISR."""
        if follower not in replica.replicas:
            return
        now, leo = _now_ms(), self.log(replica).log_end_offset
        previous = replica.last_fetch.get(follower)
        if fetch_offset >= leo:
            replica.caught_up_ms[follower] = now
        elif previous is not None and fetch_offset >= previous[1]:
            replica.caught_up_ms[follower] = previous[0]
        replica.last_fetch[follower] = (now, leo)
        replica.follower_leo[follower] = fetch_offset
        epoch_start = replica.epochs.entries[-1][1] if replica.epochs.entries else 0
        if follower not in replica.isr and follower in self.live and fetch_offset >= max(
                replica.high_watermark, epoch_start):  # not a broker shutting down
            self._write_isr(replica, (*replica.isr, follower))
        self._advance_high_watermark(replica)

    def _advance_high_watermark(self, replica: Replica) -> None:
        if replica.leader != self.broker_id:
            return
        ends = [self.log(replica).log_end_offset]
        for member in replica.isr:
            if member != self.broker_id:
                ends.append(replica.follower_leo.get(member, -1))
        high = min(ends)
        if high > replica.high_watermark:
            replica.high_watermark = high
            self.broker.notify_append((replica.topic, replica.partition))
            still = []
            for offset, future in replica.waiters:
                if offset <= high:
                    if not future.done():
                        future.set_result(ErrorCode.NONE)
                else:
                    still.append((offset, future))
            replica.waiters = still

    def follower_high_watermark(self, replica: Replica, leader_high_watermark: int) -> None:
        replica.high_watermark = min(leader_high_watermark, self.log(replica).log_end_offset)

    @staticmethod
    def _release(replica: Replica, code: ErrorCode) -> None:
        for _, future in replica.waiters:
            if not future.done():
                future.set_result(code)
        replica.waiters = []

    async def _shrink_isr_forever(self) -> None:
        while True:
            await asyncio.sleep(max(self.lag_ms / 4000, 0.05))
            now = _now_ms()
            for replica in list(self.partitions.values()):
                if replica.leader != self.broker_id or replica.isr_write:
                    continue
                end = self.log(replica).log_end_offset
                laggards = {m for m in replica.isr if m != self.broker_id
                            and replica.follower_leo.get(m, -1) < end
                            and now - replica.caught_up_ms.get(m, now) > self.lag_ms}
                if laggards:
                    log.warning("%s: shrinking the ISR: %s lag more than %d ms", replica.name,
                                sorted(laggards), self.lag_ms)
                    self._write_isr(replica, tuple(m for m in replica.isr if m not in laggards))

    def _write_isr(self, replica: Replica, isr: tuple[int, ...]) -> None:
        """Compare-and-set the state znode with a new ISR (one write in flight per partition)."""
        state = replica.state
        if state is None or replica.isr_write or self.session is None:
            return
        new = PartitionState(state.leader, state.leader_epoch, isr, state.controller_epoch,
                             state.zk_version)
        replica.isr_write = True
        assert self._loop is not None
        session = self.session

        async def write() -> None:
            try:
                assert self._loop is not None
                version = await self._loop.run_in_executor(
                    None, session.write_state, replica.topic, replica.partition, new)
            finally:
                replica.isr_write = False
            if version is not None and replica.state is state:
                replica.state = PartitionState(new.leader, new.leader_epoch, new.isr,
                                               new.controller_epoch, version)
                log.info("%s: isr now %s", replica.name, list(isr))
                self._advance_high_watermark(replica)

        task = asyncio.ensure_future(write())
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    # -- requests ------------------------------------------------------------------------
    def produce(self, topic: str, partition: int, records: bytes, acks: int, now: int,
                timeout_ms: int) -> Awaitable[AppendInfo]:
        """Append now (a Produce's partitions in request order); the result resolves once
        ``acks`` is satisfied."""
        replica = self.leader_replica(topic, partition)
        partition_log = self.log(replica)
        info = self._append_now(replica, lambda: partition_log.append(
            records, now_ms=now, leader_epoch=replica.leader_epoch), acks)
        return self._acknowledged(replica, info, acks, timeout_ms)

    async def append_marker(self, topic: str, partition: int, kind: ControlType,
                            producer_id: int, producer_epoch: int, coordinator_epoch: int,
                            now: int, timeout_ms: int) -> AppendInfo:
        """WriteTxnMarkers on the leader: the marker appended as acks=all (Kafka's too)."""
        replica = self.leader_replica(topic, partition)
        partition_log = self.log(replica)
        info = self._append_now(replica, lambda: partition_log.append_marker(
            kind, producer_id, producer_epoch, coordinator_epoch, now_ms=now,
            leader_epoch=replica.leader_epoch), -1)
        return await self._acknowledged(replica, info, -1, timeout_ms)

    def _append_now(self, replica: Replica, append: Callable[[], AppendInfo],
                    acks: int) -> AppendInfo:
        """The append itself (NOT_ENOUGH_REPLICAS before it for acks=all on a small ISR)."""
        min_isr = self._min_isr(replica)
        if acks == -1 and len(replica.isr) < min_isr:
            raise KafkaError(f"{replica.name}: {len(replica.isr)} in-sync replicas, "
                             f"min.insync.replicas is {min_isr}",
                             ErrorCode.NOT_ENOUGH_REPLICAS)
        info = append()
        if not info.duplicate:
            self.broker.notify_append((replica.topic, replica.partition))
        if acks != -1:
            self._advance_high_watermark(replica)
        return info

    async def _acknowledged(self, replica: Replica, info: AppendInfo, acks: int,
                            timeout_ms: int) -> AppendInfo:
        """``info`` once ``acks`` is satisfied: at once unless acks=all, which waits for
        the high watermark to pass the append (module invariants)."""
        if acks != -1:
            return info
        code = await self.wait_replicated(replica, info.last_offset + 1, timeout_ms / 1000)
        if code == ErrorCode.NONE and len(replica.isr) < self._min_isr(replica):
            code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        if code != ErrorCode.NONE:
            raise KafkaError(f"{replica.name}: acks=all not satisfied", code)
        return info

    def _min_isr(self, replica: Replica) -> int:
        return int(self.log(replica).config.get("min.insync.replicas"))

    async def wait_replicated(self, replica: Replica, offset: int, timeout_s: float
                              ) -> ErrorCode:
        """Wait until the high watermark reaches ``offset`` (every ISR member has what is
        below it): NONE, REQUEST_TIMED_OUT, or NOT_LEADER_OR_FOLLOWER if leadership went."""
        self._advance_high_watermark(replica)
        if replica.high_watermark >= offset:
            return ErrorCode.NONE
        if replica.leader != self.broker_id:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert self._loop is not None
        future: asyncio.Future[ErrorCode] = self._loop.create_future()
        replica.waiters.append((offset, future))
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT

    # -- the coordinators' partitions ------------------------------------------------------
    async def group_coordinator(self, group: str) -> BrokerInfo | None:
        """The live broker leading ``group``'s ``__consumer_offsets`` partition; None while
        there is none (the topic is created here on first use, as Kafka does)."""
        config, store = self.broker.config, self.broker.coordinator.store
        return await self._coordinator(
            OFFSETS_TOPIC, store.partition_for(group), store.partitions,
            config.get_int("offsets.topic.replication.factor"),
            {"segment.bytes": config.get("offsets.topic.segment.bytes")})

    async def txn_coordinator(self, transactional_id: str) -> BrokerInfo | None:
        """The live broker leading ``transactional_id``'s ``__transaction_state`` partition;
        None while there is none (the topic is created here on first use)."""
        config, txn = self.broker.config, self.broker.txn_coordinator
        return await self._coordinator(
            TRANSACTION_TOPIC, txn.partition_of(transactional_id), txn.topic.partitions,
            config.get_int("transaction.state.log.replication.factor"),
            {"segment.bytes": config.get("transaction.state.log.segment.bytes"),
             "min.insync.replicas": config.get("transaction.state.log.min.isr")})

    async def _coordinator(self, topic: str, partition: int, partitions: int,
                           replication_factor: int, config: dict[str, str]
                           ) -> BrokerInfo | None:
        if topic not in self.assignments:
            try:
                await self.create_topic(topic, partitions, replication_factor,
                                        {"cleanup.policy": "compact", **config})
            except KafkaError as exc:  # too few brokers yet, or another broker created it
                log.info("%s not created: %s", topic, exc)
            return None
        replica = self.partitions.get((topic, partition))
        return None if replica is None else self.live.get(replica.leader)

    async def offsets_replicated(self, group: str, timeout_s: float) -> ErrorCode:
        """After a commit to ``group``'s partition: wait until the ISR has it (a committed
        offset must survive the coordinator's death); errors in a coordinator's terms."""
        code = await self.internal_replicated(
            OFFSETS_TOPIC, self.broker.coordinator.store.partition_for(group), timeout_s)
        return {ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE
                }.get(code, code)

    async def internal_replicated(self, topic: str, partition: int, timeout_s: float
                                  ) -> ErrorCode:
        """Wait until the ISR has everything this leader appended to ``topic-partition``
        (as acks=all: NOT_ENOUGH_REPLICAS_AFTER_APPEND below ``min.insync.replicas``)."""
        replica = self.partitions.get((topic, partition))
        if replica is None or not replica.local:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        code = await self.wait_replicated(replica, self.log(replica).log_end_offset, timeout_s)
        if code == ErrorCode.NONE and len(replica.isr) < self._min_isr(replica):
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return code

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           config: dict[str, str], timeout_s: float = 0,
                           manual: dict[int, tuple[int, ...]] | None = None) -> None:
        """Write a new topic's assignment (``manual``, else round robin) to ZooKeeper; the
        controller elects its leaders, which this waits up to ``timeout_s`` to hear of
        (Kafka's CreateTopics does too)."""
        racks = {b: info.rack for b, info in self.live.items()}
        replicas = assign_replicas(racks, partitions, replication_factor) if manual is None \
            else check_assignment(racks, manual, len(next(iter(manual.values()))))
        assignment = TopicAssignment(replicas, uuid.uuid4().hex)
        assert self.session is not None
        if not await self.zookeeper(self.session.create_topic, name, assignment, config):
            raise KafkaError(f"topic {name!r} already exists", ErrorCode.TOPIC_ALREADY_EXISTS)
        await self.wait_for(lambda: self.led(name, range(partitions)), timeout_s)

    def led(self, topic: str, partitions: Iterable[int]) -> bool:
        """True once each of ``partitions`` of ``topic`` has a leader (as this broker hears)."""
        return all((r := self.partitions.get((topic, p))) is not None and r.leader != NO_LEADER
                   for p in partitions)

    async def zookeeper(self, call: Callable[..., T], *args: Any) -> T:
        """Run a blocking ZooKeeper call of the session off the event loop."""
        assert self._loop is not None
        return await self._loop.run_in_executor(None, call, *args)

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
        controller = self.session.controller if self.session is not None else None
        if controller is None or not controller.active:
            return None
        assert self._loop is not None
        try:
            outcomes = await self._loop.run_in_executor(None, controller.elect_leaders,
                                                        partitions, election)
        except FencedError:
            return None
        elected = {tp: s.leader_epoch for tp, s in outcomes.items()
                   if isinstance(s, PartitionState)}

        def shown(tp: TopicPartition) -> bool:
            replica = self.partitions.get(tp)
            return replica is not None and replica.leader_epoch >= elected[tp]

        await self.wait_for(lambda: all(shown(tp) for tp in elected), timeout_s)
        return {tp: outcome if isinstance(outcome, ErrorCode) else
                ErrorCode.NONE if shown(tp) else ErrorCode.REQUEST_TIMED_OUT
                for tp, outcome in outcomes.items()}
