"""``sparklog transactions``: list, describe and abort transactions, like
``kafka-transactions.sh``.

- ``list [--state S ...] [--producer-id N ...]`` prints every transactional id the brokers'
  coordinators know (TRANSACTIONALID COORDINATOR PRODUCERID TRANSACTIONSTATE), asking every
  broker (ListTransactions is answered per coordinator);
- ``describe --transactional-id ID`` prints Kafka's columns (COORDINATORID TRANSACTIONALID
  PRODUCERID PRODUCEREPOCH TRANSACTIONSTATE TRANSACTIONTIMEOUTMS
  CURRENTTRANSACTIONSTARTTIMEMS TRANSACTIONDURATIONMS TOPICPARTITIONS);
- ``abort --topic T --partition P --producer-id N --producer-epoch E --coordinator-epoch C``
  writes an ABORT marker into that partition (WriteTxnMarkers to its leader), as Kafka's tool
  does for a hanging transaction; ``abort --transactional-id ID`` (a sparklog addition)
  asks the id's coordinator to abort its open transaction, which fences its producer, the
  way a new producer of the id would (InitProducerId).

Invariants:
- These requests have no confluent-kafka API; they go through ``sparklog.client``'s
  protocol client, so they work against any Kafka broker that serves the APIs.
- stdout is for results; a failure is one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import time
from datetime import timedelta

from sparklog.client.cluster import TopicPartition
from sparklog.client.errors import error_name
from sparklog.client.kafka import KafkaClient
from sparklog.client.settings import ClientConfig, RetryPolicy, SettingsError, parse_bootstrap
from sparklog.commands._client import ToolError, client_parent, tool
from sparklog.commands._table import print_table
from sparklog.errors import ErrorCode
from sparklog.protocol.versions import ApiKey, CoordinatorType

NAME = "transactions"
RETRY = RetryPolicy(timeout_s=30.0, backoff_s=0.1)
ABORT_TIMEOUT_MS = 60_000  # the transaction timeout the fencing InitProducerId asks for


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parent = client_parent()
    command = subparsers.add_parser(NAME, help="list, describe and abort transactions",
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

    abort = actions.add_parser("abort", parents=[parent], help="abort a transaction")
    abort.add_argument("--transactional-id", help="abort this id's open transaction")
    abort.add_argument("--topic")
    abort.add_argument("--partition", type=int)
    abort.add_argument("--producer-id", type=int)
    abort.add_argument("--producer-epoch", type=int)
    abort.add_argument("--coordinator-epoch", type=int)
    abort.set_defaults(func=tool(NAME, _abort))


def _client(args: argparse.Namespace) -> KafkaClient:
    try:
        return KafkaClient(ClientConfig(parse_bootstrap(args.bootstrap), client_id="sparklog"),
                           RETRY)
    except SettingsError as exc:
        raise ToolError(str(exc), 2) from None


def _list(args: argparse.Namespace) -> int:
    rows = []
    with _client(args) as client:
        for node, address in sorted(client.metadata([]).brokers.items()):
            answer = client.broker_request(address, ApiKey.LIST_TRANSACTIONS, {
                "state_filters": args.state, "producer_id_filters": args.producer_id})
            _check(answer.error_code, f"ListTransactions on broker {node}")
            rows += [(t.transactional_id, node, t.producer_id, t.transaction_state)
                     for t in answer.transaction_states]
    print_table(("TRANSACTIONALID", "COORDINATOR", "PRODUCERID", "TRANSACTIONSTATE"),
                sorted(rows))
    return 0


def _describe(args: argparse.Namespace) -> int:
    tid = args.transactional_id
    with _client(args) as client:
        answer = client.coordinator_request(
            tid, CoordinatorType.TRANSACTION, ApiKey.DESCRIBE_TRANSACTIONS,
            {"transactional_ids": [tid]}, lambda a: a.transaction_states[0].error_code)
        node, _ = client.coordinator(tid, CoordinatorType.TRANSACTION)
    (state,) = answer.transaction_states
    _check(state.error_code, f"transactional id {tid!r}")
    start = state.transaction_start_time  # int ms, -1 when no transaction is open
    duration = int(time.time() * 1000) - start if start >= 0 else None
    partitions = ",".join(f"{t.topic}-{p}" for t in state.topics for p in t.partitions)
    print_table(("COORDINATORID", "TRANSACTIONALID", "PRODUCERID", "PRODUCEREPOCH",
                 "TRANSACTIONSTATE", "TRANSACTIONTIMEOUTMS", "CURRENTTRANSACTIONSTARTTIMEMS",
                 "TRANSACTIONDURATIONMS", "TOPICPARTITIONS"),
                [(node, tid, state.producer_id, state.producer_epoch, state.transaction_state,
                  int(state.transaction_timeout.total_seconds() * 1000),
                  start if start >= 0 else None, duration, partitions or None)])
    return 0


def _abort(args: argparse.Namespace) -> int:
    marker = (args.topic, args.partition, args.producer_id, args.producer_epoch,
              args.coordinator_epoch)
    by_id = args.transactional_id is not None and all(v is None for v in marker)
    by_marker = args.transactional_id is None and all(v is not None for v in marker)
    if not (by_id or by_marker):
        raise ToolError("give --transactional-id, or all of --topic --partition --producer-id "
                        "--producer-epoch --coordinator-epoch", 2)
    with _client(args) as client:
        if by_id:
            return _abort_by_id(client, args.transactional_id)
        return _abort_marker(client, *marker)


def _abort_by_id(client: KafkaClient, tid: str) -> int:
    """InitProducerId of the id: its coordinator aborts the open transaction under a bumped
    epoch, answering CONCURRENT_TRANSACTIONS (retried) until the abort is complete."""
    answer = client.coordinator_request(
        tid, CoordinatorType.TRANSACTION, ApiKey.INIT_PRODUCER_ID,
        {"transactional_id": tid, "transaction_timeout": _timedelta_ms(ABORT_TIMEOUT_MS)},
        lambda a: a.error_code)
    _check(answer.error_code, f"transactional id {tid!r}")
    print(f"aborted the open transaction of {tid!r} (producer {answer.producer_id} is now at "
          f"epoch {answer.producer_epoch})")
    return 0


def _abort_marker(client: KafkaClient, topic: str, partition: int, producer_id: int,
                  producer_epoch: int, coordinator_epoch: int) -> int:
    answer = client.leader_request(TopicPartition(topic, partition), ApiKey.WRITE_TXN_MARKERS, {
        "markers": [{"producer_id": producer_id, "producer_epoch": producer_epoch,
                     "transaction_result": False, "coordinator_epoch": coordinator_epoch,
                     "topics": [{"name": topic, "partition_indexes": [partition]}]}]})
    (result,) = answer.markers
    _check(result.topics[0].partitions[0].error_code, f"{topic}-{partition}")
    print(f"wrote an ABORT marker for producer {producer_id} epoch {producer_epoch} to "
          f"{topic}-{partition}")
    return 0


def _check(code: int, what: str) -> None:
    if code != ErrorCode.NONE:
        raise ToolError(f"{what}: {error_name(code)}")


def _timedelta_ms(ms: int) -> timedelta:
    return timedelta(milliseconds=ms)

