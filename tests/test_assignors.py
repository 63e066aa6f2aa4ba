"""KIP-848's server-side assignors against a model, and Kafka's own examples.

Random groups (members with the same or different subscriptions, static and dynamic, with
no current assignment, the assignment of a previous run after a member joined or left, or
a current assignment naming what no longer holds) must get:
- every subscribed partition exactly once, and only to a member subscribed to its topic;
- ``uniform``: members sharing a subscription within one partition of each other; sticky: a
  member joining or leaving a homogeneous group takes from the others only what balance
  requires (the model's least number of revocations), and a result assigned again stays;
- ``range``: exactly Kafka's rule, member i of the n sorted subscribers of a topic gets its
  i-th range, the first ``count % n`` one partition more; a static member rejoining under a
  new member id gets its ranges back;
- the same result for the same input, whatever the order of the mappings.
The examples are Kafka's test cases (``OptimizedUniformAssignmentBuilderTest``,
``UniformHeterogeneousAssignmentBuilderTest``, ``RangeAssignorTest``).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.coordinator.assignors import (
    ASSIGNORS,
    Assignment,
    MemberSubscription,
    PartitionAssignorError,
    RangeAssignor,
    TopicKey,
    UniformAssignor,
)

T1, T2, T3, T4 = (uuid.UUID(int=n) for n in range(1, 5))
uniform = UniformAssignor()
range_assignor = RangeAssignor()

Members = dict[str, MemberSubscription]


def owners(result: Mapping[str, Assignment]) -> Counter[tuple[TopicKey, int]]:
    return Counter((topic, p) for assignment in result.values()
                   for topic, parts in assignment.items() for p in parts)


def size(assignment: Assignment) -> int:
    return sum(map(len, assignment.values()))


def check_valid(members: Members, partitions: Mapping[TopicKey, int],
                result: Mapping[str, Assignment]) -> None:
    """Every subscribed partition once, to a subscriber; every member named."""
    assert set(result) == set(members)
    subscribed = {topic for member in members.values() for topic in member.topics}
    expected = {(topic, p) for topic in subscribed for p in range(partitions[topic])}
    counted = owners(result)
    assert set(counted) == expected
    assert max(counted.values(), default=1) == 1
    for member_id, assignment in result.items():
        assert all(parts for parts in assignment.values()), "no empty topic entries"
        assert set(assignment) <= members[member_id].topics


def with_assignments(members: Members, result: Mapping[str, Assignment]) -> Members:
    return {member_id: MemberSubscription(member.topics, member.rack, member.instance_id,
                                          result.get(member_id, {}))
            for member_id, member in members.items()}


def least_revocations(counts: list[int], total: int) -> int:
    """The fewest partitions members holding ``counts`` must give up for a balanced
    assignment of ``total`` partitions over them (the extra ones to the fullest)."""
    base, extra = divmod(total, len(counts))
    quotas = [base + 1] * extra + [base] * (len(counts) - extra)
    return sum(max(0, c - q) for c, q in zip(sorted(counts, reverse=True), quotas, strict=True))


def range_model(members: Members, partitions: Mapping[TopicKey, int]) -> dict[str, Assignment]:
    """Kafka's range rule, written plainly: static members first by instance id, then the
    others by member id; member i of a topic's n subscribers gets the i-th range."""
    order = sorted(members, key=lambda m: (members[m].instance_id is None,
                                           members[m].instance_id or m))
    result: dict[str, Assignment] = {m: {} for m in members}
    for topic, count in partitions.items():
        subscribers = [m for m in order if topic in members[m].topics]
        n = len(subscribers)
        start = 0
        for i, member_id in enumerate(subscribers):
            end = start + count // n + (1 if i < count % n else 0)
            if end > start:
                result[member_id][topic] = frozenset(range(start, end))
            start = end
    return result


TOPICS = (T1, T2, T3, T4)


@st.composite
def groups(draw: st.DrawFn, homogeneous: bool | None = None) -> tuple[Members, dict[TopicKey, int]]:
    """A group of 1-8 members over 1-4 topics of 1-20 partitions, with random current
    assignments (some invalid: unsubscribed topics, partitions past the count, shared)."""
    topics = TOPICS[:draw(st.integers(1, 4))]
    partitions = {topic: draw(st.integers(1, 20)) for topic in TOPICS}
    subsets = st.frozensets(st.sampled_from(topics), min_size=0, max_size=len(topics))
    if homogeneous is None:
        homogeneous = draw(st.booleans())
    shared = draw(subsets)
    count = draw(st.integers(1, 8))
    members: Members = {}
    for n in range(count):
        current = draw(st.dictionaries(st.sampled_from(TOPICS),
                                       st.frozensets(st.integers(0, 22), min_size=1),
                                       max_size=2) | st.just({}))
        instance = draw(st.none() | st.sampled_from("xyzw"))
        if instance in {m.instance_id for m in members.values()}:
            instance = None
        members[f"m{draw(st.integers(0, 99)):02d}-{n}"] = MemberSubscription(
            shared if homogeneous else draw(subsets), None, instance, current)
    return members, partitions


