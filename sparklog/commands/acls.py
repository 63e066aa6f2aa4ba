"""``sparklog acls``: add, list and remove ACLs, with ``kafka-acls.sh``'s flags.

    sparklog acls add --allow-principal User:alice --operation Read --topic orders
    sparklog acls add --consumer --allow-principal User:alice --topic orders --group g
    sparklog acls add --deny-principal User:bob --operation All --topic pay- \\
        --resource-pattern-type prefixed
    sparklog acls list [--topic T | --group G | --cluster | --transactional-id T]
        [--principal P]
    sparklog acls remove --allow-principal User:alice --operation Read --topic orders

each with ``--bootstrap-server`` and the client settings every tool takes (``--command-config
FILE``, ``-X``), through confluent-kafka's admin API (CreateAcls, DescribeAcls, DeleteAcls).

Invariants:
- Flags are Kafka's: ``--allow-principal``/``--deny-principal`` (repeatable, ``User:NAME``),
  ``--allow-host``/``--deny-host`` (default ``*``), ``--operation`` (repeatable, any case,
  default All for add), the resources ``--topic``, ``--group``, ``--cluster``,
  ``--transactional-id`` (repeatable), ``--resource-pattern-type`` (literal or prefixed for
  add; any, match, literal or prefixed for list and remove; default literal for add, any
  otherwise), ``--producer`` (Write, Describe and Create on the topics, plus Write and
  Describe on ``--transactional-id``s, IdempotentWrite on the cluster with
  ``--idempotent``) and ``--consumer`` (Read and Describe on the topics, Read on the groups).
- ``add`` and ``remove`` print Kafka's ``Adding ACLs for resource `ResourcePattern(...)`:``
  (``Removing ...``) with one ``(principal=..., host=..., operation=..., permissionType=...)``
  line per binding; ``list`` prints ``Current ACLs for resource ...`` per resource pattern.
- A refusal (no authorizer, not authorized, an invalid binding) is one stderr line and exit
  code 1; a flag combination that names no binding is a usage error (exit 2).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import Future

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from sparklog.client.admin import REQUEST_TIMEOUT_S, kafka_error
from sparklog.client.watch import connected_admin
from sparklog.commands._client import USAGE, ToolError, client_config, client_parent, tool

CLUSTER = "kafka-cluster"
_OPERATIONS = {op.name.replace("_", "").lower(): op for op in AclOperation
               if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}
_KAFKA_TYPES = {ResourceType.BROKER: "CLUSTER"}
Resource = tuple[ResourceType, str]


def operation(text: str) -> AclOperation:
    """An argparse type: Kafka's operation names in any case (Read, IdempotentWrite, ...)."""
    found = _OPERATIONS.get(text.replace("_", "").replace("-", "").lower())
    if found is None:
        raise argparse.ArgumentTypeError(
            f"unknown operation {text!r}; known: "
            + ", ".join(sorted(op.name.title().replace("_", "") for op in _OPERATIONS.values())))
    return found


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("acls", help="add, list and remove ACLs (like kafka-acls.sh)")
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    parent = client_parent()
    for name, body, helptext in (("add", add_acls, "add ACLs"), ("list", list_acls, "list ACLs"),
                                 ("remove", remove_acls, "remove ACLs")):
        action = actions.add_parser(name, parents=[parent], help=helptext)
        action.add_argument("--topic", action="append", default=[])
        action.add_argument("--group", action="append", default=[])
        action.add_argument("--transactional-id", action="append", default=[])
        action.add_argument("--cluster", action="store_true", help="the cluster resource")
        action.add_argument("--resource-pattern-type", type=str.upper,
                            choices=("LITERAL", "PREFIXED", "ANY", "MATCH"))
        if name == "list":
            action.add_argument("--principal", action="append", default=[],
                                help="only the ACLs of this principal")
        else:
            for flag in ("--allow-principal", "--deny-principal", "--allow-host",
                         "--deny-host"):
                action.add_argument(flag, action="append", default=[])
            action.add_argument("--operation", action="append", type=operation, default=[],
                                help="Read, Write, Create, Delete, Alter, Describe, "
                                     "ClusterAction, DescribeConfigs, AlterConfigs, "
                                     "IdempotentWrite or All (repeatable)")
            action.add_argument("--producer", action="store_true",
                                help="what a producer needs on the topics")
            action.add_argument("--consumer", action="store_true",
                                help="what a consumer needs on the topics and groups")
            action.add_argument("--idempotent", action="store_true",
                                help="with --producer: IdempotentWrite on the cluster")
            action.add_argument("--force", action="store_true",
                                help="accepted for kafka-acls.sh compatibility")
        action.set_defaults(func=tool("acls", body))


