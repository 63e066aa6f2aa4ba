"""Metadata (key 3), v0-v8.

Behaviour: this node is the only broker, the controller, and the leader (epoch
``LEADER_EPOCH``), only replica and only ISR member of every partition. ``topics`` null
(v1+) or empty (v0) means every topic. Missing topics are auto-created with
``num.partitions`` when ``auto.create.topics.enable`` is on and the request allows it (v4+
flag; always allowed before v4), as client test suites expect; otherwise they are answered
UNKNOWN_TOPIC_OR_PARTITION, and an illegal name INVALID_TOPIC_EXCEPTION.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.state import LEADER_EPOCH, Broker
from sparklog.errors import ErrorCode, KafkaError
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey
from sparklog.storage.log_manager import TopicMetadata

if TYPE_CHECKING:
    from kio.schema.metadata.v8.request import MetadataRequest



@handles(ApiKey.METADATA, versions=(0, 8))
async def metadata(broker: Broker, header: RequestHeader,
                   request: MetadataRequest) -> Any:
    build = Build(header)
    version = header.api_version
    if request.topics is None or (version == 0 and not request.topics):
        names = sorted(broker.logs.topics)
    else:
        names = [t.name for t in request.topics]
    auto_create = version < 4 or request.allow_auto_topic_creation
    topics = []
    for name in names:
        try:
            topic = broker.topic(name, auto_create=auto_create and not name.startswith("__"))
        except KafkaError as exc:
            topics.append(build("MetadataResponseTopic", error_code=exc.code, name=name,
                                is_internal=False, partitions=()))
            continue
        topics.append(_describe(build, broker, topic))
    node = broker.node_id
    return build.response(
        brokers=(build("MetadataResponseBroker", node_id=node, host=broker.host,
                       port=broker.port, rack=None),),
        cluster_id=broker.cluster_id,
        controller_id=node,
        topics=tuple(topics),
    )


def _describe(build: Build, broker: Broker, topic: TopicMetadata) -> Any:
    node = (broker.node_id,)
    partitions = []
    for p in range(topic.partitions):
        refused = broker.refused(topic.name, p)
        partitions.append(build(
            "MetadataResponsePartition", error_code=refused or ErrorCode.NONE,
            partition_index=p, leader_id=-1 if refused else broker.node_id,
            leader_epoch=LEADER_EPOCH, replica_nodes=node, isr_nodes=node,
            offline_replicas=()))
    return build("MetadataResponseTopic", error_code=ErrorCode.NONE, name=topic.name,
                 is_internal=topic.internal, partitions=tuple(partitions))
