"""``sparklog configs``: describe and alter topic and broker configs and client quotas, like
``kafka-configs.sh``.

    sparklog configs --bootstrap-server B --entity-type topics|brokers [--entity-name N]
        --describe [--all]
    sparklog configs --bootstrap-server B --entity-type brokers --entity-default
        --describe [--all] | --alter ...
    sparklog configs --bootstrap-server B --entity-type users|clients [--entity-name N |
        --entity-default] [--entity-type clients ...] --describe | --alter
        [--add-config producer_byte_rate=1024,consumer_byte_rate=2048] [--delete-config K]
    sparklog configs --bootstrap-server B --entity-type topics --entity-name T --alter
        [--add-config k1=v1,k2=[a,b]] [--delete-config k1,k2]
        [--append-config k=[a,b]] [--subtract-config k=[a,b]]
    sparklog configs --bootstrap-server B --entity-type brokers (--entity-name ID |
        --entity-default) --alter --add-config log.retention.ms=3600000 [--delete-config K]

``--topic T`` and ``--broker ID`` are short for ``--entity-type ... --entity-name ...``.
Quotas of users and client ids are ``commands/_quotas.py``'s.

Invariants:
- ``--describe`` prints Kafka's layout: ``Dynamic configs for topic T are:`` (or ``All
  configs ...`` with ``--all``), then one line per config, ``  key=value sensitive=false
  synonyms={SOURCE:key=value, ...}``. Without ``--all`` only dynamic configs are listed (a
  topic's overrides, a broker's own dynamic configs). Without ``--entity-name`` every topic
  (or every broker, then the brokers' cluster-wide default, as Kafka's) is described.
- Brokers are described over the protocol client (``sparklog.client.configs``), whose
  answers keep every synonym (confluent-kafka keeps one per name).
- ``--entity-type brokers --entity-default`` is the cluster-wide default of the brokers (the
  broker resource named "", which confluent-kafka cannot name): ``Default configs for
  brokers in the cluster are:`` then its dynamic configs (every config with ``--all``);
  ``--alter`` sends SET and DELETE and prints ``Completed updating default config for
  brokers in the cluster.`` The broker accepts only the configs Kafka changes at run time
  (``sparklog.broker.dynamic_config``).
- ``--alter`` sends one IncrementalAlterConfigs request: ``--add-config`` is SET,
  ``--delete-config`` DELETE, ``--append-config`` / ``--subtract-config`` APPEND / SUBTRACT
  on list configs such as ``cleanup.policy``. Values are Kafka's ``k=v`` lists separated by
  commas, a list value in brackets (``cleanup.policy=[compact,delete]``). It prints
  ``Completed updating config for topic T.`` and a warning on stderr for each deprecated
  config set (``message.format.version``: accepted, ignored).
- Failures are one stderr line and exit code 1 (2 for usage errors), as the other tools.
"""

from __future__ import annotations

import argparse
import sys

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)

from sparklog.client.admin import REQUEST_TIMEOUT_S
from sparklog.client.configs import BROKER, alter_configs, describe_configs
from sparklog.client.kafka import KafkaClient
from sparklog.client.watch import connected_admin
from sparklog.commands import _quotas
from sparklog.commands._client import (
    USAGE,
    ToolError,
    client_config,
    client_parent,
    complain,
    protocol_client,
    tool,
)
from sparklog.storage.config import DEPRECATED

NAME = "configs"
CLUSTER_DEFAULT = ""
"""The broker resource name of the brokers' cluster-wide default (Kafka's <default>)."""
ENTITY_TYPES = {"topics": ConfigResource.Type.TOPIC, "brokers": ConfigResource.Type.BROKER}
_OPERATIONS = (("add_config", AlterConfigOpType.SET), ("append_config", AlterConfigOpType.APPEND),
               ("subtract_config", AlterConfigOpType.SUBTRACT))


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        NAME, parents=[client_parent()], help="describe and alter topic and broker configs",
        description=__doc__.split("Invariants:")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--entity-type", action="append",
                        choices=sorted([*ENTITY_TYPES, *_quotas.ENTITY_TYPES]),
                        help="users and clients may be given together (a user's client id)")
    parser.add_argument("--entity-name", action="append", dest="entity_names",
                        help="the topic name, broker id, user or client id (default: all)")
    parser.add_argument("--entity-default", action="append_const", const=None,
                        dest="entity_names",
                        help="the default user or client id, or the brokers' cluster-wide "
                             "default")
    parser.add_argument("--topic", help="same as --entity-type topics --entity-name TOPIC")
    parser.add_argument("--broker", help="same as --entity-type brokers --entity-name ID")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="print configs")
    action.add_argument("--alter", action="store_true", help="change configs")
    parser.add_argument("--all", action="store_true",
                        help="with --describe: every config, not only dynamic ones")
    parser.add_argument("--add-config", metavar="K=V,K=[A,B]", help="configs to set")
    parser.add_argument("--delete-config", metavar="K1,K2", help="configs to remove")
    parser.add_argument("--append-config", metavar="K=[A,B]",
                        help="items to add to list configs")
    parser.add_argument("--subtract-config", metavar="K=[A,B]",
                        help="items to remove from list configs")
    parser.set_defaults(func=tool(NAME, run))


