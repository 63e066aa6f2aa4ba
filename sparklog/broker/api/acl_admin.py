"""CreateAcls (key 30), DescribeAcls (key 29), DeleteAcls (key 31), v1-v3 (v0 is gone from
Kafka 4, KIP-896): the authorizer's bindings, as ``kafka-acls.sh`` and ``sparklog acls``
manage them.

Versions, as Kafka's JSON: v1 adds the resource pattern type (LITERAL, PREFIXED; MATCH in
filters), v2 is the first flexible version, v3 adds the USER resource type (7, KIP-373's
delegation-token bindings such as ``CREATE_TOKENS`` on ``User:alice``): such a binding is
stored, described and deleted like any other (at any version, as Kafka's broker, which
checks no version; an older client cannot name the type). It grants nothing here, as this
broker has no delegation tokens.

Behaviour, as Kafka's:
- Without an authorizer (``authorizer.class.name`` empty) all three answer
  SECURITY_DISABLED.
- DescribeAcls needs DESCRIBE on the CLUSTER, CreateAcls and DeleteAcls need ALTER on it
  (CLUSTER_AUTHORIZATION_FAILED otherwise).
- A binding that cannot be stored (an ANY or UNKNOWN field, a principal without a type, a
  cluster resource not named ``kafka-cluster``) is answered INVALID_REQUEST per creation; the
  others of the request are stored. Creating a binding twice stores it once.
- DescribeAcls groups the matching bindings by resource pattern; DeleteAcls answers, per
  filter, the bindings it removed.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.security.acls import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.create_acls.v3.request import CreateAclsRequest
    from kio.schema.delete_acls.v3.request import DeleteAclsRequest
    from kio.schema.describe_acls.v3.request import DescribeAclsRequest

DISABLED = "No Authorizer is configured on the broker"


def _enum(kind: type[Any], value: int) -> Any:
    try:
        return kind(value)
    except ValueError:
        return kind(0)  # UNKNOWN


def _filter(request: Any) -> AclFilter:
    return AclFilter(_enum(ResourceType, request.resource_type_filter),
                     request.resource_name_filter,
                     _enum(PatternType, getattr(request, "pattern_type_filter", 3)),
                     request.principal_filter, request.host_filter,
                     _enum(Operation, request.operation),
                     _enum(Permission, request.permission_type))


@handles(ApiKey.CREATE_ACLS, versions=(1, 3))
async def create_acls(broker: Broker, header: RequestHeader, request: CreateAclsRequest) -> Any:
    build = Build(header)
    authorizer = broker.security.authorizer

    def result(code: ErrorCode, message: str | None = None) -> Any:
        return build("AclCreationResult", error_code=code, error_message=message)

    if authorizer is None:
        return build.response(results=tuple(result(ErrorCode.SECURITY_DISABLED, DISABLED)
                                            for _ in request.creations))
    if not broker.security.allows_cluster(Operation.ALTER):
        return build.response(results=tuple(result(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                                            for _ in request.creations))
    results, valid = [], []
    for creation in request.creations:
        binding = AclBinding(
            _enum(ResourceType, creation.resource_type), creation.resource_name,
            _enum(PatternType, getattr(creation, "resource_pattern_type", 3)),
            creation.principal, creation.host, _enum(Operation, creation.operation),
            _enum(Permission, creation.permission_type))
        why = binding.invalid()
        if why is None:
            valid.append(binding)
        results.append(result(ErrorCode.NONE) if why is None
                       else result(ErrorCode.INVALID_REQUEST, why))
    await broker.security.add_acls(valid)
    return build.response(results=tuple(results))


@handles(ApiKey.DESCRIBE_ACLS, versions=(1, 3))
async def describe_acls(broker: Broker, header: RequestHeader,
                        request: DescribeAclsRequest) -> Any:
    build = Build(header)
    authorizer = broker.security.authorizer
    if authorizer is None:
        return build.response(error_code=ErrorCode.SECURITY_DISABLED, error_message=DISABLED,
                              resources=())
    if not broker.security.allows_cluster(Operation.DESCRIBE):
        return build.response(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                              error_message=None, resources=())
    grouped: dict[tuple[int, str, int], list[Any]] = defaultdict(list)
    for acl in authorizer.acls(_filter(request)):
        grouped[acl.resource_type, acl.resource_name, acl.pattern_type].append(
            build("AclDescription", principal=acl.principal, host=acl.host,
                  operation=acl.operation, permission_type=acl.permission))
    return build.response(error_code=ErrorCode.NONE, error_message=None, resources=tuple(
        build("DescribeAclsResource", resource_type=kind, resource_name=name,
              pattern_type=pattern, acls=tuple(acls))
        for (kind, name, pattern), acls in grouped.items()))


@handles(ApiKey.DELETE_ACLS, versions=(1, 3))
async def delete_acls(broker: Broker, header: RequestHeader, request: DeleteAclsRequest) -> Any:
    build = Build(header)
    authorizer = broker.security.authorizer

    def result(code: ErrorCode, message: str | None = None, acls: tuple[Any, ...] = ()) -> Any:
        return build("DeleteAclsFilterResult", error_code=code, error_message=message,
                     matching_acls=acls)

    if authorizer is None or not broker.security.allows_cluster(Operation.ALTER):
        code = ErrorCode.SECURITY_DISABLED if authorizer is None \
            else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return build.response(filter_results=tuple(
            result(code, DISABLED if authorizer is None else None) for _ in request.filters))
    results = []
    for each in request.filters:
        gone = await broker.security.remove_acls(_filter(each))
        results.append(result(ErrorCode.NONE, acls=tuple(
            build("DeleteAclsMatchingAcl", error_code=ErrorCode.NONE, error_message=None,
                  resource_type=a.resource_type, resource_name=a.resource_name,
                  pattern_type=a.pattern_type, principal=a.principal, host=a.host,
                  operation=a.operation, permission_type=a.permission) for a in gone)))
    return build.response(filter_results=tuple(results))
