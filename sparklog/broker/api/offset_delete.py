"""OffsetDelete (key 47, v0): delete a group's committed offsets of some partitions.

Behaviour (Kafka's KafkaApis.handleOffsetDeleteRequest and the coordinator's
deleteOffsets; the group rules are ``GroupCoordinator.delete_offsets``):
- DELETE on the GROUP is needed (else the top-level GROUP_AUTHORIZATION_FAILED, no topics),
  and READ on each TOPIC (else TOPIC_AUTHORIZATION_FAILED for its partitions).
- A topic that does not exist, or a partition it does not have, is
  UNKNOWN_TOPIC_OR_PARTITION; the coordinator sees only the others.
- Group-level errors are top-level, with no topics: GROUP_ID_NOT_FOUND for a group the
  coordinator does not know, NON_EMPTY_GROUP for a group with members that does not use the
  consumer protocol, INVALID_GROUP_ID, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, or the
  error of the tombstones' append.
- A partition of a topic the group's members subscribe to is GROUP_SUBSCRIBED_TO_TOPIC;
  the others are NONE, whether or not they had an offset, and the offsets they had are
  tombstoned in ``__consumer_offsets`` (one append), replicated before the answer as a
  commit is (``offset_commit.replicated``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparklog.broker.api.offset_commit import replicated
from sparklog.broker.registry import handles
from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.broker.state import Broker
from sparklog.coordinator.group_records import TopicPartition
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.offset_delete.v0.request import OffsetDeleteRequest


@handles(ApiKey.OFFSET_DELETE, versions=(0, 0))
async def offset_delete(broker: Broker, header: RequestHeader,
                        request: OffsetDeleteRequest) -> Any:
    build = Build(header)
    security = broker.security
    if not security.authorize(Operation.DELETE, ResourceType.GROUP, request.group_id):
        return build.response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, topics=())
    refused: dict[TopicPartition, ErrorCode] = {}
    eligible: list[TopicPartition] = []
    for topic in request.topics:
        partitions = broker.partition_count(topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if not security.authorize(Operation.READ, ResourceType.TOPIC, topic.name):
                refused[tp] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif not 0 <= p.partition_index < partitions:
                refused[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                eligible.append(tp)
    error, errors = broker.coordinator.delete_offsets(request.group_id, eligible)
    if error != ErrorCode.NONE:
        return build.response(error_code=error, topics=())
    errors = await replicated(broker, request.group_id, errors)
    errors |= refused
    return build.response(error_code=ErrorCode.NONE, topics=tuple(
        build("OffsetDeleteResponseTopic", name=topic.name, partitions=tuple(
            build("OffsetDeleteResponsePartition", partition_index=p.partition_index,
                  error_code=errors[(topic.name, p.partition_index)])
            for p in topic.partitions))
        for topic in request.topics))
