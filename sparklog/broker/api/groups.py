"""Group membership APIs: FindCoordinator (10, v0-v6), JoinGroup (11, v0-v9), Heartbeat
(12, v0-v4), LeaveGroup (13, v0-v5), SyncGroup (14, v0-v5), DescribeGroups (15, v0-v6),
ListGroups (16, v0-v5), DeleteGroups (42, v0-v2).

Behaviour (the group logic itself is ``sparklog.coordinator``; this module translates):
- FindCoordinator: a group's coordinator (key type 0) is the leader of its
  ``__consumer_offsets`` partition, a transactional id's (key type 1) the leader of its
  ``__transaction_state`` partition (COORDINATOR_NOT_AVAILABLE while there is none; the
  topic is created on the first such request; a single node leads them all); share groups
  (key type 2, v6) are not served and, as any other key type, are INVALID_REQUEST (what
  Kafka answers without a share coordinator); a stopped coordinator is
  COORDINATOR_NOT_AVAILABLE. v0-v3 ask for one ``key``; v4+ for a batch of
  ``coordinator_keys``, each answered in ``coordinators`` with its own error code and
  message. v3 (and every API's version noted "flexible" below) only changes the encoding.
  The API must be advertised in any case: librdkafka only enables LZ4 when it is.
- JoinGroup: v0 has no rebalance timeout (the session timeout serves as both); from v4 a
  dynamic member (no ``group.instance.id``, v5+) joining with an empty member id gets
  MEMBER_ID_REQUIRED and its member id, and must join again with it. The response is parked
  until the rebalance completes; only the leader gets the member list. v6 is flexible; v7+
  answers the group's ``protocol_type`` (null, as the protocol name, on an error); v8's
  ``reason`` is logged with the rebalance the join causes ("client reason: ..."). v9
  (KIP-814): a static leader rejoining a Stable group with unchanged protocols is told it
  leads, with the members, and ``skip_assignment`` set: it syncs without computing a new
  assignment; before v9 it is answered with its old member id as the leader instead, so it
  does not act as one. A JoinGroup, SyncGroup, Heartbeat or LeaveGroup of a KIP-848
  consumer group with members is a classic member's inside it (online migration, see
  ``consumer_group_coordinator``): the join is answered at once with the member epoch as the
  generation and no leader (the coordinator assigns), once what it stored is replicated.
- SyncGroup v4 is flexible; v5 checks the request's ``protocol_type`` and
  ``protocol_name`` against the group's (INCONSISTENT_GROUP_PROTOCOL when one is given and
  differs) and answers the group's. Heartbeat v4 is flexible.
- LeaveGroup v0-v2 remove the one ``member_id`` (its error is the top-level error); v3
  removes a list of members, each answered on its own; v4 is flexible; v5 carries a
  ``reason`` per member, logged with its departure.
- DescribeGroups: an unknown group, or a KIP-848 consumer group (ConsumerGroupDescribe
  describes those), is described as Dead with no error up to v5; from v6 (KIP-1043) it is
  GROUP_ID_NOT_FOUND, and every error carries an ``error_message``.
  Member metadata, assignments and the protocol are only shown for a Stable group. With
  ``include_authorized_operations`` (v3+), the group operations the principal may do.
- ListGroups v3 is flexible; v4 filters by ``states_filter`` (case-insensitive; empty: any)
  and answers each group's ``group_state``; v5 filters by ``types_filter`` and answers
  ``group_type``: "classic", or "consumer" for a KIP-848 group (protocol type "consumer",
  its state one of Empty, Assigning, Reconciling, Stable).
- DeleteGroups v2 is flexible.
- With an authorizer, as Kafka's: FindCoordinator needs DESCRIBE on the GROUP or
  TRANSACTIONAL_ID (per key from v4); JoinGroup, SyncGroup, Heartbeat and LeaveGroup READ
  on the GROUP; DescribeGroups DESCRIBE and DeleteGroups DELETE on it
  (GROUP_AUTHORIZATION_FAILED); ListGroups lists every group with DESCRIBE on the CLUSTER,
  else the describable ones.
- The client host of a member is the connection's address, ``/ip`` as Kafka shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sparklog.broker.api.offset_commit import COMMIT_REPLICATION_TIMEOUT_S
from sparklog.broker.registry import handles
from sparklog.broker.request_context import client_host, listener_name
from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.broker.security.broker_security import OPERATIONS_NOT_ASKED, REFUSED
from sparklog.broker.state import Broker
from sparklog.coordinator.group import GroupState, JoinResult
from sparklog.coordinator.group_records import OFFSETS_TOPIC
from sparklog.coordinator.txn_records import TRANSACTION_TOPIC
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey, CoordinatorType

if TYPE_CHECKING:
    from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
    from kio.schema.describe_groups.v6.request import DescribeGroupsRequest
    from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest
    from kio.schema.heartbeat.v4.request import HeartbeatRequest
    from kio.schema.join_group.v9.request import JoinGroupRequest
    from kio.schema.leave_group.v5.request import LeaveGroupRequest
    from kio.schema.list_groups.v5.request import ListGroupsRequest
    from kio.schema.sync_group.v5.request import SyncGroupRequest


# Kafka's AclOperation codes READ (3), DELETE (6), DESCRIBE (8): all a group supports.
_BATCHED_FIND_COORDINATOR = 4  # FindCoordinator v4+: coordinator_keys, one answer per key
_SHARE_KEY_TYPE = 2  # FindCoordinator v6: share groups (KIP-932), not served here
_SKIP_ASSIGNMENT = 9  # JoinGroup v9+: a rejoining static leader may skip the assignment
_DESCRIBE_UNKNOWN_GROUP_NOT_FOUND = 6  # DescribeGroups v6+ (KIP-1043)


def _may_read(broker: Broker, group_id: str) -> bool:
    """READ on the GROUP: what joining, syncing, heartbeats and leaving need."""
    return broker.security.authorize(Operation.READ, ResourceType.GROUP, group_id)


def _ms(duration: timedelta) -> int:
    return round(duration.total_seconds() * 1000)


@handles(ApiKey.FIND_COORDINATOR, versions=(0, 6))
async def find_coordinator(broker: Broker, header: RequestHeader,
                           request: FindCoordinatorRequest) -> Any:
    build = Build(header)
    key_type = getattr(request, "key_type", CoordinatorType.GROUP)
    if header.api_version < _BATCHED_FIND_COORDINATOR:
        found = await _coordinator_of(broker, key_type, request.key)
        return build.response(error_code=found.error, error_message=found.message,
                              node_id=found.node_id, host=found.host, port=found.port)
    coordinators = [await _coordinator_of(broker, key_type, key)
                    for key in request.coordinator_keys]
    return build.response(coordinators=tuple(
        build("Coordinator", key=key, error_code=found.error, error_message=found.message,
              node_id=found.node_id, host=found.host, port=found.port)
        for key, found in zip(request.coordinator_keys, coordinators, strict=True)))


@dataclass(frozen=True, slots=True)
class _Found:
    """One key's FindCoordinator answer (node -1, no host, port -1 with an error)."""

    error: ErrorCode
    message: str | None = None
    node_id: int = -1
    host: str = ""
    port: int = -1


