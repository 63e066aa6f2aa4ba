"""A cluster's SCRAM credentials, ACLs and client quotas: ZooKeeper's
(``cluster.security_store``) as this broker's ``ScramStore``, ``Authorizer`` and
``ClientQuotas`` see them.

Invariants:
- ZooKeeper is the record; the broker's stores are views of it. Every change a watch
  reports (on kazoo's threads) is applied on the event loop (``call_soon_threadsafe``), so
  the views are touched from the loop thread only, like the rest of ``Broker``.
- Writes (the SCRAM and ACL APIs) run the blocking compare-and-set in the default executor,
  never on the loop, and apply their result to this broker's view as soon as ZooKeeper took
  it, so the next request on this broker sees it; the others see it once their watch fires.
- ACLs map to Kafka's JSON names: resource types ``Topic``, ``Group``, ``Cluster``,
  ``TransactionalId``; operations ``Read``, ``ClusterAction``, ...; ``Allow`` / ``Deny``.
  Entries this broker cannot read (a resource type or operation it does not know) are kept
  in ZooKeeper untouched and left out of the view.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from enum import IntEnum
from typing import TYPE_CHECKING, Any, TypeVar

from sparklog.broker.security.acls import (
    AclBinding,
    AclFilter,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from sparklog.broker.security.client_quotas import (
    QUOTA_KEYS,
    ClientQuotas,
    Entity,
    entity,
    entity_of_path,
    entity_path,
    kafka_value,
    quota_values,
)
from sparklog.broker.security.scram_credentials import (
    ScramCredential,
    ScramStore,
    credentials_of,
)
from sparklog.cluster.security_store import AclEntry, AclResource, SecurityStore

if TYPE_CHECKING:
    from kazoo.client import KazooClient

log = logging.getLogger(__name__)

E = TypeVar("E", bound=IntEnum)


def kafka_name(value: IntEnum) -> str:
    """Kafka's JSON name of an enum value: TRANSACTIONAL_ID -> TransactionalId."""
    return "".join(word.capitalize() for word in value.name.split("_"))


def from_kafka_name(kind: type[E], name: str) -> E | None:
    wanted = name.replace("_", "").lower()
    return next((v for v in kind if v.name.replace("_", "").lower() == wanted), None)


def resource_of(binding: AclBinding) -> AclResource:
    return binding.pattern_type.name, kafka_name(binding.resource_type), binding.resource_name


def entry_of(binding: AclBinding) -> AclEntry:
    return {"principal": binding.principal, "permissionType": kafka_name(binding.permission),
            "operation": kafka_name(binding.operation), "host": binding.host}


def binding_of(resource: AclResource, entry: AclEntry) -> AclBinding | None:
    """The binding of one stored entry; None when this broker does not know its names."""
    pattern, kind, name = resource
    resource_type = from_kafka_name(ResourceType, kind)
    pattern_type = from_kafka_name(PatternType, pattern)
    operation = from_kafka_name(Operation, str(entry.get("operation", "")))
    permission = from_kafka_name(Permission, str(entry.get("permissionType", "")))
    if None in (resource_type, pattern_type, operation, permission):
        return None
    return AclBinding(resource_type, name, pattern_type, str(entry["principal"]),  # type: ignore[arg-type]
                      str(entry["host"]), operation, permission)  # type: ignore[arg-type]


