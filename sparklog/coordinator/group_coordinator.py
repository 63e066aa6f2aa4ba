"""The group coordinator: every classic group of this node, their timers and their records.

Behaviour (Kafka's classic ``GroupCoordinator``):
- JoinGroup parks the request until the rebalance completes: when every known member rejoined
  (and no member id handed out with MEMBER_ID_REQUIRED is still pending), or when the largest
  rebalance timeout of the members passed; dynamic members that did not rejoin are removed
  then. The first rebalance of an Empty group waits ``group.initial.rebalance.delay.ms``, and
  again (up to the rebalance timeout) while new members keep arriving.
- A completed rebalance increments the generation, elects the protocol most members prefer
  among those all support, and answers every parked join (only the leader gets the members).
  The leader's SyncGroup is stored as group metadata, then its assignment is handed to every
  member; followers' syncs wait for it.
- A member whose session (``session.timeout.ms`` since its last heartbeat, join, sync or
  commit) ran out is removed and the group rebalances; a member parked in JoinGroup or
  SyncGroup stays alive (new members for at most five minutes, as in Kafka). A heartbeat of
  a Stable group whose subscribed topics changed partition count starts a rebalance.
- Static members (``group.instance.id``): a known instance rejoining with an empty member id
  takes over its old entry under a new member id; in a Stable group with unchanged metadata
  this needs no rebalance (the old member id is then fenced: FENCED_INSTANCE_ID). Static
  members are not removed for missing a rebalance, only by their session timeout.
- Offsets are committed by members of the current generation, or by "simple" consumers
  (generation -1, empty member id) while the group is Empty. Offsets of Empty groups expire
  after ``offsets.retention.minutes``: from the time the group became Empty for groups that
  had members, from each commit for simple groups. An Empty group without offsets is dropped.

Invariants:
- ``groups`` never holds a Dead group: a group that dies (deleted, or Empty with its last
  offsets expired) is removed in the same step, so later requests see an unknown group.
- All state lives on the broker's event loop and is only touched from it: handlers call in
  directly, timers are ``loop.call_at`` callbacks; nothing blocks and there are no locks.
- A member's liveness check is one timer per member, scheduled for its earliest possible
  expiry and re-armed lazily when a heartbeat moved the deadline (a heartbeat never touches
  the timer heap).
- Every change that must survive a restart (commits, the group after each rebalance and
  leader sync, deletions and expirations as tombstones) is appended to ``__consumer_offsets``
  before it is applied in memory or acknowledged; a failed append changes nothing.
- The coordinator's inputs are narrow: its settings (``GroupConfig``), its store
  (``OffsetsStore`` over an ``InternalTopic``), a partition-count lookup and a clock. It
  never reaches into the broker, storage or configs, so it runs without a data directory.
- It serves the groups of the ``__consumer_offsets`` partitions it has loaded: ``load``
  replays a partition (groups with members come back Stable with their generation,
  assignment and fresh session timers, so live consumers carry on without a rebalance),
  ``unload`` forgets its groups (parked requests answered NOT_COORDINATOR); a request for a
  group of a partition not loaded is answered NOT_COORDINATOR, so a client looks the
  coordinator up again. ``start`` loads every partition on a single node (which leads them
  all; in a cluster none: they are loaded as this broker comes to lead them); ``stop``
  unloads them; afterwards every API answers COORDINATOR_NOT_AVAILABLE.
- A group id is a classic group or a KIP-848 consumer group (``consumer``, a
  ``ConsumerGroupCoordinator`` on the same store, loaded and unloaded with it), never both:
  an empty one of either kind is replaced by the other. Online migration (Kafka's
  ``group.consumer.migration.policy``): a consumer-protocol member joining a classic group
  with members upgrades it (``take_over``/``release``: GROUP_ID_NOT_FOUND if the policy
  does not upgrade or the group's protocol type is not "consumer"); the classic members'
  JoinGroup, SyncGroup, Heartbeat and LeaveGroup of a consumer group are served by the
  consumer coordinator (``classic_*``); when only classic members remain it downgrades
  (``adopt``: the classic group in one batch with the consumer group's tombstones, then a
  rebalance). Offsets of both kinds live in ``groups`` (for a consumer group an entry
  holding only offsets, which ListGroups, DescribeGroups and expiration pass over while
  the consumer group has members); commits and fetches of a consumer group are checked
  against its members' epochs.
- ``rebalances`` counts rebalances per group type (a classic generation, a consumer group's
  target assignment).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sparklog.coordinator.consumer_group_coordinator import (
    CONSUMER_GROUP_TYPE,
    ClassicGroupState,
    ClassicMemberState,
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    TopicCatalog,
)
from sparklog.coordinator.consumer_protocol import PROTOCOL_TYPE, subscribed_topics
from sparklog.coordinator.group import (
    Group,
    GroupState,
    JoinResult,
    Member,
    Protocols,
    SyncResult,
)
from sparklog.coordinator.group_records import (
    OFFSETS_TOPIC,
    GroupRecord,
    MemberRecord,
    OffsetAndMetadata,
    TopicPartition,
    group_key,
    group_value,
    offset_key,
    offset_value,
)
from sparklog.coordinator.internal_topic import Record
from sparklog.coordinator.offsets_store import OffsetsStore
from sparklog.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000  # Kafka's GroupCoordinator.NewMemberJoinTimeoutMs
NO_GENERATION = -1
CLASSIC_GROUP_TYPE = "classic"


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """What DescribeGroups shows: metadata and assignments only once the group is Stable."""

    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberSummary, ...]


DEAD_GROUP = GroupSummary(GroupState.DEAD, "", "", ())


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker settings the group coordinator reads (Kafka's names and defaults)."""

    min_session_ms: int = 6000
    max_session_ms: int = 1800000
    initial_delay_ms: int = 3000
    retention_ms: int = 10080 * 60_000
    retention_check_ms: int = 600000
    metadata_max_bytes: int = 4096
    load_buffer_bytes: int = 5 * 1024 * 1024

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> GroupConfig:
        default = cls()

        def get(key: str, fallback: int) -> int:
            return int(props.get(key, fallback))

        return cls(
            min_session_ms=get("group.min.session.timeout.ms", default.min_session_ms),
            max_session_ms=get("group.max.session.timeout.ms", default.max_session_ms),
            initial_delay_ms=get("group.initial.rebalance.delay.ms", default.initial_delay_ms),
            retention_ms=get("offsets.retention.minutes", default.retention_ms // 60_000)
            * 60_000,
            retention_check_ms=get("offsets.retention.check.interval.ms",
                                   default.retention_check_ms),
            metadata_max_bytes=get("offset.metadata.max.bytes", default.metadata_max_bytes),
            load_buffer_bytes=get("offsets.load.buffer.size", default.load_buffer_bytes),
        )


class GroupCoordinator:
    def __init__(self, config: GroupConfig, store: OffsetsStore, topics: TopicCatalog,
                 clock: Callable[[], int],
                 consumer_config: ConsumerGroupConfig | None = None) -> None:
        self.config = config
        self.store = store
        self._partition_count = topics.partition_count
        self._now_ms = clock
        self.rebalances = {CLASSIC_GROUP_TYPE: 0, CONSUMER_GROUP_TYPE: 0}
        self.consumer = ConsumerGroupCoordinator(
            consumer_config or ConsumerGroupConfig(), store, topics, self, clock,
            lambda: self._count_rebalance(CONSUMER_GROUP_TYPE))
        self.groups: dict[str, Group] = {}
        self.loaded: set[int] = set()
        self.active = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._expiration: asyncio.TimerHandle | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Start serving (partitions are loaded as this broker becomes their leader:
        ``load``). Needs the running loop."""
        self._loop = asyncio.get_running_loop()
        self.active = True
        self.consumer.start(self._loop)
        self._expiration = self._loop.call_later(self.config.retention_check_ms / 1000,
                                                 self._expire_periodically)

    def stop(self) -> None:
        self.active = False
        if self._expiration is not None:
            self._expiration.cancel()
        count = len(self.groups)
        for partition in sorted(self.loaded):
            self.unload(partition)
        log.info("group coordinator stopped (%d groups)", count)

    def load(self, partition: int) -> None:
        """Become the coordinator of the groups of ``partition``: replay it."""
        loaded = self.store.replay(partition)
        pending_groups = {g for by_group in loaded.pending.values() for g in by_group}
        group_ids = loaded.groups.keys() | loaded.offsets.keys() | pending_groups
        for group_id in group_ids:
            record = loaded.groups.get(group_id)
            group = Group(group_id, self._now_ms())
            if record is not None:
                self._restore(group, record)
            group.offsets = loaded.offsets.get(group_id, {})
            group.pending_txn_offsets = {pid: by_group[group_id]
                                         for pid, by_group in loaded.pending.items()
                                         if group_id in by_group}
            self.groups[group_id] = group
        self.consumer.load(partition, loaded.consumer_groups)
        self.loaded.add(partition)
        log.debug("group coordinator loaded %s-%d: %d groups", OFFSETS_TOPIC, partition,
                 len(group_ids))

    def unload(self, partition: int) -> None:
        """Stop coordinating the groups of ``partition``; their parked requests are answered
        NOT_COORDINATOR."""
        self.loaded.discard(partition)
        self.consumer.unload(partition)
        for group in [g for g in self.groups.values()
                      if self.store.partition_for(g.group_id) == partition]:
            self._forget_members(group, ErrorCode.NOT_COORDINATOR)
            del self.groups[group.group_id]

    @staticmethod
    def _forget_members(group: Group, error: ErrorCode) -> None:
        """Cancel the group's timers and answer its parked requests with ``error``."""
        if group.join_timer is not None:
            group.join_timer.cancel()
        for handle in group.pending_members.values():
            handle.cancel()
        group.pending_members.clear()
        for member in group.members.values():
            if member.expiry is not None:
                member.expiry.cancel()
            _answer_join(member, JoinResult(error, member.member_id))
            _answer_sync(member, SyncResult(error))

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "the coordinator is not started"
        return self._loop

    def _call_later(self, delay_ms: float, callback: Callable[..., None],
                    *args: Any) -> asyncio.TimerHandle:
        return self.loop.call_later(max(delay_ms, 0) / 1000, callback, *args)

    def _count_rebalance(self, group_type: str) -> None:
        self.rebalances[group_type] += 1

    def check_group(self, group_id: str) -> ErrorCode | None:
        return self._check(group_id)

    def take_over(self, group_id: str, upgrade: bool) -> ClassicGroupState | None:
        """A consumer group starts with this id (see ``ClassicGroups.take_over``)."""
        group = self.groups.get(group_id)
        if group is None or group.protocol_type is None:
            return None
        if group.members:
            if not upgrade or group.protocol_type != PROTOCOL_TYPE or group.protocol is None:
                raise KafkaError(f"Group {group_id} is not a consumer group.",
                                 ErrorCode.GROUP_ID_NOT_FOUND)
            return ClassicGroupState(group.generation, group.protocol, tuple(
                ClassicMemberState(m.member_id, m.group_instance_id, m.client_id,
                                   m.client_host, m.rebalance_timeout_ms, m.session_timeout_ms,
                                   m.protocols, m.assignment)
                for m in group.members.values()))
        if group.pending_members:
            raise KafkaError(f"Group {group_id} is not a consumer group.",
                             ErrorCode.GROUP_ID_NOT_FOUND)
        if group.generation > 0:
            self.store.append(group_id, [(group_key(group_id), None)], self._now_ms())
        group.generation, group.protocol_type, group.protocol = 0, None, None
        log.info("group %s: the empty classic group becomes a consumer group", group_id)

    def release(self, group_id: str) -> None:
        """The upgrade is written (see ``ClassicGroups.release``)."""
        group = self.groups[group_id]
        self._forget_members(group, ErrorCode.REBALANCE_IN_PROGRESS)
        group.members.clear()
        group.static_members.clear()
        group.generation, group.protocol_type, group.protocol, group.leader = 0, None, None, None
        group.state = GroupState.EMPTY

    def adopt(self, group_id: str, generation: int, members: Iterable[ClassicMemberState],
              records: list[Record]) -> None:
        """A downgrade (see ``ClassicGroups.adopt``)."""
        old = self.groups.get(group_id)
        group = Group(group_id, self._now_ms())
        group.state, group.generation = GroupState.STABLE, generation
        for m in members:
            group.add(Member(m.member_id, m.instance_id, m.client_id, m.client_host,
                             m.rebalance_timeout_ms, m.session_timeout_ms, PROTOCOL_TYPE,
                             m.protocols, m.assignment))
        group.protocol = group.select_protocol()
        self.store.append(group_id, [*records, self._group_record(group)], self._now_ms())
        if old is not None:
            group.offsets, group.pending_txn_offsets = old.offsets, old.pending_txn_offsets
        self.groups[group_id] = group
        for member in group.members.values():
            self._touch(group, member)
        group.partition_counts = self._partition_counts(group)
        self._prepare_rebalance(group, "the group converts from a consumer group to a "
                                       "classic group")

    def _is_consumer_group(self, group_id: str) -> bool:
        return group_id in self.consumer.groups

    def _check(self, group_id: str, *, allow_empty_id: bool = False) -> ErrorCode | None:
        """Kafka's validateGroupStatus: a usable group id, an active coordinator, and one
        that coordinates this group."""
        if not group_id and not allow_empty_id:
            return ErrorCode.INVALID_GROUP_ID
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.store.partition_for(group_id) not in self.loaded:
            return ErrorCode.NOT_COORDINATOR
        return None

    # -- JoinGroup ------------------------------------------------------------------------
    async def join(self, group_id: str, member_id: str, instance_id: str | None, *,
                   require_known_member_id: bool, client_id: str, client_host: str,
                   rebalance_timeout_ms: int, session_timeout_ms: int, protocol_type: str,
                   protocols: Protocols, reason: str | None = None,
                   supports_skip_assignment: bool = False) -> JoinResult:
        """A JoinGroup; ``reason`` (v8+) is logged with the rebalance it causes, and a
        client that ``supports_skip_assignment`` (v9+) rejoining as the static leader of a
        Stable group is answered as the leader with ``skip_assignment`` (KIP-814)."""
        error = self._check(group_id)
        if error is None and not (
                self.config.min_session_ms <= session_timeout_ms <= self.config.max_session_ms):
            error = ErrorCode.INVALID_SESSION_TIMEOUT
        if error is None and self.consumer.has_members(group_id):
            return self.consumer.classic_join(
                group_id, member_id, instance_id,
                require_known_member_id=require_known_member_id, client_id=client_id,
                client_host=client_host, rebalance_timeout_ms=rebalance_timeout_ms,
                session_timeout_ms=session_timeout_ms, protocol_type=protocol_type,
                protocols=protocols)
        if error is None and self._is_consumer_group(group_id):
            deleted = self.consumer.delete(group_id)  # a classic group replaces an empty one
            if deleted != ErrorCode.NONE:
                error = (ErrorCode.INCONSISTENT_GROUP_PROTOCOL
                         if deleted == ErrorCode.NON_EMPTY_GROUP else deleted)
        if error is not None:
            return JoinResult(error, member_id)
        member = Member(member_id, instance_id, client_id, client_host, rebalance_timeout_ms,
                        session_timeout_ms, protocol_type, protocols, join_reason=reason)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:  # a member of a group we do not know: let it rejoin afresh
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
            group = self.groups[group_id] = Group(group_id, self._now_ms())
        if not group.supports_protocols(protocol_type, member.protocol_names):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if member_id:
            outcome = self._join_known(group, member)
        else:
            outcome = self._join_unknown(group, member, require_known_member_id,
                                         supports_skip_assignment)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)
        return await outcome if isinstance(outcome, asyncio.Future) else outcome

    def _join_unknown(self, group: Group, joining: Member, require_known_member_id: bool,
                      supports_skip_assignment: bool
                      ) -> JoinResult | asyncio.Future[JoinResult]:
        instance_id = joining.group_instance_id
        joining.member_id = f"{instance_id or joining.client_id}-{uuid.uuid4()}"
        if instance_id is not None and instance_id in group.static_members:
            return self._rejoin_static_member(group, joining, supports_skip_assignment)
        if require_known_member_id:
            group.pending_members[joining.member_id] = self._call_later(
                joining.session_timeout_ms, self._expire_pending_member, group,
                joining.member_id)
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, joining.member_id)
        return self._add_member_and_rebalance(group, joining)

    def _join_known(self, group: Group, joining: Member
                    ) -> JoinResult | asyncio.Future[JoinResult]:
        member_id, instance_id = joining.member_id, joining.group_instance_id
        pending = group.pending_members.pop(member_id, None)
        if pending is not None:
            pending.cancel()
            return self._add_member_and_rebalance(group, joining)
        if group.is_static_member_fenced(member_id, instance_id):
            return JoinResult(ErrorCode.FENCED_INSTANCE_ID, member_id)
        member = group.members.get(member_id)
        if member is None or (instance_id is not None and instance_id not in group.static_members):
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)
        if group.state is GroupState.PREPARING_REBALANCE:
            return self._update_member_and_rebalance(group, member, joining)
        if group.state is GroupState.COMPLETING_REBALANCE:
            if member.matches(joining.protocols):  # a retry: the answer it may have missed
                return self._join_answer(group, member)
            return self._update_member_and_rebalance(group, member, joining)
        if group.state is GroupState.STABLE:
            if group.leader == member_id or not member.matches(joining.protocols):
                return self._update_member_and_rebalance(group, member, joining)
            return self._join_answer(group, member)
        return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id)  # Empty

    def _rejoin_static_member(self, group: Group, joining: Member,
                              supports_skip_assignment: bool
                              ) -> JoinResult | asyncio.Future[JoinResult]:
        """A known ``group.instance.id`` came back with an empty member id: replace it."""
        assert joining.group_instance_id is not None
        old_id = group.static_members[joining.group_instance_id]
        old_leader = group.leader
        member = group.members[old_id]
        _answer_join(member, JoinResult(ErrorCode.FENCED_INSTANCE_ID, old_id))
        _answer_sync(member, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
        group.replace_static_member(joining.group_instance_id, joining.member_id)
        unchanged = member.matches(joining.protocols)
        _update_member(member, joining)
        self._touch(group, member)
        log.info("group %s: static member %s rejoined as %s (was %s)", group.group_id,
                 joining.group_instance_id, member.member_id, old_id)
        if group.state is GroupState.STABLE and unchanged:
            try:
                self._store_group(group)
            except KafkaError as exc:  # not stored: the old member id stays the valid one
                group.replace_static_member(joining.group_instance_id, old_id)
                return JoinResult(exc.code, "")
            if supports_skip_assignment and group.leader == member.member_id:
                # KIP-814: the leader learns it leads (and its members) but keeps the
                # assignment the Stable group has.
                return JoinResult(ErrorCode.NONE, member.member_id, group.generation,
                                  group.protocol, member.member_id, group.member_metadata(),
                                  skip_assignment=True)
            # Before JoinGroup v9 the old leader id keeps a rejoined leader from computing a
            # new assignment that a Stable group would not hand out.
            return JoinResult(ErrorCode.NONE, member.member_id, group.generation,
                              group.protocol, old_leader or "")
        waiter = self._park_join(member)
        self._maybe_prepare_rebalance(group, _client_reason(
            f"static member {joining.group_instance_id} rejoined", joining))
        return waiter

    def _add_member_and_rebalance(self, group: Group, member: Member) -> asyncio.Future[JoinResult]:
        member.is_new = True
        if group.state is GroupState.PREPARING_REBALANCE and group.generation == 0:
            group.new_member_added = True
        group.add(member)
        waiter = self._park_join(member)
        # A new member cannot heartbeat before its join completes: give it longer (Kafka).
        self._touch(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, _client_reason(f"member {member.member_id} joined",
                                                            member))
        return waiter

    def _update_member_and_rebalance(self, group: Group, member: Member, joining: Member
                                     ) -> asyncio.Future[JoinResult]:
        _update_member(member, joining)
        waiter = self._park_join(member)
        self._maybe_prepare_rebalance(group, _client_reason(
            f"member {member.member_id} rejoined", joining))
        return waiter

    def _park_join(self, member: Member) -> asyncio.Future[JoinResult]:
        # A member has one JoinGroup in flight; an older one (another connection) gives way.
        _answer_join(member, JoinResult(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        member.join_waiter = self.loop.create_future()
        return member.join_waiter

    @staticmethod
    def _join_answer(group: Group, member: Member) -> JoinResult:
        is_leader = group.leader == member.member_id
        return JoinResult(ErrorCode.NONE, member.member_id, group.generation, group.protocol,
                          group.leader or "", group.member_metadata() if is_leader else ())

    # -- rebalancing ----------------------------------------------------------------------
    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment(group, ErrorCode.REBALANCE_IN_PROGRESS)
        was_empty = group.state is GroupState.EMPTY
        group.transition(GroupState.PREPARING_REBALANCE, self._now_ms())
        if group.join_timer is not None:
            group.join_timer.cancel()
        timeout = group.rebalance_timeout_ms()
        if was_empty:
            group.initial_delay_remaining_ms = max(timeout - self.config.initial_delay_ms, 0)
            group.join_timer = self._call_later(self.config.initial_delay_ms,
                                                self._initial_join_due, group)
        else:
            group.initial_delay_remaining_ms = None
            group.join_timer = self._call_later(timeout, self._complete_join, group)
        log.info("group %s: preparing to rebalance generation %d (%s)", group.group_id,
                 group.generation, reason)
        self._try_complete_join(group)  # e.g. the last member left: nobody to wait for

    def _initial_join_due(self, group: Group) -> None:
        remaining = group.initial_delay_remaining_ms
        if group.new_member_added and remaining:
            group.new_member_added = False
            delay = min(self.config.initial_delay_ms, remaining)
            group.initial_delay_remaining_ms = max(remaining - self.config.initial_delay_ms, 0)
            group.join_timer = self._call_later(delay, self._initial_join_due, group)
        else:
            self._complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        """Complete the join now if every member is in (not during the initial delay)."""
        if (group.state is GroupState.PREPARING_REBALANCE
                and group.initial_delay_remaining_ms is None and group.all_members_joined()):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
        group.join_timer = None
        group.initial_delay_remaining_ms = None
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        for member in group.not_yet_rejoined():
            if member.group_instance_id is None:
                log.info("group %s: removing member %s, which did not rejoin in time",
                         group.group_id, member.member_id)
                self._drop_member(group, member)
        if group.members and not group.elect_joined_leader():
            # Only static members that did not rejoin are left: give them another timeout.
            group.join_timer = self._call_later(group.rebalance_timeout_ms(),
                                                self._complete_join, group)
            return
        now = self._now_ms()
        group.init_next_generation(now)
        self._count_rebalance(CLASSIC_GROUP_TYPE)
        if group.state is GroupState.EMPTY:
            log.info("group %s: generation %d is empty", group.group_id, group.generation)
            try:
                self._store_group(group)
            except KafkaError as exc:  # the next rebalance writes the group again
                log.warning("group %s: cannot store the empty group: %s", group.group_id, exc)
            return
        group.partition_counts = self._partition_counts(group)
        log.info("group %s: generation %d with %d members, protocol %s, leader %s",
                 group.group_id, group.generation, len(group.members), group.protocol,
                 group.leader)
        for member in group.members.values():
            _answer_join(member, self._join_answer(group, member))
            member.is_new = False
            self._touch(group, member)

    def _reset_and_propagate_assignment(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            if member.sync_waiter is not None:
                _answer_sync(member, _sync_answer(group, member, error))
                self._touch(group, member)

    # -- liveness -------------------------------------------------------------------------
    def _touch(self, group: Group, member: Member, timeout_ms: int | None = None) -> None:
        """A sign of life: the member's session restarts now."""
        member.last_heartbeat = self.loop.time()
        member.liveness_timeout_ms = timeout_ms or member.session_timeout_ms
        deadline = member.last_heartbeat + member.liveness_timeout_ms / 1000
        if member.expiry is not None:
            if member.expiry.when() <= deadline:
                return  # the timer fires first and re-arms itself for the new deadline
            member.expiry.cancel()
        member.expiry = self.loop.call_at(deadline, self._check_expiry, group, member)

    def _check_expiry(self, group: Group, member: Member) -> None:
        member.expiry = None
        if group.members.get(member.member_id) is not member:
            return
        now = self.loop.time()
        deadline = member.last_heartbeat + member.liveness_timeout_ms / 1000
        parked = member.join_waiter is not None or member.sync_waiter is not None
        if parked and not member.is_new:  # awaiting a rebalance counts as alive (Kafka)
            deadline = max(deadline, now + member.session_timeout_ms / 1000)
        if now < deadline:
            member.expiry = self.loop.call_at(deadline, self._check_expiry, group, member)
            return
        log.info("group %s: member %s failed its session timeout of %d ms", group.group_id,
                 member.member_id, member.liveness_timeout_ms)
        self._remove_member_and_update_group(group, member)

    def _expire_pending_member(self, group: Group, member_id: str) -> None:
        if group.pending_members.pop(member_id, None) is not None:
            log.info("group %s: pending member %s never joined", group.group_id, member_id)
            if group.state is GroupState.PREPARING_REBALANCE:
                self._try_complete_join(group)

    def _drop_member(self, group: Group, member: Member) -> None:
        """Remove a member, answering whatever it has parked (UNKNOWN_MEMBER_ID)."""
        _answer_join(member, JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, ""))
        _answer_sync(member, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        if member.expiry is not None:
            member.expiry.cancel()
            member.expiry = None
        group.remove(member.member_id)

    def _remove_member_and_update_group(self, group: Group, member: Member) -> None:
        self._drop_member(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f"member {member.member_id} left")
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    # -- SyncGroup ------------------------------------------------------------------------
    async def sync(self, group_id: str, generation: int, member_id: str,
                   instance_id: str | None, assignments: Mapping[str, bytes],
                   protocol_type: str | None = None, protocol: str | None = None
                   ) -> SyncResult:
        """A SyncGroup; a ``protocol_type`` or ``protocol`` (v5+) other than the group's is
        INCONSISTENT_GROUP_PROTOCOL (None: not checked)."""
        error = self._check(group_id)
        if error is None and self._is_consumer_group(group_id):
            return self.consumer.classic_sync(group_id, generation, member_id, instance_id,
                                              protocol_type, protocol)
        group = self.groups.get(group_id)
        if error is None:
            error = self._member_error(group, member_id, instance_id, generation)
        if error is None and group is not None and (
                _inconsistent(protocol_type, group.protocol_type)
                or _inconsistent(protocol, group.protocol)):
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error is not None:
            return SyncResult(error)
        assert group is not None
        member = group.members[member_id]
        if group.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        if group.state is GroupState.STABLE:
            self._touch(group, member)
            return _sync_answer(group, member, ErrorCode.NONE)
        _answer_sync(member, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))  # a superseded sync
        waiter = member.sync_waiter = self.loop.create_future()
        if group.leader == member_id:
            self._complete_sync(group, assignments)
        return await waiter

    def _complete_sync(self, group: Group, assignments: Mapping[str, bytes]) -> None:
        """The leader's assignment: store the group with it, then hand it out."""
        chosen = {m: assignments.get(m, b"") for m in group.members}
        try:
            self._store_group(group, chosen)
        except KafkaError as exc:
            self._reset_and_propagate_assignment(group, exc.code)
            self._maybe_prepare_rebalance(group, "the group could not be stored")
            return
        for member_id, assignment in chosen.items():
            group.members[member_id].assignment = assignment
        group.transition(GroupState.STABLE, self._now_ms())
        log.info("group %s: generation %d is stable", group.group_id, group.generation)
        self._propagate_assignment(group, ErrorCode.NONE)

    def _member_error(self, group: Group | None, member_id: str, instance_id: str | None,
                      generation: int) -> ErrorCode | None:
        """Checks shared by SyncGroup and Heartbeat, in Kafka's order."""
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_static_member_fenced(member_id, instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    # -- Heartbeat ------------------------------------------------------------------------
    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None,
                  generation: int) -> ErrorCode:
        error = self._check(group_id)
        if error is None and self._is_consumer_group(group_id):
            return self.consumer.classic_heartbeat(group_id, member_id, instance_id,
                                                   generation)
        group = self.groups.get(group_id)
        if error is None:
            error = self._member_error(group, member_id, instance_id, generation)
        if error is not None:
            return error
        assert group is not None
        self._touch(group, group.members[member_id])
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        # CompletingRebalance: a member may heartbeat once its join is answered (Kafka).
        if group.state is GroupState.STABLE and any(
                self._partition_count(topic) != count
                for topic, count in group.partition_counts.items()):
            self._prepare_rebalance(group, "a subscribed topic changed partition count")
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def _partition_counts(self, group: Group) -> dict[str, int]:
        """Partition counts of the topics the members subscribe to (consumer protocol)."""
        if group.protocol_type != PROTOCOL_TYPE or group.protocol is None:
            return {}
        topics: set[str] = set()
        for member in group.members.values():
            try:
                topics.update(subscribed_topics(member.metadata(group.protocol)))
            except ValueError:
                continue  # not a subscription we can read: the leader keeps track itself
        return {topic: self._partition_count(topic) for topic in topics}

    # -- LeaveGroup -----------------------------------------------------------------------
    def leave(self, group_id: str, leaving: Iterable[tuple[str, str | None]],
              reasons: Iterable[str | None] = ()) -> tuple[ErrorCode, list[ErrorCode]]:
        """Remove (member id, instance id) pairs; the top-level error and one per member.
        ``reasons`` (LeaveGroup v5+, one per member) are logged."""
        leaving = list(leaving)
        error = self._check(group_id)
        if error is not None:
            return error, []
        if self._is_consumer_group(group_id):
            return ErrorCode.NONE, [self.consumer.classic_leave(group_id, m, i)
                                    for m, i in leaving]
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [ErrorCode.UNKNOWN_MEMBER_ID] * len(leaving)
        why = list(reasons)
        why += [None] * (len(leaving) - len(why))
        return ErrorCode.NONE, [self._leave_one(group, m, i, r)
                                for (m, i), r in zip(leaving, why, strict=True)]

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None,
                   reason: str | None) -> ErrorCode:
        if member_id and group.is_static_member_fenced(member_id, instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        pending = group.pending_members.pop(member_id, None)
        if pending is not None:
            pending.cancel()
            if group.state is GroupState.PREPARING_REBALANCE:
                self._try_complete_join(group)
            return ErrorCode.NONE
        if instance_id is not None and instance_id in group.static_members:
            member_id = group.static_members[instance_id]
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        log.info("group %s: member %s left; client reason: %s", group.group_id, member_id,
                 reason or "not provided")
        self._remove_member_and_update_group(group, member)
        return ErrorCode.NONE

    # -- offsets --------------------------------------------------------------------------
    def commit(self, group_id: str, member_id: str, instance_id: str | None, generation: int,
               offsets: Mapping[TopicPartition, OffsetCommit], *,
               unknown_group_not_found: bool = False) -> dict[TopicPartition, ErrorCode]:
        """An OffsetCommit. A member's commit (generation >= 0) to an unknown group is
        ILLEGAL_GENERATION, or GROUP_ID_NOT_FOUND with ``unknown_group_not_found`` (v9+,
        KIP-848's version: only it may commit for a consumer group's member, whose
        ``generation`` is its member epoch)."""
        error = self._check(group_id, allow_empty_id=True)
        group = self.groups.get(group_id)
        if error is None and self._is_consumer_group(group_id):
            error = self.consumer.validate_commit(group_id, member_id, generation,
                                                  version=9 if unknown_group_not_found else 8)
            if error is None:
                return self._store_offsets(self._offsets_holder(group_id), offsets)
        elif error is None:
            error = self._commit_error(group, member_id, instance_id, generation)
            if group is None and error is not None and unknown_group_not_found:
                error = ErrorCode.GROUP_ID_NOT_FOUND
        if error is not None:
            return dict.fromkeys(offsets, error)
        if group is None:  # a simple consumer's first commit creates the group
            group = self.groups[group_id] = Group(group_id, self._now_ms())
        member = group.members.get(member_id)
        if member is not None:
            self._touch(group, member)
        return self._store_offsets(group, offsets)

    @staticmethod
    def _commit_error(group: Group | None, member_id: str, instance_id: str | None,
                      generation: int, *, transactional: bool = False) -> ErrorCode | None:
        """Kafka's ``validateOffsetCommit``: a TxnOffsetCommit (``transactional``) naming no
        member (before v3, or a producer outside the group) is not checked against the
        members, nor refused while a rebalance completes."""
        if group is None:
            return None if generation < 0 else ErrorCode.ILLEGAL_GENERATION
        if transactional and generation < 0 and not member_id and instance_id is None:
            return None
        if group.is_static_member_fenced(member_id, instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if generation < 0 and group.state is GroupState.EMPTY:
            return None  # the group only stores offsets
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if not transactional and group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return None  # Stable, or PreparingRebalance (commits of this generation still count)

    def txn_commit(self, group_id: str, producer_id: int, producer_epoch: int,
                   offsets: Mapping[TopicPartition, OffsetCommit], *, member_id: str = "",
                   instance_id: str | None = None, generation: int = -1
                   ) -> dict[TopicPartition, ErrorCode]:
        """TxnOffsetCommit: offsets written in the producer's transaction, which count (for
        OffsetFetch and at every later load) only once its COMMIT marker reaches the group's
        partition (``complete_txn``). As in Kafka, the group need not have members; a
        member the request names (v3+, KIP-447) is checked as OffsetCommit checks it."""
        error = self._check(group_id)
        group = self.groups.get(group_id)
        if error is None and self._is_consumer_group(group_id):
            error = self.consumer.validate_commit(group_id, member_id, generation,
                                                  transactional=True)
        elif error is None:
            error = self._commit_error(group, member_id, instance_id, generation,
                                       transactional=True)
        if error is not None:
            return dict.fromkeys(offsets, error)
        return self._store_offsets(self._offsets_holder(group_id), offsets,
                                   (producer_id, producer_epoch))

    def _offsets_holder(self, group_id: str) -> Group:
        """The group's entry in ``groups`` (created Empty for a group that has none)."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id, self._now_ms())
        return group

    def complete_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        """A marker of ``producer_id``'s transaction was written to ``__consumer_offsets``
        partition ``partition``: its offsets count now (COMMIT) or never (ABORT)."""
        for group in self.groups.values():
            if self.store.partition_for(group.group_id) != partition:
                continue
            done = group.pending_txn_offsets.pop(producer_id, None)
            if done and commit:
                group.offsets.update(done)

    def _store_offsets(self, group: Group, offsets: Mapping[TopicPartition, OffsetCommit],
                       producer: tuple[int, int] | None = None
                       ) -> dict[TopicPartition, ErrorCode]:
        now = self._now_ms()
        result: dict[TopicPartition, ErrorCode] = {}
        accepted: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, commit in offsets.items():
            metadata = commit.metadata or ""
            if len(metadata) > self.config.metadata_max_bytes:
                result[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            elif not 0 <= tp[1] < self._partition_count(tp[0]):
                result[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                accepted[tp] = OffsetAndMetadata(commit.offset, commit.leader_epoch, metadata,
                                                 now)
        if accepted:
            records = [(offset_key(group.group_id, *tp), offset_value(value))
                       for tp, value in accepted.items()]
            try:
                self.store.append(group.group_id, records, now, producer)
            except KafkaError as exc:
                return result | dict.fromkeys(accepted, exc.code)
            if producer is None:
                group.offsets.update(accepted)
            else:
                group.pending_txn_offsets.setdefault(producer[0], {}).update(accepted)
        return result | dict.fromkeys(accepted, ErrorCode.NONE)

    def fetch_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None,
                      member_id: str | None = None, member_epoch: int = -1
                      ) -> tuple[ErrorCode, dict[TopicPartition, OffsetAndMetadata | None]]:
        """Committed offsets (all of the group's when ``partitions`` is None); the member
        (OffsetFetch v9+) is checked for a consumer group."""
        error = self._check(group_id, allow_empty_id=True)
        if error is None and self._is_consumer_group(group_id):
            error = self.consumer.validate_fetch(group_id, member_id, member_epoch)
        if error is not None:
            return error, {}
        group = self.groups.get(group_id)
        committed = group.offsets if group is not None else {}
        if partitions is None:
            return ErrorCode.NONE, dict(committed)
        return ErrorCode.NONE, {tp: committed.get(tp) for tp in partitions}

    def unstable_offsets(self, group_id: str) -> set[TopicPartition]:
        """The group's partitions with a transactional commit still open (KIP-447: OffsetFetch
        with ``require_stable`` answers them UNSTABLE_OFFSET_COMMIT)."""
        group = self.groups.get(group_id)
        if group is None:
            return set()
        return {tp for pending in group.pending_txn_offsets.values() for tp in pending}

    # -- ListGroups, DescribeGroups, DeleteGroups -----------------------------------------
    def list_groups(self) -> tuple[ErrorCode, list[tuple[str, str, str]]]:
        """(error, [(group id, protocol type, state)]) of both group types."""
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        consumer = self.consumer.groups
        return ErrorCode.NONE, [
            *((g.group_id, g.protocol_type or "", g.state)
              for g in self.groups.values() if g.group_id not in consumer),
            *((g.group_id, PROTOCOL_TYPE, g.state) for g in consumer.values())]

    def group_type(self, group_id: str) -> str:
        """ListGroups' group type (v5+): ``consumer`` (KIP-848) or ``classic``."""
        return CONSUMER_GROUP_TYPE if self._is_consumer_group(group_id) else CLASSIC_GROUP_TYPE

    def describe(self, group_id: str) -> tuple[ErrorCode, GroupSummary]:
        error = self._check(group_id, allow_empty_id=True)
        if error is not None:
            return error, GroupSummary("", "", "", ())
        group = self.groups.get(group_id)
        if group is None or self._is_consumer_group(group_id):  # not a classic group
            return ErrorCode.NONE, DEAD_GROUP
        protocol = group.protocol if group.state is GroupState.STABLE else None
        members = tuple(
            MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                          b"" if protocol is None else m.metadata(protocol),
                          b"" if protocol is None else m.assignment)
            for m in group.members.values())
        return ErrorCode.NONE, GroupSummary(group.state, group.protocol_type or "",
                                            protocol or "", members)

    def delete(self, group_id: str) -> ErrorCode:
        error = self._check(group_id, allow_empty_id=True)
        if error is not None:
            return error
        if self._is_consumer_group(group_id):
            error = self.consumer.delete(group_id)
            if error != ErrorCode.NONE or group_id not in self.groups:
                return error
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.state is not GroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        try:
            self._cleanup(group, list(group.offsets))
        except KafkaError as exc:
            return exc.code
        log.info("group %s deleted", group_id)
        return ErrorCode.NONE

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]
                       ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete (Kafka's deleteOffsets): the group-level error, and each partition's.
        A group with members may only lose offsets if it uses the consumer protocol
        (NON_EMPTY_GROUP otherwise), and never those of a topic its members subscribe to
        (GROUP_SUBSCRIBED_TO_TOPIC); the rest get a tombstone where an offset is committed
        or a transaction's commit is pending (the open transaction's own offsets still land
        at its COMMIT marker, on replay too). An Empty group left without offsets dies."""
        error = self._check(group_id)
        if error is not None:
            return error, {}
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        if group.state is not GroupState.EMPTY and group.protocol_type != PROTOCOL_TYPE:
            return ErrorCode.NON_EMPTY_GROUP, {}
        subscribed = self._subscribed_topics(group)
        result = {tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                  if subscribed is None or tp[0] in subscribed else ErrorCode.NONE
                  for tp in partitions}
        pending = self.unstable_offsets(group_id)
        removed = [tp for tp, code in result.items()
                   if code == ErrorCode.NONE and (tp in group.offsets or tp in pending)]
        try:
            self._cleanup(group, removed)
        except KafkaError as exc:
            return exc.code, {}
        if removed:
            log.info("group %s: deleted the offsets of %d partitions", group_id, len(removed))
        return ErrorCode.NONE, result

    def _subscribed_topics(self, group: Group) -> set[str] | None:
        """The topics the members subscribe to (consumer protocol); None when a member's
        subscription cannot be read (Kafka then takes every topic to be subscribed)."""
        if self._is_consumer_group(group.group_id):
            return self.consumer.subscribed_topics(group.group_id)
        if group.protocol_type != PROTOCOL_TYPE or not group.members:
            return set()
        if group.protocol is None:
            return None
        topics: set[str] = set()
        for member in group.members.values():
            try:
                topics.update(subscribed_topics(member.metadata(group.protocol)))
            except (ValueError, KeyError):
                return None
        return topics

    # -- expiration -----------------------------------------------------------------------
    def _expire_periodically(self) -> None:
        try:
            self.expire_offsets()
        except Exception:
            log.exception("offset expiration failed")
        self._expiration = self._call_later(self.config.retention_check_ms,
                                            self._expire_periodically)

    def expire_offsets(self) -> None:
        """Drop expired offsets of Empty groups, and Empty groups left without offsets (a
        consumer group's offsets expire from their commits once it has no members)."""
        now = self._now_ms()
        for group_id, modern in list(self.consumer.groups.items()):
            if not modern.members and group_id not in self.groups:
                if self.consumer.delete(group_id) == ErrorCode.NONE:
                    log.info("group %s: the empty consumer group without offsets is deleted",
                             group_id)
        for group in list(self.groups.values()):
            if group.state is not GroupState.EMPTY or group.pending_members or (
                    self._is_consumer_group(group.group_id)
                    and self.consumer.groups[group.group_id].members):
                continue
            if group.protocol_type is not None:  # had members: expire from becoming Empty
                expired = (list(group.offsets)
                           if now - group.state_timestamp >= self.config.retention_ms else [])
            else:  # a simple group: each offset from its commit
                expired = [tp for tp, value in group.offsets.items()
                           if now - value.commit_timestamp >= self.config.retention_ms]
            if expired or not group.offsets:
                try:
                    self._cleanup(group, expired)
                except KafkaError as exc:
                    log.warning("group %s: cannot expire offsets: %s", group.group_id, exc)
                    continue
                log.info("group %s: expired %d offsets", group.group_id, len(expired))

    def _cleanup(self, group: Group, removed: list[TopicPartition]) -> None:
        """Tombstone ``removed`` offsets; an Empty group left without offsets dies."""
        dies = (group.state is GroupState.EMPTY and set(removed) >= group.offsets.keys()
                and not group.pending_txn_offsets)
        tombstones: list[Record] = [(offset_key(group.group_id, *tp), None) for tp in removed]
        if dies and group.generation > 0:  # generation 0 never wrote group metadata
            tombstones.append((group_key(group.group_id), None))
        if tombstones:
            self.store.append(group.group_id, tombstones, self._now_ms())
        for tp in removed:
            group.offsets.pop(tp, None)
        if dies:
            for handle in group.pending_members.values():
                handle.cancel()
            group.transition(GroupState.DEAD, self._now_ms())
            del self.groups[group.group_id]

    # -- persistence ----------------------------------------------------------------------
    def _store_group(self, group: Group, assignments: Mapping[str, bytes] | None = None) -> None:
        """Append the group's metadata (with ``assignments``, else the current ones)."""
        self.store.append(group.group_id, [self._group_record(group, assignments)],
                          self._now_ms())

    @staticmethod
    def _group_record(group: Group, assignments: Mapping[str, bytes] | None = None) -> Record:
        members = tuple(
            MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                         m.rebalance_timeout_ms, m.session_timeout_ms,
                         m.metadata(group.protocol) if group.protocol else b"",
                         m.assignment if assignments is None else assignments[m.member_id])
            for m in group.members.values())
        record = GroupRecord(group.protocol_type or "", group.generation, group.protocol,
                             group.leader, group.state_timestamp, members)
        return group_key(group.group_id), group_value(record)

    def _restore(self, group: Group, record: GroupRecord) -> None:
        group.generation = record.generation
        group.protocol_type = record.protocol_type or None
        if record.state_timestamp >= 0:
            group.state_timestamp = record.state_timestamp
        if not record.members or record.protocol is None:
            return  # Empty
        group.protocol, group.leader = record.protocol, record.leader
        group.state = GroupState.STABLE
        for m in record.members:
            member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.rebalance_timeout_ms, m.session_timeout_ms, record.protocol_type,
                            ((record.protocol, m.subscription),), m.assignment)
            group.add(member)
            self._touch(group, member)
        group.leader = record.leader if record.leader in group.members else group.leader
        group.partition_counts = self._partition_counts(group)


def _update_member(member: Member, joining: Member) -> None:
    """Take the rejoining request's settings (Kafka updates these on every join)."""
    member.protocols = joining.protocols
    member.client_id, member.client_host = joining.client_id, joining.client_host
    member.rebalance_timeout_ms = joining.rebalance_timeout_ms
    member.session_timeout_ms = joining.session_timeout_ms
    member.join_reason = joining.join_reason


def _client_reason(cause: str, member: Member) -> str:
    """A rebalance's cause with the client's reason, as Kafka logs it."""
    return f"{cause}; client reason: {member.join_reason or 'not provided'}"


def _answer_join(member: Member, result: JoinResult) -> None:
    if member.join_waiter is not None:
        if not member.join_waiter.done():
            member.join_waiter.set_result(result)
        member.join_waiter = None


def _inconsistent(given: str | None, group_value: str | None) -> bool:
    """Kafka's isProtocolInconsistent: both known and different."""
    return given is not None and group_value is not None and given != group_value


def _sync_answer(group: Group, member: Member, error: ErrorCode) -> SyncResult:
    if error != ErrorCode.NONE:
        return SyncResult(error, member.assignment)
    return SyncResult(error, member.assignment, group.protocol_type, group.protocol)


def _answer_sync(member: Member, result: SyncResult) -> None:
    if member.sync_waiter is not None:
        if not member.sync_waiter.done():
            member.sync_waiter.set_result(result)
        member.sync_waiter = None