async def _coordinator_of(broker: Broker, key_type: int, key: str) -> _Found:
    coordinators = {CoordinatorType.GROUP: broker.coordinator,
                    CoordinatorType.TRANSACTION: broker.txn_coordinator}
    coordinator = coordinators.get(key_type)
    if coordinator is None:
        what = "share groups (key type 2) are" if key_type == _SHARE_KEY_TYPE \
            else f"coordinator key type {key_type} is"
        return _Found(ErrorCode.INVALID_REQUEST, f"{what} not supported")
    if not coordinator.active:
        return _Found(ErrorCode.COORDINATOR_NOT_AVAILABLE, "the coordinator is stopped")
    group = key_type == CoordinatorType.GROUP
    resource = ResourceType.GROUP if group else ResourceType.TRANSACTIONAL_ID
    if not broker.security.authorize(Operation.DESCRIBE, resource, key):
        return _Found(REFUSED[resource], f"not authorized to describe {key}")
    found = await (broker.replicas.group_coordinator(key) if group
                   else broker.replicas.txn_coordinator(key))
    endpoint = None if found is None else found.endpoint(listener_name())
    if found is None or endpoint is None:
        return _Found(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                      f"no live leader of the {OFFSETS_TOPIC if group else TRANSACTION_TOPIC}"
                      " partition of this key yet")
    return _Found(ErrorCode.NONE, None, found.broker_id, endpoint.host, endpoint.port)


