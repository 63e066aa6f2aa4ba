"""DeleteRecords (key 21), v0-v2 (v1 is v0, v2 the first flexible version).

Behaviour: advances each partition's log start offset to the requested offset (-1 means
the high watermark, as in Kafka) and answers the new low watermark; offsets below it become
unreadable at once, and segments wholly below it are deleted by the next retention pass. An
offset above the high watermark is OFFSET_OUT_OF_RANGE. The start offset is checkpointed
at once, so a restart keeps it. Only the partition's leader answers (NOT_LEADER_OR_FOLLOWER
elsewhere), up to its high watermark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.responses import per_partition
from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode, KafkaError
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.delete_records.v2.request import DeleteRecordsRequest


HIGH_WATERMARK = -1


@handles(ApiKey.DELETE_RECORDS, versions=(0, 2))
async def delete_records(broker: Broker, header: RequestHeader,
                         request: DeleteRecordsRequest) -> Any:
    build = Build(header)
    topics = per_partition(build, request.topics, "DeleteRecordsTopicResult",
                           lambda topic, p: _delete(build, broker, topic, p))
    broker.logs.checkpoint()
    return build.response(topics=topics)


def _delete(build: Build, broker: Broker, topic: str, p: Any) -> Any:
    try:
        broker.security.require(Operation.DELETE, ResourceType.TOPIC, topic)
        partition = broker.leader_partition(topic, p.partition_index)
        log, high = partition.log, partition.high_watermark
        offset = high if p.offset == HIGH_WATERMARK else p.offset
        if offset > high:
            raise KafkaError(f"offset {offset} is above the high watermark {high}",
                             ErrorCode.OFFSET_OUT_OF_RANGE)
        low = log.delete_records(offset)
    except KafkaError as exc:
        return build("DeleteRecordsPartitionResult", partition_index=p.partition_index,
                     low_watermark=-1, error_code=exc.code)
    return build("DeleteRecordsPartitionResult", partition_index=p.partition_index,
                 low_watermark=low, error_code=ErrorCode.NONE)
