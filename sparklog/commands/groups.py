"""``sparklog groups``: list, describe, reset the offsets of, and delete consumer groups.

Like ``kafka-consumer-groups.sh``, through confluent-kafka's AdminClient:
- ``list`` prints one group id per line (``--state`` adds each group's state);
- ``describe --group G`` prints the group's state, coordinator, assignment strategy and
  member count, then Kafka's offsets table (GROUP TOPIC PARTITION CURRENT-OFFSET
  LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID, LAG = LOG-END-OFFSET - CURRENT-OFFSET) for
  every partition that is assigned or has a committed offset, then each member with its
  assignment;
- ``reset-offsets --group G (--topic T[:P,P...] ... | --all-topics) --to-...`` prints the plan
  (GROUP TOPIC PARTITION NEW-OFFSET) and commits it only with ``--execute``;
- ``delete --group G`` deletes groups that have no members.

Invariants:
- stdout is for results (tables, ids, confirmations); notes such as "dry run" and failures go
  to stderr. A failure is one line and exit code 1 (2 for a usage error).
- ``reset-offsets`` changes nothing unless ``--execute`` is given, and refuses (exit 1) for a
  group that has members (any state but Empty or Dead), as Kafka's tool does. New offsets
  are clamped to the partition's [log start, log end], as Kafka's tool does; ``--shift-by``
  needs a committed offset to shift from.
- A value that does not exist (no committed offset, no member) is printed ``-``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from datetime import datetime

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription, OffsetSpec

from sparklog.client.admin import REQUEST_TIMEOUT_S, kafka_error, topic_partitions
from sparklog.commands._client import (
    USAGE,
    ToolError,
    client_config,
    client_parent,
    tool,
    topic_error,
)
from sparklog.commands._table import print_table

NAME = "groups"
INACTIVE = frozenset({ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD})
STATE_NAMES = {
    ConsumerGroupState.EMPTY: "Empty",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.UNKNOWN: "Unknown",
}
Partition = tuple[str, int]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parent = client_parent()
    groups = subparsers.add_parser(NAME, help="list, describe, reset offsets of, delete groups",
                                   description=__doc__.split("\n\n")[1])
    actions = groups.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", parents=[parent], help="print group ids")
    listing.add_argument("--state", action="store_true", help="also print each group's state")
    listing.set_defaults(func=tool(NAME, _list))

    describe = actions.add_parser("describe", parents=[parent],
                                  help="state, members, committed offsets and lag of a group")
    describe.add_argument("--group", required=True)
    describe.set_defaults(func=tool(NAME, _describe))

    reset = actions.add_parser("reset-offsets", parents=[parent],
                               help="plan (and with --execute commit) new offsets of a group")
    reset.add_argument("--group", required=True)
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]",
                       help="a topic, optionally with some of its partitions (repeatable)")
    scope.add_argument("--all-topics", action="store_true",
                       help="every topic the group has committed offsets for")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start offset")
    target.add_argument("--to-latest", action="store_true", help="the log end offset")
    target.add_argument("--to-offset", type=int, metavar="N", help="offset N")
    target.add_argument("--to-datetime", type=_datetime, metavar="YYYY-MM-DDTHH:mm:SS.sss",
                        help="the first offset at or after this time (ISO 8601; local time "
                             "unless it names a zone)")
    target.add_argument("--shift-by", type=int, metavar="N",
                        help="the committed offset plus N (negative: back)")
    reset.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.add_argument("--dry-run", action="store_true",
                       help="only print the plan (the default without --execute)")
    reset.set_defaults(func=tool(NAME, _reset))

    delete = actions.add_parser("delete", parents=[parent], help="delete groups without members")
    delete.add_argument("--group", action="append", required=True,
                        help="a group to delete (repeatable)")
    delete.set_defaults(func=tool(NAME, _delete))


def _datetime(text: str) -> int:
    """An argparse type: an ISO 8601 time as epoch milliseconds."""
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time like 2024-05-01T12:00:00.000 (optionally +02:00 or Z)"
        ) from None


# -- the broker ---------------------------------------------------------------------------------


class _Admin:
    """One AdminClient and the requests the tool makes (it must outlive their futures)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.client = AdminClient(client_config(args))

    def group_ids(self) -> list[str]:
        result = self.client.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S).result()
        if result.errors:
            raise KafkaException(result.errors[0])
        return sorted(listing.group_id for listing in result.valid)

    def describe(self, group: str) -> ConsumerGroupDescription:
        futures = self.client.describe_consumer_groups([group], request_timeout=REQUEST_TIMEOUT_S)
        return futures[group].result()

    def committed(self, group: str) -> dict[Partition, int]:
        request = [ConsumerGroupTopicPartitions(group)]
        futures = self.client.list_consumer_group_offsets(request,
                                                          request_timeout=REQUEST_TIMEOUT_S)
        found = futures[group].result().topic_partitions or []
        return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}

    def offsets(self, spec: OffsetSpec, partitions: Iterable[Partition]) -> dict[Partition, int]:
        """ListOffsets: the offset ``spec`` names for each partition (-1: none)."""
        wanted = {TopicPartition(topic, partition): spec for topic, partition in partitions}
        if not wanted:
            return {}
        futures = self.client.list_offsets(wanted, request_timeout=REQUEST_TIMEOUT_S)
        return {(tp.topic, tp.partition): future.result().offset
                for tp, future in futures.items()}

    def partitions(self, topic: str) -> list[int]:
        try:
            return topic_partitions(self.client, topic)
        except KafkaException as exc:
            raise topic_error(topic, kafka_error(exc)) from None

    def commit(self, group: str, offsets: dict[Partition, int]) -> None:
        request = [ConsumerGroupTopicPartitions(
            group, [TopicPartition(t, p, offset) for (t, p), offset in offsets.items()])]
        futures = self.client.alter_consumer_group_offsets(request,
                                                           request_timeout=REQUEST_TIMEOUT_S)
        result = futures[group].result()
        failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
        if failed:
            raise ToolError(f"group {group!r}: {failed[0].topic}-{failed[0].partition}: "
                            f"{failed[0].error.str()}")


