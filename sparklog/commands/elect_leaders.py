"""``sparklog elect-leaders``: preferred or unclean leader elections, like
``kafka-leader-election.sh``.

    sparklog elect-leaders --bootstrap-server B --election-type PREFERRED|UNCLEAN
        (--topic T --partition P | --all-topic-partitions | --path-to-json-file FILE)
        [--command-config FILE | --admin.config FILE]

Invariants:
- Flags are Kafka's: ``--election-type`` in any case; exactly one of ``--topic`` (with
  ``--partition``, which needs it), ``--all-topic-partitions`` and ``--path-to-json-file``
  (Kafka's ``{"partitions": [{"topic": "t", "partition": 0}]}``, no partition twice); a
  wrong combination or a malformed file is a usage error (exit 2) before anything is sent.
- One ElectLeaders request through confluent-kafka's admin API, which sends it to the
  controller. stdout is Kafka's: ``Successfully completed leader election (PREFERRED) for
  partitions t-0, t-1``, ``Valid replica already elected for partitions ...``, and per
  failed partition ``Error completing leader election (PREFERRED) for partition: t-0:
  <error>``; any failed partition makes the exit code 1 with ``N replica(s) could not be
  elected`` on stderr, as Kafka's tool. With ``--all-topic-partitions`` the controller
  answers only the partitions it elected or failed to (Kafka's rule): every other partition
  of the cluster's metadata is printed as ``Valid replica already elected``, so a run where
  nothing moves says so rather than nothing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from confluent_kafka import ElectionType, KafkaError, TopicPartition

from sparklog.client.admin import REQUEST_TIMEOUT_S, kafka_error
from sparklog.client.watch import connected_admin
from sparklog.commands._client import (
    FAILED,
    USAGE,
    ToolError,
    client_config,
    client_parent,
    complain,
    tool,
)

NAME = "elect-leaders"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(NAME, parents=[client_parent()],
                                   help="elect preferred or unclean leaders (ElectLeaders)",
                                   description=__doc__.split("Invariants:")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--admin.config", dest="command_config", type=Path, metavar="FILE",
                        help="Kafka's name for --command-config")
    parser.add_argument("--election-type", required=True, type=_election_type,
                        metavar="PREFERRED|UNCLEAN", help="the type of election (any case)")
    parser.add_argument("--topic", help="the topic of --partition")
    parser.add_argument("--partition", type=int, help="the partition (with --topic)")
    parser.add_argument("--all-topic-partitions", action="store_true",
                        help="every partition of every topic")
    parser.add_argument("--path-to-json-file", type=Path, metavar="FILE",
                        help='{"partitions": [{"topic": T, "partition": P}]}')
    parser.set_defaults(func=tool(NAME, _elect))


def _election_type(text: str) -> ElectionType:
    try:
        return ElectionType[text.upper()]
    except KeyError:
        raise argparse.ArgumentTypeError(f"{text!r} is not PREFERRED or UNCLEAN") from None


def _partitions(args: argparse.Namespace) -> list[TopicPartition] | None:
    """The partitions the flags name; None for every partition (``--all-topic-partitions``)."""
    chosen = [args.topic is not None, args.all_topic_partitions,
              args.path_to_json_file is not None]
    if sum(chosen) != 1:
        raise ToolError("One and only one of the following options is required: --topic, "
                        "--all-topic-partitions, --path-to-json-file", USAGE)
    if args.topic is not None and args.partition is None:
        raise ToolError("Missing required option(s): --partition", USAGE)
    if args.topic is None and args.partition is not None:
        raise ToolError("Option --partition is only allowed if --topic is used", USAGE)
    if args.topic is not None:
        return [TopicPartition(args.topic, args.partition)]
    if args.all_topic_partitions:
        return None
    return _read_partitions(args.path_to_json_file)


def _read_partitions(path: Path) -> list[TopicPartition]:
    flag = f"--path-to-json-file {path}"
    try:
        document: Any = json.loads(path.read_text())
        named = [(str(e["topic"]), int(e["partition"])) for e in document["partitions"]]
    except OSError as exc:
        raise ToolError(f"{flag}: {exc.strerror or exc}", USAGE) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ToolError(f'{flag}: expected {{"partitions": [{{"topic": T, "partition": P}}]}} '
                        f"({exc})", USAGE) from None
    twice = sorted({f"{t}-{p}" for t, p in named if named.count((t, p)) > 1})
    if twice:
        raise ToolError(f"{flag}: Replica election data contains duplicate partitions: "
                        + ", ".join(twice), USAGE)
    if not named:
        raise ToolError(f"{flag}: no partitions", USAGE)
    return [TopicPartition(t, p) for t, p in named]


def _elect(args: argparse.Namespace) -> int:
    partitions = _partitions(args)
    election: ElectionType = args.election_type
    admin = connected_admin(client_config(args))
    # confluent-kafka 2.16 fails on either timeout argument (a SystemError in its binding):
    # its defaults (socket.timeout.ms, 60 s) bound the request and the broker's wait
    results = admin.elect_leaders(election, partitions).result()
    if partitions is None:
        answered = {(tp.topic, tp.partition) for tp in results}
        results.update({TopicPartition(name, p): KafkaError(KafkaError.ELECTION_NOT_NEEDED)
                        for name, topic in admin.list_topics(timeout=REQUEST_TIMEOUT_S)
                        .topics.items() for p in topic.partitions
                        if (name, p) not in answered})
    succeeded, noop, failed = [], [], []
    for tp, error in sorted(results.items(), key=lambda item: (item[0].topic,
                                                               item[0].partition)):
        name = f"{tp.topic}-{tp.partition}"
        code = None if error is None else _error(error)
        if code is None:
            succeeded.append(name)
        elif code.code() == KafkaError.ELECTION_NOT_NEEDED:
            noop.append(name)
        else:
            failed.append((name, code))
    if succeeded:
        print(f"Successfully completed leader election ({election.name}) for partitions "
              + ", ".join(succeeded))
    if noop:
        print("Valid replica already elected for partitions " + ", ".join(noop))
    for name, code in failed:
        print(f"Error completing leader election ({election.name}) for partition: {name}: "
              f"{code.name()}: {code.str()}")
    if failed:
        complain(NAME, f"{len(failed)} replica(s) could not be elected")
        return FAILED
    return 0


def _error(error: Any) -> KafkaError:
    """A partition's result as a ``KafkaError`` (the client gives an error or an exception)."""
    return error if isinstance(error, KafkaError) else kafka_error(error)
