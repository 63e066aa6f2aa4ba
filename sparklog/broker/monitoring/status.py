"""The broker's state at one moment, for the metrics endpoint and the status page.

``take_status`` reads everything the listener serves in one step and returns plain frozen
data that other threads may format at leisure.

Invariants:
- ``take_status`` runs on the broker's event loop thread (the listener's threads hop there,
  see ``listener.py``), which owns the logs, the groups and the request metrics, so it reads
  them where they are written and needs no locks. The cleaner's figures come from its own
  threads: ``LogCleaner.activity`` is one object replaced whole, and the backlog is measured
  with ``log_to_clean``, which takes one reference to a log's segment list as every reader
  does.
- Connections are counted per listener and per client software name and version (what
  each connection's ApiVersions v3+ named, KIP-511), from the servers' live sessions.
- Per topic, messages and bytes in are the sums of the partition logs' append counters
  (since each log was opened); bytes out are counted by the server per Fetch response.
- A group's partitions are those it committed offsets for and those assigned to its members
  (as ``kafka-consumer-groups --describe`` lists them). Lag is the log end offset minus the
  committed offset, never below 0; a partition without a committed offset, or without a
  log on this broker (in a cluster: no replica here), has none.
  Members' assignments are decoded only for Stable ``consumer`` groups; one that does not
  decode shows none. A KIP-848 consumer group shows its state, group epoch (as the
  generation) and each member's current assignment.
- ``rebalances`` counts the coordinator's rebalances per group type since it started
  (``classic``: completed generations, ``consumer``: target assignments computed).
- Leader, replicas and ISR are this node for every partition on a single node, as Metadata
  answers (``broker/api/metadata.py``); in a cluster they are the replica manager's view (the
  partition state znodes), for the partitions with a replica here (the only ones with a
  log), and ``controller_id`` is the controller it knows. Under-replicated partitions are
  counted over the led ones; ``topic_partitions`` is every topic's partition count and
  ``offline_partitions`` the partitions without a leader, both the cluster's (the offline
  count only on the controller, 0 elsewhere, as Kafka reports it).
- The cluster view is the same on every broker (each watches all of ZooKeeper's state):
  ``brokers`` are the live (registered) ones with their rack, endpoints and status page
  URL, and those an assignment names that are not live; ``cluster_partitions`` every
  partition of every topic with the leader and ISR of its state, under-replicated when led
  with fewer ISR members than replicas, offline without a live leader. Each group names its
  coordinator (this broker: the groups it holds are those it coordinates).
- Client telemetry (KIP-714) is the broker's ``client_metrics`` snapshot: every client
  instance it knows (bounded and expired there, ``broker/client_metrics.py``), by client
  id, each with the latest value of each metric it pushed.
- Storage errors (a full disk, issue 31): each partition's ``storage_error`` and the whole
  data directory's ``storage_errors`` (partitions and checkpoints whose last write failed),
  empty again once their writes work.
- Client quotas: one ``QuotaSensor`` per rate the broker enforces (per quota key and the
  user and client id its entity names; none while no quota is set), read from the
  broker's quota manager with its rate at this moment.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sparklog.broker.monitoring.requests import RequestMetrics, RequestTotals
from sparklog.coordinator.consumer_group import ConsumerGroup
from sparklog.coordinator.consumer_protocol import PROTOCOL_TYPE, assigned_partitions
from sparklog.coordinator.group import Group, GroupState
from sparklog.coordinator.group_coordinator import GroupCoordinator
from sparklog.coordinator.group_records import OffsetAndMetadata, TopicPartition
from sparklog.storage.cleaner import LogCleaner, log_to_clean
from sparklog.storage.log_manager import LogManager


class Leadership(Protocol):
    @property
    def leader(self) -> int: ...
    @property
    def isr(self) -> tuple[int, ...]: ...
    @property
    def high_watermark(self) -> int: ...


class Endpoint(Protocol):
    @property
    def listener(self) -> str: ...
    @property
    def protocol(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...


class LiveBroker(Protocol):
    """A registered broker (``cluster.layout.BrokerInfo``)."""

    @property
    def endpoints(self) -> tuple[Endpoint, ...]: ...
    @property
    def rack(self) -> str | None: ...
    @property
    def metrics_url(self) -> str | None: ...


class Replicas(Protocol):
    """What the status reads of the replica manager."""

    controller_id: int
    assignments: dict[str, dict[int, tuple[int, ...]]]
    live: dict[int, LiveBroker]

    @property
    def partitions(self) -> Mapping[tuple[str, int], Leadership]: ...


class ClientTelemetry(Protocol):
    """What the status reads of the client metrics (``client_metrics.ClientMetricsManager``)."""

    def snapshot(self) -> Sequence[TelemetryClient]: ...


class QuotaSensor(Protocol):
    """One enforced rate (``quotas.QuotaSensor``): Kafka's ``kafka.server:type=<group>,
    user=<user>,client-id=<client id>`` sensor."""

    @property
    def group(self) -> str: ...
    @property
    def user(self) -> str: ...
    @property
    def client_id(self) -> str: ...
    @property
    def rate(self) -> float: ...
    @property
    def throttle_time_avg_ms(self) -> float: ...


class Quotas(Protocol):
    def sensors(self) -> Iterable[QuotaSensor]: ...


class Broker(Protocol):
    """What monitoring reads of the broker (``state.Broker``), on its event loop thread."""

    node_id: int
    data_dir: Path
    logs: LogManager
    coordinator: GroupCoordinator
    replicas: Replicas
    advertised: dict[str, tuple[str, int]]
    client_metrics: ClientTelemetry
    quotas: Quotas

    @property
    def cluster_id(self) -> str: ...
    def now_ms(self) -> int: ...


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    topic: str
    partition: int
    internal: bool
    log_start_offset: int
    log_end_offset: int
    size: int
    segments: int
    messages_in: int
    bytes_in: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    storage_error: str = ""  # why its last write failed (a full disk); "" once one works


@dataclass(frozen=True, slots=True)
class MemberStatus:
    member_id: str
    client_id: str
    client_host: str
    assignment: tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class GroupOffset:
    topic: str
    partition: int
    committed: int | None  # None: assigned, nothing committed yet
    log_end_offset: int | None  # None: no log of it here (gone, or in a cluster held elsewhere)
    lag: int | None


@dataclass(frozen=True, slots=True)
class GroupStatus:
    coordinator: int  # the broker coordinating it (its __consumer_offsets partition's leader)
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    generation: int
    members: tuple[MemberStatus, ...]
    offsets: tuple[GroupOffset, ...]


@dataclass(frozen=True, slots=True)
class ClientSoftware:
    """Open connections of one listener from one client software name and version
    (KIP-511; "unknown" for clients that do not say)."""

    listener: str
    name: str
    version: str
    connections: int


@dataclass(frozen=True, slots=True)
class TelemetryMetric:
    """The latest value of one metric series a client pushed (KIP-714, OTLP): a gauge's
    value, a sum's total (deltas added up), a histogram's or summary's mean."""

    name: str
    kind: str
    unit: str
    attributes: dict[str, str]
    value: float | None  # None: not a finite number (NaN or infinite: JSON has neither)
    time_ms: int  # the data point's time, as the client stamped it


