"""The controller's pure decisions: replica assignment and leader election.

What an operator relies on: replicas of a partition are distinct brokers spread over as
many racks as the replication factor allows, preferred leaders go round the brokers, a
factor above the brokers is refused; a dead leader is replaced by the first live in-sync
replica with a higher leader epoch, a partition without one goes offline (leader -1)
unless unclean election is on, and dead followers leave the ISR; the preferred replica
takes leadership back only once alive and in sync; ElectLeaders' PREFERRED and UNCLEAN
elections follow Kafka's rules and say why they did not happen. A reassignment lists the
target first, records what it adds and removes, can be cancelled back to the original
replicas, refuses bad targets, and completes only once every target replica is in sync,
with a leader from the target in a new epoch. The topic znode is Kafka's (topic id, reassignment).
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kazoo.exceptions import SessionExpiredError

from sparklog.cluster.assignment import assign_replicas
from sparklog.cluster.controller import (
    PREFERRED,
    UNCLEAN,
    Controller,
    ControllerConfig,
    FencedError,
    elect,
    prefer,
    requested_election,
)
from sparklog.cluster.layout import PartitionState, TopicAssignment
from sparklog.cluster.reassignment import complete, original, reassign, target
from sparklog.errors import ErrorCode, KafkaError

racks_of = st.dictionaries(st.integers(0, 20), st.sampled_from([None, "a", "b", "c"]),
                           min_size=1, max_size=8)


@given(brokers=racks_of, partitions=st.integers(1, 30), data=st.data())
def test_assignment_spreads_replicas_racks_and_leaders(
        brokers: dict[int, str | None], partitions: int, data: st.DataObject) -> None:
    factor = data.draw(st.integers(1, len(brokers)))
    assignment = assign_replicas(brokers, partitions, factor)
    assert sorted(assignment) == list(range(partitions))
    racks = {r for r in brokers.values()}
    for replicas in assignment.values():
        assert len(set(replicas)) == factor and set(replicas) <= set(brokers)
        if None not in racks:
            assert len({brokers[b] for b in replicas}) == min(factor, len(racks))
    leaders = Counter(replicas[0] for replicas in assignment.values())
    even = partitions // len(brokers)
    assert all(even <= leaders[b] <= even + 1 for b in brokers)


def test_a_factor_above_the_brokers_is_refused() -> None:
    with pytest.raises(KafkaError) as refused:
        assign_replicas({0: None, 1: None}, 1, 3)
    assert refused.value.code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_elections() -> None:
    state = PartitionState(leader=1, leader_epoch=4, isr=(1, 2, 3), controller_epoch=2)
    # a new partition: its live replicas, the first leading
    assert elect((2, 1, 3), None, {1, 3}, False, 7) == PartitionState(1, 0, (1, 3), 7)
    assert elect((1, 2, 3), state, {1, 2, 3}, False, 7) is None  # nothing to do
    # a dead follower leaves the ISR; the leader and its epoch stay
    assert elect((1, 2, 3), state, {1, 2}, False, 7) == PartitionState(1, 4, (1, 2), 7)
    # a dead leader: the first live ISR member in assignment order, a higher epoch
    assert elect((1, 3, 2), state, {2, 3}, False, 7) == PartitionState(3, 5, (2, 3), 7)
    lonely = PartitionState(leader=1, leader_epoch=4, isr=(1,), controller_epoch=2)
    # nobody in sync alive: offline (the ISR kept for the last member's return) ...
    assert elect((1, 2, 3), lonely, {2, 3}, False, 7) == PartitionState(-1, 5, (1,), 7)
    # ... unless unclean election is on
    assert elect((1, 2, 3), lonely, {2, 3}, True, 7) == PartitionState(2, 5, (2,), 7)
    offline = PartitionState(leader=-1, leader_epoch=5, isr=(1,), controller_epoch=7)
    assert elect((1, 2, 3), offline, {2, 3}, False, 7) is None
    assert elect((1, 2, 3), offline, {1, 2}, False, 8) == PartitionState(1, 6, (1,), 8)


def test_preferred_leader_election() -> None:
    away = PartitionState(leader=2, leader_epoch=3, isr=(2, 3, 1), controller_epoch=4)
    # the preferred replica (first assigned) is back in sync: it leads again, a new epoch
    assert prefer((1, 2, 3), away, {1, 2, 3}, 5) == PartitionState(1, 4, (2, 3, 1), 5)
    assert prefer((2, 1, 3), away, {1, 2, 3}, 5) is None  # it already leads
    behind = PartitionState(leader=2, leader_epoch=3, isr=(2, 3), controller_epoch=4)
    assert prefer((1, 2, 3), behind, {1, 2, 3}, 5) is None  # not in sync yet
    assert prefer((1, 2, 3), away, {2, 3}, 5) is None  # not alive


def test_requested_elections() -> None:
    """ElectLeaders' rules: PREFERRED only to the preferred replica alive and in sync,
    UNCLEAN only for a partition whose leader is gone, an in-sync replica first."""
    away = PartitionState(leader=2, leader_epoch=3, isr=(2, 3, 1), controller_epoch=4)
    assert requested_election((1, 2, 3), away, {1, 2, 3}, PREFERRED, 5) == \
        PartitionState(1, 4, (2, 3, 1), 5)
    assert requested_election((2, 1, 3), away, {1, 2, 3}, PREFERRED, 5) == \
        ErrorCode.ELECTION_NOT_NEEDED
    assert requested_election((1, 2, 3), away, {2, 3}, PREFERRED, 5) == \
        ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    assert requested_election((1, 2, 3), away, {1, 2, 3}, UNCLEAN, 5) == \
        ErrorCode.ELECTION_NOT_NEEDED  # its leader lives
    offline = PartitionState(leader=-1, leader_epoch=5, isr=(1,), controller_epoch=4)
    assert requested_election((1, 2, 3), offline, {2, 3}, UNCLEAN, 5) == \
        PartitionState(2, 6, (2,), 5)  # nobody in sync: any live replica
    assert requested_election((3, 1, 2), offline, {1, 2}, UNCLEAN, 5) == \
        PartitionState(1, 6, (1,), 5)  # the in-sync one first
    assert requested_election((1, 2, 3), offline, set(), UNCLEAN, 5) == \
        ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE


def test_reassignment_plans() -> None:
    start = TopicAssignment({0: (0, 1), 1: (1, 2)}, "a" * 32)
    moved, errors = reassign(start, {0: (1, 2)}, {0, 1, 2})
    assert errors == {0: None}
    # target first, then the replicas it drops; what it adds and removes is recorded
    assert moved.partitions == {0: (1, 2, 0), 1: (1, 2)}
    assert moved.adding == {0: (2,)} and moved.removing == {0: (0,)}
    # (as in Kafka, the original replicas are RS minus adding: their order is not kept)
    assert (set(original(moved, 0)), target(moved, 0)) == ({0, 1}, (1, 2))
    # a cancel heads back to the original replicas, dropping the one being added
    cancelled, errors = reassign(moved, {0: None}, {0, 1, 2})
    assert errors == {0: None}
    assert set(target(cancelled, 0)) == {0, 1} and cancelled.removing == {0: (2,)}
    assert not cancelled.adding
    # the same replicas reordered take effect at once; refusals change nothing
    reordered, _ = reassign(start, {1: (2, 1)}, {0, 1, 2})
    assert reordered.partitions[1] == (2, 1) and not (reordered.adding or reordered.removing)
    same, errors = reassign(start, {0: (0, 0), 1: None, 2: (0,), 3: (7,)}, {0, 1, 2})
    assert same == start
    assert {p: e.code for p, e in errors.items() if e is not None} == {
        0: ErrorCode.INVALID_REPLICA_ASSIGNMENT, 1: ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
        2: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 3: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    _, errors = reassign(start, {0: (0, 1, 2)}, {0, 1, 2}, allow_factor_change=False)
    assert errors[0] is not None and errors[0].code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_reassignment_completes_once_the_target_is_in_sync() -> None:
    moving, _ = reassign(TopicAssignment({0: (0, 1)}), {0: (1, 2)}, {0, 1, 2})
    catching_up = PartitionState(leader=0, leader_epoch=3, isr=(0, 1), controller_epoch=2)
    assert complete(moving, 0, catching_up, {0, 1, 2}, 5) is None
    # all of the target in sync: a leader from the target, a new epoch, the ISR trimmed
    in_sync = PartitionState(leader=0, leader_epoch=3, isr=(0, 1, 2), controller_epoch=2)
    assert complete(moving, 0, in_sync, {0, 1, 2}, 5) == (PartitionState(1, 4, (1, 2), 5),
                                                          (1, 2))
    led_by_target = PartitionState(leader=2, leader_epoch=3, isr=(2, 0, 1), controller_epoch=2)
    assert complete(moving, 0, led_by_target, {0, 1, 2}, 5) == (
        PartitionState(2, 4, (2, 1), 5), (1, 2))


def test_topic_znode_is_kafkas_format() -> None:
    moving = TopicAssignment({0: (1, 2, 0)}, "0123456789abcdef0123456789abcdef",
                             adding={0: (2,)}, removing={0: (0,)})
    value = json.loads(moving.encode())
    # Kafka 2.8's version 3: the topic id as unpadded URL-safe base64 of its 16 bytes
    assert value == {"version": 3, "topic_id": "ASNFZ4mrze8BI0VniavN7w",
                     "partitions": {"0": [1, 2, 0]}, "adding_replicas": {"0": [2]},
                     "removing_replicas": {"0": [0]}}
    assert TopicAssignment.decode(moving.encode()) == moving
    # a Kafka 2.x znode without an id or a reassignment reads with empty ones
    old = TopicAssignment.decode(b'{"version":1,"partitions":{"0":[0,1]}}')
    assert old == TopicAssignment({0: (0, 1)})


class _LostSession:
    """A ZooKeeper client whose session expired (what kazoo raises then)."""

    def __getattr__(self, name: str) -> object:
        def expired(*args: object, **kwargs: object) -> object:
            raise SessionExpiredError()
        return expired


def test_a_controller_that_lost_its_session_is_not_the_controller() -> None:
    """ElectLeaders at a controller resumed after its session expired answers NOT_CONTROLLER
    (the replica manager turns FencedError into it), not an internal error."""
    controller = Controller(_LostSession(), 0, 1, 0,  # type: ignore[arg-type]
                            ControllerConfig(lambda topic: False))
    with pytest.raises(FencedError, match="SessionExpiredError"):
        controller.elect_leaders(None, PREFERRED)
