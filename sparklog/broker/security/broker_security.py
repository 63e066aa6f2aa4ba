"""The security state a broker keeps (SCRAM credentials, the authorizer and its ACLs, the
client quotas of users and client ids) and the checks handlers make against the current
request's principal.

Invariants:
- On a single node everything here lives in the data directory; on a cluster
  (``join_cluster``) in ZooKeeper, and the stores are this broker's view of it
  (``cluster_view``). Either way it is touched from the event loop thread only, like the
  rest of ``Broker``, and changed only through ``set_credential``, ``set_quotas``,
  ``add_acls`` and ``remove_acls``, which write where the record is.
- Without an authorizer (``authorizer.class.name`` empty, Kafka's default) every check
  allows and costs one attribute test; the authorized-operations fields then list every
  operation of the resource type, as Kafka's.
- Checks read the principal and host of the connection the request came in on (the
  ``Session`` the broker's ``session`` gives: ``principal``, ``client_host``; outside a
  request, ANONYMOUS), never anything the request says.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from sparklog.broker.security.acls import (
    CLUSTER_NAME,
    SUPPORTED,
    AclBinding,
    AclFilter,
    Authorizer,
    Operation,
    ResourceType,
)
from sparklog.broker.security.client_quotas import ClientQuotas, Entity
from sparklog.broker.security.cluster_view import ClusterSecurityStore
from sparklog.broker.security.listener import ANONYMOUS
from sparklog.broker.security.scram_credentials import ScramCredential, ScramStore
from sparklog.broker.security.session import Session
from sparklog.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from kazoo.client import KazooClient

log = logging.getLogger(__name__)

REFUSED = {ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
           ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
           ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
           ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
"""The error answered when an operation on a resource of the type is refused."""


OPERATIONS_NOT_ASKED = -(1 << 31)
"""Authorized operations a request did not ask for (Kafka's Integer.MIN_VALUE)."""

class BrokerSecurity:
    def __init__(self, props: Mapping[str, str], data_dir: Path,
                 session: Callable[[], Session | None] = lambda: None) -> None:
        self._session = session
        self.scram = ScramStore(data_dir)
        self.quotas = ClientQuotas(data_dir)
        self.authorizer: Authorizer | None = None
        self.cluster: ClusterSecurityStore | None = None
        self._super_users = [u.strip() for u in props.get("super.users", "").split(";")
                             if u.strip()]
        self._allow = props.get("allow.everyone.if.no.acl.found", "false").strip() == "true"
        if props.get("authorizer.class.name", "").strip():
            self.authorizer = Authorizer(data_dir, self._super_users, self._allow)

    async def join_cluster(self, zk: KazooClient) -> None:
        """Serve the cluster's users and ACLs (ZooKeeper's) instead of the data directory's,
        loaded before this returns."""
        loop = asyncio.get_running_loop()
        for single_node in (self.scram.path, getattr(self.authorizer, "path", None),
                            self.quotas.path):
            if single_node is not None and single_node.exists():
                log.warning("%s is a single node's and is not read in a cluster, whose "
                            "users, ACLs and quotas are ZooKeeper's (add them again through "
                            "a broker, or sparklog users add --zookeeper)", single_node)
        self.scram = ScramStore(None)
        self.quotas = ClientQuotas(None)
        if self.authorizer is not None:
            self.authorizer = Authorizer(None, self._super_users, self._allow)
        self.cluster = ClusterSecurityStore(self.scram, self.authorizer, self.quotas, zk, loop)
        # the loaded views reach the loop (call_soon_threadsafe) before this resumes
        await loop.run_in_executor(None, self.cluster.start)

    def leave_cluster(self) -> None:
        if self.cluster is not None:
            self.cluster.close()

    async def set_credential(self, user: str, mechanism: str,
                             credential: ScramCredential | None) -> None:
        """Upsert (None: delete) one SCRAM credential where credentials are kept."""
        if self.cluster is not None:
            await self.cluster.set_credential(user, mechanism, credential)
        elif credential is None:
            self.scram.delete(user, mechanism)
        else:
            self.scram.upsert(user, mechanism, credential)

    async def set_quotas(self, quota_entity: Entity, values: dict[str, float]) -> None:
        """The entity's quotas are now ``values`` (none: it has no quota left)."""
        if self.cluster is not None:
            await self.cluster.set_quotas(quota_entity, values)
        else:
            self.quotas.alter(quota_entity, values)

    async def add_acls(self, bindings: Iterable[AclBinding]) -> None:
        assert self.authorizer is not None
        if self.cluster is not None:
            await self.cluster.add_acls(bindings)
        else:
            self.authorizer.add(bindings)

    async def remove_acls(self, acl_filter: AclFilter) -> list[AclBinding]:
        """The bindings ``acl_filter`` matched, now removed."""
        assert self.authorizer is not None
        if self.cluster is not None:
            return await self.cluster.remove_acls(acl_filter, self.authorizer.acls(acl_filter))
        return self.authorizer.remove(acl_filter)

    def _who(self) -> tuple[str, str]:
        """The current request's principal and client host (without Kafka's ``/``)."""
        session = self._session()
        if session is None:
            return ANONYMOUS, ""
        return session.principal, session.client_host.lstrip("/")

    def authorize(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        """Whether the current request's principal may ``operation`` the resource."""
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(*self._who(), operation, resource_type, name)

    def require(self, operation: Operation, resource_type: ResourceType, name: str) -> None:
        """``authorize`` or raise ``KafkaError`` with Kafka's code for the resource type."""
        if not self.authorize(operation, resource_type, name):
            raise KafkaError(f"{self._who()[0]} may not {operation.name} {resource_type.name} "
                             f"{name}", REFUSED[resource_type])

    def allows_cluster(self, operation: Operation) -> bool:
        return self.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def any_allowed(self, operation: Operation, resource_type: ResourceType) -> bool:
        """Whether the principal may ``operation`` some resource of the type."""
        if self.authorizer is None:
            return True
        return self.authorizer.any_allowed(*self._who(), operation, resource_type)

    def authorized_operations(self, resource_type: ResourceType, name: str,
                              asked: bool = True) -> int:
        """Kafka's bit field of what the principal may do to the resource, or
        ``OPERATIONS_NOT_ASKED`` when the request did not ask for it."""
        if not asked:
            return OPERATIONS_NOT_ASKED
        if self.authorizer is None:
            return sum(1 << op for op in SUPPORTED[resource_type])
        return self.authorizer.authorized_operations(*self._who(), resource_type, name)
