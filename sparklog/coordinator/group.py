"""A classic consumer group: its members, generation, chosen protocol and committed offsets.

States (Kafka's ``ClassicGroupState``) and the transitions allowed into each:
- Empty <- PreparingRebalance: no members; offsets may remain (also a "simple" group that only
  commits offsets). Join: accepted; sync, heartbeat, member commits: UNKNOWN_MEMBER_ID.
- PreparingRebalance <- Stable, CompletingRebalance, Empty: joins are parked until every
  known member rejoined or the rebalance timeout passed; heartbeats and syncs get
  REBALANCE_IN_PROGRESS; commits of the current generation are still accepted.
- CompletingRebalance <- PreparingRebalance: the generation is chosen and join responses went
  out; the followers' syncs wait for the leader's; heartbeats of the new generation are
  answered as in Stable (a member may start heartbeating once its join is answered);
  commits get REBALANCE_IN_PROGRESS.
- Stable <- CompletingRebalance: the leader's assignment was stored and handed out.
- Dead <- any: the group was deleted or expired; it is no longer in the coordinator.

Invariants:
- This module is pure state: no I/O and no timers (the ``GroupCoordinator`` owns those). A
  member's parked JoinGroup and SyncGroup are futures on the member; whoever resolves one
  also clears it, so a parked request is answered exactly once.
- ``leader`` is None or a current member id; ``static_members`` maps every
  ``group.instance.id`` of a current member to that member's id and nothing else.
- ``protocol`` is set exactly when the group has a generation with members; every member
  supports it (it was elected among the protocols all members listed).
- The generation only grows, by one per completed rebalance (also one that leaves the
  group Empty).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum

from sparklog.coordinator.group_records import OffsetAndMetadata, TopicPartition
from sparklog.errors import ErrorCode

Protocols = tuple[tuple[str, bytes], ...]
"""A member's (protocol name, metadata) list in its order of preference."""


class GroupState(StrEnum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


@dataclass(frozen=True, slots=True)
class JoinResult:
    """A JoinGroup answer; ``members`` (id, instance id, metadata) only go to the leader.
    ``skip_assignment``: a static leader rejoined a Stable group (KIP-814, JoinGroup v9+); it
    gets the members but must not compute a new assignment."""

    error: ErrorCode
    member_id: str
    generation: int = -1
    protocol: str | None = None
    leader: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    """A SyncGroup answer; a successful one names the group's protocol type and protocol
    (SyncGroup v5+ echoes them)."""

    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol: str | None = None


@dataclass(eq=False)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    join_reason: str | None = None  # the client's reason for its latest JoinGroup (v8+)
    is_new: bool = False
    join_waiter: asyncio.Future[JoinResult] | None = None
    sync_waiter: asyncio.Future[SyncResult] | None = None
    # Liveness, in event loop time (seconds): the coordinator's expiry timer reads these.
    last_heartbeat: float = 0.0
    liveness_timeout_ms: int = 0
    expiry: asyncio.TimerHandle | None = None

    @property
    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: Protocols) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        return next(name for name in self.protocol_names if name in candidates)


@dataclass(eq=False)
class Group:
    group_id: str
    state_timestamp: int
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    # Member ids handed out with MEMBER_ID_REQUIRED, not joined yet -> their expiry timer.
    pending_members: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)
    # Offsets of open transactions (TxnOffsetCommit), by producer id: committed at its marker.
    pending_txn_offsets: dict[int, dict[TopicPartition, OffsetAndMetadata]] = field(
        default_factory=dict)
    # The delayed join: its timer, and while the initial delay (group.initial.rebalance.
    # delay.ms) runs, the rebalance time it may still extend into (None otherwise).
    join_timer: asyncio.TimerHandle | None = None
    initial_delay_remaining_ms: int | None = None
    new_member_added: bool = False
    # Partition counts of the subscribed topics when the generation started.
    partition_counts: dict[str, int] = field(default_factory=dict)

    # -- states ---------------------------------------------------------------------------
    def transition(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise RuntimeError(f"group {self.group_id}: illegal transition {self.state} -> {state}")
        self.state = state
        self.state_timestamp = now_ms

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    # -- members --------------------------------------------------------------------------
    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader is None:
            self.leader = member.member_id

    def remove(self, member_id: str) -> Member:
        member = self.members.pop(member_id)
        if member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        return member

    def replace_static_member(self, instance_id: str, new_member_id: str) -> Member:
        """Move the member of ``instance_id`` to ``new_member_id`` (leadership follows)."""
        old_member_id = self.static_members[instance_id]
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[instance_id] = new_member_id
        if self.leader == old_member_id:
            self.leader = new_member_id
        return member

    def is_static_member_fenced(self, member_id: str, instance_id: str | None) -> bool:
        """A known ``group.instance.id`` used with another member id: a zombie instance."""
        return instance_id is not None and self.static_members.get(instance_id,
                                                                   member_id) != member_id

    # -- protocols ------------------------------------------------------------------------
    def supports_protocols(self, protocol_type: str, names: list[str]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        counts = Counter(name for m in self.members.values() for name in set(m.protocol_names))
        return any(counts[name] == len(self.members) for name in names)

    def select_protocol(self) -> str:
        """The protocol every member supports that most members prefer (Kafka's vote)."""
        members = list(self.members.values())
        candidates = set(members[0].protocol_names)
        for member in members[1:]:
            candidates &= set(member.protocol_names)
        votes = Counter(member.vote(candidates) for member in members)
        return votes.most_common(1)[0][0]

    # -- rebalances -----------------------------------------------------------------------
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(
            m.join_waiter is not None for m in self.members.values())

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if m.join_waiter is None]

    def elect_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick a member that did; False if none did."""
        if self.leader is not None and self.members[self.leader].join_waiter is not None:
            return True
        joined = next((m for m in self.members.values() if m.join_waiter is not None), None)
        if joined is None:
            return False
        self.leader = joined.member_id
        return True

    def init_next_generation(self, now_ms: int) -> None:
        self.generation += 1
        if self.members:
            self.protocol = self.select_protocol()
            self.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol = None
            self.transition(GroupState.EMPTY, now_ms)

    def member_metadata(self) -> tuple[tuple[str, str | None, bytes], ...]:
        """Every member with its metadata for the chosen protocol (the leader's JoinGroup)."""
        assert self.protocol is not None
        return tuple((m.member_id, m.group_instance_id, m.metadata(self.protocol))
                     for m in self.members.values())
