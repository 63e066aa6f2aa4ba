"""The ``uniform`` assignor: Kafka's ``UniformAssignor`` (KIP-848's default), balanced and
sticky.

Rules:
- Homogeneous groups (every member subscribes to the same topics; Kafka's
  ``UniformHomogeneousAssignmentBuilder``): with ``total`` partitions over ``n`` members each
  member's quota is ``total // n``, one more for ``total % n`` of them. The extra partitions
  go to the members that hold the most of their current assignment (ties by member id), so
  the fewest move: a member keeps its current partitions up to its quota and gives up the
  rest (its highest topic ids and partition numbers first); the free partitions, by topic id
  and partition, then fill the members under quota in member id order. Every member ends
  within one partition of every other.
- Heterogeneous groups (Kafka's ``UniformHeterogeneousAssignmentBuilder``): a member keeps
  its current partitions of the topics it still subscribes to; the free partitions go, topic
  by topic (most partitions per subscriber first, then fewer subscribers, then topic id),
  each to the subscriber with the fewest partitions in all (ties by member id); then each
  topic with two or more subscribers is balanced in turn, moving a partition its most
  loaded holder had (the highest number) to its least loaded subscriber while their totals
  differ by two or more, until a pass over the topics moves nothing or after Kafka's 16
  passes. Members sharing a subscription end within one partition of each other (once the
  passes converge, which they do unless subscriptions overlap in long chains); with
  overlapping subscriptions the totals are close, not always within one.
- Members are numbered in member id order and every choice breaks ties by that number,
  topic id or partition, so the result does not depend on the order of the mappings.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from itertools import groupby, islice
from operator import itemgetter

from sparklog.coordinator.assignors.spec import (
    Assignment,
    MemberSubscription,
    TopicKey,
    is_homogeneous,
    topic_subscribers,
)

MAX_BALANCE_PASSES = 16
"""Kafka's ``MAX_ITERATION_COUNT``: passes over the topics when balancing a heterogeneous
group (each pass about halves what imbalance overlapping subscriptions leave)."""

UNOWNED = -1


class UniformAssignor:
    """Balanced, sticky assignment of all subscribed partitions."""

    name = "uniform"

    def assign(self, members: Mapping[str, MemberSubscription],
               partitions: Mapping[TopicKey, int]) -> dict[str, Assignment]:
        if not members:
            return {}
        builder = _Builder(members, partitions)
        if is_homogeneous(members):
            builder.fill_homogeneous()
        else:
            builder.fill_heterogeneous()
            builder.balance()
        return builder.result()


class _Builder:
    """One assignment's state: members numbered by id, each partition's owner, each member's
    partitions by topic and its total (``loads``)."""

    def __init__(self, members: Mapping[str, MemberSubscription],
                 partitions: Mapping[TopicKey, int]) -> None:
        self.ids = sorted(members)
        self.partitions = partitions
        self.subscribers = topic_subscribers(members, self.ids, partitions)
        self.owners = {topic: [UNOWNED] * partitions[topic] for topic in self.subscribers}
        self.held: list[dict[TopicKey, set[int]]] = []
        for index, member_id in enumerate(self.ids):
            member = members[member_id]
            kept: dict[TopicKey, set[int]] = {}
            for topic, current in member.assignment.items():
                if topic not in member.topics:
                    continue
                owners = self.owners[topic]
                mine = {p for p in current if 0 <= p < len(owners) and owners[p] == UNOWNED}
                for p in mine:
                    owners[p] = index
                if mine:
                    kept[topic] = mine
            self.held.append(kept)
        self.loads = [sum(map(len, kept.values())) for kept in self.held]

    def result(self) -> dict[str, Assignment]:
        return {member_id: {topic: frozenset(held) for topic, held in self.held[index].items()}
                for index, member_id in enumerate(self.ids)}

    def move(self, topic: TopicKey, partition: int, to: int) -> None:
        """Give ``partition`` of ``topic`` to member ``to`` (from its owner, if any)."""
        if self.owners[topic][partition] != UNOWNED:
            self.revoke(topic, partition)
        self.held[to].setdefault(topic, set()).add(partition)
        self.owners[topic][partition] = to
        self.loads[to] += 1

    def unowned(self, topics: list[TopicKey]) -> Iterator[tuple[TopicKey, int]]:
        """The partitions nobody holds, by topic in the given order, then partition."""
        for topic in topics:
            for partition, owner in enumerate(self.owners[topic]):
                if owner == UNOWNED:
                    yield topic, partition

    def fill_homogeneous(self) -> None:
        topics = sorted(self.subscribers)
        count = len(self.ids)
        base, extra = divmod(sum(self.partitions[topic] for topic in topics), count)
        quotas = [base] * count
        for index in sorted(range(count), key=lambda i: (-self.loads[i], i))[:extra]:
            quotas[index] += 1
        for index, quota in enumerate(quotas):
            excess = self.loads[index] - quota
            for topic in sorted(self.held[index], reverse=True):
                if excess <= 0:
                    break
                for partition in sorted(self.held[index][topic], reverse=True)[:excess]:
                    self.revoke(topic, partition)
                    excess -= 1
        # The free partitions in runs per member; loads and owners are not needed after.
        free = self.unowned(topics)
        for index, quota in enumerate(quotas):
            held = self.held[index]
            for topic, run in groupby(islice(free, quota - self.loads[index]), itemgetter(0)):
                held.setdefault(topic, set()).update(partition for _, partition in run)

    def revoke(self, topic: TopicKey, partition: int) -> None:
        owner = self.owners[topic][partition]
        held = self.held[owner][topic]
        held.discard(partition)
        if not held:
            del self.held[owner][topic]
        self.loads[owner] -= 1
        self.owners[topic][partition] = UNOWNED

    def topic_order(self, topics: list[TopicKey]) -> list[TopicKey]:
        """Most partitions per subscriber first, then fewer subscribers, then topic id."""
        def key(topic: TopicKey) -> tuple[float, int, TopicKey]:
            subscribers = len(self.subscribers[topic])
            return -self.partitions[topic] / subscribers, subscribers, topic
        return sorted(topics, key=key)

    def fill_heterogeneous(self) -> None:
        for topic in self.topic_order(list(self.subscribers)):
            free = [p for p, owner in enumerate(self.owners[topic]) if owner == UNOWNED]
            if not free:
                continue
            least = [(self.loads[index], index) for index in self.subscribers[topic]]
            heapq.heapify(least)
            for partition in free:
                _, index = least[0]
                self.move(topic, partition, index)
                heapq.heapreplace(least, (self.loads[index], index))

    def balance(self) -> None:
        topics = self.topic_order([t for t, s in self.subscribers.items() if len(s) >= 2])
        last_moved = None
        for _ in range(MAX_BALANCE_PASSES):
            for topic in topics:
                if topic == last_moved:
                    return  # a whole pass since the last move: balanced
                if self.balance_topic(topic) or last_moved is None:
                    last_moved = topic

    def balance_topic(self, topic: TopicKey) -> int:
        """Move partitions of ``topic`` from its most loaded holders to its least loaded
        subscribers while their totals differ by two or more; returns how many moved. Only
        partitions a member held when this topic's turn came are moved (no ping-pong)."""
        subscribers = self.subscribers[topic]
        loads = self.loads
        if max(loads[i] for i in subscribers) - min(loads[i] for i in subscribers) <= 1:
            return 0
        movable = {i: sorted(self.held[i][topic]) for i in subscribers if topic in self.held[i]}
        # Heaps of (load, member) and (-load, -member); an entry whose load is no longer
        # the member's is stale and dropped: every move pushes both members' new loads.
        least = [(loads[i], i) for i in subscribers]
        most = [(-loads[i], -i) for i in movable]
        heapq.heapify(least)
        heapq.heapify(most)
        moved = 0
        while True:
            while least[0][0] != loads[least[0][1]]:
                heapq.heappop(least)
            while most and (-most[0][0] != loads[-most[0][1]] or not movable[-most[0][1]]):
                heapq.heappop(most)
            if not most:
                return moved
            to, source = least[0][1], -most[0][1]
            if loads[source] - loads[to] <= 1:
                return moved
            self.move(topic, movable[source].pop(), to)
            moved += 1
            for member in (source, to):
                heapq.heappush(least, (loads[member], member))
                if member in movable:
                    heapq.heappush(most, (-loads[member], -member))
