"""Group membership APIs: FindCoordinator (10, v0-v2), JoinGroup (11, v0-v5), Heartbeat
(12, v0-v3), LeaveGroup (13, v0-v3), SyncGroup (14, v0-v3), DescribeGroups (15, v0-v4),
ListGroups (16, v0-v2), DeleteGroups (42, v0-v1).

Behaviour (the group logic itself is ``sparklog.coordinator``; this module translates):
- FindCoordinator: a group's coordinator (key type 0) is the leader of its
  ``__consumer_offsets`` partition, a transactional id's (key type 1) the leader of its
  ``__transaction_state`` partition (COORDINATOR_NOT_AVAILABLE while there is none; the
  topic is created on the first such request; a single node leads them all); another key
  type is INVALID_REQUEST, a stopped coordinator COORDINATOR_NOT_AVAILABLE. The
  API must be advertised in any case: librdkafka only enables LZ4 when it is.
- JoinGroup: v0 has no rebalance timeout (the session timeout serves as both); from v4 a
  dynamic member (no ``group.instance.id``, v5+) joining with an empty member id gets
  MEMBER_ID_REQUIRED and its member id, and must join again with it. The response is parked
  until the rebalance completes; only the leader gets the member list.
- LeaveGroup v0-v2 remove the one ``member_id`` (its error is the top-level error); v3
  removes a list of members, each answered on its own.
- DescribeGroups: an unknown group is described as Dead with no error (as Kafka does up to
  v5); member metadata, assignments and the protocol are only shown for a Stable group. With
  ``include_authorized_operations`` (v3+), the group operations the principal may do.
- With an authorizer, as Kafka's: FindCoordinator needs DESCRIBE on the GROUP or
  TRANSACTIONAL_ID; JoinGroup, SyncGroup, Heartbeat and LeaveGroup READ on the GROUP;
  DescribeGroups DESCRIBE and DeleteGroups DELETE on it (GROUP_AUTHORIZATION_FAILED);
  ListGroups lists every group with DESCRIBE on the CLUSTER, else the describable ones.
- The client host of a member is the connection's address, ``/ip`` as Kafka shows it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.request_context import client_host, listener_name
from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.broker.security.broker_security import REFUSED
from sparklog.broker.state import Broker
from sparklog.coordinator.group_records import OFFSETS_TOPIC
from sparklog.coordinator.txn_records import TRANSACTION_TOPIC
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey, CoordinatorType

if TYPE_CHECKING:
    from kio.schema.delete_groups.v1.request import DeleteGroupsRequest
    from kio.schema.describe_groups.v4.request import DescribeGroupsRequest
    from kio.schema.find_coordinator.v2.request import FindCoordinatorRequest
    from kio.schema.heartbeat.v3.request import HeartbeatRequest
    from kio.schema.join_group.v5.request import JoinGroupRequest
    from kio.schema.leave_group.v3.request import LeaveGroupRequest
    from kio.schema.list_groups.v2.request import ListGroupsRequest
    from kio.schema.sync_group.v3.request import SyncGroupRequest


# Kafka's AclOperation codes READ (3), DELETE (6), DESCRIBE (8): all a group supports.
_UNREQUESTED_OPERATIONS = -(1 << 31)


def _may_read(broker: Broker, group_id: str) -> bool:
    """READ on the GROUP: what joining, syncing, heartbeats and leaving need."""
    return broker.security.authorize(Operation.READ, ResourceType.GROUP, group_id)


def _ms(duration: timedelta) -> int:
    return round(duration.total_seconds() * 1000)


@handles(ApiKey.FIND_COORDINATOR, versions=(0, 2))
async def find_coordinator(broker: Broker, header: RequestHeader,
                           request: FindCoordinatorRequest) -> Any:
    build = Build(header)
    key_type = getattr(request, "key_type", CoordinatorType.GROUP)

    def error(code: ErrorCode, message: str) -> Any:
        return build.response(error_code=code, error_message=message, node_id=-1, host="",
                              port=-1)

    coordinators = {CoordinatorType.GROUP: broker.coordinator,
                    CoordinatorType.TRANSACTION: broker.txn_coordinator}
    coordinator = coordinators.get(key_type)
    if coordinator is None:
        return error(ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}")
    if not coordinator.active:
        return error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinator is stopped")
    resource = ResourceType.GROUP if coordinator is broker.coordinator \
        else ResourceType.TRANSACTIONAL_ID
    if not broker.security.authorize(Operation.DESCRIBE, resource, request.key):
        return error(REFUSED[resource], f"not authorized to describe {request.key}")
    group = key_type == CoordinatorType.GROUP
    found = await (broker.replicas.group_coordinator(request.key) if group
                   else broker.replicas.txn_coordinator(request.key))
    endpoint = None if found is None else found.endpoint(listener_name())
    if found is None or endpoint is None:
        return error(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     f"no live leader of the {OFFSETS_TOPIC if group else TRANSACTION_TOPIC}"
                     " partition of this key yet")
    return build.response(error_code=ErrorCode.NONE, error_message=None,
                          node_id=found.broker_id, host=endpoint.host, port=endpoint.port)


@handles(ApiKey.JOIN_GROUP, versions=(0, 5))
async def join_group(broker: Broker, header: RequestHeader,
                     request: JoinGroupRequest) -> Any:
    build = Build(header)
    if not _may_read(broker, request.group_id):
        return build.response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                              generation_id=-1, protocol_name="", leader="",
                              member_id=request.member_id, members=())
    instance_id = getattr(request, "group_instance_id", None)
    session_ms = _ms(request.session_timeout)
    rebalance_ms = _ms(request.rebalance_timeout) if header.api_version >= 1 else session_ms
    result = await broker.coordinator.join(
        request.group_id, request.member_id, instance_id,
        require_known_member_id=header.api_version >= 4 and instance_id is None,
        client_id=header.client_id or "", client_host=client_host(),
        rebalance_timeout_ms=rebalance_ms, session_timeout_ms=session_ms,
        protocol_type=request.protocol_type,
        protocols=tuple((p.name, p.metadata) for p in request.protocols))
    members = tuple(build("JoinGroupResponseMember", member_id=member_id,
                          group_instance_id=member_instance, metadata=metadata)
                    for member_id, member_instance, metadata in result.members)
    return build.response(error_code=result.error, generation_id=result.generation,
                          protocol_name=result.protocol or "", leader=result.leader,
                          member_id=result.member_id, members=members)


@handles(ApiKey.SYNC_GROUP, versions=(0, 3))
async def sync_group(broker: Broker, header: RequestHeader,
                     request: SyncGroupRequest) -> Any:
    if not _may_read(broker, request.group_id):
        return Build(header).response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                      assignment=b"")
    result = await broker.coordinator.sync(
        request.group_id, request.generation_id, request.member_id,
        getattr(request, "group_instance_id", None),
        {a.member_id: a.assignment for a in request.assignments})
    return Build(header).response(error_code=result.error, assignment=result.assignment)


@handles(ApiKey.HEARTBEAT, versions=(0, 3))
async def heartbeat(broker: Broker, header: RequestHeader,
                    request: HeartbeatRequest) -> Any:
    if not _may_read(broker, request.group_id):
        return Build(header).response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    error = broker.coordinator.heartbeat(request.group_id, request.member_id,
                                         getattr(request, "group_instance_id", None),
                                         request.generation_id)
    return Build(header).response(error_code=error)


@handles(ApiKey.LEAVE_GROUP, versions=(0, 3))
async def leave_group(broker: Broker, header: RequestHeader,
                      request: LeaveGroupRequest) -> Any:
    build = Build(header)
    if not _may_read(broker, request.group_id):
        return build.response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=())
    if header.api_version < 3:
        error, errors = broker.coordinator.leave(request.group_id, [(request.member_id, None)])
        return build.response(error_code=errors[0] if errors else error)
    leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    error, errors = broker.coordinator.leave(request.group_id, leaving)
    members = tuple(build("MemberResponse", member_id=member_id, group_instance_id=instance_id,
                          error_code=member_error)
                    for (member_id, instance_id), member_error in zip(leaving, errors,
                                                                      strict=False))
    return build.response(error_code=error, members=members)


@handles(ApiKey.LIST_GROUPS, versions=(0, 2))
async def list_groups(broker: Broker, header: RequestHeader,
                      request: ListGroupsRequest) -> Any:
    build = Build(header)
    error, groups = broker.coordinator.list_groups()
    security = broker.security
    every = security.allows_cluster(Operation.DESCRIBE)
    return build.response(error_code=error, groups=tuple(
        build("ListedGroup", group_id=group_id, protocol_type=protocol_type)
        for group_id, protocol_type in groups
        if every or security.authorize(Operation.DESCRIBE, ResourceType.GROUP, group_id)))


@handles(ApiKey.DESCRIBE_GROUPS, versions=(0, 4))
async def describe_groups(broker: Broker, header: RequestHeader,
                          request: DescribeGroupsRequest) -> Any:
    build = Build(header)
    with_operations = getattr(request, "include_authorized_operations", False)
    security = broker.security
    described = []
    for group_id in request.groups:
        if not security.authorize(Operation.DESCRIBE, ResourceType.GROUP, group_id):
            described.append(build("DescribedGroup",
                                   error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                   group_id=group_id, group_state="", protocol_type="",
                                   protocol_data="", members=(),
                                   authorized_operations=_UNREQUESTED_OPERATIONS))
            continue
        operations = security.authorized_operations(ResourceType.GROUP, group_id) \
            if with_operations else _UNREQUESTED_OPERATIONS
        error, summary = broker.coordinator.describe(group_id)
        members = tuple(
            build("DescribedGroupMember", member_id=m.member_id,
                  group_instance_id=m.group_instance_id, client_id=m.client_id,
                  client_host=m.client_host, member_metadata=m.metadata,
                  member_assignment=m.assignment)
            for m in summary.members)
        described.append(build("DescribedGroup", error_code=error, group_id=group_id,
                               group_state=summary.state, protocol_type=summary.protocol_type,
                               protocol_data=summary.protocol, members=members,
                               authorized_operations=operations))
    return build.response(groups=tuple(described))


@handles(ApiKey.DELETE_GROUPS, versions=(0, 1))
async def delete_groups(broker: Broker, header: RequestHeader,
                        request: DeleteGroupsRequest) -> Any:
    build = Build(header)
    return build.response(results=tuple(
        build("DeletableGroupResult", group_id=group_id,
              error_code=broker.coordinator.delete(group_id)
              if broker.security.authorize(Operation.DELETE, ResourceType.GROUP, group_id)
              else ErrorCode.GROUP_AUTHORIZATION_FAILED)
        for group_id in request.groups_names))
