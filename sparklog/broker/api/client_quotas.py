"""DescribeClientQuotas (key 48, v0-v1) and AlterClientQuotas (key 49, v0-v1): the client
quotas of users and client ids (KIP-546), as ``kafka-configs.sh --entity-type
users|clients`` and ``sparklog configs`` manage them; ``broker/quotas.py`` enforces them.

Behaviour, as a ZooKeeper-era Kafka broker (``ZkAdminManager``):
- Entities are ``user`` and ``client-id`` components (a null name: the default entity of
  the type), alone or together; keys ``producer_byte_rate``, ``consumer_byte_rate`` (whole
  numbers) and ``request_percentage``. Where they are kept: ``BrokerSecurity.set_quotas``
  (the data directory on a single node, ZooKeeper's ``/config/users`` and
  ``/config/clients`` with a change notification on a cluster: every broker applies it).
- Describe: filter components match a type's exact name (match type 0), its default (1)
  or any entity of the type, the default included (2); a type without a component matches
  entities without it, and, unless ``strict``, also those with it. Only entities with a
  quota are answered, each with its entity and values. A type named twice or an empty type
  is INVALID_REQUEST, an unknown type UNSUPPORTED_VERSION (Kafka's "custom entity type");
  ``ip`` components (connection rate quotas, which this broker does not keep) match
  nothing, and combined with user or client-id are INVALID_REQUEST.
- Alter: per entry, INVALID_REQUEST for an empty entity, an unknown or ``ip`` entity type,
  an empty name, a key other than the three (``controller_mutation_rate`` too: this broker
  has no controller mutation quota to enforce it with, as Kafka before 2.7), a fractional
  byte rate; removing a key that is not set is not an error. An entry is applied whole or
  not at all; ``validate_only`` checks and writes nothing. Values are stored as Kafka does
  (``1024``, ``50.0``).
- v1 is v0 made flexible (compact strings, tagged fields): nothing else changes.
- With an authorizer: Describe needs DESCRIBE_CONFIGS and Alter ALTER_CONFIGS on the
  CLUSTER (CLUSTER_AUTHORIZATION_FAILED: for the whole Describe, for every Alter entry).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.security.acls import Operation
from sparklog.broker.security.client_quotas import (
    CLIENT_ID,
    QUOTA_KEYS,
    USER,
    Entity,
)
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest
    from kio.schema.describe_client_quotas.v1.request import DescribeClientQuotasRequest

IP = "ip"
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2


class InvalidQuota(Exception):
    """A request Kafka refuses, with its error code and message."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.INVALID_REQUEST) -> None:
        super().__init__(message)
        self.code = code


@handles(ApiKey.DESCRIBE_CLIENT_QUOTAS, versions=(0, 1))
async def describe_client_quotas(broker: Broker, header: RequestHeader,
                                 request: DescribeClientQuotasRequest) -> Any:
    build = Build(header)
    if not broker.security.allows_cluster(Operation.DESCRIBE_CONFIGS):
        return build.response(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                              error_message=None, entries=None)
    try:
        components = _filter(request.components)
    except InvalidQuota as exc:
        return build.response(error_code=exc.code, error_message=str(exc), entries=None)
    entries = [] if IP in components else [
        build("EntryData",
              entity=tuple(build("EntityData", entity_type=kind, entity_name=name)
                           for kind, name in quota_entity),
              values=tuple(build("ValueData", key=key, value=value)
                           for key, value in sorted(values.items())))
        for quota_entity, values in sorted(broker.security.quotas.entries().items(),
                                           key=lambda item: str(item[0]))
        if all(_matches(components.get(kind), dict(quota_entity), kind, request.strict)
               for kind in (USER, CLIENT_ID))]
    return build.response(error_code=ErrorCode.NONE, error_message=None, entries=tuple(entries))


def _filter(components: Any) -> dict[str, Any]:
    """Entity type -> its filter component, checked as Kafka does."""
    found: dict[str, Any] = {}
    for component in components:
        kind = component.entity_type
        if kind == "":
            raise InvalidQuota("Unexpected empty filter component entity type")
        if kind not in (USER, CLIENT_ID, IP):
            raise InvalidQuota(f"Custom entity type '{kind}' not supported",
                               ErrorCode.UNSUPPORTED_VERSION)
        if kind in found:
            raise InvalidQuota(f"Duplicate {kind} filter component entity type")
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY) or (
                component.match_type == MATCH_EXACT and component.match is None):
            raise InvalidQuota(f"Unexpected match type {component.match_type}")
        found[kind] = component
    if IP in found and len(found) > 1:
        raise InvalidQuota("Invalid entity filter component combination, IP filter component "
                           "should not be used with user or clientId filter component.")
    return found


def _matches(component: Any, names: dict[str, str | None], kind: str, strict: bool) -> bool:
    if component is None:
        return kind not in names or not strict
    if kind not in names:
        return False
    if component.match_type == MATCH_EXACT:
        return names[kind] == component.match
    return component.match_type == MATCH_ANY or names[kind] is None


@handles(ApiKey.ALTER_CLIENT_QUOTAS, versions=(0, 1))
async def alter_client_quotas(broker: Broker, header: RequestHeader,
                              request: AlterClientQuotasRequest) -> Any:
    build = Build(header)
    allowed = broker.security.allows_cluster(Operation.ALTER_CONFIGS)
    answers = []
    for entry in request.entries:
        code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None
        if allowed:
            try:
                quota_entity = _entity(entry.entity)
                values = _altered(broker.security.quotas.get(quota_entity), entry.ops)
                if not request.validate_only:
                    await broker.security.set_quotas(quota_entity, values)
                code = ErrorCode.NONE
            except InvalidQuota as exc:
                code, message = exc.code, str(exc)
        answers.append(build("EntryData", error_code=code, error_message=message, entity=tuple(
            build("EntityData", entity_type=e.entity_type, entity_name=e.entity_name)
            for e in entry.entity)))
    return build.response(entries=tuple(answers))


def _entity(components: Any) -> Entity:
    if not components:
        raise InvalidQuota("Invalid empty client quota entity")
    names: dict[str, str | None] = {}
    for component in components:
        kind, name = component.entity_type, component.entity_name
        if kind == IP:
            raise InvalidQuota("ip quotas (connection_creation_rate) are not supported by "
                               "this broker")
        if kind not in (USER, CLIENT_ID):
            raise InvalidQuota(f"Unhandled client quota entity type: {kind}")
        if name == "":
            raise InvalidQuota(f"Empty {kind} not supported")
        names[kind] = name
    return tuple(sorted(names.items()))


def _altered(current: dict[str, float], ops: Any) -> dict[str, float]:
    """The entity's quotas after ``ops`` (checked as Kafka checks each op)."""
    values = dict(current)
    for op in ops:
        if op.remove:
            values.pop(op.key, None)
            continue
        kind = QUOTA_KEYS.get(op.key)
        if kind is None:
            raise InvalidQuota(f"Invalid configuration key {op.key}")
        value = float(op.value)
        if kind == "LONG":
            whole = int(value + 1e-6)
            if abs(whole - value) > 1e-6:
                raise InvalidQuota(f"Configuration {op.key} must be a LONG value")
            value = float(whole)
        values[op.key] = value
    return values