@handles(ApiKey.JOIN_GROUP, versions=(0, 9))
async def join_group(broker: Broker, header: RequestHeader,
                     request: JoinGroupRequest) -> Any:
    build = Build(header)
    version = header.api_version
    if not _may_read(broker, request.group_id):
        return build.response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                              generation_id=-1, protocol_name=_no_protocol(version),
                              leader="", member_id=request.member_id, members=())
    instance_id = getattr(request, "group_instance_id", None)
    session_ms = _ms(request.session_timeout)
    rebalance_ms = _ms(request.rebalance_timeout) if version >= 1 else session_ms
    result = await broker.coordinator.join(
        request.group_id, request.member_id, instance_id,
        require_known_member_id=version >= 4 and instance_id is None,
        client_id=header.client_id or "", client_host=client_host(),
        rebalance_timeout_ms=rebalance_ms, session_timeout_ms=session_ms,
        protocol_type=request.protocol_type,
        protocols=tuple((p.name, p.metadata) for p in request.protocols),
        reason=getattr(request, "reason", None),
        supports_skip_assignment=version >= _SKIP_ASSIGNMENT)
    if result.error == ErrorCode.NONE and request.group_id in broker.coordinator.consumer.groups:
        # A classic member of a consumer group: what its join stored must survive the
        # coordinator, as a heartbeat's does.
        replicated = await broker.replicas.offsets_replicated(request.group_id,
                                                              COMMIT_REPLICATION_TIMEOUT_S)
        if replicated != ErrorCode.NONE:
            result = JoinResult(replicated, result.member_id)
    members = tuple(build("JoinGroupResponseMember", member_id=member_id,
                          group_instance_id=member_instance, metadata=metadata)
                    for member_id, member_instance, metadata in result.members)
    joined = result.error == ErrorCode.NONE
    return build.response(error_code=result.error, generation_id=result.generation,
                          protocol_type=request.protocol_type if joined else None,
                          protocol_name=result.protocol or _no_protocol(version),
                          leader=result.leader, skip_assignment=result.skip_assignment,
                          member_id=result.member_id, members=members)


def _no_protocol(version: int) -> str | None:
    """JoinGroup's protocol name without one: null from v7, where it became nullable."""
    return None if version >= 7 else ""


@handles(ApiKey.SYNC_GROUP, versions=(0, 5))
async def sync_group(broker: Broker, header: RequestHeader,
                     request: SyncGroupRequest) -> Any:
    if not _may_read(broker, request.group_id):
        return Build(header).response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                      assignment=b"")
    result = await broker.coordinator.sync(
        request.group_id, request.generation_id, request.member_id,
        getattr(request, "group_instance_id", None),
        {a.member_id: a.assignment for a in request.assignments},
        getattr(request, "protocol_type", None), getattr(request, "protocol_name", None))
    return Build(header).response(error_code=result.error, assignment=result.assignment,
                                  protocol_type=result.protocol_type,
                                  protocol_name=result.protocol)


@handles(ApiKey.HEARTBEAT, versions=(0, 4))
async def heartbeat(broker: Broker, header: RequestHeader,
                    request: HeartbeatRequest) -> Any:
    if not _may_read(broker, request.group_id):
        return Build(header).response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    error = broker.coordinator.heartbeat(request.group_id, request.member_id,
                                         getattr(request, "group_instance_id", None),
                                         request.generation_id)
    return Build(header).response(error_code=error)