class ClusterSecurityStore:
    """The ZooKeeper side of ``BrokerSecurity`` on a cluster (see the module invariants):
    it keeps ``scram``, ``authorizer`` (None without one) and ``quotas`` as views of
    ZooKeeper."""

    def __init__(self, scram: ScramStore, authorizer: Authorizer | None, quotas: ClientQuotas,
                 zk: KazooClient, loop: asyncio.AbstractEventLoop) -> None:
        self.scram = scram
        self.authorizer = authorizer
        self.quotas = quotas
        self.loop = loop
        self.zookeeper = SecurityStore(zk, self)

    def start(self) -> None:
        """Load every user and ACL and watch for changes (blocking: a worker thread)."""
        self.zookeeper.start()

    def close(self) -> None:
        self.zookeeper.close()

    # -- what ZooKeeper says (kazoo threads) ---------------------------------------------
    def user(self, name: str, config: dict[str, str]) -> None:
        self.loop.call_soon_threadsafe(self._apply_user, name, config)

    def entity_config(self, path: str, config: dict[str, str]) -> None:
        found = entity_of_path(path)
        if found is not None:
            self.loop.call_soon_threadsafe(self.quotas.replace, found, quota_values(config))

    def acls(self, resource: AclResource, entries: list[AclEntry]) -> None:
        self.loop.call_soon_threadsafe(self._apply_acls, resource, entries)

    def _apply_user(self, name: str, config: dict[str, str]) -> None:
        self.scram.replace(name, credentials_of(name, config))
        self.quotas.replace(entity(user=name), quota_values(config))

    def _apply_acls(self, resource: AclResource, entries: list[AclEntry]) -> None:
        authorizer = self.authorizer
        resource_type = from_kafka_name(ResourceType, resource[1])
        pattern_type = from_kafka_name(PatternType, resource[0])
        if authorizer is None or resource_type is None or pattern_type is None:
            return
        bindings = [b for e in entries if (b := binding_of(resource, e)) is not None]
        authorizer.replace(resource_type, pattern_type, resource[2], bindings)

    # -- writes (the event loop) ---------------------------------------------------------
    async def _run(self, call: Callable[..., Any], *args: Any) -> Any:
        return await self.loop.run_in_executor(None, call, *args)

    async def set_credential(self, user: str, mechanism: str,
                             credential: ScramCredential | None) -> None:
        """Upsert (or, with None, delete) one SCRAM credential of ``user``."""

        def change(config: dict[str, str]) -> dict[str, str]:
            config.pop(mechanism, None)
            if credential is not None:
                config[mechanism] = credential.to_kafka()
            return config

        self._apply_user(user, await self._run(self.zookeeper.alter_user, user, change))

    async def set_quotas(self, quota_entity: Entity, values: dict[str, float]) -> None:
        """The entity's quotas are now ``values``; other keys of its config (a user's
        credentials) are kept."""

        def change(config: dict[str, str]) -> dict[str, str]:
            kept = {k: v for k, v in config.items() if k not in QUOTA_KEYS}
            return {**kept, **{k: kafka_value(k, v) for k, v in values.items()}}

        config = await self._run(self.zookeeper.alter_entity, entity_path(quota_entity), change)
        self.quotas.replace(quota_entity, quota_values(config))

    async def add_acls(self, bindings: Iterable[AclBinding]) -> None:
        by_resource: dict[AclResource, list[AclEntry]] = defaultdict(list)
        for binding in bindings:
            by_resource[resource_of(binding)].append(entry_of(binding))
        for resource, new in by_resource.items():
            def change(entries: list[AclEntry], new: list[AclEntry] = new) -> list[AclEntry]:
                return entries + [e for e in new if e not in entries]

            self._apply_acls(resource, await self._run(self.zookeeper.alter_acls, resource,
                                                       change))

    async def remove_acls(self, acl_filter: AclFilter, candidates: Iterable[AclBinding]
                          ) -> list[AclBinding]:
        """Remove what ``acl_filter`` matches among the resources of ``candidates`` (this
        broker's view), matched again on ZooKeeper's current content; the removed ones."""
        removed: list[AclBinding] = []
        for resource in dict.fromkeys(resource_of(b) for b in candidates):
            gone: list[AclBinding] = []

            def change(entries: list[AclEntry], resource: AclResource = resource,
                       gone: list[AclBinding] = gone) -> list[AclEntry]:
                gone.clear()
                kept = []
                for entry in entries:
                    binding = binding_of(resource, entry)
                    if binding is not None and acl_filter.matches(binding):
                        gone.append(binding)
                    else:
                        kept.append(entry)
                return kept

            self._apply_acls(resource, await self._run(self.zookeeper.alter_acls, resource,
                                                       change))
            removed.extend(gone)
        return removed
