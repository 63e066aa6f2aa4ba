"""Kafka's ACL model and its authorizer: bindings, filters, the decision, the store.

Invariants (Kafka's ``AclAuthorizer`` / ``StandardAuthorizer`` rules):
- A binding is (resource type, resource name, pattern type LITERAL or PREFIXED, principal,
  host, operation, ALLOW or DENY); a LITERAL ``*`` name matches every resource of its type,
  a PREFIXED name every resource whose name starts with it; principal ``User:*`` and host
  ``*`` match everyone.
- ``authorize``: a super user (``super.users``) may do anything; otherwise any matching
  DENY refuses (deny wins), then a matching ALLOW grants; ``ALL`` matches every operation,
  an ALLOW of READ, WRITE, DELETE or ALTER implies DESCRIBE and one of ALTER_CONFIGS implies
  DESCRIBE_CONFIGS. When no binding at all matches the resource, the answer is
  ``allow.everyone.if.no.acl.found``.
- On a single node bindings live in ``acls.json`` in the data directory, replaced
  atomically on change; on a cluster (``Authorizer(None, ...)``) the authorizer holds this
  broker's view of ZooKeeper's ACLs, one resource pattern at a time (``replace``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import IntEnum
from pathlib import Path

from sparklog.storage.checkpoint import write_atomically

STORE_FILE = "acls.json"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
AUTHORIZER_CLASSES = frozenset({
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "sparklog.Authorizer",
})
"""``authorizer.class.name`` values that switch the authorizer on (Kafka's own classes, so a
Kafka ``server.properties`` works unchanged)."""


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"
"""The one CLUSTER resource's name, as Kafka's."""
SUPPORTED = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE,
                         Operation.ALTER, Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.ALTER, Operation.DESCRIBE,
                           Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
}
"""The operations each resource type has (Kafka's ``AclEntry.supportedOperations``)."""
_IMPLIED = {Operation.DESCRIBE: (Operation.READ, Operation.WRITE, Operation.DELETE,
                                 Operation.ALTER),
            Operation.DESCRIBE_CONFIGS: (Operation.ALTER_CONFIGS,)}


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)

    def invalid(self) -> str | None:
        """Why this binding cannot be stored (None when it can)."""
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            return "the resource type must be a specific one"
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return "the pattern type must be LITERAL or PREFIXED"
        if self.operation in (Operation.UNKNOWN, Operation.ANY):
            return "the operation must be a specific one"
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            return "the permission must be ALLOW or DENY"
        if not self.resource_name:
            return "the resource name must not be empty"
        if ":" not in self.principal:
            return f"the principal {self.principal!r} is not TYPE:NAME (e.g. User:alice)"
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            return f"the cluster resource is named {CLUSTER_NAME}"
        return None


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls' and DeleteAcls' filter: ANY and None match everything; pattern type
    MATCH matches the LITERAL and PREFIXED bindings that apply to the named resource."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is not None and not acl.matches_resource(
                    acl.resource_type, self.resource_name):
                return False
        else:
            if self.pattern_type not in (PatternType.ANY, acl.pattern_type):
                return False
            if self.resource_name not in (None, acl.resource_name):
                return False
        return (self.principal in (None, acl.principal) and self.host in (None, acl.host)
                and self.operation in (Operation.ANY, acl.operation)
                and self.permission in (Permission.ANY, acl.permission))


class Authorizer:
    """The decisions and the stored bindings (see the module invariants)."""

    def __init__(self, data_dir: Path | None, super_users: Iterable[str],
                 allow_if_no_acl: bool) -> None:
        self.path = data_dir / STORE_FILE if data_dir is not None else None
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._acls: list[AclBinding] = []
        if self.path is not None and self.path.exists():
            self._acls = [AclBinding(ResourceType[a["resource_type"]], a["resource_name"],
                                     PatternType[a["pattern_type"]], a["principal"], a["host"],
                                     Operation[a["operation"]], Permission[a["permission"]])
                          for a in json.loads(self.path.read_text())]

    def authorize(self, principal: str, host: str, operation: Operation,
                  resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        matching = [a for a in self._acls if a.matches_resource(resource_type, name)]
        if not matching:
            return self.allow_if_no_acl
        mine = [a for a in matching if a.principal in (principal, WILDCARD_PRINCIPAL)
                and a.host in (host, WILDCARD)]
        if any(a.permission == Permission.DENY and a.operation in (operation, Operation.ALL)
               for a in mine):
            return False
        granting = (operation, Operation.ALL, *_IMPLIED.get(operation, ()))
        return any(a.permission == Permission.ALLOW and a.operation in granting for a in mine)

    def authorized_operations(self, principal: str, host: str, resource_type: ResourceType,
                              name: str) -> int:
        """Kafka's authorized-operations bit field of a resource for ``principal``."""
        return sum(1 << op for op in SUPPORTED[resource_type]
                   if self.authorize(principal, host, op, resource_type, name))

    def any_allowed(self, principal: str, host: str, operation: Operation,
                    resource_type: ResourceType) -> bool:
        """Whether ``principal`` may ``operation`` some resource of the type (Kafka's
        ``authorizeByResourceType``): a super user, an ALLOW not cancelled by a DENY of the
        same pattern, or no binding on the type with ``allow.everyone.if.no.acl.found``."""
        if principal in self.super_users:
            return True
        of_type = [a for a in self._acls if a.resource_type == resource_type]
        if not of_type:
            return self.allow_if_no_acl
        mine = [a for a in of_type if a.principal in (principal, WILDCARD_PRINCIPAL)
                and a.host in (host, WILDCARD) and a.operation in (operation, Operation.ALL)]
        denied = {(a.pattern_type, a.resource_name) for a in mine
                  if a.permission == Permission.DENY}
        if (PatternType.LITERAL, WILDCARD) in denied:
            return False
        return any(a.permission == Permission.ALLOW and (a.pattern_type, a.resource_name)
                   not in denied for a in mine)

    def acls(self, acl_filter: AclFilter) -> list[AclBinding]:
        return [a for a in self._acls if acl_filter.matches(a)]

    def replace(self, resource_type: ResourceType, pattern_type: PatternType, name: str,
                bindings: Iterable[AclBinding]) -> None:
        """The bindings of one resource pattern are now ``bindings`` (a cluster's view)."""
        self._acls = [a for a in self._acls if (a.resource_type, a.pattern_type,
                                                a.resource_name) != (resource_type,
                                                                     pattern_type, name)]
        self._acls.extend(dict.fromkeys(bindings))

    def add(self, bindings: Iterable[AclBinding]) -> None:
        new = [b for b in bindings if b not in self._acls]
        if new:
            self._acls.extend(dict.fromkeys(new))
            self._save()

    def remove(self, acl_filter: AclFilter) -> list[AclBinding]:
        gone = self.acls(acl_filter)
        if gone:
            self._acls = [a for a in self._acls if a not in gone]
            self._save()
        return gone

    def _save(self) -> None:
        assert self.path is not None, "a cluster's ACLs are written to ZooKeeper"
        data = [{k: v.name if isinstance(v, IntEnum) else v for k, v in asdict(a).items()}
                for a in self._acls]
        write_atomically(self.path, json.dumps(data, indent=1).encode())
