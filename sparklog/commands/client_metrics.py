"""``sparklog client-metrics``: client telemetry subscriptions (KIP-714), like
``kafka-client-metrics.sh``.

    sparklog client-metrics --bootstrap-server B --alter (--name N | --generate-name)
        [--metrics M1,M2] [--interval MS] [--match K1=REGEX,K2=REGEX]
    sparklog client-metrics --bootstrap-server B --describe [--name N]
    sparklog client-metrics --bootstrap-server B --delete --name N
    sparklog client-metrics --bootstrap-server B --list

Invariants:
- Exactly one action, and Kafka's checks of the flags it takes (usage errors, exit code 2):
  ``--alter`` needs one of ``--name`` and ``--generate-name`` (a random UUID); ``--delete``
  needs ``--name``; ``--describe`` and ``--delete`` take no settings; ``--list`` no name.
- It goes through sparklog's protocol client (``client.client_metrics``; confluent-kafka's
  admin client has no CLIENT_METRICS resource type) and prints Kafka's lines:
  ``Altered client metrics config for N.``; ``Deleted client metrics config for N.``;
  ``Client metrics configs for N are:`` then ``  key=value`` per setting (every
  subscription without ``--name``); ``--list`` one name a line.
- ``--alter`` sets each setting given (``--interval`` is ``interval.ms``), an empty value
  deleting it, in one IncrementalAlterConfigs; ``--delete`` deletes every setting the
  subscription has, which deletes it.
- Failures are one stderr line and exit code 1, as the other tools.
"""

from __future__ import annotations

import argparse
import uuid

from sparklog.client.client_metrics import (
    alter_subscription,
    describe_subscription,
    list_subscriptions,
)
from sparklog.commands._client import USAGE, ToolError, client_parent, protocol_client, tool

NAME = "client-metrics"
ACTIONS = {"alter": "alter the configuration of the client metrics resource",
           "delete": "delete the configuration of the client metrics resource",
           "describe": "list the configurations of the client metrics resource(s)",
           "list": "list the client metrics resources"}
SETTING_FLAGS = {"metrics": "metrics", "interval": "interval.ms", "match": "match"}
"""Each settings flag and the setting it sets."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        NAME, parents=[client_parent()],
        help="describe and alter client telemetry subscriptions (KIP-714)",
        description=__doc__.split("Invariants:")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    for action, does in ACTIONS.items():
        parser.add_argument(f"--{action}", action="store_true", help=does)
    parser.add_argument("--name", help="name of the client metrics configuration resource")
    parser.add_argument("--generate-name", action="store_true",
                        help="generate a UUID to use as the name")
    parser.add_argument("--metrics", metavar="M1,M2",
                        help="telemetry metric name prefixes ('*' for every metric)")
    parser.add_argument("--interval", type=int, metavar="MS",
                        help="the metrics push interval in milliseconds")
    parser.add_argument("--match", metavar="K1=V1,K2=V2",
                        help="matching selectors: client_id, client_instance_id, "
                             "client_software_name, client_software_version, "
                             "client_source_address, client_source_port")
    parser.set_defaults(func=tool(NAME, run))


def _check(args: argparse.Namespace) -> None:
    """Kafka's ``ClientMetricsCommandOptions.checkArgs``."""
    chosen = [a for a in ACTIONS if getattr(args, a)]
    if len(chosen) != 1:
        raise ToolError("Command must include exactly one action: --alter, --delete, "
                        "--describe or --list.", USAGE)
    given = [f"--{flag}" for flag in SETTING_FLAGS if getattr(args, flag) is not None]
    given += ["--generate-name"] if args.generate_name else []
    given += ["--name"] if args.list and args.name is not None else []
    if not args.alter and given:
        raise ToolError(f"Option --{chosen[0]} can't be used with {', '.join(given)}", USAGE)
    if args.alter and (args.name is None) == (not args.generate_name):
        raise ToolError("One of --name or --generate-name must be specified with --alter.",
                        USAGE)
    if args.delete and args.name is None:
        raise ToolError("A client metrics resource name must be specified with --delete.",
                        USAGE)


def run(args: argparse.Namespace) -> int:
    _check(args)
    with protocol_client(args, NAME) as client:
        if args.alter:
            name = str(uuid.uuid4()) if args.generate_name else args.name
            changes = {setting: str(value) for flag, setting in SETTING_FLAGS.items()
                       if (value := getattr(args, flag)) is not None}
            alter_subscription(client, name, {k: v or None for k, v in changes.items()})
            print(f"Altered client metrics config for {name}.")
        elif args.delete:
            settings = describe_subscription(client, args.name)
            alter_subscription(client, args.name, {key: None for key, _ in settings})
            print(f"Deleted client metrics config for {args.name}.")
        elif args.describe:
            for name in [args.name] if args.name is not None else list_subscriptions(client):
                print(f"Client metrics configs for {name} are:")
                for key, value in describe_subscription(client, name):
                    print(f"  {key}={value}")
        else:
            print("\n".join(list_subscriptions(client)))
    return 0
