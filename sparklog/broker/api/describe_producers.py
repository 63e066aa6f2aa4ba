"""DescribeProducers (key 61), v0 (KIP-664: what ``kafka-transactions.sh describe-producers``
and an admin's ``describeProducers`` ask, to find the producer of a hanging transaction).

Behaviour, as Kafka's: per requested partition that this broker leads, the producers its
log's producer state holds (``sparklog.storage.producer_state``): producer id, epoch, last
sequence (-1 before any sequenced batch), the max timestamp of its last batch or marker,
the coordinator epoch of its last marker (-1 before any) and the first offset of its open
transaction (-1 when none). A topic that does not exist is UNKNOWN_TOPIC_OR_PARTITION in
each partition asked; a partition of an existing topic that this broker does not lead is
NOT_LEADER_OR_FOLLOWER (also while it has no leader), one past the topic's partitions
UNKNOWN_TOPIC_OR_PARTITION.

With an authorizer, as Kafka's: READ on the TOPIC (TOPIC_AUTHORIZATION_FAILED in each of its
partitions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode, KafkaError
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.describe_producers.v0.request import DescribeProducersRequest

_NOT_LED = frozenset({ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})


@handles(ApiKey.DESCRIBE_PRODUCERS, versions=(0, 0))
async def describe_producers(broker: Broker, header: RequestHeader,
                             request: DescribeProducersRequest) -> Any:
    build = Build(header)
    return build.response(topics=tuple(
        build("TopicResponse", name=topic.name, partitions=tuple(
            _partition(build, broker, topic.name, index) for index in topic.partition_indexes))
        for topic in request.topics))


def _partition(build: Build, broker: Broker, topic: str, index: int) -> Any:
    try:
        broker.security.require(Operation.READ, ResourceType.TOPIC, topic)
        count = broker.partition_count(topic)
        if not count:
            raise KafkaError(f"unknown topic {topic}", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        try:
            log = broker.leader_partition(topic, index).log
        except KafkaError as exc:
            if exc.code in _NOT_LED and 0 <= index < count:
                raise KafkaError(str(exc), ErrorCode.NOT_LEADER_OR_FOLLOWER) from None
            raise
    except KafkaError as exc:
        return build("PartitionResponse", partition_index=index, error_code=exc.code,
                     active_producers=())
    with log.lock:  # appends update the state under the log's lock
        producers = sorted(log.producer_state.producers.items())
    return build("PartitionResponse", partition_index=index, error_code=ErrorCode.NONE,
                 active_producers=tuple(
                     build("ProducerState", producer_id=pid, producer_epoch=entry.epoch,
                           last_sequence=entry.last_seq, last_timestamp=entry.last_timestamp,
                           coordinator_epoch=entry.coordinator_epoch,
                           current_txn_start_offset=entry.txn_first_offset)
                     for pid, entry in producers))
