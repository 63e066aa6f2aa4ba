"""``sparklog groups``: list, describe, reset and delete the offsets of, and delete consumer
groups.

Like ``kafka-consumer-groups.sh``, through confluent-kafka's AdminClient:
- ``list`` prints one group id per line (``--state`` adds each group's state);
- ``describe (--group G ... | --all-groups)`` prints, per group, the group's state,
  coordinator, assignment strategy and member count, then Kafka's offsets table (GROUP
  TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID, LAG =
  LOG-END-OFFSET - CURRENT-OFFSET) for every partition that is assigned or has a committed
  offset, then each member with its assignment; ``--state``, ``--offsets`` or ``--members``
  print only that table, as Kafka's tool; a KIP-848 consumer group's state is the
  coordinator's (Assigning, Reconciling too); ``--verbose`` adds, as Kafka's tool, the
  group's TYPE (classic or consumer), GROUP-EPOCH and TARGET-ASSIGNMENT-EPOCH to the state
  table and each member's GROUP-INSTANCE-ID, CURRENT-EPOCH, CURRENT-ASSIGNMENT, TARGET-EPOCH
  TARGET-ASSIGNMENT and UPGRADED (Kafka 4.1's: ``true`` for a consumer-protocol member,
  ``false`` for a classic member of an upgraded group) to the members table (``-`` for a
  classic group);
- ``reset-offsets (--group G ... | --all-groups) (--topic T[:P,P...] ... | --all-topics)
  --to-...`` prints the plan (GROUP TOPIC PARTITION NEW-OFFSET) and commits it only with
  ``--execute``; targets are Kafka's: ``--to-earliest``, ``--to-latest``, ``--to-current``
  (the committed offset; the log end without one), ``--to-offset``, ``--to-datetime``,
  ``--by-duration PnDTnHnMnS`` (the first offset at or after now minus the duration),
  ``--shift-by`` and ``--from-file`` (CSV lines ``topic,partition,offset``, as ``--export``
  prints the plan: one group, or ``group,topic,partition,offset`` for several);
- ``delete (--group G ... | --all-groups)`` deletes groups that have no members;
- ``delete-offsets --group G --topic T[:P,P...] ...`` (Kafka's ``--delete-offsets``) deletes
  the group's committed offsets of those partitions (every partition of a topic named
  without any) with OffsetDelete, through ``sparklog.client.group_offsets``; it prints
  TOPIC PARTITION STATUS, the status ``Successful`` or the partition's error (a topic the
  group's members still consume cannot lose its offsets). A group with members that does
  not use the consumer protocol, or an unknown group, fails as a whole.

Invariants:
- stdout is for results (tables, ids, confirmations); notes such as "dry run" and failures go
  to stderr. A failure is one line and exit code 1 (2 for a usage error).
- ``reset-offsets`` changes nothing unless ``--execute`` is given, and refuses (exit 1) for a
  group that has members (any state but Empty or Dead), as Kafka's tool does. New offsets
  are clamped to the partition's [log start, log end], as Kafka's tool does, with a warning
  on stderr naming the partition, the target and the offset used; ``--shift-by`` needs a
  committed offset to shift from.
- A value that does not exist (no committed offset, no member) is printed ``-``.
- ``delete-offsets`` exits 1 when any partition kept its offset (after the table).
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import sys
import time
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import ConsumerGroupDescription, MemberAssignment, OffsetSpec

from sparklog.client.admin import REQUEST_TIMEOUT_S, kafka_error, topic_partitions
from sparklog.client.cluster import TopicPartition as ClientPartition
from sparklog.client.consumer_groups import ConsumerGroupEpochs, describe_consumer_group
from sparklog.client.group_offsets import GroupOffsetsError, delete_offsets
from sparklog.client.watch import connected_admin
from sparklog.commands._client import (
    USAGE,
    ToolError,
    client_config,
    client_parent,
    complain,
    protocol_client,
    tool,
    topic_error,
)
from sparklog.commands._table import print_table
from sparklog.errors import ErrorCode, error_name

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
_DURATION = re.compile(r"P(?:(?P<days>\d+)D)?(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?"
                       r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?", re.IGNORECASE)
_DURATION_UNITS_MS = {"days": 86_400_000, "hours": 3_600_000, "minutes": 60_000,
                      "seconds": 1000}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parent = client_parent()
    groups = subparsers.add_parser(NAME, help="list, describe, reset and delete offsets of, "
                                              "delete groups",
                                   description=__doc__.split("\n\n")[1])
    actions = groups.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", parents=[parent], help="print group ids")
    listing.add_argument("--state", action="store_true", help="also print each group's state")
    listing.set_defaults(func=tool(NAME, _list))

    describe = actions.add_parser("describe", parents=[parent],
                                  help="state, members, committed offsets and lag of groups")
    _add_groups(describe)
    only = describe.add_mutually_exclusive_group()
    only.add_argument("--state", dest="only", action="store_const", const="state",
                      help="only the state line of each group")
    only.add_argument("--offsets", dest="only", action="store_const", const="offsets",
                      help="only the offsets table")
    only.add_argument("--members", dest="only", action="store_const", const="members",
                      help="only the members table")
    describe.add_argument("--verbose", action="store_true",
                          help="also the group's type and epochs, and each member's epoch, "
                               "current and target assignment")
    describe.set_defaults(func=tool(NAME, _describe))

    reset = actions.add_parser("reset-offsets", parents=[parent],
                               help="plan (and with --execute commit) new offsets of groups")
    _add_groups(reset)
    scope = reset.add_mutually_exclusive_group()
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
    target.add_argument("--by-duration", type=_duration, metavar="PnDTnHnMnS",
                        help="the first offset at or after now minus this ISO 8601 duration")
    target.add_argument("--to-current", action="store_true",
                        help="the committed offset (the log end where there is none)")
    target.add_argument("--shift-by", type=int, metavar="N",
                        help="the committed offset plus N (negative: back)")
    target.add_argument("--from-file", type=Path, metavar="CSV",
                        help="offsets from a CSV file as --export prints them")
    reset.add_argument("--execute", action="store_true", help="commit the new offsets")
    reset.add_argument("--dry-run", action="store_true",
                       help="only print the plan (the default without --execute)")
    reset.add_argument("--export", action="store_true",
                       help="print the plan as CSV, the format --from-file reads")
    reset.set_defaults(func=tool(NAME, _reset))

    delete = actions.add_parser("delete", parents=[parent], help="delete groups without members")
    _add_groups(delete)
    delete.set_defaults(func=tool(NAME, _delete))

    delete_offsets = actions.add_parser("delete-offsets", parents=[parent],
                                        help="delete a group's committed offsets of partitions")
    delete_offsets.add_argument("--group", required=True, help="the group")
    delete_offsets.add_argument("--topic", action="append", required=True,
                                metavar="TOPIC[:P,P...]",
                                help="a topic, optionally with some of its partitions "
                                     "(repeatable)")
    delete_offsets.set_defaults(func=tool(NAME, _delete_offsets))


def _add_groups(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--group", action="append", help="a group (repeatable)")
    which.add_argument("--all-groups", action="store_true", help="every group")


def _duration(text: str) -> int:
    """An argparse type: an ISO 8601 duration (Java's ``Duration.parse``) in milliseconds."""
    match = _DURATION.fullmatch(text)
    if match is None or not any(match.groups()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like PT1H30M or P1DT12H")
    return int(sum(float(value) * _DURATION_UNITS_MS[unit]
                   for unit, value in match.groupdict().items() if value))


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
        self.args = args
        self.client = connected_admin(client_config(args))

    def epochs(self, description: ConsumerGroupDescription) -> ConsumerGroupEpochs | None:
        """A KIP-848 consumer group's state and epochs (None for a classic group)."""
        if description.type != ConsumerGroupType.CONSUMER:
            return None
        return describe_consumer_group(protocol_client(self.args, NAME), description.group_id)

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


def _groups(admin: _Admin, args: argparse.Namespace) -> list[str]:
    """The groups named, or every group with ``--all-groups``."""
    return admin.group_ids() if args.all_groups else list(dict.fromkeys(args.group))


def _describe(args: argparse.Namespace) -> int:
    admin = _Admin(args)
    for number, group in enumerate(_groups(admin, args)):
        if number:
            print()
        _describe_group(admin, group, args.only, args.verbose)
    return 0


def _describe_group(admin: _Admin, group: str, only: str | None, verbose: bool) -> None:
    description = admin.describe(group)
    committed = admin.committed(group)
    if description.state == ConsumerGroupState.DEAD and not committed:
        raise ToolError(f"consumer group {group!r} does not exist")
    epochs = admin.epochs(description)
    state = _state(description) if epochs is None else epochs.state
    if only in (None, "state"):
        coordinator = description.coordinator
        where = f"{coordinator.host}:{coordinator.port} ({coordinator.id})"
        if verbose:
            print_table(("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "TYPE",
                         "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"),
                        [(group, where, description.partition_assignor or None, state,
                          "classic" if epochs is None else "consumer",
                          epochs and epochs.group_epoch, epochs and epochs.assignment_epoch,
                          len(description.members))])
        else:
            print_table(("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE",
                         "#MEMBERS"),
                        [(group, where, description.partition_assignor or None, state,
                          len(description.members))])
    if only is None:
        print()
    if only in (None, "offsets"):
        _offsets_table(admin, group, description, committed)
    if only is None:
        print()
    if only in (None, "members"):
        _members_table(group, description, epochs if verbose else None, verbose)


def _offsets_table(admin: _Admin, group: str, description: ConsumerGroupDescription,
                   committed: dict[Partition, int]) -> None:
    owners = {(tp.topic, tp.partition): member for member in description.members
              for tp in member.assignment.topic_partitions}
    partitions = sorted(owners.keys() | committed.keys())
    ends = admin.offsets(OffsetSpec.latest(), partitions)
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


def _members_table(group: str, description: ConsumerGroupDescription,
                   epochs: ConsumerGroupEpochs | None, verbose: bool) -> None:
    if not description.members:
        print(f"Consumer group '{group}' has no active members.")
        return
    members = sorted(description.members, key=lambda m: m.member_id)
    if not verbose:
        print_table(("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"),
                    [(group, m.member_id, m.host, m.client_id,
                      len(m.assignment.topic_partitions), _member_assignment(m.assignment))
                     for m in members])
        return
    print_table(("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                 "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT",
                 "UPGRADED"),
                [(group, m.member_id, m.group_instance_id, m.host, m.client_id,
                  len(m.assignment.topic_partitions),
                  epochs and epochs.member_epochs.get(m.member_id),
                  _member_assignment(m.assignment), epochs and epochs.assignment_epoch,
                  None if m.target_assignment is None
                  else _member_assignment(m.target_assignment),
                  epochs and str(epochs.upgraded.get(m.member_id, True)).lower())
                 for m in members])


def _member_assignment(assignment: MemberAssignment) -> str:
    return _assignment_text((tp.topic, tp.partition) for tp in assignment.topic_partitions)


def _reset(args: argparse.Namespace) -> int:
    if args.execute and args.dry_run:
        raise ToolError("--execute and --dry-run exclude each other", USAGE)
    if (args.from_file is None) == (args.topic is None and not args.all_topics):
        raise ToolError("give the partitions with --topic or --all-topics, or --from-file "
                        "(which names them)", USAGE)
    admin = _Admin(args)
    groups = _groups(admin, args)
    from_file = _read_plan(args.from_file, groups) if args.from_file is not None else None
    plans = {}
    for group in groups:
        description = admin.describe(group)
        if description.state not in INACTIVE:
            raise ToolError(f"offsets can only be reset if group {group!r} is inactive, but "
                            f"its state is {_state(description)}")
        committed = admin.committed(group)
        if from_file is not None:
            wanted = from_file.get(group, {})
            plans[group] = _clamped(admin, wanted, "the offset from the file")
            continue
        partitions = sorted(committed) if args.all_topics else _scope(admin, args.topic)
        plans[group] = _plan(admin, args, partitions, committed)
    for group, plan in plans.items():
        if args.execute and plan:
            admin.commit(group, plan)
    if args.export:
        _export(plans)
    else:
        print_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
               [(group, topic, partition, offset) for group, plan in plans.items()
                for (topic, partition), offset in plan.items()])
    if not args.execute:
        print("Dry run: nothing was changed (add --execute to commit these offsets).",
              file=sys.stderr)
    return 0


def _export(plans: dict[str, dict[Partition, int]]) -> None:
    """The plan as Kafka's ``--export`` CSV: ``topic,partition,offset`` for one group,
    ``group,topic,partition,offset`` for several."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for group, plan in plans.items():
        for (topic, partition), offset in plan.items():
            writer.writerow(([group] if len(plans) > 1 else []) + [topic, partition, offset])
    sys.stdout.write(out.getvalue())


def _read_plan(path: Path, groups: list[str]) -> dict[str, dict[Partition, int]]:
    """``--from-file``: per group, the offsets a CSV file of ``--export`` names."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ToolError(f"--from-file {path}: {exc.strerror or exc}", USAGE) from None
    plans: dict[str, dict[Partition, int]] = {}
    for number, row in enumerate(csv.reader(lines), 1):
        if not row:
            continue
        if len(row) == 3 and len(groups) == 1:
            row = [groups[0], *row]
        try:
            group, topic, partition, offset = row
            plans.setdefault(group, {})[topic, int(partition)] = int(offset)
        except ValueError:
            raise ToolError(f"--from-file {path}:{number}: expected topic,partition,offset"
                            f"{' (or group,topic,partition,offset)' if len(groups) == 1 else ''}"
                            f" with integers, got {','.join(row)!r}", USAGE) from None
    return plans


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
    if args.to_earliest:
        return admin.offsets(OffsetSpec.earliest(), partitions)
    if args.to_latest:
        return admin.offsets(OffsetSpec.latest(), partitions)
    if args.to_current:
        ends = admin.offsets(OffsetSpec.latest(), partitions)
        return {tp: committed.get(tp, ends[tp]) for tp in partitions}
    if args.to_offset is not None:
        return _clamped(admin, dict.fromkeys(partitions, args.to_offset), "the offset asked for")
    if args.to_datetime is not None or args.by_duration is not None:
        when = args.to_datetime if args.to_datetime is not None else (
            int(time.time() * 1000) - args.by_duration)
        found = admin.offsets(OffsetSpec.for_timestamp(when), partitions)
        ends = admin.offsets(OffsetSpec.latest(), partitions)
        return {tp: offset if offset >= 0 else ends[tp] for tp, offset in found.items()}
    missing = [tp for tp in partitions if tp not in committed]
    if missing:
        raise ToolError(f"cannot shift {missing[0][0]}-{missing[0][1]}: the group has no "
                        "committed offset for it")
    return _clamped(admin, {tp: committed[tp] + args.shift_by for tp in partitions},
                    "the shifted offset")


def _clamped(admin: _Admin, wanted: dict[Partition, int], what: str) -> dict[Partition, int]:
    """``wanted`` moved into each partition's [log start, log end], with a warning for each
    offset moved, as Kafka's tool does."""
    starts = admin.offsets(OffsetSpec.earliest(), wanted)
    ends = admin.offsets(OffsetSpec.latest(), wanted)
    plan = {}
    for tp, offset in sorted(wanted.items()):
        plan[tp] = min(max(offset, starts[tp]), ends[tp])
        if plan[tp] != offset:
            side = "lower than the log start" if offset < starts[tp] else "higher than the log end"
            complain(NAME, f"warning: {what} {offset} for {tp[0]}-{tp[1]} is {side} offset; "
                           f"using {plan[tp]}")
    return plan


def _delete(args: argparse.Namespace) -> int:
    admin = _Admin(args)
    groups = _groups(admin, args)
    if not groups:
        return 0
    futures = admin.client.delete_consumer_groups(groups, request_timeout=REQUEST_TIMEOUT_S)
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


def _delete_offsets(args: argparse.Namespace) -> int:
    partitions = _scope(_Admin(args), args.topic)
    with protocol_client(args, NAME) as client:
        try:
            errors = delete_offsets(client, args.group,
                                    [ClientPartition(t, p) for t, p in partitions])
        except GroupOffsetsError as exc:
            reason = {ErrorCode.GROUP_ID_NOT_FOUND: "it does not exist",
                      ErrorCode.NON_EMPTY_GROUP: "it has members and does not use the "
                                                 "consumer protocol"}.get(exc.code,
                                                                          error_name(exc.code))
            raise ToolError(f"the offsets of group {args.group!r} were not deleted: "
                            f"{reason}") from None
    print_table(("TOPIC", "PARTITION", "STATUS"), (
        (tp.topic, str(tp.partition),
         "Successful" if code == ErrorCode.NONE else f"Error: {error_name(code)}")
        for tp, code in sorted(errors.items())))
    kept = sorted(tp for tp, code in errors.items() if code != ErrorCode.NONE)
    if kept:
        raise ToolError(f"group {args.group!r} kept the offsets of {len(kept)} partitions "
                        f"(first {kept[0]}: {error_name(errors[kept[0]])})")
    return 0