@dataclass(frozen=True, slots=True)
class TelemetryClient:
    """A client instance that asked for its telemetry subscription (KIP-714)."""

    client_instance_id: str
    client_id: str
    software_name: str
    software_version: str
    source_address: str
    subscription_id: int
    subscribed: tuple[str, ...]  # the metric prefixes it was asked for ("*": all)
    push_interval_ms: int
    pushes: int
    last_push_ms: int | None  # None: never pushed
    last_error: str  # the last request's error name, NONE when it was accepted
    terminating: bool
    metrics: tuple[TelemetryMetric, ...]  # by name, then attributes


@dataclass(frozen=True, slots=True)
class CleanerStatus:
    threads: int
    dead_threads: int
    cleans: int
    last_round_ms: int
    last_clean_seconds: float
    last_clean_recopy_percent: float
    max_dirty_percent: float
    dirty_bytes: int
    uncleanable_partitions: int


@dataclass(frozen=True, slots=True)
class ClusterBroker:
    """A broker of the cluster: live (registered) or named by an assignment only."""

    broker_id: int
    alive: bool
    controller: bool
    rack: str | None
    endpoints: tuple[str, ...]  # "NAME host:port" ("NAME (PROTOCOL) host:port"), as registered
    metrics_url: str | None  # its status page, when it has one


