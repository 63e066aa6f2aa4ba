"""``sparklog topics``: create, list, describe, alter and delete topics.

Like ``kafka-topics.sh`` (and ``kafka-configs.sh --entity-type topics`` for ``alter``), through
confluent-kafka's AdminClient.

Invariants:
- Nothing is cached between runs: every action asks the broker.
- stdout is for results only: ``list`` prints one name per line; ``describe`` prints Kafka's
  layout (a topic line with the TopicId as Kafka prints it, URL-safe base64, and the topic's
  own config overrides, then one tab-indented line per
  partition) plus ``Offsets: <log start>..<log end>`` per partition, or with
  ``--under-replicated-partitions`` / ``--unavailable-partitions`` only the partition lines
  of partitions with fewer in-sync replicas than replicas / without a leader; the other actions
  print one confirmation line per change made.
- A failure is one stderr line naming the topic (and the broker's reason, which names a bad
  config) and exit code 1. Internal topics (``__consumer_offsets``) are neither deleted nor
  given partitions: the tool says so before asking, as Kafka's does (the broker refuses
  too). ``--if-not-exists`` and ``--if-exists`` make "already exists"
  and "does not exist" successes that print nothing.
"""

from __future__ import annotations

import argparse
import base64
from concurrent.futures import Future

from confluent_kafka import (
    KafkaException,
    Node,
    TopicCollection,
    TopicPartition,
    TopicPartitionInfo,
    Uuid,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    TopicDescription,
)

from sparklog.client.admin import (
    MISSING_TOPIC,
    REQUEST_TIMEOUT_S,
    TOPIC_EXISTS,
    admin_result,
    kafka_error,
)
from sparklog.client.watch import connected_admin
from sparklog.commands._client import (
    USAGE,
    ToolError,
    client_config,
    client_parent,
    complain,
    parse_assignments,
    tool,
    topic_error,
)
from sparklog.storage.config import DEPRECATED

_LONG = (1 << 64) - 1


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parent = client_parent()
    topics = subparsers.add_parser("topics", help="create, list, describe, alter, delete topics",
                                   description=__doc__.split("\n\n")[1])
    actions = topics.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = actions.add_parser("create", parents=[parent], help="create a topic")
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", type=int, default=-1,
                        help="partition count (default: the broker's num.partitions)")
    create.add_argument("--replication-factor", type=int, default=-1,
                        help="replicas per partition; 1 on a single broker (default: the "
                             "broker's default.replication.factor)")
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="a topic config override, e.g. retention.ms=60000 (repeatable)")
    create.add_argument("--if-not-exists", action="store_true",
                        help="succeed quietly if the topic exists")
    create.set_defaults(func=tool("topics", _create))

    listing = actions.add_parser("list", parents=[parent], help="print topic names")
    listing.add_argument("--exclude-internal", action="store_true",
                         help="leave out internal topics such as __consumer_offsets")
    listing.set_defaults(func=tool("topics", _list))

    describe = actions.add_parser("describe", parents=[parent],
                                  help="print partitions, configs and offsets")
    describe.add_argument("--topic", help="the topic (default: every topic)")
    describe.add_argument("--exclude-internal", action="store_true",
                          help="without --topic, leave out internal topics")
    only = describe.add_mutually_exclusive_group()
    only.add_argument("--under-replicated-partitions", action="store_true",
                      help="only partitions with fewer in-sync replicas than replicas")
    only.add_argument("--unavailable-partitions", action="store_true",
                      help="only partitions without a leader")
    describe.set_defaults(func=tool("topics", _describe))

    alter = actions.add_parser("alter", parents=[parent],
                               help="change configs or grow the partition count")
    alter.add_argument("--topic", required=True)
    alter.add_argument("--partitions", type=int, help="the new, larger partition count")
    alter.add_argument("--add-config", action="append", default=[], metavar="KEY=VALUE",
                       help="set a topic config override (repeatable)")
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                       help="remove a topic config override (repeatable)")
    alter.add_argument("--if-exists", action="store_true",
                       help="succeed quietly if the topic does not exist")
    alter.set_defaults(func=tool("topics", _alter))

    delete = actions.add_parser("delete", parents=[parent], help="delete a topic")
    delete.add_argument("--topic", required=True)
    delete.add_argument("--if-exists", action="store_true",
                        help="succeed quietly if the topic does not exist")
    delete.set_defaults(func=tool("topics", _delete))


