"""ElectLeaders (key 43, v0-v2): preferred and unclean leader elections on request (KIP-460).

Behaviour, as Kafka's ZooKeeper-era brokers answer it:
- The election types are PREFERRED (0; v0 knows no other) and UNCLEAN (1); another value is
  INVALID_REQUEST. ``topic_partitions`` null means every partition of every topic, and then
  partitions that needed no election are left out of the answer (Kafka's rule).
- ALTER on the CLUSTER is required: without it every named partition, and the top-level
  error (v1+), is CLUSTER_AUTHORIZATION_FAILED, and nothing is elected.
- The controller answers, after the election (``ReplicaManager.elect_leaders``;
  the rules are ``cluster.controller.requested_election``): NONE, ELECTION_NOT_NEEDED,
  PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION
  per partition, with Kafka's messages. Another broker answers NOT_CONTROLLER (top level and
  per partition): clients send ElectLeaders to the controller Metadata names (librdkafka,
  kafka-python, Kafka's Admin; the last two refresh it and retry on NOT_CONTROLLER).
- A single node is its own controller and leads every partition as its only (preferred)
  replica: every known partition is ELECTION_NOT_NEEDED.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.security.acls import Operation
from sparklog.broker.state import Broker
from sparklog.cluster.controller import PREFERRED, UNCLEAN
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.elect_leaders.v2.request import ElectLeadersRequest

TopicPartition = tuple[str, int]

_STRATEGY = {PREFERRED: "PreferredReplicaPartitionLeaderElectionStrategy",
             UNCLEAN: "OfflinePartitionLeaderElectionStrategy(true)"}


def _message(code: ErrorCode, tp: TopicPartition, election: int) -> str | None:
    """Kafka's message for a partition's result."""
    name = f"{tp[0]}-{tp[1]}"
    if code in (ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
                ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE):
        return f"Failed to elect leader for partition {name} under strategy " \
               f"{_STRATEGY[election]}"
    return {ErrorCode.NONE: None,
            ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "The partition does not exist.",
            ErrorCode.REQUEST_TIMED_OUT: f"the new leader of {name} was not seen in time",
            }.get(code, code.name)


@handles(ApiKey.ELECT_LEADERS, versions=(0, 2))
async def elect_leaders(broker: Broker, header: RequestHeader,
                        request: ElectLeadersRequest) -> Any:
    election = getattr(request, "election_type", PREFERRED)
    wanted = None if request.topic_partitions is None else sorted(
        {(t.topic, p) for t in request.topic_partitions for p in t.partitions})
    top = ErrorCode.NONE
    results: dict[TopicPartition, ErrorCode] = {}
    if not broker.security.allows_cluster(Operation.ALTER):
        top = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    elif election not in (PREFERRED, UNCLEAN):
        top = ErrorCode.INVALID_REQUEST
    else:
        replicas = broker.replicas
        answered = await replicas.elect_leaders(wanted, election, request.timeout.total_seconds())
        if answered is None:
            top = ErrorCode.NOT_CONTROLLER
            if wanted is None:
                wanted = sorted((t, p) for t, assignment in replicas.assignments.items()
                                for p in assignment)
        else:
            results = answered
    if top != ErrorCode.NONE:
        results = dict.fromkeys(wanted or (), top)
    elif wanted is None:
        results = {tp: c for tp, c in results.items() if c != ErrorCode.ELECTION_NOT_NEEDED}
    return _response(Build(header), top, results, election)


def _response(build: Build, top: ErrorCode, results: dict[TopicPartition, ErrorCode],
              election: int) -> Any:
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for tp, code in sorted(results.items()):
        by_topic[tp[0]].append(build("PartitionResult", partition_id=tp[1], error_code=code,
                                     error_message=_message(code, tp, election)))
    return build.response(error_code=top, replica_election_results=tuple(
        build("ReplicaElectionResult", topic=topic, partition_result=tuple(partitions))
        for topic, partitions in by_topic.items()))
