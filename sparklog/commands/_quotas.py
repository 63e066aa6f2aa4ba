"""``sparklog configs --entity-type users|clients``: client quotas, as ``kafka-configs.sh``.

    sparklog configs --bootstrap-server B --entity-type users [--entity-name U |
        --entity-default] [--entity-type clients [--entity-name C | --entity-default]]
        --describe | --alter [--add-config producer_byte_rate=1024,...] [--delete-config K]

Invariants (Kafka's ``ConfigCommand`` over its admin client):
- Each ``--entity-type`` takes the ``--entity-name`` or ``--entity-default`` given in the
  same position (``users`` then ``clients`` for a user's client id); ``--alter`` needs one
  for each, ``--describe`` without one describes every entity of the type.
- ``--describe`` sends one strict DescribeClientQuotas and prints a line per entity with a
  quota: ``Quota configs for user-principal 'alice', client-id 'c1' are
  producer_byte_rate=1024.0`` (``the default user-principal`` for a default), the values
  as Java prints a double.
- ``--alter`` sends one AlterClientQuotas: ``--add-config`` sets (values read as numbers),
  ``--delete-config`` removes; only quota keys are accepted. It prints ``Completed updating
  config for user alice.`` or ``Completed updating default config for users in the
  cluster.``
"""

from __future__ import annotations

import argparse
from decimal import Decimal

from sparklog.client.client_quotas import (
    ANY,
    QuotaEntity,
    alter_client_quotas,
    describe_client_quotas,
)
from sparklog.commands._client import USAGE, ToolError, protocol_client

ENTITY_TYPES = {"users": "user", "clients": "client-id"}
"""The tool's entity types -> the protocol's."""
SHOWN = {"user": "user-principal", "client-id": "client-id"}
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
              "controller_mutation_rate")
"""The keys Kafka's tool sends as quotas (the broker decides which it accepts)."""


def run(args: argparse.Namespace, name: str, add_configs: dict[str, str]) -> int:
    kinds = args.entity_type or []
    names = args.entity_names or []
    if len(names) > len(kinds) or not set(kinds) <= set(ENTITY_TYPES) or len(set(kinds)) < len(
            kinds):
        raise ToolError("give each of --entity-type users and clients once, each followed "
                        "by its --entity-name or --entity-default", USAGE)
    wanted: dict[str, object] = {ENTITY_TYPES[kind]: names[i] if i < len(names) else ANY
                                 for i, kind in enumerate(kinds)}
    with protocol_client(args, name) as client:
        if args.describe:
            for entity, values in describe_client_quotas(client, wanted):
                print(f"Quota configs for {_entity_text(entity)} are " + ", ".join(
                    f"{key}={java_double(value)}" for key, value in sorted(values.items())))
            return 0
        if ANY in wanted.values():
            raise ToolError("--entity-name or --entity-default must be specified with each "
                            "--entity-type for --alter", USAGE)
        changes: dict[str, float | None] = {}
        for key, value in add_configs.items():
            try:
                changes[key] = float(value)
            except ValueError:
                raise ToolError(f"--add-config {key}={value}: not a number", USAGE) from None
        for key in (k.strip() for k in (args.delete_config or "").split(",") if k.strip()):
            changes[key] = None
        unknown = sorted(k for k in changes if k not in QUOTA_KEYS)
        if unknown or not changes:
            raise ToolError("give quota configs to --add-config or --delete-config ("
                            f"{', '.join(QUOTA_KEYS)})"
                            + (f"; not quotas: {', '.join(unknown)}" if unknown else ""), USAGE)
        entity: QuotaEntity = {k: v for k, v in wanted.items() if isinstance(v, str) or v is None}
        alter_client_quotas(client, entity, changes)
    first_kind, first_name = kinds[0], names[0]
    print(f"Completed updating config for {first_kind.removesuffix('s')} {first_name}."
          if first_name is not None else
          f"Completed updating default config for {first_kind} in the cluster.")
    return 0


def _entity_text(entity: QuotaEntity) -> str:
    return ", ".join(f"{SHOWN[kind]} '{entity[kind]}'" if entity[kind] is not None
                     else f"the default {SHOWN[kind]}" for kind in ("user", "client-id")
                     if kind in entity)


def java_double(value: float) -> str:
    """``value`` as Java's ``Double.toString``: ``1024.0``, ``1.0E7`` from ten million."""
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    power = len(digits) - 1 + int(exponent)
    rest = "".join(map(str, digits[1:])) or "0"
    return f"{'-' if sign else ''}{digits[0]}.{rest}E{power}"
