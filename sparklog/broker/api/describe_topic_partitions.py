"""DescribeTopicPartitions (key 75), v0: what Kafka 3.8's admin client describes topics with.

Behaviour (as Kafka's ``DescribeTopicPartitionsRequestHandler``):
- No topics named means every topic the principal may DESCRIBE; named topics are answered
  each (UNKNOWN_TOPIC_OR_PARTITION for a missing one, never auto-created;
  TOPIC_AUTHORIZATION_FAILED for one it may not describe). Topics go in name order.
- Each partition as Metadata describes it (``metadata.partition_states``: leader, epoch,
  replicas, ISR, offline replicas); the eligible leader replicas of KIP-966 are empty, as
  for a Kafka without ELR. Each topic carries the principal's authorized operations.
- Paginated: at most ``response_partition_limit`` partitions (and the broker's
  ``max.request.partition.size.limit``, 2000) are answered; ``next_cursor`` names the
  first partition left out, and a request with a cursor starts there (topics before the
  cursor's are skipped). A cursor on a topic the request does not name answers every
  topic INVALID_REQUEST (Kafka's error response for the InvalidRequestException it
  throws).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparklog.broker.api.metadata import partition_states
from sparklog.broker.registry import handles
from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.describe_topic_partitions.v0.request import (
        DescribeTopicPartitionsRequest,
    )


@handles(ApiKey.DESCRIBE_TOPIC_PARTITIONS, versions=(0, 0))
async def describe_topic_partitions(broker: Broker, header: RequestHeader,
                                    request: DescribeTopicPartitionsRequest) -> Any:
    build = Build(header)
    security = broker.security
    assignments = broker.replicas.assignments
    if request.topics:
        names = sorted({t.name for t in request.topics})
    else:
        names = [n for n in sorted(assignments)
                 if security.authorize(Operation.DESCRIBE, ResourceType.TOPIC, n)]
    cursor = request.cursor
    if cursor is not None:
        if request.topics and cursor.topic_name not in names:
            return build.response(topics=tuple(
                build("DescribeTopicPartitionsResponseTopic",
                      error_code=ErrorCode.INVALID_REQUEST, name=name, topic_id=None,
                      partitions=()) for name in names), next_cursor=None)
        names = [n for n in names if n >= cursor.topic_name]
    budget = min(request.response_partition_limit,
                 broker.config.get_int("max.request.partition.size.limit"))
    topics, next_cursor = [], None
    for name in names:
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name \
            else 0
        refused = _refused(broker, name)
        if refused is not None:
            topics.append(build("DescribeTopicPartitionsResponseTopic", error_code=refused,
                                name=name, topic_id=None, partitions=()))
            continue
        if budget <= 0:
            next_cursor = build("Cursor", topic_name=name, partition_index=first)
            break
        states = list(partition_states(broker, name, first))
        if len(states) > budget:
            next_cursor = build("Cursor", topic_name=name,
                                partition_index=states[budget]["partition_index"])
            states = states[:budget]
        budget -= len(states)
        local = broker.logs.topics.get(name)
        topics.append(build(
            "DescribeTopicPartitionsResponseTopic", error_code=ErrorCode.NONE, name=name,
            topic_id=broker.topic_id(name), is_internal=local is not None and local.internal,
            partitions=tuple(build("DescribeTopicPartitionsResponsePartition",
                                   eligible_leader_replicas=(), last_known_elr=(), **state)
                             for state in states),
            topic_authorized_operations=security.authorized_operations(ResourceType.TOPIC,
                                                                       name)))
        if next_cursor is not None:
            break
    return build.response(topics=tuple(topics), next_cursor=next_cursor)


def _refused(broker: Broker, name: str) -> ErrorCode | None:
    if not broker.security.authorize(Operation.DESCRIBE, ResourceType.TOPIC, name):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if name not in broker.replicas.assignments:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return None