# -- output -------------------------------------------------------------------------------------


def _state(description: ConsumerGroupDescription) -> str:
    return STATE_NAMES.get(description.state, str(description.state))


def _assignment_text(partitions: Iterable[Partition]) -> str:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return ",".join(f"{t}({','.join(map(str, ps))})" for t, ps in by_topic.items()) or "-"


# -- actions ------------------------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    admin = _Admin(args)
    groups = admin.group_ids()
    if not args.state:
        for group in groups:
            print(group)
        return 0
    print_table(("GROUP", "STATE"), ((g, _state(admin.describe(g))) for g in groups))
    return 0


def _describe(args: argparse.Namespace) -> int:
    admin = _Admin(args)
    group = args.group
    description = admin.describe(group)
    committed = admin.committed(group)
    if description.state == ConsumerGroupState.DEAD and not committed:
        raise ToolError(f"consumer group {group!r} does not exist")
    owners = {(tp.topic, tp.partition): member for member in description.members
              for tp in member.assignment.topic_partitions}
    partitions = sorted(owners.keys() | committed.keys())
    ends = admin.offsets(OffsetSpec.latest(), partitions)
    coordinator = description.coordinator
    print_table(("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"),
           [(group, f"{coordinator.host}:{coordinator.port} ({coordinator.id})",
             description.partition_assignor or None, _state(description),
             len(description.members))])
    print()
    rows = []
    for tp in partitions:
        member = owners.get(tp)
        current = committed.get(tp)
        lag = None if current is None or ends[tp] < 0 else max(ends[tp] - current, 0)
        rows.append((group, tp[0], tp[1], current, ends[tp] if ends[tp] >= 0 else None, lag,
                     member and member.member_id, member and member.host,
                     member and member.client_id))
    print_table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
            "CONSUMER-ID", "HOST", "CLIENT-ID"), rows)
    print()
    if not description.members:
        print(f"Consumer group '{group}' has no active members.")
        return 0
    print_table(("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"),
           [(group, m.member_id, m.host, m.client_id, len(m.assignment.topic_partitions),
             _assignment_text((tp.topic, tp.partition) for tp in m.assignment.topic_partitions))
            for m in sorted(description.members, key=lambda m: m.member_id)])
    return 0