@dataclass(frozen=True, slots=True)
class ClusterPartition:
    """A partition of the cluster as this broker's view of its state znode tells it."""

    topic: str
    partition: int
    internal: bool
    leader: int  # -1: none
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    under_replicated: bool  # led, with fewer ISR members than replicas
    offline: bool  # no live leader


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    node_id: int
    controller_id: int
    cluster_id: str
    advertised: dict[str, str]  # listener name -> host:port
    data_dir: str
    time_ms: int
    connections: dict[str, int]  # listener name -> open connections
    clients: tuple[ClientSoftware, ...]  # by listener, then most connections first
    partitions: tuple[PartitionStatus, ...]
    groups: tuple[GroupStatus, ...]
    cleaner: CleanerStatus | None
    requests: RequestTotals
    topic_partitions: dict[str, int]  # topic -> partitions, in the whole cluster
    offline_partitions: int
    telemetry: tuple[TelemetryClient, ...]  # by client id, then instance id
    quotas: tuple[QuotaSensor, ...] = ()
    brokers: tuple[ClusterBroker, ...] = ()  # by id
    cluster_partitions: tuple[ClusterPartition, ...] = ()  # every topic's, by topic
    storage_errors: tuple[tuple[str, str], ...] = ()  # (partition or "checkpoints", why)
    rebalances: tuple[tuple[str, int], ...] = ()  # (group type, rebalances)


def take_status(broker: Broker, connections: Mapping[str, Counter[tuple[str, str]]],
                requests: RequestMetrics, cleaner: LogCleaner | None) -> BrokerStatus:
    """Everything the listener serves, read now (on the broker's event loop thread)."""
    node = broker.node_id
    logs = broker.logs
    partitions = []
    for (topic, partition), log in sorted(logs.logs.items()):
        partitions.append(PartitionStatus(
            topic, partition, logs.topics[topic].internal, log.log_start_offset,
            log.log_end_offset, log.size, len(log.segments), log.appended_records,
            log.appended_bytes, *_replication(broker, topic, partition),
            log.storage_error or ""))
    groups = take_groups(broker)
    return BrokerStatus(
        node, broker.replicas.controller_id,
        broker.cluster_id,
        {name: f"{host}:{port}" for name, (host, port) in broker.advertised.items()},
        str(broker.data_dir),
        broker.now_ms(), {name: sum(software.values()) for name, software in connections.items()},
        tuple(ClientSoftware(listener, name, version, count)
              for listener, software in sorted(connections.items())
              for (name, version), count in software.most_common()),
        tuple(partitions), groups,
        None if cleaner is None else _cleaner(cleaner, broker.now_ms()), requests.copy(),
        {name: topic.partitions for name, topic in sorted(logs.topics.items())},
        _offline(broker, partitions), tuple(broker.client_metrics.snapshot()),
        tuple(broker.quotas.sensors()), _brokers(broker.replicas), _cluster_partitions(broker),
        tuple(sorted(logs.storage_errors().items())),
        tuple(sorted(broker.coordinator.rebalances.items())))


def take_groups(broker: Broker) -> tuple[GroupStatus, ...]:
    """The groups this broker coordinates, read now (on the loop): what the other brokers'
    pages ask it for."""
    ends = {tp: log.log_end_offset for tp, log in broker.logs.logs.items()}
    coordinator, node = broker.coordinator, broker.node_id
    modern = coordinator.consumer.groups
    return tuple(
        _consumer_group(node, modern[group_id], coordinator.groups.get(group_id), ends)
        if group_id in modern else _group(node, coordinator.groups[group_id], ends)
        for group_id in sorted(coordinator.groups.keys() | modern.keys()))


def _brokers(cluster: Replicas) -> tuple[ClusterBroker, ...]:
    """The live brokers and those an assignment names that are not live."""
    named = {b for partitions in cluster.assignments.values() for replicas in partitions.values()
             for b in replicas}
    brokers = []
    for broker_id in sorted(named | cluster.live.keys()):
        info = cluster.live.get(broker_id)
        brokers.append(ClusterBroker(
            broker_id, info is not None, broker_id == cluster.controller_id,
            None if info is None else info.rack,
            () if info is None else tuple(_endpoint(e) for e in info.endpoints),
            None if info is None else info.metrics_url))
    return tuple(brokers)


def _endpoint(endpoint: Endpoint) -> str:
    """``NAME host:port``, with its security protocol when the name is not one."""
    name = endpoint.listener if endpoint.listener == endpoint.protocol else \
        f"{endpoint.listener} ({endpoint.protocol})"
    return f"{name} {endpoint.host}:{endpoint.port}"


