"""KIP-848's server-side assignors, by the names ``group.consumer.assignors`` and a member's
``ServerAssignor`` use: ``uniform`` (Kafka's default) and ``range``.

Both are pure functions from the members' subscriptions and current target assignments, and
the subscribed topics' partition counts, to every member's new target assignment (see
``spec``); the consumer group coordinator computes target assignments with them.
"""

from __future__ import annotations

from sparklog.coordinator.assignors.range import RangeAssignor
from sparklog.coordinator.assignors.spec import (
    Assignment,
    Assignor,
    MemberSubscription,
    PartitionAssignorError,
    TopicKey,
)
from sparklog.coordinator.assignors.uniform import UniformAssignor

ASSIGNORS: dict[str, Assignor] = {assignor.name: assignor
                                  for assignor in (UniformAssignor(), RangeAssignor())}
"""The assignors by Kafka's names; the first is the default (``uniform``)."""

__all__ = ["ASSIGNORS", "Assignment", "Assignor", "MemberSubscription",
           "PartitionAssignorError", "RangeAssignor", "TopicKey", "UniformAssignor"]