def run(args: argparse.Namespace) -> int:
    if set(args.entity_type or ()) & _quotas.ENTITY_TYPES.keys():
        return _quotas.run(args, NAME, split_configs(args.add_config or "", "--add-config"))
    kind, name = _entity(args)
    if kind == "brokers" and (args.describe or name == CLUSTER_DEFAULT):
        return _brokers(args, name)
    admin = connected_admin(client_config(args))
    if args.describe:
        _describe_topics(admin, name, args.all)
        return 0
    if name is None:
        raise ToolError("--alter needs --entity-name (or --topic / --broker)", USAGE)
    return _alter(admin, kind, name, args)


def _entity(args: argparse.Namespace) -> tuple[str, str | None]:
    """(entity type, name or None) from --entity-type/--entity-name or --topic/--broker."""
    given = [(kind, value) for kind, value in (("topics", args.topic), ("brokers", args.broker))
             if value is not None]
    if given and (args.entity_type or args.entity_names or len(given) > 1):
        raise ToolError("give --topic, --broker or --entity-type/--entity-name, not several",
                        USAGE)
    if given:
        return given[0]
    if not args.entity_type:
        raise ToolError("--entity-type (topics, brokers, users or clients) is required", USAGE)
    names = args.entity_names or [None]
    if len(args.entity_type) > 1 or len(names) > 1:
        raise ToolError("topics and brokers take one --entity-type and --entity-name", USAGE)
    if args.entity_names == [None]:  # --entity-default
        if args.entity_type != ["brokers"]:
            raise ToolError("--entity-default is for brokers, users and clients", USAGE)
        return "brokers", CLUSTER_DEFAULT
    return args.entity_type[0], names[0]


def _topics(admin: AdminClient, name: str | None) -> list[ConfigResource]:
    """The topic named, or every topic."""
    names = [name] if name is not None else sorted(
        admin.list_topics(timeout=REQUEST_TIMEOUT_S).topics)
    return [ConfigResource(ConfigResource.Type.TOPIC, n) for n in names]


def _describe_topics(admin: AdminClient, name: str | None, everything: bool) -> None:
    resources = _topics(admin, name)
    if not resources:
        return
    futures = admin.describe_configs(resources, request_timeout=REQUEST_TIMEOUT_S)
    for resource in resources:
        entries = next(f for r, f in futures.items() if r.name == resource.name).result()
        print(f"{'All' if everything else 'Dynamic'} configs for topic {resource.name} are:")
        for key in sorted(entries):
            entry = entries[key]
            if everything or entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value:
                print(f"  {_entry_text(entry)}")


def _brokers(args: argparse.Namespace, name: str | None) -> int:
    """Describe brokers (one, or each then their cluster-wide default, as Kafka's), or alter
    the default (the broker resource "", which confluent-kafka cannot name), over the
    protocol client, whose answers keep every synonym."""
    with protocol_client(args, NAME) as client:
        if not args.describe:
            return _alter_default(args, client)
        brokers = sorted(str(b) for b in client.metadata([]).brokers)
        if name not in (None, CLUSTER_DEFAULT, *brokers):
            raise ToolError(f"broker {name} does not exist (brokers: {', '.join(brokers)})")
        for each in [*brokers, CLUSTER_DEFAULT] if name is None else [name]:
            if each == CLUSTER_DEFAULT:
                print("Default configs for brokers in the cluster are:")
                dynamic = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
            else:
                print(f"{'All' if args.all else 'Dynamic'} configs for broker {each} are:")
                dynamic = ConfigSource.DYNAMIC_BROKER_CONFIG.value
            for value in sorted(describe_configs(client, BROKER, each, _broker_name(each),
                                                 synonyms=True), key=lambda v: v.name):
                if args.all or value.source == dynamic:
                    print("  " + _line(value.name, value.value, value.sensitive,
                                       list(value.synonyms)))
    return 0