@settings(max_examples=200, deadline=None)
@given(groups(), st.sampled_from(sorted(ASSIGNORS)), st.randoms(use_true_random=False))
def test_every_partition_once_to_a_subscriber_deterministically(group, name, rnd) -> None:
    members, partitions = group
    assignor = ASSIGNORS[name]
    result = assignor.assign(members, partitions)
    check_valid(members, partitions, result)
    shuffled = list(members.items())
    rnd.shuffle(shuffled)
    assert assignor.assign(dict(shuffled), dict(reversed(partitions.items()))) == result


@settings(max_examples=200, deadline=None)
@given(groups())
def test_uniform_balances_members_sharing_a_subscription(group) -> None:
    members, partitions = group
    result = uniform.assign(members, partitions)
    by_subscription: dict[frozenset[TopicKey], list[int]] = {}
    for member_id, member in members.items():
        by_subscription.setdefault(member.topics, []).append(size(result[member_id]))
    for sizes in by_subscription.values():
        assert max(sizes) - min(sizes) <= 1, (sizes, result)


@settings(max_examples=200, deadline=None)
@given(groups())
def test_uniform_assigning_its_result_again_changes_nothing(group) -> None:
    members, partitions = group
    result = uniform.assign(members, partitions)
    assert uniform.assign(with_assignments(members, result), partitions) == result


def moved_from_survivors(before: Mapping[str, Assignment], after: Mapping[str, Assignment]) -> int:
    """Partitions a member had before and not after, over members present in both."""
    return sum(len(parts - after[member_id].get(topic, frozenset()))
               for member_id, assignment in before.items() if member_id in after
               for topic, parts in assignment.items())


@settings(max_examples=200, deadline=None)
@given(groups(homogeneous=True), st.data())
def test_uniform_join_and_leave_move_the_least_balance_requires(group, data) -> None:
    members, partitions = group
    settled = with_assignments(members, uniform.assign(members, partitions))
    topics = next(iter(members.values())).topics
    total = sum(partitions[topic] for topic in topics)
    before = {m: member.assignment for m, member in settled.items()}
    if len(settled) > 1 and data.draw(st.booleans(), label="leave"):
        leaving = data.draw(st.sampled_from(sorted(settled)), label="leaving")
        after_members = {m: s for m, s in settled.items() if m != leaving}
    else:
        after_members = {**settled, "joiner": MemberSubscription(topics)}
    after = uniform.assign(after_members, partitions)
    check_valid(after_members, partitions, after)
    counts = [size(before[m]) for m in after_members if m in before]
    counts += [0] * (len(after_members) - len(counts))
    assert moved_from_survivors(before, after) == least_revocations(counts, total)


@settings(max_examples=200, deadline=None)
@given(groups(homogeneous=False), st.data())
def test_uniform_leave_leaves_unrelated_members_alone(group, data) -> None:
    """A leave in a heterogeneous group: members sharing no topic with the leaver, nor with
    anyone who does, keep exactly what they had."""
    members, partitions = group
    settled = with_assignments(members, uniform.assign(members, partitions))
    if len(settled) < 2:
        return
    leaving = data.draw(st.sampled_from(sorted(settled)), label="leaving")
    after_members = {m: s for m, s in settled.items() if m != leaving}
    after = uniform.assign(after_members, partitions)
    check_valid(after_members, partitions, after)
    untouched = {m for m, s in after_members.items() if not s.topics & settled[leaving].topics
                 and not any(s.topics & o.topics for o in after_members.values()
                             if o.topics & settled[leaving].topics)}
    for member_id in untouched:
        assert after[member_id] == settled[member_id].assignment


@settings(max_examples=200, deadline=None)
@given(groups())
def test_range_is_kafkas_rule(group) -> None:
    members, partitions = group
    assert range_assignor.assign(members, partitions) == range_model(members, partitions)


def test_model_of_least_revocations() -> None:
    assert least_revocations([4, 4], 8) == 0
    assert least_revocations([4, 4, 0], 8) == 2  # quotas 3, 3, 2
    assert least_revocations([3, 3, 2, 0], 8) == 2  # quotas 2 each
    assert least_revocations([5, 0], 5) == 2  # quotas 3, 2


def subs(*topics: TopicKey, current: Assignment | None = None,
         instance: str | None = None) -> MemberSubscription:
    return MemberSubscription(frozenset(topics), None, instance, current or {})


def parts(*numbers: int) -> frozenset[int]:
    return frozenset(numbers)


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_no_members_no_subscriptions_and_unknown_topics(name) -> None:
    assignor = ASSIGNORS[name]
    assert assignor.assign({}, {T1: 3}) == {}
    assert assignor.assign({"a": subs(), "b": subs()}, {T1: 3}) == {"a": {}, "b": {}}
    with pytest.raises(PartitionAssignorError):
        assignor.assign({"a": subs(T1, T2)}, {T1: 3})


