"""AlterPartitionReassignments (key 45, v0-v1) and ListPartitionReassignments (46, v0).

Behaviour, as Kafka's (KIP-455):
- Alter needs ALTER on the CLUSTER, List DESCRIBE on it (CLUSTER_AUTHORIZATION_FAILED for
  the whole request otherwise).
- Alter writes each topic's reassignments into its assignment (in a cluster ZooKeeper's
  znode) by compare-and-set (``cluster/reassignment.reassign``: targets checked against the live
  brokers, v1's ``allow_replication_factor_change`` honoured, null replicas cancel) and
  answers once written, per partition; the controller carries them out. A missing topic or
  partition is UNKNOWN_TOPIC_OR_PARTITION.
- List answers the reassignments in flight, read from the store at the time of the request
  (so an Alter just answered is listed): each partition's replicas (target + original),
  adding and removing replicas; ``topics`` null means every topic, and named partitions
  not in flight are left out.
- A single node has nothing to move: a target of this node alone is accepted and changes
  nothing, any other names a broker that is not live, and List is empty.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.security.acls import Operation
from sparklog.broker.state import Broker
from sparklog.cluster.layout import TopicAssignment
from sparklog.cluster.reassignment import in_flight, reassign
from sparklog.errors import ErrorCode, KafkaError
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.alter_partition_reassignments.v1.request import (
        AlterPartitionReassignmentsRequest,
    )
    from kio.schema.list_partition_reassignments.v0.request import (
        ListPartitionReassignmentsRequest,
    )

Requests = dict[int, tuple[int, ...] | None]


@handles(ApiKey.ALTER_PARTITION_REASSIGNMENTS, versions=(0, 1))
async def alter_partition_reassignments(broker: Broker, header: RequestHeader,
                                        request: AlterPartitionReassignmentsRequest) -> Any:
    build = Build(header)
    if not broker.security.allows_cluster(Operation.ALTER):
        return build.response(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                              error_message=None, responses=())
    allow = getattr(request, "allow_replication_factor_change", True)
    responses = []
    for topic in request.topics:
        wanted: Requests = {p.partition_index: None if p.replicas is None else tuple(p.replicas)
                            for p in topic.partitions}
        errors = await _reassign(broker, topic.name, wanted, allow)
        responses.append(build("ReassignableTopicResponse", name=topic.name, partitions=tuple(
            build("ReassignablePartitionResponse", partition_index=p,
                  error_code=ErrorCode.NONE if e is None else e.code,
                  error_message=None if e is None else str(e))
            for p, e in sorted(errors.items()))))
    return build.response(error_code=ErrorCode.NONE, error_message=None,
                          responses=tuple(responses))


async def _reassign(broker: Broker, name: str, wanted: Requests, allow: bool
                    ) -> dict[int, KafkaError | None]:
    """Each partition's error (None: accepted)."""
    replicas = broker.replicas
    if name not in replicas.assignments:
        return dict.fromkeys(wanted, KafkaError(f"unknown topic {name}",
                                                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
    live = set(replicas.live)
    errors: dict[int, KafkaError | None] = {}

    def change(current: TopicAssignment) -> TopicAssignment | None:
        new, found = reassign(current, wanted, live, allow)
        errors.clear()
        errors.update(found)
        return new if new != current else None

    try:
        await replicas.update_topic(name, change)
    except KafkaError as exc:
        return dict.fromkeys(wanted, exc)
    return errors


@handles(ApiKey.LIST_PARTITION_REASSIGNMENTS, versions=(0, 0))
async def list_partition_reassignments(broker: Broker, header: RequestHeader,
                                       request: ListPartitionReassignmentsRequest) -> Any:
    build = Build(header)
    if not broker.security.allows_cluster(Operation.DESCRIBE):
        return build.response(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                              error_message=None, topics=())
    replicas = broker.replicas
    asked = None if request.topics is None else {
        t.name: set(t.partition_indexes) for t in request.topics}
    names = sorted(replicas.assignments) if asked is None else sorted(asked)
    found = await replicas.read_topics(names)
    topics = []
    for name, assignment in sorted(found.items()):
        partitions = tuple(
            build("OngoingPartitionReassignment", partition_index=p,
                  replicas=assignment.partitions[p], adding_replicas=assignment.adding.get(p, ()),
                  removing_replicas=assignment.removing.get(p, ()))
            for p in in_flight(assignment) if asked is None or p in asked[name])
        if partitions:
            topics.append(build("OngoingTopicReassignment", name=name, partitions=partitions))
    return build.response(error_code=ErrorCode.NONE, error_message=None, topics=tuple(topics))
