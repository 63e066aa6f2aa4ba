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
    topic_subscribers,
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
        result: dict[str, Assignment] = {member_id: {} for member_id in ordered}
        for topic, subscribers in topic_subscribers(members, ordered, partitions).items():
            count = partitions[topic]
            size, extra = divmod(count, len(subscribers))
            start = 0
            for i, position in enumerate(subscribers[:count]):  # the others get nothing
                end = start + size + (i < extra)
                result[ordered[position]][topic] = frozenset(range(start, end))
                start = end
        return result
