"""The ``range`` assignor: Kafka's server-side ``RangeAssignor`` (KIP-848, as rewritten for
Kafka 4: ranges recomputed on every assignment).

Rules:
- Members are ordered static members first, by ``group.instance.id``, then the others by
  member id. A static member that rejoins under a new member id takes its old place, so it
  gets its old ranges back (the only stickiness: the assignment ignores current ones).
- Per topic, the ``n`` subscribed members in that order split the ``count`` partitions in
  consecutive ranges: the i-th gets the i-th range, of ``count // n`` partitions, one more
  for the first ``count % n``. Topics with the same partition count and subscribers are so
  co-partitioned: a member gets the same partition numbers of each.
- Members subscribed to nothing, and members past the last partition, get nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparklog.coordinator.assignors.spec import (
    Assignment,
    MemberSubscription,
    TopicKey,
    partition_count,
)


def member_order(members: Mapping[str, MemberSubscription]) -> list[str]:
    """Member ids, static members first by instance id, then the others by member id."""
    def key(member_id: str) -> tuple[int, str]:
        instance_id = members[member_id].instance_id
        return (1, member_id) if instance_id is None else (0, instance_id)
    return sorted(members, key=key)


class RangeAssignor:
    """Consecutive ranges of each topic's partitions over its sorted subscribers."""

    name = "range"

    def assign(self, members: Mapping[str, MemberSubscription],
               partitions: Mapping[TopicKey, int]) -> dict[str, Assignment]:
        ordered = member_order(members)
        subscribers: dict[TopicKey, int] = {}
        for member_id in ordered:
            for topic in members[member_id].topics:
                subscribers[topic] = subscribers.get(topic, 0) + 1
        # Per topic: the next range's start and how many members still get one more.
        next_start = {topic: 0 for topic in subscribers}
        extra = {topic: partition_count(partitions, topic) % n for topic, n in subscribers.items()}
        result: dict[str, Assignment] = {}
        for member_id in ordered:
            assignment: Assignment = {}
            for topic in members[member_id].topics:
                count = partitions[topic]
                size = count // subscribers[topic]
                if extra[topic] > 0:
                    size += 1
                    extra[topic] -= 1
                start = next_start[topic]
                end = min(start + size, count)
                next_start[topic] = end
                if start < end:
                    assignment[topic] = frozenset(range(start, end))
            result[member_id] = assignment
        return result
