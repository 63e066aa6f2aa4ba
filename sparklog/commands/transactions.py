"""``sparklog transactions``: list, describe, abort and find hanging transactions, like
``kafka-transactions.sh``.

- ``list [--state S ...] [--producer-id N ...]`` prints every transactional id the brokers'
  coordinators know (TRANSACTIONALID COORDINATOR PRODUCERID TRANSACTIONSTATE), asking every
  broker (ListTransactions is answered per coordinator);
- ``describe --transactional-id ID`` prints Kafka's columns (COORDINATORID TRANSACTIONALID
  PRODUCERID PRODUCEREPOCH TRANSACTIONSTATE TRANSACTIONTIMEOUTMS
  CURRENTTRANSACTIONSTARTTIMEMS TRANSACTIONDURATIONMS TOPICPARTITIONS);
- ``describe-producers --topic T --partition P [--broker-id B]`` prints the producers
  active in that partition, as its leader (or broker B's replica) knows them, with Kafka's
  columns (PRODUCERID PRODUCEREPOCH LATESTCOORDINATOREPOCH LASTSEQUENCE LASTTIMESTAMP
  CURRENTTRANSACTIONSTARTOFFSET, ``None`` for no open transaction, as Kafka's tool);
- ``abort --topic T --partition P --producer-id N --producer-epoch E --coordinator-epoch C``
  writes an ABORT marker into that partition (WriteTxnMarkers to its leader), as Kafka's tool
  does for a hanging transaction; ``abort --transactional-id ID`` (a sparklog addition)
  asks the id's coordinator to abort its open transaction, which fences its producer, the
  way a new producer of the id would (InitProducerId);
- ``find-hanging (--broker-id B | --topic T [--partition P]) [--max-transaction-timeout
  MIN]`` does what Kafka's does: the partitions searched are the topic's (or every topic's,
  internal ones included) with broker B among their replicas; their active producers
  (DescribeProducers, at broker B when given, else at each leader) with an open
  transaction whose last write is older than the timeout (15 minutes by default) are
  candidates; a candidate is hanging when no coordinator lists a transactional id for its
  producer id (ListTransactions), the id is not found (DescribeTransactions), or the id's
  transaction does not include that partition. It prints Kafka's columns (Topic Partition
  ProducerId ProducerEpoch CoordinatorEpoch StartOffset LastTimestamp Duration(min)); an
  ``abort --topic ... --producer-id ...`` with those values ends one.

Invariants:
- These requests have no confluent-kafka API; they go through
  ``sparklog.client.transactions``, so they work against any Kafka broker that serves them.
- stdout is for results; a failure is one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import time

from sparklog.client.cluster import TopicPartition
from sparklog.client.kafka import KafkaClient
from sparklog.client.transactions import (
    ProducerListing,
    TransactionError,
    abort_by_id,
    describe_producers,
    describe_transaction,
    list_transactions,
    write_abort_marker,
)
from sparklog.commands._client import (
    USAGE,
    ToolError,
    client_parent,
    protocol_client,
    replicas_of,
    tool,
)
from sparklog.commands._table import print_table
from sparklog.errors import ErrorCode

NAME = "transactions"
MINUTE_MS = 60_000
OpenTransaction = tuple[TopicPartition, ProducerListing]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parent = client_parent()
    command = subparsers.add_parser(NAME, help="list, describe, abort and find hanging "
                                               "transactions",
                                    description=__doc__.split("\n\n")[0])
    actions = command.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = actions.add_parser("list", parents=[parent], help="print transactional ids")
    listing.add_argument("--state", action="append", default=[],
                         help="only ids in this state, e.g. Ongoing (repeatable)")
    listing.add_argument("--producer-id", action="append", default=[], type=int,
                         help="only ids of this producer id (repeatable)")
    listing.set_defaults(func=tool(NAME, _list))

    describe = actions.add_parser("describe", parents=[parent],
                                  help="state, producer and partitions of a transactional id")
    describe.add_argument("--transactional-id", required=True)
    describe.set_defaults(func=tool(NAME, _describe))

    producers = actions.add_parser("describe-producers", parents=[parent],
                                   help="the active producers of a topic partition")
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", required=True, type=int)
    producers.add_argument("--broker-id", type=int,
                           help="ask this broker's replica, not the partition's leader")
    producers.set_defaults(func=tool(NAME, _describe_producers))

    abort = actions.add_parser("abort", parents=[parent], help="abort a transaction")
    abort.add_argument("--transactional-id", help="abort this id's open transaction")
    abort.add_argument("--topic")
    abort.add_argument("--partition", type=int)
    abort.add_argument("--producer-id", type=int)
    abort.add_argument("--producer-epoch", type=int)
    abort.add_argument("--coordinator-epoch", type=int)
    abort.set_defaults(func=tool(NAME, _abort))

    hanging = actions.add_parser("find-hanging", parents=[parent],
                                 help="open transactions no coordinator will end")
    hanging.add_argument("--broker-id", type=int, help="search this broker's partitions")
    hanging.add_argument("--topic", help="search this topic's partitions")
    hanging.add_argument("--partition", type=int, help="only this partition (with --topic)")
    hanging.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                         help="only transactions whose last write is older (default 15)")
    hanging.set_defaults(func=tool(NAME, _find_hanging))


def _list(args: argparse.Namespace) -> int:
    with protocol_client(args, NAME) as client:
        found = list_transactions(client, args.state, args.producer_id)
    print_table(("TRANSACTIONALID", "COORDINATOR", "PRODUCERID", "TRANSACTIONSTATE"),
                sorted((t.transactional_id, t.coordinator, t.producer_id, t.state)
                       for t in found))
    return 0


def _describe(args: argparse.Namespace) -> int:
    with protocol_client(args, NAME) as client:
        txn = describe_transaction(client, args.transactional_id)
    duration = int(time.time() * 1000) - txn.start_ms if txn.start_ms >= 0 else None
    partitions = ",".join(f"{tp.topic}-{tp.partition}" for tp in txn.partitions)
    print_table(("COORDINATORID", "TRANSACTIONALID", "PRODUCERID", "PRODUCEREPOCH",
                 "TRANSACTIONSTATE", "TRANSACTIONTIMEOUTMS", "CURRENTTRANSACTIONSTARTTIMEMS",
                 "TRANSACTIONDURATIONMS", "TOPICPARTITIONS"),
                [(txn.coordinator, txn.transactional_id, txn.producer_id, txn.producer_epoch,
                  txn.state, txn.timeout_ms, txn.start_ms if txn.start_ms >= 0 else None,
                  duration, partitions or None)])
    return 0


def _describe_producers(args: argparse.Namespace) -> int:
    with protocol_client(args, NAME) as client:
        found = describe_producers(client, TopicPartition(args.topic, args.partition),
                                   args.broker_id)
    print_table(("PRODUCERID", "PRODUCEREPOCH", "LATESTCOORDINATOREPOCH", "LASTSEQUENCE",
                 "LASTTIMESTAMP", "CURRENTTRANSACTIONSTARTOFFSET"),
                [(p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence,
                  p.last_timestamp,
                  p.current_txn_start_offset if p.current_txn_start_offset >= 0 else "None")
                 for p in found])
    return 0


def _abort(args: argparse.Namespace) -> int:
    marker = (args.topic, args.partition, args.producer_id, args.producer_epoch,
              args.coordinator_epoch)
    by_id = args.transactional_id is not None and all(v is None for v in marker)
    by_marker = args.transactional_id is None and all(v is not None for v in marker)
    if not (by_id or by_marker):
        raise ToolError("give --transactional-id, or all of --topic --partition --producer-id "
                        "--producer-epoch --coordinator-epoch", 2)
    with protocol_client(args, NAME) as client:
        if by_id:
            tid = args.transactional_id
            producer_id, epoch = abort_by_id(client, tid)
            print(f"aborted the open transaction of {tid!r} (producer {producer_id} is now at "
                  f"epoch {epoch})")
        else:
            topic, partition, producer_id, epoch, coordinator_epoch = marker
            write_abort_marker(client, TopicPartition(topic, partition), producer_id, epoch,
                               coordinator_epoch)
            print(f"wrote an ABORT marker for producer {producer_id} epoch {epoch} to "
                  f"{topic}-{partition}")
    return 0


def _find_hanging(args: argparse.Namespace) -> int:
    if args.topic is None and args.broker_id is None:
        raise ToolError("The `find-hanging` command requires either --topic or --broker-id to "
                        "limit the scope of the search", USAGE)
    if args.partition is not None and args.topic is None:
        raise ToolError("The --partition argument requires --topic to be provided", USAGE)
    now = int(time.time() * 1000)
    with protocol_client(args, NAME) as client:
        partitions = _partitions_to_search(args, client)
        candidates = [(tp, producer) for tp in partitions
                      for producer in describe_producers(client, tp, args.broker_id)
                      if producer.current_txn_start_offset >= 0
                      and now - producer.last_timestamp > args.max_transaction_timeout * MINUTE_MS]
        hanging = _hanging(client, candidates) if candidates else []
    print_table(("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                 "StartOffset", "LastTimestamp", "Duration(min)"),
                [(tp.topic, tp.partition, p.producer_id, p.producer_epoch, p.coordinator_epoch,
                  p.current_txn_start_offset, p.last_timestamp,
                  (now - p.last_timestamp) // MINUTE_MS) for tp, p in hanging])
    return 0


def _partitions_to_search(args: argparse.Namespace, client: KafkaClient
                          ) -> list[TopicPartition]:
    """The topic's partitions (or every topic's), those with ``--broker-id`` among their
    replicas; only ``--partition`` when it is given, as Kafka's tool."""
    if args.partition is not None:
        return [TopicPartition(args.topic, args.partition)]
    topics = [args.topic] if args.topic is not None else list(client.metadata(None).topics)
    return [tp for tp, replicas in sorted(replicas_of(args, topics).items())
            if args.broker_id is None or args.broker_id in replicas]


def _hanging(client: KafkaClient, candidates: list[OpenTransaction]) -> list[OpenTransaction]:
    """The candidates whose transaction no coordinator will end (Kafka's rules)."""
    producer_ids = {producer.producer_id for _, producer in candidates}
    ids = {t.producer_id: t.transactional_id
           for t in list_transactions(client, producer_ids=producer_ids)}
    partitions_of: dict[str, frozenset[TopicPartition]] = {}
    for tid in set(ids.values()):
        try:
            partitions_of[tid] = frozenset(describe_transaction(client, tid).partitions)
        except TransactionError as exc:
            if exc.code != ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                raise
    return [(tp, producer) for tp, producer in candidates
            if tp not in partitions_of.get(ids.get(producer.producer_id, ""), frozenset())]
