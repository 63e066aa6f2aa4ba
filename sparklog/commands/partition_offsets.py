"""``sparklog get-offsets`` and ``sparklog delete-records``, like ``kafka-get-offsets.sh`` and
``kafka-delete-records.sh``.

    sparklog get-offsets --bootstrap-server B [--topic REGEX] [--partitions 0,1]
        [--topic-partitions t1:0,t2] [--time latest|earliest|max-timestamp|EPOCH_MS]
        [--exclude-internal-topics]
    sparklog delete-records --bootstrap-server B --offset-json-file FILE

Invariants:
- ``get-offsets`` prints ``topic:partition:offset`` per partition, sorted, as Kafka's tool:
  ``--time latest`` or ``-1`` (default) the log end, ``earliest`` or ``-2`` the log start,
  ``max-timestamp`` or ``-3`` the offset of the record with the largest timestamp
  (ListOffsets v7), a time in epoch milliseconds the first offset at or after it (a
  partition without one prints nothing, as Kafka's). ``--topic`` is a regular expression
  matched against the whole name.
- ``delete-records`` reads Kafka's JSON, ``{"partitions": [{"topic": "t", "partition": 0,
  "offset": 3}], "version": 1}`` (offset -1: the high watermark), sends one DeleteRecords
  request and prints ``partition: t-0  low_watermark: 3`` per partition; a partition that
  failed is one stderr line naming it and the broker's reason, and the exit code is 1.
- A malformed file or flag is a usage error (exit 2) naming it, before anything is sent.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import OffsetSpec

from sparklog.client.admin import REQUEST_TIMEOUT_S, kafka_error
from sparklog.client.watch import connected_admin
from sparklog.commands._client import (
    FAILED,
    USAGE,
    ToolError,
    client_config,
    client_parent,
    complain,
    id_list,
    regex,
    tool,
)

# Kafka's Topic.isInternal: the topics its tools leave out with --exclude-internal-topics.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
_SPECS = {-1: OffsetSpec.latest, -2: OffsetSpec.earliest, -3: OffsetSpec.max_timestamp}
_TIME_NAMES = {"latest": -1, "earliest": -2, "max-timestamp": -3}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    get = subparsers.add_parser("get-offsets", parents=[client_parent()],
                                help="print partitions' offsets (log end, start, by time)",
                                description=__doc__.split("Invariants:")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    get.add_argument("--topic", help="a regular expression of topic names (default: all)")
    get.add_argument("--partitions", type=_partition_list, metavar="P,P...",
                     help="only these partitions (with --topic)")
    get.add_argument("--topic-partitions", metavar="T[:P,P...],...",
                     help="topics (regular expressions) with optional partitions; "
                          "excludes --topic and --partitions")
    get.add_argument("--time", type=_time, default=-1,
                     metavar="latest|earliest|max-timestamp|EPOCH_MS",
                     help="latest or -1: the log end (default); earliest or -2: the log "
                          "start; max-timestamp or -3: the record with the largest "
                          "timestamp; or a time in epoch milliseconds")
    get.add_argument("--exclude-internal-topics", action="store_true")
    get.set_defaults(func=tool("get-offsets", _get_offsets))

    delete = subparsers.add_parser("delete-records", parents=[client_parent()],
                                   help="delete records below offsets (DeleteRecords)",
                                   description=__doc__.split("Invariants:")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    delete.add_argument("--offset-json-file", type=Path, required=True, metavar="FILE",
                        help='{"partitions": [{"topic": T, "partition": P, "offset": O}], '
                             '"version": 1}')
    delete.set_defaults(func=tool("delete-records", _delete_records))


_partition_list = id_list("partitions")


def _time(text: str) -> int:
    """An argparse type: Kafka's ``--time``, a name or a number."""
    try:
        return _TIME_NAMES.get(text.lower()) or int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not latest, earliest, max-timestamp or a time in epoch milliseconds"
        ) from None


# -- get-offsets --------------------------------------------------------------------------------


def _selectors(args: argparse.Namespace) -> list[tuple[re.Pattern[str], list[int] | None]]:
    """(topic regex, partitions or None for all) pairs from the flags."""
    if args.topic_partitions is not None:
        if args.topic is not None or args.partitions is not None:
            raise ToolError("--topic-partitions excludes --topic and --partitions", USAGE)
        pairs = []
        for item in re.split(r",(?![0-9])", args.topic_partitions):
            name, sep, listed = item.partition(":")
            pairs.append((regex(name), _partition_list(listed) if sep else None))
        return pairs
    return [(regex(args.topic or ".*"), args.partitions)]


def _get_offsets(args: argparse.Namespace) -> int:
    selectors = _selectors(args)
    spec = _SPECS[args.time]() if args.time in _SPECS else (
        OffsetSpec.for_timestamp(args.time) if args.time >= 0 else None)
    if spec is None:
        raise ToolError(f"--time {args.time}: expected latest (-1), earliest (-2), "
                        "max-timestamp (-3) or a time in epoch milliseconds", USAGE)
    admin = connected_admin(client_config(args))
    metadata = admin.list_topics(timeout=REQUEST_TIMEOUT_S)
    wanted = []
    for name, topic in sorted(metadata.topics.items()):
        if args.exclude_internal_topics and name in INTERNAL_TOPICS:
            continue
        for pattern, partitions in selectors:
            if pattern.fullmatch(name):
                wanted += [TopicPartition(name, p) for p in sorted(topic.partitions)
                           if partitions is None or p in partitions]
    if not wanted:
        return 0
    futures = admin.list_offsets(dict.fromkeys(wanted, spec), request_timeout=REQUEST_TIMEOUT_S)
    found = {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}
    for (name, partition), offset in sorted(found.items()):
        if offset >= 0:
            print(f"{name}:{partition}:{offset}")
    return 0


# -- delete-records -----------------------------------------------------------------------------


def _read_offsets(path: Path) -> list[TopicPartition]:
    try:
        document: Any = json.loads(path.read_text())
        entries = document["partitions"]
        return [TopicPartition(str(e["topic"]), int(e["partition"]), int(e["offset"]))
                for e in entries]
    except OSError as exc:
        raise ToolError(f"--offset-json-file {path}: {exc.strerror or exc}", USAGE) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise ToolError(f"--offset-json-file {path}: expected {{\"partitions\": [{{\"topic\": "
                        f"T, \"partition\": P, \"offset\": O}}], \"version\": 1}} ({exc})",
                        USAGE) from None


def _delete_records(args: argparse.Namespace) -> int:
    partitions = _read_offsets(args.offset_json_file)
    if not partitions:
        raise ToolError(f"--offset-json-file {args.offset_json_file}: no partitions", USAGE)
    admin = connected_admin(client_config(args))
    print("Executing records delete operation")
    futures = admin.delete_records(partitions, request_timeout=REQUEST_TIMEOUT_S)
    print("Records delete operation completed:")
    status = 0
    for tp, future in sorted(futures.items(), key=lambda item: (item[0].topic,
                                                                item[0].partition)):
        try:
            deleted = future.result()
        except KafkaException as exc:
            complain("delete-records", f"partition {tp.topic}-{tp.partition}: "
                                       f"{kafka_error(exc).str()}")
            status = FAILED
            continue
        print(f"partition: {tp.topic}-{tp.partition}\tlow_watermark: {deleted.low_watermark}")
    return status
