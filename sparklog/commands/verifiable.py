"""``sparklog verifiable produce|consume``: Kafka's VerifiableProducer and VerifiableConsumer,
whose JSON events (one object per line on stdout) let a user check a cluster: every value
acked is read back, offsets committed are where the reads got to.

    sparklog verifiable produce --bootstrap-server B --topic T [--max-messages N]
        [--throughput R] [--acks -1|0|1] [--value-prefix P] [--repeating-keys K]
    sparklog verifiable consume --bootstrap-server B --topic T --group-id G
        [--max-messages N] [--enable-autocommit] [--reset-policy earliest|latest]
        [--verbose]

Invariants:
- Events are Kafka's, named and shaped as its tools print them, each with a ``timestamp``
  (epoch ms): ``startup_complete``, ``shutdown_complete``; the producer's
  ``producer_send_success`` (key, value, topic, partition, offset) and
  ``producer_send_error`` (exception, message, topic, key, value) per record, then
  ``tool_data`` (sent, acked, target_throughput, avg_throughput); the consumer's
  ``partitions_assigned`` / ``partitions_revoked`` (partitions), ``records_consumed`` (count
  and, per partition, count, minOffset, maxOffset; with ``--verbose`` also one
  ``record_data`` per record) and ``offsets_committed`` (offsets, success, error).
- Values are the record's number as text, after ``--value-prefix`` and a dot when given
  (``P.0``, ``P.1``...); keys are null, or with ``--repeating-keys K`` the number modulo K
  as text, as Kafka's.
- Without ``--enable-autocommit`` the consumer commits synchronously after each batch it
  read, the next offset to read per partition, and reports that commit.
- ``--max-messages`` (-1: no limit) ends either tool; so does Ctrl-C or SIGTERM, after
  which every event still due (delivery reports, the last commit) is printed. The exit code
  is 1 when a record was not delivered.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from sparklog.client.watch import WatchedConsumer, WatchedProducer
from sparklog.commands._client import (
    FAILED,
    client_config,
    client_parent,
    send,
    throttle,
    tool,
)
from sparklog.signals import Stop, stop_on_signals

NAME = "verifiable"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    verifiable = subparsers.add_parser(NAME, help="Kafka's VerifiableProducer / Consumer",
                                       description=__doc__.split("Invariants:")[0],
                                       formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = verifiable.add_subparsers(dest="action", required=True, metavar="ACTION")

    produce = actions.add_parser("produce", parents=[client_parent("producer-property")],
                                 help="send numbered values, report each ack as JSON")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--max-messages", type=int, default=-1, metavar="N",
                         help="records to send (-1, the default: until stopped)")
    produce.add_argument("--throughput", type=int, default=-1, metavar="RECORDS_PER_S",
                         help="at most this many records/s (-1, the default: no limit)")
    produce.add_argument("--acks", type=int, choices=(-1, 0, 1), default=-1)
    produce.add_argument("--value-prefix", help="values are PREFIX.N instead of N")
    produce.add_argument("--repeating-keys", type=int, metavar="K",
                         help="keys N mod K (default: null keys)")
    produce.set_defaults(func=tool(f"{NAME} produce", _produce))

    consume = actions.add_parser("consume", parents=[client_parent("consumer-property")],
                                 help="read as a group member, report reads and commits")
    consume.add_argument("--topic", required=True)
    consume.add_argument("--group-id", required=True)
    consume.add_argument("--group-instance-id", help="static membership")
    consume.add_argument("--max-messages", type=int, default=-1, metavar="N")
    consume.add_argument("--enable-autocommit", action="store_true")
    consume.add_argument("--reset-policy", choices=("earliest", "latest"), default="earliest")
    consume.add_argument("--assignment-strategy", default="range",
                         help="range, roundrobin or cooperative-sticky (default: range)")
    consume.add_argument("--session-timeout", type=int, default=30_000, metavar="MS")
    consume.add_argument("--verbose", action="store_true", help="one record_data per record")
    consume.set_defaults(func=tool(f"{NAME} consume", _consume))


def emit(name: str, **fields: Any) -> None:
    """One event: a JSON object on its own line, flushed (readers follow it live)."""
    event = {"timestamp": int(time.time() * 1000), "name": name, **fields}
    sys.stdout.write(json.dumps(event, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "backslashreplace")


# -- producer -------------------------------------------------------------------------------------


def _produce(args: argparse.Namespace) -> int:
    producer = WatchedProducer(client_config(args, {"acks": args.acks}))
    counts = {"sent": 0, "acked": 0, "failed": 0}

    def report(error: KafkaError | None, message: Message) -> None:
        key, value = _text(message.key()), _text(message.value())
        if error is None:
            counts["acked"] += 1
            emit("producer_send_success", key=key, value=value, topic=message.topic(),
                 partition=message.partition(), offset=message.offset())
        else:
            counts["failed"] += 1
            emit("producer_send_error", exception=error.name(), message=error.str(),
                 topic=message.topic(), key=key, value=value)

    started = time.perf_counter()
    pace = throttle(args.throughput, started)
    emit("startup_complete")
    with stop_on_signals() as stop:
        number = 0
        while number != args.max_messages and not stop.requested:
            value = f"{args.value_prefix}.{number}" if args.value_prefix else str(number)
            key = None if not args.repeating_keys else str(number % args.repeating_keys)
            send(producer, args.topic, value.encode(), None if key is None else key.encode(),
                 on_delivery=report)
            counts["sent"] += 1
            number += 1
            pace(number, stop)
        stop.wait(producer.flush)
    emit("shutdown_complete")
    seconds = max(time.perf_counter() - started, 1e-9)
    emit("tool_data", sent=counts["sent"], acked=counts["acked"],
         target_throughput=args.throughput, avg_throughput=counts["acked"] / seconds)
    # failed or never reported; not len(producer), where librdkafka's log events wait too
    return FAILED if counts["sent"] != counts["acked"] else 0


# -- consumer -------------------------------------------------------------------------------------


def _partitions(partitions: list[TopicPartition]) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]


def _consume(args: argparse.Namespace) -> int:
    settings: dict[str, str | int | bool] = {
        "group.id": args.group_id, "auto.offset.reset": args.reset_policy,
        "enable.auto.commit": args.enable_autocommit,
        "partition.assignment.strategy": args.assignment_strategy,
        "session.timeout.ms": args.session_timeout,
    }
    if args.group_instance_id:
        settings["group.instance.id"] = args.group_instance_id
    consumer = WatchedConsumer(client_config(args, settings))
    emit("startup_complete")
    try:
        with stop_on_signals() as stop:
            consumer.subscribe(
                [args.topic],
                on_assign=lambda _, tps: emit("partitions_assigned",
                                              partitions=_partitions(tps)),
                on_revoke=lambda _, tps: emit("partitions_revoked",
                                              partitions=_partitions(tps)))
            _read(consumer, args, stop)
    finally:
        consumer.close()
        emit("shutdown_complete")
    return 0


def _read(consumer: Consumer, args: argparse.Namespace, stop: Stop) -> None:
    consumed = 0
    while not stop.requested and consumed != args.max_messages:
        wanted = 500 if args.max_messages < 0 else min(500, args.max_messages - consumed)
        batch = [m for m in stop.wait(consumer.consume, wanted, 0.5) or [] if _is_record(m)]
        if not batch:
            continue
        consumed += len(batch)
        ranges: dict[tuple[str, int], list[int]] = {}
        for message in batch:
            if args.verbose:
                emit("record_data", key=_text(message.key()), value=_text(message.value()),
                     topic=message.topic(), partition=message.partition(),
                     offset=message.offset())
            ranges.setdefault((message.topic(), message.partition()), []).append(
                message.offset())
        emit("records_consumed", count=len(batch), partitions=[
            {"topic": t, "partition": p, "count": len(o), "minOffset": min(o),
             "maxOffset": max(o)} for (t, p), o in sorted(ranges.items())])
        if not args.enable_autocommit:
            _commit(consumer, {tp: max(o) + 1 for tp, o in ranges.items()})


def _is_record(message: Message) -> bool:
    error = message.error()
    if error is None:
        return True
    if error.fatal():
        raise KafkaException(error)
    return False


def _commit(consumer: Consumer, offsets: dict[tuple[str, int], int]) -> None:
    committed = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
    listed = [{"topic": tp.topic, "partition": tp.partition, "offset": tp.offset}
              for tp in committed]
    try:
        consumer.commit(offsets=committed, asynchronous=False)
    except KafkaException as exc:  # the event reports it; the consumer goes on, as Kafka's
        emit("offsets_committed", offsets=listed, success=False, error=str(exc))
        return
    emit("offsets_committed", offsets=listed, success=True)