@handles(ApiKey.LEAVE_GROUP, versions=(0, 5))
async def leave_group(broker: Broker, header: RequestHeader,
                      request: LeaveGroupRequest) -> Any:
    build = Build(header)
    if not _may_read(broker, request.group_id):
        return build.response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=())
    if header.api_version < 3:
        error, errors = broker.coordinator.leave(request.group_id, [(request.member_id, None)])
        return build.response(error_code=errors[0] if errors else error)
    leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    error, errors = broker.coordinator.leave(request.group_id, leaving,
                                             [getattr(m, "reason", None) for m in request.members])
    members = tuple(build("MemberResponse", member_id=member_id, group_instance_id=instance_id,
                          error_code=member_error)
                    for (member_id, instance_id), member_error in zip(leaving, errors,
                                                                      strict=False))
    return build.response(error_code=error, members=members)


@handles(ApiKey.LIST_GROUPS, versions=(0, 5))
async def list_groups(broker: Broker, header: RequestHeader,
                      request: ListGroupsRequest) -> Any:
    build = Build(header)
    error, groups = broker.coordinator.list_groups()
    states = {state.strip().lower() for state in getattr(request, "states_filter", ())}
    types = {kind.strip().lower() for kind in getattr(request, "types_filter", ())}
    security = broker.security
    every = security.allows_cluster(Operation.DESCRIBE)
    typed = [(group_id, protocol_type, state, broker.coordinator.group_type(group_id))
             for group_id, protocol_type, state in groups]
    return build.response(error_code=error, groups=tuple(
        build("ListedGroup", group_id=group_id, protocol_type=protocol_type,
              group_state=state, group_type=group_type)
        for group_id, protocol_type, state, group_type in typed
        if (not states or state.lower() in states)
        and (not types or group_type in types)
        and (every or security.authorize(Operation.DESCRIBE, ResourceType.GROUP, group_id))))


@handles(ApiKey.DESCRIBE_GROUPS, versions=(0, 6))
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
                                   error_message=f"not authorized to describe {group_id}",
                                   group_id=group_id, group_state="", protocol_type="",
                                   protocol_data="", members=(),
                                   authorized_operations=OPERATIONS_NOT_ASKED))
            continue
        operations = security.authorized_operations(ResourceType.GROUP, group_id,
                                                    with_operations)
        error, summary = broker.coordinator.describe(group_id)
        message = None if error == ErrorCode.NONE else f"group {group_id}: {error.name}"
        if (error == ErrorCode.NONE and summary.state == GroupState.DEAD
                and header.api_version >= _DESCRIBE_UNKNOWN_GROUP_NOT_FOUND):
            error, message = ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
        members = tuple(
            build("DescribedGroupMember", member_id=m.member_id,
                  group_instance_id=m.group_instance_id, client_id=m.client_id,
                  client_host=m.client_host, member_metadata=m.metadata,
                  member_assignment=m.assignment)
            for m in summary.members)
        described.append(build("DescribedGroup", error_code=error, error_message=message,
                               group_id=group_id,
                               group_state=summary.state, protocol_type=summary.protocol_type,
                               protocol_data=summary.protocol, members=members,
                               authorized_operations=operations))
    return build.response(groups=tuple(described))


@handles(ApiKey.DELETE_GROUPS, versions=(0, 2))
async def delete_groups(broker: Broker, header: RequestHeader,
                        request: DeleteGroupsRequest) -> Any:
    build = Build(header)
    return build.response(results=tuple(
        build("DeletableGroupResult", group_id=group_id,
              error_code=broker.coordinator.delete(group_id)
              if broker.security.authorize(Operation.DELETE, ResourceType.GROUP, group_id)
              else ErrorCode.GROUP_AUTHORIZATION_FAILED)
        for group_id in request.groups_names))
