"""A KIP-848 consumer group and its members, and the reconciliation of a member's assignment
(Kafka's ``ConsumerGroup``, ``ConsumerGroupMember`` and ``CurrentAssignmentBuilder``).

Vocabulary: the *group epoch* is bumped whenever what the assignment depends on changes (a
member joins or leaves, a subscription or a subscribed topic's partition count changes);
the *target assignment* is computed by the server-side assignor for a group epoch (its
*assignment epoch*); each member converges to its target one heartbeat at a time and
carries its own *member epoch*, which reaches the assignment epoch once it is reconciled.

Invariants:
- A ``ConsumerMember`` is immutable: a change is a new member (``dataclasses.replace``),
  built, written to ``__consumer_offsets`` and only then put in the group, so the group's
  memory never holds what the log does not.
- A partition is owned by at most one member at a time: a member is given a partition
  (``reconcile``) only once no other member holds it, assigned or pending revocation
  (``partition_epochs``); a member that must give partitions up stays at its epoch in
  UNREVOKED_PARTITIONS until its heartbeat no longer reports them, and one waiting for
  partitions another member still holds is in UNRELEASED_PARTITIONS.
- ``partition_epochs`` is derived from the members (``put``/``remove`` keep it in step):
  every partition a member holds, assigned or pending revocation, maps to that member's
  epoch.
- ``static_members`` maps each instance id to its current member id.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from sparklog.coordinator.consumer_protocol import PROTOCOL_TYPE as CONSUMER_PROTOCOL_TYPE
from sparklog.coordinator.group_records import (
    ClassicMemberMetadata,
    ConsumerMemberRecord,
    CurrentAssignmentRecord,
    TopicAssignment,
)

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
NO_OWNER = -1

EMPTY_ASSIGNMENT: TopicAssignment = {}


class MemberState(IntEnum):
    """Kafka's ``MemberState`` (the byte in the current assignment record)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState:
    """Kafka's ``ConsumerGroupState`` names (DescribeGroups, ListGroups, the tools)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


class FencedMemberEpoch(Exception):
    """The member must abandon its partitions and rejoin (FENCED_MEMBER_EPOCH)."""


@dataclass(frozen=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: TopicAssignment = field(default_factory=dict)
    pending_revocation: TopicAssignment = field(default_factory=dict)
    classic: ClassicMemberMetadata | None = None
    """A member speaking the classic protocol (JoinGroup, SyncGroup, Heartbeat)."""

    def subscription_record(self) -> ConsumerMemberRecord:
        return ConsumerMemberRecord(self.instance_id, self.rack_id, self.client_id,
                                    self.client_host, self.subscribed_topic_names,
                                    self.subscribed_topic_regex, self.rebalance_timeout_ms,
                                    self.server_assignor, self.classic)

    def same_subscription(self, other: ConsumerMember) -> bool:
        return self.subscription_record() == other.subscription_record()

    def current_record(self) -> CurrentAssignmentRecord:
        return CurrentAssignmentRecord(self.member_epoch, self.previous_member_epoch,
                                       int(self.state), self.assigned, self.pending_revocation)

    def same_assignment(self, other: ConsumerMember) -> bool:
        return self.current_record() == other.current_record()

    def with_epoch(self, epoch: int, **changes: object) -> ConsumerMember:
        """Kafka's ``updateMemberEpoch``: the old epoch becomes the previous one."""
        return dataclasses.replace(self, member_epoch=epoch,
                                   previous_member_epoch=self.member_epoch, **changes)

    def is_reconciled_to(self, assignment_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == assignment_epoch

    @classmethod
    def restored(cls, member_id: str, subscription: ConsumerMemberRecord | None,
                 current: CurrentAssignmentRecord | None) -> ConsumerMember:
        member = cls(member_id)
        if subscription is not None:
            member = dataclasses.replace(
                member, instance_id=subscription.instance_id, rack_id=subscription.rack_id,
                client_id=subscription.client_id, client_host=subscription.client_host,
                subscribed_topic_names=subscription.subscribed_topic_names,
                subscribed_topic_regex=subscription.subscribed_topic_regex,
                rebalance_timeout_ms=subscription.rebalance_timeout_ms,
                server_assignor=subscription.server_assignor, classic=subscription.classic)
        if current is not None:
            state = current.state if current.state in iter(MemberState) else MemberState.UNKNOWN
            member = dataclasses.replace(
                member, member_epoch=current.member_epoch,
                previous_member_epoch=current.previous_member_epoch, state=MemberState(state),
                assigned=dict(current.assigned),
                pending_revocation=dict(current.pending_revocation))
        return member


def _held(member: ConsumerMember) -> list[tuple[uuid.UUID, int]]:
    return [(topic_id, p) for assignment in (member.assigned, member.pending_revocation)
            for topic_id, partitions in assignment.items() for p in partitions]


class ConsumerGroup:
    """One consumer group's state (timers included; the coordinator drives it)."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.static_members: dict[str, str] = {}
        self.targets: dict[str, TopicAssignment] = {}
        self.subscription_metadata: dict[str, tuple[uuid.UUID, int]] = {}
        """Topic name -> (id, partitions) of every subscribed topic that exists."""
        self.partition_epochs: dict[tuple[uuid.UUID, int], int] = {}
        self.metadata_refresh_ms = 0
        """When ``subscription_metadata`` is next checked against the topics."""
        self.session_timers: dict[str, asyncio.TimerHandle] = {}
        self.rebalance_timers: dict[str, asyncio.TimerHandle] = {}
        self.join_timers: dict[str, asyncio.TimerHandle] = {}
        """Classic members told to rejoin (REBALANCE_IN_PROGRESS) that have not yet."""
        self.sync_timers: dict[str, asyncio.TimerHandle] = {}
        """Classic members that joined and have not yet sent their SyncGroup."""

    @property
    def timers(self) -> tuple[dict[str, asyncio.TimerHandle], ...]:
        return (self.session_timers, self.rebalance_timers, self.join_timers,
                self.sync_timers)

    @property
    def state(self) -> str:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def target(self, member_id: str) -> TopicAssignment:
        return self.targets.get(member_id, EMPTY_ASSIGNMENT)

    def current_partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), NO_OWNER)

    def put(self, member: ConsumerMember) -> None:
        """Add or replace a member (same member id)."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self.members[member.member_id] = member
        for tp in _held(member):
            self.partition_epochs[tp] = member.member_epoch
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def uses_classic_protocol_only(self, but: str = "") -> bool:
        """Kafka's ``allMembersUseClassicProtocolExcept``: every member but ``but``."""
        return all(m.classic is not None for m in self.members.values() if m.member_id != but)

    def supports_classic_protocols(self, protocol_type: str, member_id: str,
                                   names: set[str]) -> bool:
        """Kafka's ``supportsClassicProtocols``: a "consumer" JoinGroup naming a protocol
        every other classic member supports."""
        if protocol_type != CONSUMER_PROTOCOL_TYPE or not names:
            return False
        for member in self.members.values():
            if member.classic is not None and member.member_id != member_id:
                names = names & {name for name, _ in member.classic.protocols}
        return bool(names)

    def waits_on_unreleased(self, member: ConsumerMember) -> bool:
        """Kafka's ``waitingOnUnreleasedPartition``: a partition of its target another
        member still holds."""
        return any(self.current_partition_epoch(topic_id, p) != NO_OWNER
                   for topic_id, partitions in self.target(member.member_id).items()
                   for p in partitions - member.assigned.get(topic_id, frozenset()))

    def remove(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        self.targets.pop(member_id, None)
        if member is None:
            return None
        self._release(member)
        if member.instance_id is not None and \
                self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]
        for timers in self.timers:
            handle = timers.pop(member_id, None)
            if handle is not None:
                handle.cancel()
        return member

    def _release(self, member: ConsumerMember) -> None:
        for tp in _held(member):
            if self.partition_epochs.get(tp) == member.member_epoch:
                del self.partition_epochs[tp]

    def cancel_timers(self) -> None:
        for timers in self.timers:
            for handle in timers.values():
                handle.cancel()
            timers.clear()


def reconcile(member: ConsumerMember, target_epoch: int, target: TopicAssignment,
              owned: TopicAssignment | None,
              partition_epoch: Callable[[uuid.UUID, int], int]) -> ConsumerMember:
    """The member's next state towards ``target`` (Kafka's ``CurrentAssignmentBuilder``);
    ``owned`` is what its heartbeat reports (None: not reported, so nothing counts as
    revoked). Raises ``FencedMemberEpoch`` for a member in an unknown state that still owns
    partitions."""
    if member.state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next_assignment(member, member.member_epoch, target_epoch, target, owned,
                                partition_epoch)
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        return _next_assignment(member, member.member_epoch + 1, target_epoch, target, owned,
                                partition_epoch)
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        return _next_assignment(member, member.member_epoch, target_epoch, target, owned,
                                partition_epoch)
    if owned is None or owned:
        raise FencedMemberEpoch("the member is in an unknown state: it must abandon all its "
                                "partitions and rejoin")
    return _next_assignment(member, target_epoch, target_epoch, target, owned, partition_epoch)


def _owns_any(owned: TopicAssignment | None, partitions: TopicAssignment) -> bool:
    if owned is None:
        return True
    return any(owned.get(topic_id, frozenset()) & pending
               for topic_id, pending in partitions.items())


def _next_assignment(member: ConsumerMember, epoch: int, target_epoch: int,
                     target: TopicAssignment, owned: TopicAssignment | None,
                     partition_epoch: Callable[[uuid.UUID, int], int]) -> ConsumerMember:
    unreleased = False
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoking: dict[uuid.UUID, frozenset[int]] = {}
    adding: dict[uuid.UUID, frozenset[int]] = {}
    for topic_id in target.keys() | member.assigned.keys():
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        kept = current & wanted
        pending = wanted - kept
        free = frozenset(p for p in pending if partition_epoch(topic_id, p) == NO_OWNER)
        unreleased = unreleased or free != pending
        for into, partitions in ((assigned, kept), (revoking, current - kept), (adding, free)):
            if partitions:
                into[topic_id] = partitions
    if revoking and _owns_any(owned, revoking):
        return member.with_epoch(epoch, state=MemberState.UNREVOKED_PARTITIONS,
                                 assigned=assigned, pending_revocation=revoking)
    for topic_id, partitions in adding.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return member.with_epoch(target_epoch, state=state, assigned=assigned,
                             pending_revocation={})


def is_subset(owned: TopicAssignment | None, assigned: Mapping[uuid.UUID, frozenset[int]]
              ) -> bool:
    """Kafka's ``isSubset``: every owned partition is assigned (None owns nothing known)."""
    if owned is None:
        return False
    return all(partitions <= assigned.get(topic_id, frozenset())
               for topic_id, partitions in owned.items())