def test_uniform_more_members_than_partitions() -> None:
    """Kafka's testFirstAssignmentNumMembersGreaterThanTotalNumPartitions."""
    result = uniform.assign({m: subs(T1, T2) for m in "abc"}, {T1: 1, T2: 1})
    assert sorted(map(size, result.values())) == [0, 1, 1]


def test_uniform_homogeneous_unbalanced_previous_assignment() -> None:
    """Kafka's testReassignmentForTwoMembersTwoTopicsGivenUnbalancedPrevAssignment: A keeps
    three of its four, B gets the fourth."""
    members = {"A": subs(T1, T2, current={T1: parts(0, 1), T2: parts(0, 1)}),
               "B": subs(T1, T2, current={T1: parts(2), T2: parts(2)})}
    assert uniform.assign(members, {T1: 3, T2: 3}) == {
        "A": {T1: parts(0, 1), T2: parts(0)}, "B": {T1: parts(2), T2: parts(1, 2)}}


def test_uniform_homogeneous_member_joins() -> None:
    """Kafka's testReassignmentWhenOneMemberAddedAfterInitialAssignmentWithTwoMembersTwoTopics:
    the new member takes two partitions, one from each of the others."""
    members = {"A": subs(T1, T2, current={T1: parts(0, 2), T2: parts(0)}),
               "B": subs(T1, T2, current={T1: parts(1), T2: parts(1, 2)}),
               "C": subs(T1, T2)}
    result = uniform.assign(members, {T1: 3, T2: 3})
    assert list(map(size, result.values())) == [2, 2, 2]
    assert moved_from_survivors({m: s.assignment for m, s in members.items()}, result) == 2


def test_uniform_heterogeneous_unbalanced_previous_assignment() -> None:
    """Kafka's testReassignmentForTwoMembersThreeTopicsGivenUnbalancedPrevAssignment."""
    members = {
        "A": subs(T1, current={T1: parts(0, 1, 2)}),
        "B": subs(T1, T2, current={T1: parts(3), T2: parts(0)}),
        "C": subs(T1, T2, T3, current={T1: parts(4, 5), T2: parts(1, 2, 3),
                                       T3: parts(0, 1, 2, 3)}),
    }
    assert uniform.assign(members, {T1: 6, T2: 4, T3: 4}) == {
        "A": {T1: parts(0, 1, 2, 5)},
        "B": {T1: parts(3), T2: parts(0, 1, 2, 3)},
        "C": {T1: parts(4), T3: parts(0, 1, 2, 3)},
    }


def test_uniform_heterogeneous_subscription_removed() -> None:
    """Kafka's testReassignmentWhenOneSubscriptionRemovedAfterInitialAssignmentWithTwoMembers
    TwoTopics: A stops subscribing to T2 and gives up its partitions of it; B, the only other
    subscriber, takes them, and A takes B's partition of T1 for balance."""
    members = {"A": subs(T1, current={T1: parts(0, 2), T2: parts(1, 3)}),
               "B": subs(T1, T2, current={T1: parts(1), T2: parts(0, 2, 4)})}
    assert uniform.assign(members, {T1: 3, T2: 5}) == {
        "A": {T1: parts(0, 1, 2)}, "B": {T2: parts(0, 1, 2, 3, 4)}}


def test_range_three_members_three_topics_different_subscriptions() -> None:
    """Kafka's testFirstAssignmentThreeMembersThreeTopicsDifferentSubscriptions."""
    members = {"A": subs(T1, T2), "B": subs(T3), "C": subs(T2, T3)}
    assert range_assignor.assign(members, {T1: 3, T2: 3, T3: 2}) == {
        "A": {T1: parts(0, 1, 2), T2: parts(0, 1)},
        "B": {T3: parts(0)},
        "C": {T2: parts(2), T3: parts(1)},
    }


def test_range_co_partitions_topics_of_equal_counts() -> None:
    result = range_assignor.assign({m: subs(T1, T2) for m in "abc"}, {T1: 7, T2: 7})
    assert all(assignment[T1] == assignment[T2] for assignment in result.values())
    assert result["a"][T1] == parts(0, 1, 2)


def test_range_static_member_rejoining_gets_its_ranges_back() -> None:
    """Kafka's testMixedStaticMembership: A (static) leaves and rejoins under a new member
    id with the same instance id; nobody's assignment changes."""
    members = {"memberA": subs(T1, instance="instanceA"), "memberC": subs(T1, instance="instanceC"),
               "memberB": subs(T1)}
    first = range_assignor.assign(members, {T1: 5})
    del members["memberA"]
    members["memberA1"] = subs(T1, instance="instanceA")
    again = range_assignor.assign(members, {T1: 5})
    assert again["memberA1"] == first["memberA"]
    assert again["memberB"] == first["memberB"] and again["memberC"] == first["memberC"]
    assert first["memberB"] == {T1: parts(4)}  # static members come first


def test_assignors_by_kafkas_names() -> None:
    assert list(ASSIGNORS) == ["uniform", "range"]
    assert all(assignor.name == name for name, assignor in ASSIGNORS.items())