def _broker_name(name: str) -> str:
    return f"broker {name}" if name else "the default broker configs"


def _alter_default(args: argparse.Namespace, client: KafkaClient) -> int:
    """Set and delete configs of the brokers' cluster-wide default."""
    if args.append_config or args.subtract_config:
        raise ToolError("--append-config and --subtract-config are for topics", USAGE)
    changes: dict[str, str | None] = dict(split_configs(args.add_config or "", "--add-config"))
    changes.update({key: None for key in _deleted(args)})
    if not changes:
        raise ToolError("nothing to alter: give --add-config or --delete-config", USAGE)
    alter_configs(client, BROKER, CLUSTER_DEFAULT, _broker_name(CLUSTER_DEFAULT), changes)
    print("Completed updating default config for brokers in the cluster.")
    return 0


def _line(name: str, value: str | None, sensitive: bool,
          synonyms: list[tuple[int, str, str | None]]) -> str:
    """Kafka's describe line; ``synonyms`` are (source, name, value), most specific first."""
    listed = ", ".join(f"{ConfigSource(source).name}:{key}={_value(text)}"
                       for source, key, text in synonyms)
    return (f"{name}={_value(value)} sensitive={'true' if sensitive else 'false'} "
            f"synonyms={{{listed}}}")


def _entry_text(entry: ConfigEntry) -> str:
    """Kafka's describe line. confluent-kafka keeps one synonym per name, so a broker
    setting that overrides the default under the same name (``log.segment.bytes``) is put
    back from the entry's own source; synonyms are listed most specific first."""
    synonyms = {s.source: (s.name, s.value) for s in entry.synonyms.values()}
    if entry.source not in synonyms:
        own_name = entry.name if (entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
                                  or not entry.synonyms or entry.name in entry.synonyms
                                  ) else next(iter(entry.synonyms))
        synonyms[entry.source] = (own_name, entry.value)
    return _line(entry.name, entry.value, entry.is_sensitive,
                 [(source, name, value) for source, (name, value) in sorted(synonyms.items())])


def _value(value: str | None) -> str:
    return "null" if value is None else value


def split_configs(text: str, flag: str) -> dict[str, str]:
    """Kafka's ``k1=v1,k2=[a,b]``: commas inside brackets belong to the value, and a
    bracketed value is the list ``a,b``."""
    items, depth, current = [], 0, ""
    for char in text:
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    configs = {}
    for item in (i.strip() for i in items if i.strip()):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ToolError(f"{flag} {item!r} is not KEY=VALUE", USAGE)
        configs[key.strip()] = value.strip().removeprefix("[").removesuffix("]")
    return configs


def _deleted(args: argparse.Namespace) -> list[str]:
    """The keys of ``--delete-config k1,k2``."""
    return [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]


def _alter(admin: AdminClient, kind: str, name: str, args: argparse.Namespace) -> int:
    entries = []
    for attribute, operation in _OPERATIONS:
        flag = "--" + attribute.replace("_", "-")
        text = getattr(args, attribute)
        for key, value in (split_configs(text, flag) if text else {}).items():
            entries.append(ConfigEntry(key, value, incremental_operation=operation))
    for key in _deleted(args):
        entries.append(ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE))
    if not entries:
        raise ToolError("nothing to alter: give --add-config, --delete-config, "
                        "--append-config or --subtract-config", USAGE)
    resource = ConfigResource(ENTITY_TYPES[kind], name, incremental_configs=entries)
    (future,) = admin.incremental_alter_configs([resource],
                                                request_timeout=REQUEST_TIMEOUT_S).values()
    future.result()
    for entry in entries:
        if entry.name in DEPRECATED and entry.incremental_operation != AlterConfigOpType.DELETE:
            complain(NAME, f"warning: {DEPRECATED[entry.name]}")
    print(f"Completed updating config for {kind.removesuffix('s')} {name}.", file=sys.stdout)
    return 0
