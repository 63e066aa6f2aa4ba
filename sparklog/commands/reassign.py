"""``sparklog reassign``: move partition replicas between brokers, like
``kafka-reassign-partitions.sh``.

- ``--generate --topics-to-move-json-file F --broker-list 1,2`` prints the current
  assignment of F's topics (``{"topics":[{"topic":"t"}],"version":1}``) and a proposal over
  the listed brokers (round robin, rack-aware unless ``--disable-rack-aware``), both as
  reassignment JSON; it changes nothing.
- ``--execute --reassignment-json-file F`` starts the reassignments of F
  (``{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}``), printing
  the current assignment first (save it to roll back). Partitions already being reassigned
  are refused unless ``--additional``.
- ``--verify --reassignment-json-file F`` says per partition whether its reassignment is
  still in progress or completed; ``--list`` prints every reassignment in flight;
  ``--cancel --reassignment-json-file F`` cancels F's partitions' reassignments (their
  replicas go back to the original ones).

Invariants:
- A JSON file is checked before anything is sent: its shape, a version of 1, distinct
  integer replicas, a partition named once; ``log_dirs`` other than ``any`` are refused
  (moving replicas between a broker's log directories is not supported).
- AlterPartitionReassignments and ListPartitionReassignments go through
  ``sparklog.client.reassignments``; topic descriptions and brokers through confluent-kafka.
- stdout is for results; a failure is one stderr line and exit code 1 (2 for bad usage).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sparklog.client.admin import REQUEST_TIMEOUT_S
from sparklog.client.cluster import TopicPartition
from sparklog.client.reassignments import alter_reassignments, list_reassignments
from sparklog.client.watch import connected_admin
from sparklog.cluster.assignment import assign_replicas
from sparklog.commands._client import (
    USAGE,
    ToolError,
    client_config,
    client_parent,
    protocol_client,
    replicas_of,
    tool,
)
from sparklog.errors import KafkaError

NAME = "reassign"
Plan = dict[TopicPartition, tuple[int, ...]]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    command = subparsers.add_parser(NAME, parents=[client_parent()],
                                    help="move partition replicas between brokers",
                                    description=__doc__.split("\n\n")[0])
    action = command.add_mutually_exclusive_group(required=True)
    for flag, text in (("--generate", "propose an assignment of --topics-to-move-json-file's "
                                      "topics over --broker-list"),
                       ("--execute", "start the reassignments of --reassignment-json-file"),
                       ("--verify", "say whether each reassignment of the file completed"),
                       ("--list", "print the reassignments in progress"),
                       ("--cancel", "cancel the reassignments of --reassignment-json-file")):
        action.add_argument(flag, action="store_true", help=text)
    command.add_argument("--reassignment-json-file", type=Path, metavar="FILE")
    command.add_argument("--topics-to-move-json-file", type=Path, metavar="FILE")
    command.add_argument("--broker-list", metavar="IDS", help="brokers to propose, e.g. 1,2")
    command.add_argument("--disable-rack-aware", action="store_true",
                         help="--generate: ignore broker.rack")
    command.add_argument("--additional", action="store_true",
                         help="--execute: also when some partitions are being reassigned")
    command.set_defaults(func=tool(NAME, _run))


def _run(args: argparse.Namespace) -> int:
    if args.list:
        return _list(args)
    if args.generate:
        if args.topics_to_move_json_file is None or args.broker_list is None:
            raise ToolError("--generate needs --topics-to-move-json-file and --broker-list",
                            USAGE)
        return _generate(args)
    if args.reassignment_json_file is None:
        raise ToolError("give --reassignment-json-file", USAGE)
    plan = read_plan(args.reassignment_json_file)
    return _execute(args, plan) if args.execute else (
        _verify(args, plan) if args.verify else _cancel(args, plan))


# -- JSON files ------------------------------------------------------------------------------


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise ToolError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ToolError(f"{path} is not JSON: {exc}") from None


def read_plan(path: Path) -> Plan:
    """A reassignment JSON file (module invariants)."""
    value = _load(path)
    if not isinstance(value, dict) or not isinstance(value.get("partitions"), list):
        raise ToolError(f'{path}: expected {{"version":1,"partitions":[...]}}')
    if value.get("version", 1) != 1:
        raise ToolError(f"{path}: version {value['version']} is not supported (only 1)")
    plan: Plan = {}
    for entry in value["partitions"]:
        try:
            tp = TopicPartition(str(entry["topic"]), _integer(entry["partition"]))
            replicas = tuple(_integer(r) for r in entry["replicas"])
        except (KeyError, TypeError, ValueError):
            raise ToolError(f"{path}: each partition needs \"topic\", an integer \"partition\" "
                            f"and a list of integer \"replicas\": {json.dumps(entry)}") from None
        if not replicas or len(set(replicas)) != len(replicas):
            raise ToolError(f"{path}: {tp}: replicas {list(replicas)} must be distinct, at "
                            "least one")
        if any(d != "any" for d in entry.get("log_dirs", ())):
            raise ToolError(f"{path}: {tp}: log_dirs other than \"any\" are not supported")
        if tp in plan:
            raise ToolError(f"{path}: partition {tp} is listed twice")
        plan[tp] = replicas
    return plan


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(value)
    return value


def plan_json(plan: Mapping[TopicPartition, Iterable[int]]) -> str:
    """Kafka's reassignment JSON, one line, partitions sorted."""
    return json.dumps({"version": 1, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "replicas": list(replicas),
         "log_dirs": ["any"] * len(list(replicas))} for tp, replicas in sorted(plan.items())]},
        separators=(",", ":"))


