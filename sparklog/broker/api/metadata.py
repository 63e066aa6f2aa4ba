"""Metadata (key 3), v0-v12.

Behaviour: this node is the only broker, the controller, and the leader (epoch
``LEADER_EPOCH``), only replica and only ISR member of every partition. ``topics`` null
(v1+) or empty (v0) means every topic. Missing topics are auto-created with
``num.partitions`` when ``auto.create.topics.enable`` is on and the request allows it (v4+
flag; always allowed before v4), as client test suites expect; otherwise they are answered
UNKNOWN_TOPIC_OR_PARTITION, and an illegal name INVALID_TOPIC_EXCEPTION.

With an authorizer, as Kafka's (on a single node and on a cluster alike): an all-topics
request lists only the topics the principal may DESCRIBE; a named topic it may not
describe is TOPIC_AUTHORIZATION_FAILED, and so is a missing topic it may not create
(CREATE on the CLUSTER or the TOPIC). The authorized operations (v8) are Kafka's bit
fields when asked for, else ``OMITTED``.

v9+ matter to librdkafka: only from Metadata v9 does it trust the leader epochs it is
given (KIP-320), and without them it follows a partition's new leader after a failover one
metadata refresh late. Topic ids (v10+): a single node's own; in a cluster the zero UUID
(unknown), as Kafka answers for topics created before ids; a topic asked for by id alone
(no name) is UNKNOWN_TOPIC_ID.

In a cluster (``broker.cluster``) the answer is what ZooKeeper says: every live broker
(and for a few seconds one that just left, ``replication/departures.py``) with its rack, at its
endpoint of the listener the request came in on (brokers without that listener are left
out, as Kafka does), the controller, and per partition its leader
(LEADER_NOT_AVAILABLE while it has none), leader epoch, replicas, ISR and offline replicas
(assigned ones not alive); auto-created topics get ``default.replication.factor`` replicas.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.security.acls import CLUSTER_NAME, Operation, ResourceType
from sparklog.broker.security.session import listener_name
from sparklog.broker.state import LEADER_EPOCH, Broker
from sparklog.errors import ErrorCode, KafkaError
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey
from sparklog.storage.log_manager import TopicMetadata, validate_topic_name

if TYPE_CHECKING:
    from kio.schema.metadata.v12.request import MetadataRequest



OMITTED = -(2**31)
"""Authorized operations not asked for (Kafka's Integer.MIN_VALUE)."""


@handles(ApiKey.METADATA, versions=(0, 12))
async def metadata(broker: Broker, header: RequestHeader,
                   request: MetadataRequest) -> Any:
    build = Build(header)
    version = header.api_version
    security = broker.security
    if request.topics is None or (version == 0 and not request.topics):
        known = broker.cluster.assignments if broker.cluster is not None else broker.logs.topics
        names = [n for n in sorted(known)
                 if security.authorize(Operation.DESCRIBE, ResourceType.TOPIC, n)]
    else:
        names = [t.name for t in request.topics if t.name is not None]
    auto_create = version < 4 or request.allow_auto_topic_creation
    with_operations = getattr(request, "include_topic_authorized_operations", False)
    cluster_operations = security.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME) \
        if getattr(request, "include_cluster_authorized_operations", False) else OMITTED
    if broker.cluster is not None:
        return await cluster_metadata(build, broker, names, auto_create, with_operations,
                                      cluster_operations, _unknown_ids(build, request))
    topics = []
    for name in names:
        try:
            create = auto_create and not name.startswith("__")
            _authorize(broker, name, create and name not in broker.logs.topics)
            topic = broker.topic(name, auto_create=create)
        except KafkaError as exc:
            topics.append(_refused(build, name, exc.code))
            continue
        topics.append(_describe(build, broker, topic, with_operations))
    node = broker.node_id
    return build.response(
        brokers=(build("MetadataResponseBroker", node_id=node, host=broker.host,
                       port=broker.port, rack=None),),
        cluster_id=broker.cluster_id,
        controller_id=node,
        topics=tuple(topics) + _unknown_ids(build, request),
        cluster_authorized_operations=cluster_operations,
    )