def _cluster_partitions(broker: Broker) -> tuple[ClusterPartition, ...]:
    cluster, topics = broker.replicas, broker.logs.topics
    found = []
    for topic, partitions in sorted(cluster.assignments.items()):
        internal = topic in topics and topics[topic].internal
        for index, replicas in sorted(partitions.items()):
            state = cluster.partitions.get((topic, index))
            leader, isr = (-1, ()) if state is None else (state.leader, state.isr)
            found.append(ClusterPartition(
                topic, index, internal, leader, replicas, isr,
                leader >= 0 and len(isr) < len(replicas),
                leader < 0 or leader not in cluster.live))
    return tuple(found)


def _offline(broker: Broker, partitions: list[PartitionStatus]) -> int:
    cluster = broker.replicas
    if cluster.controller_id != broker.node_id:
        return 0
    return sum(replica.leader < 0 for tp, replica in cluster.partitions.items()
               if tp[0] in cluster.assignments)


def _replication(broker: Broker, topic: str, partition: int
                 ) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """(leader, replicas, ISR): what the replica manager last learned from its store
    (leader -1 while there is none)."""
    cluster = broker.replicas
    replica = cluster.partitions.get((topic, partition))
    replicas = cluster.assignments.get(topic, {}).get(partition, ())
    if replica is None:
        return -1, replicas, ()
    return replica.leader, replicas, replica.isr


def _group(node: int, group: Group, ends: dict[tuple[str, int], int]) -> GroupStatus:
    consumer = group.protocol_type == PROTOCOL_TYPE and group.state is GroupState.STABLE
    members = tuple(
        MemberStatus(m.member_id, m.client_id, m.client_host,
                     _assignment(m.assignment) if consumer else ())
        for m in group.members.values())
    return GroupStatus(node, group.group_id, str(group.state), group.protocol_type or "",
                       group.protocol or "", group.generation, members,
                       _offsets(members, group.offsets, ends))


def _consumer_group(node: int, group: ConsumerGroup, holder: Group | None,
                    ends: dict[tuple[str, int], int]) -> GroupStatus:
    """A KIP-848 group (``holder``: the entry of its committed offsets, if any)."""
    names = {topic_id: name for name, (topic_id, _) in group.subscription_metadata.items()}
    members = tuple(
        MemberStatus(m.member_id, m.client_id, m.client_host, tuple(sorted(
            (names[topic_id], tuple(sorted(partitions)))
            for topic_id, partitions in m.assigned.items() if topic_id in names)))
        for m in group.members.values())
    return GroupStatus(node, group.group_id, group.state, PROTOCOL_TYPE, "", group.group_epoch,
                       members, _offsets(members, {} if holder is None else holder.offsets,
                                         ends))


def _offsets(members: tuple[MemberStatus, ...],
             committed: Mapping[TopicPartition, OffsetAndMetadata],
             ends: dict[tuple[str, int], int]) -> tuple[GroupOffset, ...]:
    assigned = {(topic, p) for m in members for topic, parts in m.assignment for p in parts}
    offsets = []
    for tp in sorted(assigned | committed.keys()):
        found = committed.get(tp)
        offset = None if found is None else found.offset
        end = ends.get(tp)
        lag = None if end is None or offset is None else max(end - offset, 0)
        offsets.append(GroupOffset(*tp, offset, end, lag))
    return tuple(offsets)


def _assignment(assignment: bytes) -> tuple[tuple[str, tuple[int, ...]], ...]:
    try:
        return assigned_partitions(assignment)
    except ValueError:
        return ()


def _cleaner(cleaner: LogCleaner, now_ms: int) -> CleanerStatus:
    activity = cleaner.activity
    last = activity.last_clean
    ratios, dirty = [0.0], 0
    for tp, log in list(cleaner.manager.logs.items()):
        if log.config.compact and not log.closed:
            measured = log_to_clean(tp, log, cleaner.checkpoint(tp), now_ms)
            ratios.append(measured.dirty_ratio)
            dirty += measured.dirty_bytes
    recopy = 100 * last.bytes_written / last.bytes_read if last and last.bytes_read else 0.0
    return CleanerStatus(
        cleaner.config.threads if cleaner.config.enable else 0, cleaner.dead_threads,
        activity.cleans, activity.last_round_ms, last.seconds if last else 0.0, recopy,
        100 * max(ratios), dirty, cleaner.uncleanable)