def _admin(args: argparse.Namespace) -> AdminClient:
    """A client for one action. Keep a reference until its futures are done: once collected,
    they fail with "Handle is terminating"."""
    return connected_admin(client_config(args))


def _wait(future: Future, topic: str, tolerated: frozenset[int] = frozenset()) -> bool:
    """Wait for one topic's admin result: True on success, False on a tolerated error."""
    try:
        return admin_result(future, tolerated)
    except KafkaException as exc:
        raise topic_error(topic, kafka_error(exc)) from None


def _create(args: argparse.Namespace) -> int:
    configs = parse_assignments(args.config, "--config")
    new = NewTopic(args.topic, args.partitions, args.replication_factor, config=configs)
    admin = _admin(args)
    futures = admin.create_topics([new], request_timeout=REQUEST_TIMEOUT_S)
    if _wait(futures[args.topic], args.topic, TOPIC_EXISTS if args.if_not_exists else frozenset()):
        print(f"Created topic {args.topic}.")
        for name in sorted(configs.keys() & DEPRECATED.keys()):
            complain("topics", f"warning: {DEPRECATED[name]}")
    return 0


def _refuse_internal(admin: AdminClient, topic: str, change: str) -> None:
    """A ``ToolError`` when ``topic`` is internal; a missing topic is left to the action."""
    future = admin.describe_topics(TopicCollection([topic]),
                                   request_timeout=REQUEST_TIMEOUT_S)[topic]
    if _wait(future, topic, MISSING_TOPIC) and future.result().is_internal:
        raise ToolError(f"topic {topic} is an internal topic and is not allowed to be {change}")


def _delete(args: argparse.Namespace) -> int:
    admin = _admin(args)
    _refuse_internal(admin, args.topic, "deleted")
    futures = admin.delete_topics([args.topic], request_timeout=REQUEST_TIMEOUT_S)
    if _wait(futures[args.topic], args.topic, MISSING_TOPIC if args.if_exists else frozenset()):
        print(f"Deleted topic {args.topic}.")
    return 0


def _alter(args: argparse.Namespace) -> int:
    added = parse_assignments(args.add_config, "--add-config")
    if not (added or args.delete_config or args.partitions is not None):
        raise ToolError("nothing to alter: give --partitions, --add-config or --delete-config",
                        USAGE)
    admin = _admin(args)
    if args.partitions is not None:
        _refuse_internal(admin, args.topic, "given more partitions")
    tolerated = MISSING_TOPIC if args.if_exists else frozenset()
    if added or args.delete_config:
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                   for k, v in added.items()]
        entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                    for k in args.delete_config]
        resource = ConfigResource(ConfigResource.Type.TOPIC, args.topic,
                                  incremental_configs=entries)
        (future,) = admin.incremental_alter_configs(
            [resource], request_timeout=REQUEST_TIMEOUT_S).values()
        if not _wait(future, args.topic, tolerated):
            return 0
        print(f"Completed updating config for topic {args.topic}.")
    if args.partitions is not None:
        futures = admin.create_partitions([NewPartitions(args.topic, args.partitions)],
                                          request_timeout=REQUEST_TIMEOUT_S)
        if not _wait(futures[args.topic], args.topic, tolerated):
            return 0
        print(f"Topic {args.topic} now has {args.partitions} partitions.")
    return 0


def _list(args: argparse.Namespace) -> int:
    for description in _descriptions(_admin(args), None, args.exclude_internal):
        print(description.name)
    return 0


