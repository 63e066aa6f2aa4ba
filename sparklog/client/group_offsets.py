"""A consumer group's committed offsets deleted over the Kafka protocol (OffsetDelete),
as Kafka's admin client ``deleteConsumerGroupOffsets`` and ``kafka-consumer-groups.sh
--delete-offsets`` do; confluent-kafka does not offer it.

Invariants:
- The request goes to the group's coordinator through ``KafkaClient``, so a coordinator
  that moved or is loading is looked up again and retried until the client's deadline.
- A group-level error (the group does not exist, has members, is not authorized) raises
  ``GroupOffsetsError`` carrying the code; partition-level errors are returned, one per
  requested partition (NONE for a deleted offset, and for a partition without one).
"""

from __future__ import annotations

from collections.abc import Iterable

from sparklog.client.cluster import TopicPartition
from sparklog.client.errors import KafkaClientError
from sparklog.client.kafka import KafkaClient
from sparklog.errors import ErrorCode, error_name
from sparklog.protocol.versions import ApiKey, CoordinatorType


class GroupOffsetsError(KafkaClientError):
    """OffsetDelete failed for the whole group with a Kafka error."""

    def __init__(self, group: str, code: int) -> None:
        super().__init__(f"group {group!r}: {error_name(code)}")
        self.group = group
        self.code = code


def delete_offsets(client: KafkaClient, group: str, partitions: Iterable[TopicPartition]
                   ) -> dict[TopicPartition, int]:
    """Delete ``group``'s committed offsets of ``partitions``; each partition's error code."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    body = {"group_id": group, "topics": [
        {"name": topic, "partitions": [{"partition_index": p} for p in indexes]}
        for topic, indexes in by_topic.items()]}
    answer = client.coordinator_request(group, CoordinatorType.GROUP, ApiKey.OFFSET_DELETE,
                                        body, lambda a: a.error_code)
    if answer.error_code != ErrorCode.NONE:
        raise GroupOffsetsError(group, answer.error_code)
    return {TopicPartition(topic.name, p.partition_index): int(p.error_code)
            for topic in answer.topics for p in topic.partitions}
