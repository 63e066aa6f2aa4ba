"""Metadata (key 3), v0-v13.

Behaviour: the answer is what the replica manager knows of the cluster (ZooKeeper's, or a
single node's, which is the only broker, the controller, and the leader in epoch 0, only
replica and only ISR member of every partition): every live broker (and for a few seconds
one that just left, ``replication/departures.py``) with its rack, at its endpoint of the
listener the request came in on (brokers without that listener are left out, as Kafka
does), the controller, and per partition its leader (LEADER_NOT_AVAILABLE while it has
none), leader epoch, replicas, ISR and offline replicas (assigned ones not alive).
``topics`` null (v1+) or empty (v0) means every topic. Missing topics are auto-created
with ``num.partitions`` and ``default.replication.factor`` when
``auto.create.topics.enable`` is on and the request allows it (v4+ flag; always allowed
before v4), as client test suites expect: answered at once when the topic is led by then
(a single node), else LEADER_NOT_AVAILABLE until its leaders are elected; otherwise missing
topics are answered UNKNOWN_TOPIC_OR_PARTITION, and an illegal name
INVALID_TOPIC_EXCEPTION. A fault hook refusing a partition makes it LEADER_NOT_AVAILABLE
style: its error code and leader -1.

With an authorizer, as Kafka's: an all-topics request lists only the topics the principal
may DESCRIBE; a named topic it may not describe is TOPIC_AUTHORIZATION_FAILED, and so is a
missing topic it may not create (CREATE on the CLUSTER or the TOPIC). The authorized
operations (v8) are Kafka's bit fields when asked for, else ``OPERATIONS_NOT_ASKED``; the
cluster's are 0 without DESCRIBE on the CLUSTER.

v9+ matter to librdkafka: only from Metadata v9 does it trust the leader epochs it is
given (KIP-320), and without them it follows a partition's new leader after a failover one
metadata refresh late. Topic ids (v10+) are the topic's (the cluster's, which every broker
keeps). From v12 a topic may be asked for by id alone (no name): it is described like one
asked for by name (never auto-created), an id no topic has is UNKNOWN_TOPIC_ID, and one
the principal may not describe is TOPIC_AUTHORIZATION_FAILED without its name (Kafka holds
ids not sensitive, names are). v13 adds a top-level error code: always NONE here
(REBOOTSTRAP_REQUIRED is for brokers that lose their metadata).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.request_context import listener_name
from sparklog.broker.security.acls import CLUSTER_NAME, Operation, ResourceType
from sparklog.broker.security.broker_security import OPERATIONS_NOT_ASKED
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode, KafkaError
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey
from sparklog.storage.log_manager import validate_topic_name

if TYPE_CHECKING:
    from kio.schema.metadata.v13.request import MetadataRequest





@handles(ApiKey.METADATA, versions=(0, 13))
async def metadata(broker: Broker, header: RequestHeader,
                   request: MetadataRequest) -> Any:
    build = Build(header)
    version = header.api_version
    security = broker.security
    replicas = broker.replicas
    if request.topics is None or (version == 0 and not request.topics):
        names = [n for n in sorted(replicas.assignments)
                 if security.authorize(Operation.DESCRIBE, ResourceType.TOPIC, n)]
    else:
        names = [t.name if t.name is not None else broker.topic_named(t.topic_id)
                 for t in request.topics]
    by_id = {t.topic_id for t in request.topics or () if t.name is None}
    auto_create = (version < 4 or request.allow_auto_topic_creation) and \
        broker.config.get_bool("auto.create.topics.enable")
    with_operations = getattr(request, "include_topic_authorized_operations", False)
    operations = cluster_operations(
        broker, getattr(request, "include_cluster_authorized_operations", False))
    topics = [await _topic(build, broker, name, auto_create, with_operations, by_id)
              for name in names if name is not None]
    return build.response(
        brokers=tuple(build("MetadataResponseBroker", node_id=b, host=e.host, port=e.port,
                            rack=rack)
                      for b, (e, rack) in broker.listed_endpoints(listener_name()).items()),
        cluster_id=broker.cluster_id, controller_id=replicas.controller_id,
        topics=tuple(topics) + _unknown_ids(build, broker, by_id), error_code=ErrorCode.NONE,
        cluster_authorized_operations=operations)


def cluster_operations(broker: Broker, asked: bool) -> int:
    """The cluster operations the principal may do, when asked for (``OPERATIONS_NOT_ASKED``
    if not): 0 without DESCRIBE on the CLUSTER, as Kafka answers Metadata v8-v10 and
    DescribeCluster."""
    if not asked:
        return OPERATIONS_NOT_ASKED
    security = broker.security
    if not security.allows_cluster(Operation.DESCRIBE):
        return 0
    return security.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)


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
    return broker.security.authorized_operations(ResourceType.TOPIC, name, with_operations)


async def _topic(build: Build, broker: Broker, name: str, auto_create: bool,
                 with_operations: bool, by_id: set[uuid.UUID]) -> Any:
    """One topic's answer, auto-creating it when the request may (module docstring)."""
    replicas = broker.replicas
    topic_id = broker.topic_id(name)
    create = auto_create and not name.startswith("__") and topic_id not in by_id
    try:
        _authorize(broker, name, create and name not in replicas.assignments)
    except KafkaError as exc:
        if topic_id in by_id:
            return build("MetadataResponseTopic", error_code=exc.code, name=None,
                         topic_id=topic_id, is_internal=False, partitions=())
        return _refused(build, name, exc.code)
    if name not in replicas.assignments:
        if not create:
            return _refused(build, name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        try:
            validate_topic_name(name)
            await replicas.create_topic(name, broker.config.get_int("num.partitions"),
                                        broker.config.get_int("default.replication.factor"), {})
        except KafkaError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                return _refused(build, name, exc.code)
        if name not in replicas.assignments or not replicas.led(name, replicas.assignments[name]):
            return _refused(build, name, ErrorCode.LEADER_NOT_AVAILABLE)
    local = broker.logs.topics.get(name)
    return build("MetadataResponseTopic", error_code=ErrorCode.NONE, name=name,
                 topic_id=broker.topic_id(name),
                 is_internal=local is not None and local.internal,
                 partitions=tuple(build("MetadataResponsePartition", **state)
                                  for state in partition_states(broker, name)),
                 topic_authorized_operations=_operations(broker, name, with_operations))


def partition_states(broker: Broker, name: str, first: int = 0) -> Iterator[dict[str, Any]]:
    """Each partition of ``name`` from ``first`` as Metadata (and DescribeTopicPartitions)
    describe it: leader (-1, LEADER_NOT_AVAILABLE, without one), leader epoch, replicas,
    ISR and offline replicas, as the replica manager knows them."""
    replicas = broker.replicas
    for p, assigned in sorted(replicas.assignments[name].items()):
        if p < first:
            continue
        partition = replicas.partitions.get((name, p))
        leader = partition.leader if partition is not None else -1
        code = broker.refused(name, p) or (
            ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE)
        yield {"error_code": code, "partition_index": p,
               "leader_id": leader if code == ErrorCode.NONE else -1,
               "leader_epoch": partition.leader_epoch if partition is not None else -1,
               "replica_nodes": assigned,
               "isr_nodes": partition.isr if partition is not None else (),
               "offline_replicas": tuple(r for r in assigned if r not in replicas.live)}


def _unknown_ids(build: Build, broker: Broker, by_id: set[uuid.UUID]) -> tuple[Any, ...]:
    """Topics asked for by an id no topic has (v12+)."""
    return tuple(build("MetadataResponseTopic", error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                       name=None, topic_id=topic_id, partitions=())
                 for topic_id in sorted(by_id) if broker.topic_named(topic_id) is None)
