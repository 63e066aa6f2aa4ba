"""The shared vocabulary of the server-side assignors (KIP-848): a member's subscription and
current target assignment in, every member's new target assignment out.

Invariants:
- Topics are named by id (``TopicKey``, a ``uuid.UUID``: orderable, so every tie breaks the
  same way); ``partitions`` maps every subscribed topic to its partition count, and a
  subscribed topic missing from it is the caller's error (``PartitionAssignorError``, Kafka's
  ``PartitionAssignorException``).
- ``assign`` is a pure function of its arguments: the same members and partitions give the
  same result whatever the order of the mappings, and nothing passed in is changed.
- The result names every member, each with the partitions of its subscribed topics only
  (members with nothing map to ``{}``), and no partition goes to two members.
- A current assignment may name what no longer holds (an unsubscribed topic, a partition
  past the count, a partition another member also names, kept by the first member in id
  order): the assignors drop it and never fail on it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

TopicKey = uuid.UUID
"""A topic's id: the group resolves names (and regular expressions) before assigning."""

Assignment = dict[TopicKey, frozenset[int]]
"""A member's target assignment: partitions by topic, no topic with an empty set."""


class PartitionAssignorError(Exception):
    """The assignment cannot be computed (Kafka's ``PartitionAssignorException``): a member
    subscribes to a topic ``partitions`` does not describe."""


@dataclass(frozen=True)
class MemberSubscription:
    """What the assignor knows of one member."""

    topics: frozenset[TopicKey]
    """The subscribed topics that exist (a regular expression is already resolved)."""
    rack: str | None = None
    instance_id: str | None = None
    """``group.instance.id`` of a static member."""
    assignment: Mapping[TopicKey, frozenset[int]] = field(default_factory=dict)
    """The member's current target assignment."""


class Assignor(Protocol):
    """A server-side assignor, named as Kafka names it in ``group.consumer.assignors``."""

    name: str

    def assign(self, members: Mapping[str, MemberSubscription],
               partitions: Mapping[TopicKey, int]) -> dict[str, Assignment]:
        """Every member's new target assignment."""
        ...


def topic_subscribers(members: Mapping[str, MemberSubscription], order: list[str],
                      partitions: Mapping[TopicKey, int]) -> dict[TopicKey, list[int]]:
    """Each subscribed topic's subscribers, as ascending positions in ``order``; raises
    ``PartitionAssignorError`` for a topic ``partitions`` does not describe.

    Members are grouped by subscription first (a group has few distinct ones), so the cost
    is one pass over the members plus one per distinct subscription and topic; topics with
    the same subscribers share one list (read it, never change it)."""
    by_subscription: dict[frozenset[TopicKey], list[int]] = {}
    for position, member_id in enumerate(order):
        by_subscription.setdefault(members[member_id].topics, []).append(position)
    subscribers: dict[TopicKey, list[int]] = {}
    merged: set[TopicKey] = set()
    for topics, positions in by_subscription.items():
        for topic in topics:
            if topic not in subscribers:
                subscribers[topic] = positions
            else:
                subscribers[topic] = subscribers[topic] + positions
                merged.add(topic)
    for topic in merged:
        subscribers[topic].sort()
    for topic in subscribers:
        if topic not in partitions:
            raise PartitionAssignorError(f"members subscribe to topic {topic}: it does not exist")
    return subscribers


def is_homogeneous(members: Mapping[str, MemberSubscription]) -> bool:
    """Whether every member subscribes to the same topics (Kafka's ``HOMOGENEOUS``)."""
    subscriptions = iter(members.values())
    first = next(subscriptions).topics
    return all(member.topics == first for member in subscriptions)