def _authorize(broker: Broker, name: str, creates: bool) -> None:
    """DESCRIBE on the topic, and CREATE (on the cluster or the topic) when the request
    would create it; else ``KafkaError`` TOPIC_AUTHORIZATION_FAILED."""
    security = broker.security
    security.require(Operation.DESCRIBE, ResourceType.TOPIC, name)
    if creates and not security.allows_cluster(Operation.CREATE):
        security.require(Operation.CREATE, ResourceType.TOPIC, name)


def _refused(build: Build, name: str, code: int) -> Any:
    return build("MetadataResponseTopic", error_code=code, name=name, topic_id=None,
                 is_internal=False, partitions=())


def _operations(broker: Broker, name: str, with_operations: bool) -> int:
    return broker.security.authorized_operations(ResourceType.TOPIC, name) \
        if with_operations else OMITTED


def _describe(build: Build, broker: Broker, topic: TopicMetadata, with_operations: bool
              ) -> Any:
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
                 topic_id=uuid.UUID(topic.topic_id), is_internal=topic.internal,
                 partitions=tuple(partitions),
                 topic_authorized_operations=_operations(broker, topic.name, with_operations))


async def cluster_metadata(build: Build, broker: Broker, names: list[str], auto_create: bool,
                           with_operations: bool, cluster_operations: int,
                           unknown: tuple[Any, ...]) -> Any:
    cluster = broker.cluster
    assert cluster is not None
    topics = []
    for name in names:
        create = auto_create and broker.config.get_bool("auto.create.topics.enable") \
            and not name.startswith("__")
        try:
            _authorize(broker, name, create and name not in cluster.assignments)
        except KafkaError as exc:
            topics.append(_refused(build, name, exc.code))
            continue
        if name not in cluster.assignments:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            if create:
                try:
                    validate_topic_name(name)
                    await cluster.create_topic(
                        name, broker.config.get_int("num.partitions"),
                        broker.config.get_int("default.replication.factor"), {})
                    code = ErrorCode.LEADER_NOT_AVAILABLE
                except KafkaError as exc:
                    code = ErrorCode.LEADER_NOT_AVAILABLE \
                        if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS else exc.code
            topics.append(_refused(build, name, code))
            continue
        partitions = []
        for p, replicas in sorted(cluster.assignments[name].items()):
            replica = cluster.partitions.get((name, p))
            leader = replica.leader if replica is not None else -1
            partitions.append(build(
                "MetadataResponsePartition",
                error_code=ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
                partition_index=p, leader_id=leader,
                leader_epoch=replica.leader_epoch if replica is not None else -1,
                replica_nodes=replicas, isr_nodes=replica.isr if replica is not None else (),
                offline_replicas=tuple(r for r in replicas if r not in cluster.live)))
        local = broker.logs.topics.get(name)
        topics.append(build("MetadataResponseTopic", error_code=ErrorCode.NONE, name=name,
                            topic_id=None, is_internal=local is not None and local.internal,
                            partitions=tuple(partitions),
                            topic_authorized_operations=_operations(broker, name,
                                                                    with_operations)))
    listener = listener_name()
    endpoints = {b: (info, e) for b, info in cluster.listed_brokers().items()
                 if (e := info.endpoint(listener)) is not None}
    return build.response(
        brokers=tuple(build("MetadataResponseBroker", node_id=b, host=e.host, port=e.port,
                            rack=info.rack) for b, (info, e) in endpoints.items()),
        cluster_id=broker.cluster_id, controller_id=cluster.controller_id,
        topics=tuple(topics) + unknown, cluster_authorized_operations=cluster_operations)


def _unknown_ids(build: Build, request: Any) -> tuple[Any, ...]:
    """Topics asked for by id alone (v10+): sparklog knows topics by name only."""
    return tuple(build("MetadataResponseTopic", error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                       name=None, topic_id=t.topic_id, partitions=())
                 for t in request.topics or () if t.name is None)
