"""OffsetForLeaderEpoch (key 23), v0-v4 (v2 adds ``current_leader_epoch``, v3
``replica_id``, v4 is the first flexible version).

Behaviour: only the partition's leader answers (NOT_LEADER_OR_FOLLOWER elsewhere), from its
leader-epoch cache (KIP-101): the largest epoch <= the one asked for and its end offset (the
log end offset for the current epoch, and for a later one asked for by a client that saw it
in Metadata), the answer a follower truncates its divergent tail to; an epoch below every
one known is answered with the undefined (-1, -1) pair, as Kafka answers epochs it never
had (a single node leads every partition in epoch 0). A ``current_leader_epoch`` above ours
is UNKNOWN_LEADER_EPOCH, below it FENCED_LEADER_EPOCH. librdkafka validates fetch positions
with this API whenever leader epochs are >= 0. With an authorizer it needs DESCRIBE on
the topic, or for a follower (``replica_id`` >= 0) CLUSTER_ACTION on the CLUSTER, as Kafka.
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
    from kio.schema.offset_for_leader_epoch.v4.request import OffsetForLeaderEpochRequest



@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH, versions=(0, 4))
async def offset_for_leader_epoch(broker: Broker, header: RequestHeader,
                                  request: OffsetForLeaderEpochRequest) -> Any:
    build = Build(header)
    replica_id = getattr(request, "replica_id", -1)
    return build.response(topics=per_partition(
        build, request.topics, "OffsetForLeaderTopicResult",
        lambda topic, p: _end_offset(build, broker, topic, p, replica_id), name_field="topic"))


def _end_offset(build: Build, broker: Broker, topic: str, p: Any, replica_id: int) -> Any:
    def answer(code: ErrorCode, epoch: int = -1, offset: int = -1) -> Any:
        return build("EpochEndOffset", error_code=code, partition=p.partition,
                     leader_epoch=epoch, end_offset=offset)

    current = getattr(p, "current_leader_epoch", -1)
    try:
        if not (replica_id >= 0 and broker.security.allows_cluster(Operation.CLUSTER_ACTION)):
            broker.security.require(Operation.DESCRIBE, ResourceType.TOPIC, topic)
        partition = broker.leader_partition(topic, p.partition)
        leader_epoch = partition.leader_epoch
    except KafkaError as exc:
        return answer(exc.code)
    if current > leader_epoch:
        return answer(ErrorCode.UNKNOWN_LEADER_EPOCH)
    if 0 <= current < leader_epoch:
        return answer(ErrorCode.FENCED_LEADER_EPOCH)
    return answer(ErrorCode.NONE, *partition.epochs.end_offset(p.leader_epoch,
                                                               partition.log.log_end_offset))