def _describe(args: argparse.Namespace) -> int:
    admin = _admin(args)
    descriptions = _descriptions(admin, args.topic, args.exclude_internal)
    if not descriptions:
        return 0
    if args.under_replicated_partitions or args.unavailable_partitions:
        for description in descriptions:
            for partition in description.partitions:
                if (len(partition.isr) < len(partition.replicas)
                        if args.under_replicated_partitions else partition.leader is None):
                    print(_partition_line(description.name, partition))
        return 0
    overrides = _overrides(admin, [d.name for d in descriptions])
    offsets = _offsets(admin, descriptions)
    for description in descriptions:
        print(_topic_line(description, overrides[description.name]))
        for partition in description.partitions:
            start, end = offsets[description.name, partition.id]
            print(_partition_line(description.name, partition) + f"\tOffsets: {start}..{end}")
    return 0


def _descriptions(admin: AdminClient, topic: str | None,
                  exclude_internal: bool) -> list[TopicDescription]:
    """The named topic, or every topic sorted by name (one deleted meanwhile is skipped)."""
    names = [topic] if topic else sorted(admin.list_topics(timeout=REQUEST_TIMEOUT_S).topics)
    if not names:
        return []
    futures = admin.describe_topics(TopicCollection(names), request_timeout=REQUEST_TIMEOUT_S)
    found = []
    for name, future in futures.items():
        if _wait(future, name, frozenset() if topic else MISSING_TOPIC):
            found.append(future.result())
    return sorted((d for d in found if not (exclude_internal and d.is_internal)),
                  key=lambda d: d.name)


def _overrides(admin: AdminClient, names: list[str]) -> dict[str, dict[str, str]]:
    """Each topic's own config overrides (what Kafka's describe prints as ``Configs:``)."""
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in names]
    futures = admin.describe_configs(resources, request_timeout=REQUEST_TIMEOUT_S)
    overrides = {}
    for resource, future in futures.items():
        _wait(future, resource.name)
        overrides[resource.name] = {
            name: entry.value for name, entry in future.result().items()
            if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        }
    return overrides


def _offsets(admin: AdminClient,
             descriptions: list[TopicDescription]) -> dict[tuple[str, int], tuple[int, int]]:
    """(log start offset, log end offset) of every partition, in two ListOffsets rounds."""
    partitions = [TopicPartition(d.name, p.id) for d in descriptions for p in d.partitions]
    bounds = []
    for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):
        futures = admin.list_offsets(dict.fromkeys(partitions, spec),
                                     request_timeout=REQUEST_TIMEOUT_S)
        found = {}
        for tp, future in futures.items():
            _wait(future, tp.topic)
            found[tp.topic, tp.partition] = future.result().offset
        bounds.append(found)
    earliest, latest = bounds
    return {tp: (earliest[tp], latest[tp]) for tp in earliest}


def kafka_uuid(uuid: Uuid) -> str:
    """A Uuid as Kafka prints it (``Uuid.toString``): the 16 bytes in URL-safe base64
    without padding (confluent-kafka's ``str`` uses the standard alphabet, ``+`` and ``/``)."""
    bits = ((uuid.get_most_significant_bits() & _LONG) << 64
            | uuid.get_least_significant_bits() & _LONG)
    return base64.urlsafe_b64encode(bits.to_bytes(16, "big")).decode().rstrip("=")


def _topic_line(description: TopicDescription, overrides: dict[str, str]) -> str:
    """Kafka's topic line; the TopicId only when the broker reports one (Metadata v10+)."""
    topic_id = description.topic_id
    known_id = topic_id.get_most_significant_bits() or topic_id.get_least_significant_bits()
    replication = len(description.partitions[0].replicas) if description.partitions else 0
    configs = ",".join(f"{name}={value}" for name, value in sorted(overrides.items()))
    return (f"Topic: {description.name}"
            + (f"\tTopicId: {kafka_uuid(topic_id)}" if known_id else "")
            + f"\tPartitionCount: {len(description.partitions)}"
            + f"\tReplicationFactor: {replication}\tConfigs: {configs}")


def _node_ids(nodes: list[Node]) -> str:
    return ",".join(str(node.id) for node in nodes)


def _partition_line(topic: str, partition: TopicPartitionInfo) -> str:
    leader = "none" if partition.leader is None else partition.leader.id
    return (f"\tTopic: {topic}\tPartition: {partition.id}\tLeader: {leader}"
            f"\tReplicas: {_node_ids(partition.replicas)}\tIsr: {_node_ids(partition.isr)}")
