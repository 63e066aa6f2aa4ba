"""Partition reassignments over the Kafka protocol (AlterPartitionReassignments,
ListPartitionReassignments: KIP-455), which confluent-kafka does not offer.

Invariants:
- Both requests go to one broker of the cluster (the lowest id Metadata lists): in a
  sparklog cluster any broker writes a reassignment to ZooKeeper and reads it back, and a
  Kafka cluster forwards them to its controller.
- A request-level error raises ``KafkaClientError`` naming the API and the error; the
  per-partition errors of Alter are returned, one per partition asked for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sparklog.client.cluster import TopicPartition
from sparklog.client.errors import KafkaClientError
from sparklog.client.kafka import KafkaClient
from sparklog.errors import ErrorCode, error_name
from sparklog.protocol.versions import ApiKey


@dataclass(frozen=True, slots=True)
class Reassignment:
    """A reassignment in flight: all replicas (target first), and what it adds and removes."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def _send(client: KafkaClient, api_key: ApiKey, body: Mapping[str, Any], what: str) -> Any:
    answer = client.admin_request(api_key, body)
    if answer.error_code != ErrorCode.NONE:
        raise KafkaClientError.of(what, answer.error_code, answer.error_message)
    return answer


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        topics.setdefault(tp.topic, []).append(tp.partition)
    return topics


def alter_reassignments(client: KafkaClient,
                        plan: Mapping[TopicPartition, Sequence[int] | None],
                        timeout_s: float = 60.0) -> dict[TopicPartition, str | None]:
    """Start (replicas) or cancel (None) reassignments: each partition's error, or None."""
    body = {"timeout": timedelta(seconds=timeout_s), "topics": [
        {"name": topic, "partitions": [
            {"partition_index": p, "replicas": None if plan[TopicPartition(topic, p)] is None
             else list(plan[TopicPartition(topic, p)] or ())} for p in partitions]}
        for topic, partitions in _by_topic(plan).items()]}
    answer = _send(client, ApiKey.ALTER_PARTITION_REASSIGNMENTS, body,
                   "AlterPartitionReassignments")
    return {TopicPartition(t.name, p.partition_index):
            None if p.error_code == ErrorCode.NONE
            else f"{error_name(p.error_code)}: {p.error_message or ''}".rstrip(": ")
            for t in answer.responses for p in t.partitions}


def list_reassignments(client: KafkaClient, partitions: Iterable[TopicPartition] | None = None
                       ) -> dict[TopicPartition, Reassignment]:
    """The reassignments in flight (of ``partitions``, or all of them)."""
    topics = None if partitions is None else [
        {"name": topic, "partition_indexes": indexes}
        for topic, indexes in _by_topic(partitions).items()]
    answer = _send(client, ApiKey.LIST_PARTITION_REASSIGNMENTS,
                   {"timeout": timedelta(seconds=30), "topics": topics},
                   "ListPartitionReassignments")
    return {TopicPartition(t.name, p.partition_index):
            Reassignment(tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas))
            for t in answer.topics for p in t.partitions}
