"""A KIP-848 consumer group described over the Kafka protocol (ConsumerGroupDescribe), for
what confluent-kafka's admin client does not show: the group's epochs and state as the
coordinator names them, and each member's epoch.

Invariants:
- The request goes to the group's coordinator through ``KafkaClient`` (looked up again and
  retried while it moves or loads, until the client's deadline).
- A group that is not a consumer group (unknown, or classic) is None; any other error
  raises ``KafkaClientError``.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparklog.client.errors import KafkaClientError
from sparklog.client.kafka import KafkaClient
from sparklog.errors import ErrorCode, error_name
from sparklog.protocol.versions import ApiKey, CoordinatorType


@dataclass(frozen=True, slots=True)
class ConsumerGroupEpochs:
    state: str
    assignor: str
    group_epoch: int
    assignment_epoch: int
    member_epochs: dict[str, int]
    """Member id -> its member epoch."""
    upgraded: dict[str, bool]
    """Member id -> it speaks the consumer protocol (False: a classic member; ``member_type``,
    ConsumerGroupDescribe v1)."""


def describe_consumer_group(client: KafkaClient, group: str) -> ConsumerGroupEpochs | None:
    body = {"group_ids": [group], "include_authorized_operations": False}
    answer = client.coordinator_request(group, CoordinatorType.GROUP,
                                        ApiKey.CONSUMER_GROUP_DESCRIBE, body,
                                        lambda a: a.groups[0].error_code)
    described = answer.groups[0]
    if described.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
        return None
    if described.error_code != ErrorCode.NONE:
        raise KafkaClientError(f"group {group!r}: {error_name(described.error_code)}")
    return ConsumerGroupEpochs(described.group_state, described.assignor_name,
                               described.group_epoch, described.assignment_epoch,
                               {m.member_id: m.member_epoch for m in described.members},
                               {m.member_id: getattr(m, "member_type", 1) != 0
                                for m in described.members})
