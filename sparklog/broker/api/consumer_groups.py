"""KIP-848 consumer groups: ConsumerGroupHeartbeat (68, v0-v1) and ConsumerGroupDescribe (69,
v0-v1).

Behaviour (the group logic is ``sparklog.coordinator.consumer_group_coordinator``; this module
translates):
- ConsumerGroupHeartbeat: a member joins (epoch 0), heartbeats with its member epoch, or
  leaves (-1; -2 for a static member coming back); the answer carries its member id and
  epoch, the heartbeat interval and, when it changed or the request was full, its
  assignment by topic id. v0: the coordinator makes up the member id of a joining member
  that sends none; v1 (KIP-1082) requires the client's own, and adds
  ``SubscribedTopicRegex`` (Java's regular expressions, matched against every topic's
  name but the internal topics'). Errors carry an ``error_message``. The answer waits until
  the ISR of the group's ``__consumer_offsets`` partition has what the heartbeat stored
  (REQUEST_TIMED_OUT, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE as for a commit), so a
  new coordinator replays what the members were told.
- ConsumerGroupDescribe: each group's state, group and assignment epochs, assignor, and
  every member with its epoch, subscription, current and target assignment (topic ids and
  names); an unknown group, or a classic one, is GROUP_ID_NOT_FOUND. v1 adds each member's
  ``member_type`` (1: the consumer protocol; 0: a classic member of a group that was
  upgraded, served through JoinGroup, SyncGroup and Heartbeat).
- With an authorizer, as Kafka's: a heartbeat needs READ on the GROUP and DESCRIBE on each
  subscribed TOPIC it names (TOPIC_AUTHORIZATION_FAILED naming those it may not see); a
  describe needs DESCRIBE on the GROUP, and with ``include_authorized_operations`` answers
  the group operations the principal may do.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sparklog.broker.api.offset_commit import COMMIT_REPLICATION_TIMEOUT_S
from sparklog.broker.registry import handles
from sparklog.broker.request_context import client_host
from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.broker.security.broker_security import OPERATIONS_NOT_ASKED
from sparklog.broker.state import Broker
from sparklog.coordinator.consumer_group_coordinator import HeartbeatRequest
from sparklog.coordinator.group_records import TopicAssignment
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
    from kio.schema.consumer_group_heartbeat.v1.request import ConsumerGroupHeartbeatRequest

_NO_INTERVAL = timedelta(0)
_CLIENT_MEMBER_ID = 1  # ConsumerGroupHeartbeat v1+: the client generates its member id
_CLASSIC_MEMBER, _CONSUMER_MEMBER = 0, 1  # ConsumerGroupDescribe v1's member_type


@handles(ApiKey.CONSUMER_GROUP_HEARTBEAT, versions=(0, 1))
async def consumer_group_heartbeat(broker: Broker, header: RequestHeader,
                                   request: ConsumerGroupHeartbeatRequest) -> Any:
    build = Build(header)
    security = broker.security
    names = request.subscribed_topic_names
    if not security.authorize(Operation.READ, ResourceType.GROUP, request.group_id):
        return _heartbeat_error(build, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    refused = sorted({t for t in names or () if not security.authorize(
        Operation.DESCRIBE, ResourceType.TOPIC, t)})
    if refused:
        return _heartbeat_error(build, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                f"Unauthorized topics: {', '.join(refused)}")
    owned = None if request.topic_partitions is None else {
        tp.topic_id: frozenset(tp.partitions) for tp in request.topic_partitions
        if tp.topic_id is not None and tp.partitions}
    result = broker.coordinator.consumer.heartbeat(HeartbeatRequest(
        request.group_id, request.member_id, request.member_epoch, request.instance_id,
        request.rack_id, round(request.rebalance_timeout.total_seconds() * 1000),
        None if names is None else tuple(names),
        getattr(request, "subscribed_topic_regex", None), request.server_assignor, owned,
        header.client_id or "", client_host(),
        client_member_id=header.api_version >= _CLIENT_MEMBER_ID))
    if result.error == ErrorCode.NONE:  # what it stored must survive the coordinator
        replicated = await broker.replicas.offsets_replicated(request.group_id,
                                                              COMMIT_REPLICATION_TIMEOUT_S)
        if replicated != ErrorCode.NONE:
            return _heartbeat_error(build, replicated)
    assignment = None if result.assignment is None else build(
        "Assignment", topic_partitions=_topic_partitions(build, result.assignment))
    return build.response(error_code=result.error, error_message=result.message,
                          member_id=result.member_id, member_epoch=result.member_epoch,
                          heartbeat_interval=timedelta(milliseconds=result.heartbeat_interval_ms),
                          assignment=assignment)


def _heartbeat_error(build: Build, error: ErrorCode, message: str | None = None) -> Any:
    return build.response(error_code=error, error_message=message, member_id=None,
                          member_epoch=0, heartbeat_interval=_NO_INTERVAL, assignment=None)


def _topic_partitions(build: Build, assignment: TopicAssignment,
                      names: Mapping[uuid.UUID, str] | None = None) -> tuple[Any, ...]:
    """An assignment by topic id (and name: ConsumerGroupDescribe's)."""
    return tuple(build("TopicPartitions", topic_id=topic_id, topic_name=(names or {}).get(
        topic_id, ""), partitions=tuple(sorted(partitions)))
                 for topic_id, partitions in sorted(assignment.items()))


@handles(ApiKey.CONSUMER_GROUP_DESCRIBE, versions=(0, 1))
async def consumer_group_describe(broker: Broker, header: RequestHeader,
                                  request: ConsumerGroupDescribeRequest) -> Any:
    build = Build(header)
    security = broker.security
    coordinator = broker.coordinator
    described = []
    for group_id in request.group_ids:
        empty = {"group_id": group_id, "group_state": "", "group_epoch": -1,
                 "assignment_epoch": -1, "assignor_name": "", "members": (),
                 "authorized_operations": OPERATIONS_NOT_ASKED}
        if not security.authorize(Operation.DESCRIBE, ResourceType.GROUP, group_id):
            described.append(build("DescribedGroup",
                                   error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                   error_message=f"not authorized to describe {group_id}",
                                   **empty))
            continue
        error = coordinator.check_group(group_id)
        description = coordinator.consumer.describe(group_id) if error is None else None
        if description is None:
            if error is None:
                error = ErrorCode.GROUP_ID_NOT_FOUND
                message = (f"Group {group_id} is not a consumer group."
                           if group_id in coordinator.groups else f"Group {group_id} not found.")
            else:
                message = f"group {group_id}: {error.name}"
            described.append(build("DescribedGroup", error_code=error, error_message=message,
                                   **empty))
            continue
        names = {topic_id: name for name, (topic_id, _) in
                 coordinator.consumer.groups[group_id].subscription_metadata.items()}
        for topic_ids in ([*m.member.assigned, *m.target] for m in description.members):
            for topic_id in topic_ids:
                if topic_id not in names:
                    names[topic_id] = broker.topic_named(topic_id) or ""
        members = tuple(
            build("Member", member_id=m.member.member_id, instance_id=m.member.instance_id,
                  rack_id=m.member.rack_id, member_epoch=m.member.member_epoch,
                  client_id=m.member.client_id, client_host=m.member.client_host,
                  subscribed_topic_names=m.member.subscribed_topic_names,
                  subscribed_topic_regex=m.member.subscribed_topic_regex,
                  assignment=build("Assignment", topic_partitions=_topic_partitions(
                      build, m.member.assigned, names)),
                  target_assignment=build("Assignment", topic_partitions=_topic_partitions(
                      build, m.target, names)),
                  member_type=_CONSUMER_MEMBER if m.member.classic is None
                  else _CLASSIC_MEMBER)
            for m in description.members)
        operations = security.authorized_operations(ResourceType.GROUP, group_id,
                                                    request.include_authorized_operations)
        described.append(build(
            "DescribedGroup", error_code=ErrorCode.NONE, error_message=None, group_id=group_id,
            group_state=description.state, group_epoch=description.group_epoch,
            assignment_epoch=description.assignment_epoch, assignor_name=description.assignor,
            members=members, authorized_operations=operations))
    return build.response(groups=tuple(described))
