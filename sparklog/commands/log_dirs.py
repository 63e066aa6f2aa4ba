"""``sparklog log-dirs --describe``: brokers' log directories and the replicas in them, like
``kafka-log-dirs.sh``.

    sparklog log-dirs --describe --bootstrap-server B [--broker-list 0,1] [--topic-list a,b]
        [--command-config FILE]

Invariants:
- Every broker named by ``--broker-list`` (default: every live broker) is asked with
  DescribeLogDirs through sparklog's protocol client (confluent-kafka has no such call); a
  broker not in the cluster fails the command (one stderr line, exit 1) before any broker
  is asked, naming the brokers that exist, as Kafka's.
- stdout is Kafka's: ``Querying brokers for log directories information``, ``Received log
  directory information from brokers 0,1,2``, then one line of JSON, ``{"version":1,
  "brokers":[{"broker":0,"logDirs":[{"logDir":"/data","error":null,"partitions":
  [{"partition":"t-0","size":123,"offsetLag":0,"isFuture":false}]}]}]}``, keeping only the
  topics of ``--topic-list`` when given. A directory's error is its Kafka error name.
- ``--describe`` is required (Kafka's tool has no other action); a bad list is a usage
  error (exit 2).
"""

from __future__ import annotations

import argparse
import json

from sparklog.client.log_dirs import describe_log_dirs
from sparklog.commands._client import (
    USAGE,
    ToolError,
    client_parent,
    id_list,
    protocol_client,
    tool,
)
from sparklog.errors import error_name

NAME = "log-dirs"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(NAME, parents=[client_parent()],
                                   help="describe brokers' log directories (DescribeLogDirs)",
                                   description=__doc__.split("Invariants:")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--describe", action="store_true", help="describe the log directories")
    parser.add_argument("--broker-list", type=id_list("broker ids"), metavar="0,1,...",
                        help="the brokers to ask (default: every broker)")
    parser.add_argument("--topic-list", metavar="T,T...",
                        help="only these topics' partitions (default: every topic)")
    parser.set_defaults(func=tool(NAME, _describe))


def _describe(args: argparse.Namespace) -> int:
    if not args.describe:
        raise ToolError("--describe is required (the only action of log-dirs)", USAGE)
    topics = {t for t in (args.topic_list or "").split(",") if t}
    with protocol_client(args, NAME) as client:
        print("Querying brokers for log directories information")
        found = describe_log_dirs(client, args.broker_list)
    print("Received log directory information from brokers "
          + ",".join(str(b) for b in found))
    document = {"version": 1, "brokers": [
        {"broker": broker, "logDirs": [
            {"logDir": directory.path,
             "error": None if directory.error == 0 else error_name(directory.error),
             "partitions": [
                 {"partition": f"{tp.topic}-{tp.partition}", "size": info.size,
                  "offsetLag": info.offset_lag, "isFuture": info.is_future}
                 for tp, info in sorted(directory.replicas.items())
                 if not topics or tp.topic in topics]}
            for directory in directories]}
        for broker, directories in found.items()]}
    print(json.dumps(document, separators=(",", ":")))
    return 0
