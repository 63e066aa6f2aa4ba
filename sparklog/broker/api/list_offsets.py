"""ListOffsets (key 2), v0-v5.

Behaviour: timestamp -2 is the log start offset (earliest), -1 latest: the log end offset
(the high watermark), or under read_committed (``isolation_level`` 1, v2+) the last stable
offset, as Kafka answers; any other timestamp gives the first record whose timestamp is at
or after it, with that record's timestamp, or offset -1 when there is none.
Only the partition's leader answers (NOT_LEADER_OR_FOLLOWER elsewhere); latest is its high
watermark and ``leader_epoch`` its current leader epoch.
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
from sparklog.protocol.versions import ApiKey, IsolationLevel

if TYPE_CHECKING:
    from kio.schema.list_offsets.v5.request import ListOffsetsRequest


EARLIEST, LATEST = -2, -1
@handles(ApiKey.LIST_OFFSETS, versions=(0, 5))
async def list_offsets(broker: Broker, header: RequestHeader,
                       request: ListOffsetsRequest) -> Any:
    build = Build(header)
    committed = getattr(request, "isolation_level", 0) == IsolationLevel.READ_COMMITTED
    return build.response(topics=per_partition(
        build, request.topics, "ListOffsetsTopicResponse",
        lambda topic, p: _lookup(build, broker, topic, p, committed)))


def _lookup(build: Build, broker: Broker, topic: str, p: Any, committed: bool) -> Any:
    def answer(code: ErrorCode, timestamp: int = -1, offset: int = -1, epoch: int = -1) -> Any:
        return build("ListOffsetsPartitionResponse", partition_index=p.partition_index,
                     error_code=code, timestamp=timestamp, offset=offset, leader_epoch=epoch,
                     old_style_offsets=(offset,) if offset >= 0 else ())

    try:
        broker.security.require(Operation.DESCRIBE, ResourceType.TOPIC, topic)
        partition = broker.leader_partition(topic, p.partition_index)
        log, epoch, high = partition.log, partition.leader_epoch, partition.high_watermark
    except KafkaError as exc:
        return answer(exc.code)
    if p.timestamp == EARLIEST:
        return answer(ErrorCode.NONE, -1, log.log_start_offset, epoch)
    if p.timestamp == LATEST:
        latest = min(log.last_stable_offset, high) if committed else high
        return answer(ErrorCode.NONE, -1, latest, epoch)
    found = log.offset_for_timestamp(p.timestamp)
    if found is None or found[0] >= high:
        return answer(ErrorCode.NONE)
    offset, timestamp = found
    return answer(ErrorCode.NONE, timestamp, offset, epoch)