def _reset(args: argparse.Namespace) -> int:
    if args.execute and args.dry_run:
        raise ToolError("--execute and --dry-run exclude each other", USAGE)
    admin = _Admin(args)
    group = args.group
    description = admin.describe(group)
    if description.state not in INACTIVE:
        raise ToolError(f"offsets can only be reset if group {group!r} is inactive, but its "
                        f"state is {_state(description)}")
    committed = admin.committed(group)
    partitions = sorted(committed) if args.all_topics else _scope(admin, args.topic)
    plan = _plan(admin, args, partitions, committed)
    if args.execute and plan:
        admin.commit(group, plan)
    print_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
           [(group, topic, partition, offset) for (topic, partition), offset in plan.items()])
    if not args.execute:
        print("Dry run: nothing was changed (add --execute to commit these offsets).",
              file=sys.stderr)
    return 0


def _scope(admin: _Admin, specs: list[str]) -> list[Partition]:
    """``TOPIC`` (every partition) or ``TOPIC:0,2`` (those) for each ``--topic``."""
    chosen: set[Partition] = set()
    for spec in specs:
        topic, sep, listed = spec.partition(":")
        existing = admin.partitions(topic)
        if not sep:
            chosen.update((topic, p) for p in existing)
            continue
        try:
            wanted = [int(p) for p in listed.split(",")]
        except ValueError:
            raise ToolError(f"--topic {spec!r}: partitions must be integers, e.g. t:0,1",
                            USAGE) from None
        missing = sorted(set(wanted) - set(existing))
        if missing:
            raise ToolError(f"topic {topic!r} has no partition {missing[0]}")
        chosen.update((topic, p) for p in wanted)
    return sorted(chosen)


def _plan(admin: _Admin, args: argparse.Namespace, partitions: list[Partition],
          committed: dict[Partition, int]) -> dict[Partition, int]:
    """The new offset of every partition, clamped to [log start, log end]."""
    starts = admin.offsets(OffsetSpec.earliest(), partitions)
    ends = admin.offsets(OffsetSpec.latest(), partitions)
    if args.to_earliest:
        wanted = starts
    elif args.to_latest:
        wanted = ends
    elif args.to_offset is not None:
        wanted = dict.fromkeys(partitions, args.to_offset)
    elif args.to_datetime is not None:
        found = admin.offsets(OffsetSpec.for_timestamp(args.to_datetime), partitions)
        wanted = {tp: offset if offset >= 0 else ends[tp] for tp, offset in found.items()}
    else:
        missing = [tp for tp in partitions if tp not in committed]
        if missing:
            raise ToolError(f"cannot shift {missing[0][0]}-{missing[0][1]}: the group has no "
                            "committed offset for it")
        wanted = {tp: committed[tp] + args.shift_by for tp in partitions}
    return {tp: min(max(wanted[tp], starts[tp]), ends[tp]) for tp in partitions}


def _delete(args: argparse.Namespace) -> int:
    admin = _Admin(args)
    futures = admin.client.delete_consumer_groups(args.group, request_timeout=REQUEST_TIMEOUT_S)
    failures = []
    for group, future in futures.items():
        try:
            future.result()
        except KafkaException as exc:
            error = kafka_error(exc)
            reason = {KafkaError.GROUP_ID_NOT_FOUND: "it does not exist",
                      KafkaError.NON_EMPTY_GROUP: "it has members"}.get(error.code(),
                                                                       error.str())
            failures.append(f"group {group!r} was not deleted: {reason}")
            continue
        print(f"Deleted group {group}.")
    if failures:
        raise ToolError("; ".join(failures))
    return 0