def _resources(args: argparse.Namespace) -> list[Resource]:
    return ([(ResourceType.TOPIC, t) for t in args.topic]
            + [(ResourceType.GROUP, g) for g in args.group]
            + [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
            + ([(ResourceType.BROKER, CLUSTER)] if args.cluster else []))


def _operations(args: argparse.Namespace) -> dict[Resource, list[AclOperation]]:
    """resource -> the operations the flags give it (``--operation`` or the shortcuts)."""
    wanted: dict[Resource, list[AclOperation]] = defaultdict(list)
    resources = _resources(args)
    if args.operation or not (args.producer or args.consumer):
        for resource in resources:
            wanted[resource] += args.operation or [AclOperation.ALL]
    for kind, name in resources:
        if args.producer and kind == ResourceType.TOPIC:
            wanted[kind, name] += [AclOperation.WRITE, AclOperation.DESCRIBE,
                                   AclOperation.CREATE]
        if args.producer and kind == ResourceType.TRANSACTIONAL_ID:
            wanted[kind, name] += [AclOperation.WRITE, AclOperation.DESCRIBE]
        if args.consumer and kind == ResourceType.TOPIC:
            wanted[kind, name] += [AclOperation.READ, AclOperation.DESCRIBE]
        if args.consumer and kind == ResourceType.GROUP:
            wanted[kind, name] += [AclOperation.READ]
    if args.producer and args.idempotent:
        wanted[ResourceType.BROKER, CLUSTER] += [AclOperation.IDEMPOTENT_WRITE]
    return {r: list(dict.fromkeys(ops)) for r, ops in wanted.items() if ops}


def _bindings(args: argparse.Namespace, pattern: ResourcePatternType,
              kind: type[AclBinding] = AclBinding) -> list[AclBinding]:
    """The bindings (or, with ``kind=AclBindingFilter``, the filters) the flags name."""
    entries = [(p, h, AclPermissionType.ALLOW) for p in args.allow_principal
               for h in args.allow_host or ["*"]]
    entries += [(p, h, AclPermissionType.DENY) for p in args.deny_principal
                for h in args.deny_host or ["*"]]
    operations = _operations(args)
    if not entries or not operations:
        raise ToolError("name a principal (--allow-principal / --deny-principal) and a resource "
                        "(--topic, --group, --transactional-id or --cluster)", USAGE)
    return [kind(resource, name, pattern, principal, host, op, permission)
            for (resource, name), ops in operations.items() for op in ops
            for principal, host, permission in entries]


def add_acls(args: argparse.Namespace) -> int:
    pattern = ResourcePatternType[args.resource_pattern_type or "LITERAL"]
    if pattern not in (ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED):
        raise ToolError("--resource-pattern-type must be literal or prefixed to add ACLs",
                        USAGE)
    bindings = _bindings(args, pattern)
    admin = connected_admin(client_config(args))
    for future in admin.create_acls(bindings, request_timeout=REQUEST_TIMEOUT_S).values():
        _check(future)
    _print("Adding ACLs for resource", bindings)
    return 0


def remove_acls(args: argparse.Namespace) -> int:
    pattern = ResourcePatternType[args.resource_pattern_type or "ANY"]
    filters = _bindings(args, pattern, AclBindingFilter)
    admin = connected_admin(client_config(args))
    removed: list[AclBinding] = []
    for future in admin.delete_acls(filters, request_timeout=REQUEST_TIMEOUT_S).values():
        removed += _check(future)
    _print("Removing ACLs for resource", removed)
    return 0


def list_acls(args: argparse.Namespace) -> int:
    pattern = ResourcePatternType[args.resource_pattern_type or "ANY"]
    resources: list[tuple[ResourceType, str | None]] = list(_resources(args)) or [
        (ResourceType.ANY, None)]
    admin = connected_admin(client_config(args))
    found: list[AclBinding] = []
    for kind, name in resources:
        for principal in args.principal or [None]:
            found += _check(admin.describe_acls(
                AclBindingFilter(kind, name, pattern, principal, None, AclOperation.ANY,
                                 AclPermissionType.ANY), request_timeout=REQUEST_TIMEOUT_S))
    _print("Current ACLs for resource", found)
    return 0


def _check(future: Future) -> list[AclBinding]:
    try:
        return future.result() or []
    except KafkaException as exc:  # the broker's refusal
        raise ToolError(kafka_error(exc).str()) from None


def _print(title: str, bindings: Iterable[AclBinding]) -> None:
    grouped: dict[tuple[str, str, str], list[AclBinding]] = defaultdict(list)
    for b in bindings:
        kind = _KAFKA_TYPES.get(b.restype, b.restype.name)
        grouped[kind, b.name, b.resource_pattern_type.name].append(b)
    for (kind, name, pattern), acls in grouped.items():
        print(f"{title} `ResourcePattern(resourceType={kind}, name={name}, "
              f"patternType={pattern})`: ")
        for b in dict.fromkeys(acls):
            print(f" \t(principal={b.principal}, host={b.host}, operation={b.operation.name}, "
                  f"permissionType={b.permission_type.name}) ")
        print()
