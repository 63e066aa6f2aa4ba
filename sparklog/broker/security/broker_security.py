"""The security state a broker keeps (SCRAM credentials, the authorizer and its ACLs) and
the checks handlers make against the current request's principal.

Invariants:
- Everything here lives in the data directory and is touched from the event loop thread
  only, like the rest of ``Broker``.
- Without an authorizer (``authorizer.class.name`` empty, Kafka's default) every check
  allows and costs one attribute test; the authorized-operations fields then list every
  operation of the resource type, as Kafka's.
- Checks read the principal and host of the connection the request came in on
  (``session.principal``, ``registry.CLIENT_HOST``), never anything the request says.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from sparklog.broker.registry import CLIENT_HOST
from sparklog.broker.security.acls import (
    AUTHORIZER_CLASSES,
    CLUSTER_NAME,
    SUPPORTED,
    Authorizer,
    Operation,
    ResourceType,
)
from sparklog.broker.security.scram import ScramStore
from sparklog.broker.security.session import principal
from sparklog.errors import ErrorCode, InvalidConfigError, KafkaError

REFUSED = {ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
           ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
           ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
           ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
"""The error answered when an operation on a resource of the type is refused."""


def check_authorizer_settings(props: Mapping[str, str]) -> None:
    """``authorizer.class.name`` and ``allow.everyone.if.no.acl.found`` are valid."""
    name = props.get("authorizer.class.name", "").strip()
    if name and name not in AUTHORIZER_CLASSES:
        raise InvalidConfigError(
            f"invalid value {name!r} for broker config authorizer.class.name: expected one "
            f"of {', '.join(sorted(AUTHORIZER_CLASSES))} (or empty: no authorizer)")
    flag = props.get("allow.everyone.if.no.acl.found", "false").strip().lower()
    if flag not in ("true", "false"):
        raise InvalidConfigError(f"invalid value {flag!r} for broker config "
                                 "allow.everyone.if.no.acl.found: expected true or false")


class BrokerSecurity:
    def __init__(self, props: Mapping[str, str], data_dir: Path) -> None:
        self.scram = ScramStore(data_dir)
        self.authorizer: Authorizer | None = None
        if props.get("authorizer.class.name", "").strip():
            super_users = [u.strip() for u in props.get("super.users", "").split(";")
                           if u.strip()]
            allow = props.get("allow.everyone.if.no.acl.found", "false").strip() == "true"
            self.authorizer = Authorizer(data_dir, super_users, allow)

    def authorize(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether the current request's principal may ``operation`` the resource."""
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(principal(), _host(), operation, resource_type, name)

    def require(self, operation: Operation, resource_type: ResourceType, name: str) -> None:
        """``authorize`` or raise ``KafkaError`` with Kafka's code for the resource type."""
        if not self.authorize(operation, resource_type, name):
            raise KafkaError(f"{principal()} may not {operation.name} {resource_type.name} "
                             f"{name}", REFUSED[resource_type])

    def allows_cluster(self, operation: Operation) -> bool:
        return self.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def any_allowed(self, operation: Operation, resource_type: ResourceType) -> bool:
        """Whether the principal may ``operation`` some resource of the type."""
        if self.authorizer is None:
            return True
        return self.authorizer.any_allowed(principal(), _host(), operation, resource_type)

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        if self.authorizer is None:
            return sum(1 << op for op in SUPPORTED[resource_type])
        return self.authorizer.authorized_operations(principal(), _host(), resource_type, name)


def _host() -> str:
    return CLIENT_HOST.get().lstrip("/")
