"""Partition reassignment (KIP-455, as Kafka's ZooKeeper-era controller runs it).

A reassignment in flight lives in the topic znode (``TopicAssignment``): ``partitions[p]``
is the full replica set RS = target + original (target first, so the target's first replica
is the preferred leader), ``adding[p]`` the target replicas the original lacks and
``removing[p]`` the replicas the target drops. Brokers see RS as the partition's replicas:
the new ones create their logs and fetch, and the leader takes them into the ISR once
caught up (``broker/replication/replica_manager.py``).

Invariants:
- ``reassign`` (any broker, on AlterPartitionReassignments, written by compare-and-set)
  checks a target as Kafka does (distinct, registered brokers; the replication factor kept
  unless allowed to change) and replaces a reassignment already in flight; replicas that
  one was adding and the new target lacks are removed too. A target that adds and removes
  nothing (the same replicas, reordered) takes effect at once.
- A cancel (target None) turns the partition back to its original replicas: the replicas
  being added are now being removed, and it completes like any reassignment (at once when
  nothing was being added); no reassignment in flight is NO_REASSIGNMENT_IN_PROGRESS.
- ``complete`` (the controller) acts once every target replica is in the ISR: the leader is
  the current one if it is in the target and alive, else the first target replica alive and
  in sync, in a new leader epoch; the ISR keeps only target replicas; the replicas become
  the target. The topic znode and the states are written in one fenced transaction, the
  topic first: brokers hear of the new replicas before the new states, so a removed
  replica stops fetching (and deletes its log) before the new leader epoch starts, and no
  leader takes it back into the ISR.
- Everything is in ZooKeeper: a new controller carries on with the reassignments the old
  one left (``Reassignments.advance`` on every pass), watching the state znodes of the
  partitions in flight so an ISR change brings the next pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import replace

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from sparklog.cluster.assignment import check_assignment
from sparklog.cluster.fencing import commit, fenced_transaction
from sparklog.cluster.layout import (
    NO_LEADER,
    TOPICS,
    PartitionState,
    Replicas,
    TopicAssignment,
    state_path,
    topic_path,
)
from sparklog.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


def original(assignment: TopicAssignment, partition: int) -> tuple[int, ...]:
    """The replicas before the reassignment in flight (all of them when there is none)."""
    adding = assignment.adding.get(partition, ())
    return tuple(r for r in assignment.partitions[partition] if r not in adding)


def target(assignment: TopicAssignment, partition: int) -> tuple[int, ...]:
    """The replicas the partition ends with (all of them when nothing is in flight)."""
    removing = assignment.removing.get(partition, ())
    return tuple(r for r in assignment.partitions[partition] if r not in removing)


def in_flight(assignment: TopicAssignment) -> list[int]:
    return sorted(assignment.adding.keys() | assignment.removing.keys())


def reassign(assignment: TopicAssignment, requests: Mapping[int, tuple[int, ...] | None],
             brokers: Collection[int], allow_factor_change: bool = True,
             ) -> tuple[TopicAssignment, dict[int, KafkaError | None]]:
    """The topic's assignment with ``requests`` (partition -> target, None to cancel)
    applied, and each partition's error (None: accepted); refused partitions are unchanged."""
    partitions, adding, removing = (dict(assignment.partitions), dict(assignment.adding),
                                    dict(assignment.removing))
    errors: dict[int, KafkaError | None] = {}
    for partition, wanted in sorted(requests.items()):
        try:
            if partition not in assignment.partitions:
                raise KafkaError(f"unknown partition {partition}",
                                 ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            before = original(assignment, partition)
            if wanted is None:
                if partition not in in_flight(assignment):
                    raise KafkaError("no reassignment of this partition is in progress",
                                     ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
                wanted = before
            check_assignment(brokers, {partition: wanted})
            if not allow_factor_change and len(wanted) != len(before):
                raise KafkaError(f"the replication factor would change from {len(before)} to "
                                 f"{len(wanted)}", ErrorCode.INVALID_REPLICATION_FACTOR)
        except KafkaError as exc:
            errors[partition] = exc
            continue
        errors[partition] = None
        stale = tuple(r for r in assignment.adding.get(partition, ())
                      if r not in wanted and r not in before)
        dropped = tuple(r for r in before if r not in wanted) + stale
        added = tuple(r for r in wanted if r not in before)
        adding.pop(partition, None)
        removing.pop(partition, None)
        if not (added or dropped):
            partitions[partition] = tuple(wanted)
            continue
        partitions[partition] = tuple(wanted) + dropped
        if added:
            adding[partition] = added
        if dropped:
            removing[partition] = dropped
    return replace(assignment, partitions=partitions, adding=adding, removing=removing), errors


def complete(assignment: TopicAssignment, partition: int, state: PartitionState,
             live: Collection[int], controller_epoch: int
             ) -> tuple[PartitionState, tuple[int, ...]] | None:
    """The partition's final state and replicas once every target replica is in the ISR;
    None while it must wait."""
    wanted = target(assignment, partition)
    if not set(wanted) <= set(state.isr):
        return None
    leader = state.leader if state.leader in wanted and state.leader in live else next(
        (r for r in wanted if r in state.isr and r in live), NO_LEADER)
    if leader == NO_LEADER:
        return None
    isr = tuple(r for r in state.isr if r in wanted)
    return PartitionState(leader, state.leader_epoch + 1, isr, controller_epoch), wanted


class Reassignments:
    """The controller's part: completes the reassignments in flight (module invariants)."""

    def __init__(self, zk: KazooClient, on_change: Callable[..., bool]) -> None:
        self.zk = zk
        self._on_change = on_change
        self._watched: set[tuple[str, int]] = set()

    def advance(self, live: Collection[int], epoch: int, epoch_version: int) -> bool:
        """Complete what can be; False when a write lost a race (the pass must be retried)."""
        done = True
        for topic in self.zk.get_children(TOPICS):
            try:
                data, stat = self.zk.get(topic_path(topic))
            except NoNodeError:
                continue
            assignment = TopicAssignment.decode(data, stat.version)
            if in_flight(assignment):
                done &= self._advance_topic(topic, assignment, live, epoch, epoch_version)
        return done

    def _advance_topic(self, topic: str, assignment: TopicAssignment, live: Collection[int],
                       epoch: int, epoch_version: int) -> bool:
        partitions: Replicas = dict(assignment.partitions)
        adding, removing = dict(assignment.adding), dict(assignment.removing)
        finished: list[tuple[int, PartitionState]] = []
        state_versions: dict[int, int] = {}
        for partition in in_flight(assignment):
            self._watch(topic, partition)
            try:
                data, stat = self.zk.get(state_path(topic, partition))
            except NoNodeError:
                continue
            state = PartitionState.decode(data, stat.version)
            state_versions[partition] = stat.version
            outcome = complete(assignment, partition, state, live, epoch)
            if outcome is None:
                continue
            new_state, partitions[partition] = outcome
            adding.pop(partition, None)
            removing.pop(partition, None)
            finished.append((partition, new_state))
        if not finished:
            return True
        # the assignment first: brokers hear of it before the new states, so a leader never
        # takes a removed replica back into the ISR, and a removed one stops at once
        transaction = fenced_transaction(self.zk, epoch_version)
        transaction.set_data(topic_path(topic), replace(
            assignment, partitions=partitions, adding=adding, removing=removing).encode(),
            assignment.zk_version)
        for partition, state in finished:
            transaction.set_data(state_path(topic, partition), state.encode(),
                                 state_versions[partition])
        if not commit(transaction):
            return False
        for partition, state in finished:
            self._watched.discard((topic, partition))
            log.info("%s-%d: reassignment completed: replicas %s, leader %d, leader epoch %d",
                     topic, partition, list(partitions[partition]), state.leader,
                     state.leader_epoch)
        return True

    def _watch(self, topic: str, partition: int) -> None:
        """A pass on every change of the partition's state while it is in flight."""
        if (topic, partition) in self._watched:
            return
        self._watched.add((topic, partition))

        def changed(*_: object) -> bool:
            return self._on_change() and (topic, partition) in self._watched

        self.zk.DataWatch(state_path(topic, partition), changed)