# -- what the cluster has --------------------------------------------------------------------


# -- actions ---------------------------------------------------------------------------------


def _generate(args: argparse.Namespace) -> int:
    value = _load(args.topics_to_move_json_file)
    try:
        topics = [str(t["topic"]) for t in value["topics"]]
    except (KeyError, TypeError):
        raise ToolError(f'{args.topics_to_move_json_file}: expected '
                        '{"topics":[{"topic":"name"}],"version":1}') from None
    try:
        brokers = sorted({int(b) for b in args.broker_list.split(",")})
    except ValueError:
        raise ToolError(f"--broker-list {args.broker_list!r}: give broker ids like 1,2",
                        USAGE) from None
    admin = connected_admin(client_config(args))
    nodes = {n.id: n.rack for n in admin.describe_cluster(
        request_timeout=REQUEST_TIMEOUT_S).result().nodes}
    unknown = sorted(set(brokers) - nodes.keys())
    if unknown:
        raise ToolError(f"--broker-list names brokers that are not in the cluster: {unknown}")
    racks = {b: None if args.disable_rack_aware else nodes[b] for b in brokers}
    current = replicas_of(args, topics)
    proposal: Plan = {}
    for topic in dict.fromkeys(topics):
        partitions = sorted(tp.partition for tp in current if tp.topic == topic)
        factor = len(current[TopicPartition(topic, partitions[0])])
        try:
            assigned = assign_replicas(racks, len(partitions), factor)
        except KafkaError as exc:
            raise ToolError(f"topic {topic}: {exc}") from None
        proposal.update({TopicPartition(topic, p): r for p, r in assigned.items()})
    print("Current partition replica assignment")
    print(plan_json(current))
    print()
    print("Proposed partition reassignment configuration")
    print(plan_json(proposal))
    return 0


def _execute(args: argparse.Namespace, plan: Plan) -> int:
    current = replicas_of(args, {tp.topic for tp in plan})
    missing = sorted(tp for tp in plan if tp not in current)
    if missing:
        raise ToolError(f"partitions not found: {', '.join(map(str, missing))}")
    with protocol_client(args, NAME) as client:
        busy = sorted(tp for tp in list_reassignments(client, plan) if tp in plan)
        if busy and not args.additional:
            raise ToolError("cannot execute because there is an existing partition "
                            f"reassignment ({', '.join(map(str, busy))}); use --additional "
                            "to start these as well")
        print("Current partition replica assignment")
        print()
        print(plan_json({tp: current[tp] for tp in plan}))
        print()
        print("Save this to use as the --reassignment-json-file option during rollback")
        errors = alter_reassignments(client, dict(plan))
    _fail_on(errors, "start")
    print("Successfully started partition reassignments for "
          + ",".join(str(tp) for tp in sorted(plan)))
    return 0


def _fail_on(errors: Mapping[TopicPartition, str | None], what: str) -> None:
    failed = {tp: e for tp, e in errors.items() if e is not None}
    if failed:
        raise ToolError(f"could not {what} reassignments: " + "; ".join(
            f"{tp}: {e}" for tp, e in sorted(failed.items())))


def _verify(args: argparse.Namespace, plan: Plan) -> int:
    with protocol_client(args, NAME) as client:
        ongoing = list_reassignments(client, plan)
    current = replicas_of(args, {tp.topic for tp in plan})
    print("Status of partition reassignment:")
    for tp, replicas in sorted(plan.items()):
        if tp in ongoing:
            print(f"Reassignment of partition {tp} is still in progress.")
        elif current.get(tp) == replicas:
            print(f"Reassignment of partition {tp} is completed.")
        else:
            found = ",".join(map(str, current.get(tp, ())))
            print(f"There is no active reassignment of partition {tp}, but replica set is "
                  f"{found} rather than {','.join(map(str, replicas))}.")
    return 0


def _list(args: argparse.Namespace) -> int:
    with protocol_client(args, NAME) as client:
        ongoing = list_reassignments(client)
    if not ongoing:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for tp, found in sorted(ongoing.items()):
        print(f"{tp}: replicas: {_ids(found.replicas)}. adding: {_ids(found.adding)}. "
              f"removing: {_ids(found.removing)}.")
    return 0


def _ids(brokers: Iterable[int]) -> str:
    return ",".join(map(str, brokers))


def _cancel(args: argparse.Namespace, plan: Plan) -> int:
    with protocol_client(args, NAME) as client:
        active = sorted(tp for tp in list_reassignments(client, plan) if tp in plan)
        if not active:
            print("None of the specified partition reassignments are active.")
            return 0
        errors = alter_reassignments(client, dict.fromkeys(active))
    _fail_on(errors, "cancel")
    print("Successfully cancelled partition reassignments for: "
          + ",".join(str(tp) for tp in active))
    return 0
