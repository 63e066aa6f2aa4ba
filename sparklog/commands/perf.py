"""``sparklog perf produce`` and ``sparklog perf consume``: load tests of a cluster, like
``kafka-producer-perf-test.sh`` and ``kafka-consumer-perf-test.sh``.

    sparklog perf produce --bootstrap-server B --topic T --num-records N --record-size S
        --throughput RECORDS_PER_S|-1 [--producer-props K=V ...] [--producer.config FILE]
    sparklog perf consume --bootstrap-server B --topic T --messages N [--group G]
        [--timeout MS] [--from-latest]

Invariants:
- ``produce`` sends ``--num-records`` records of ``--record-size`` random bytes (uppercase
  letters, as Kafka's), keeping to ``--throughput`` records/s (-1: no limit), and measures
  each record's latency from ``produce()`` to its delivery report. Every
  ``--reporting-interval`` (5 s, Kafka's) it prints Kafka's progress line, ``N records sent,
  R records/sec (M MB/sec), A ms avg latency, X ms max latency.``, and at the end the same
  for the whole run plus ``... ms 50th, ... ms 95th, ... ms 99th, ... ms 99.9th.``.
  A record whose delivery failed is counted and named on stderr (the first error), and
  makes the exit code 1.
- ``consume`` reads ``--messages`` records from the start of the topic (assigned directly,
  or through ``--group``), printing a progress line every reporting interval and at the end
  Kafka's CSV header and values (start.time, end.time, data.consumed.in.MB, MB.sec,
  data.consumed.in.nMsg, nMsg.sec, ...). It ends early, exit code 1, when no record came for
  ``--timeout`` ms.
- Ctrl-C or SIGTERM stops either early and still prints the final summary; MB is 2^20 bytes.
"""

from __future__ import annotations

import argparse
import random
import string
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, Message

from sparklog.client.watch import WatchedConsumer, WatchedProducer
from sparklog.commands._client import (
    FAILED,
    ToolError,
    client_config,
    client_parent,
    complain,
    non_negative,
    send,
    throttle,
    tool,
)
from sparklog.commands.consume import assignment
from sparklog.signals import Stop, stop_on_signals

NAME = "perf"
MB = 1 << 20
REPORTING_INTERVAL_MS = 5000
PERCENTILES = ((0.5, "50th"), (0.95, "95th"), (0.99, "99th"), (0.999, "99.9th"))


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    perf = subparsers.add_parser(NAME, help="load-test producing or consuming",
                                 description=__doc__.split("Invariants:")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = perf.add_subparsers(dest="action", required=True, metavar="ACTION")

    produce = actions.add_parser("produce", parents=[client_parent("producer-props")],
                                 help="like kafka-producer-perf-test.sh")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--num-records", type=non_negative, required=True, metavar="N")
    produce.add_argument("--record-size", type=non_negative, required=True, metavar="BYTES")
    produce.add_argument("--throughput", type=int, required=True, metavar="RECORDS_PER_S",
                         help="at most this many records/s; -1 for no limit")
    produce.add_argument("--producer.config", dest="command_config", type=Path, metavar="FILE",
                         help="same as --command-config")
    _add_interval(produce)
    produce.set_defaults(func=tool(f"{NAME} produce", _produce))

    consume = actions.add_parser("consume", parents=[client_parent("consumer-property")],
                                 help="like kafka-consumer-perf-test.sh")
    consume.add_argument("--topic", required=True)
    consume.add_argument("--messages", type=non_negative, required=True, metavar="N")
    consume.add_argument("--group", help="consume as this group (default: assign directly)")
    consume.add_argument("--timeout", type=non_negative, default=10_000, metavar="MS",
                         help="give up when no record came for this long (default 10000)")
    consume.add_argument("--from-latest", action="store_true",
                         help="start at the log end (default: the beginning)")
    _add_interval(consume)
    consume.set_defaults(func=tool(f"{NAME} consume", _consume))


def _add_interval(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reporting-interval", type=non_negative,
                        default=REPORTING_INTERVAL_MS, metavar="MS",
                        help="between two progress lines (default 5000)")


# -- produce --------------------------------------------------------------------------------------


@dataclass
class Stats:
    """Kafka's producer-perf statistics: counts, bytes and latencies (ms) of acked records,
    for the whole run and for the current reporting window."""

    started: float
    records: int = 0
    bytes: int = 0
    latencies: list[float] = field(default_factory=list)
    window_start: float = 0.0
    window_records: int = 0
    window_bytes: int = 0
    window_latency_sum: float = 0.0
    window_latency_max: float = 0.0
    failed: int = 0
    first_error: str | None = None

    def record(self, latency_ms: float, size: int) -> None:
        self.records += 1
        self.bytes += size
        self.latencies.append(latency_ms)
        self.window_records += 1
        self.window_bytes += size
        self.window_latency_sum += latency_ms
        self.window_latency_max = max(self.window_latency_max, latency_ms)

    def fail(self, error: KafkaError) -> None:
        self.failed += 1
        self.first_error = self.first_error or error.str()

    def report_window(self, now: float) -> None:
        print(_line(self.window_records, self.window_bytes, now - self.window_start,
                    self.window_latency_sum, self.window_latency_max), flush=True)
        self.window_start, self.window_records, self.window_bytes = now, 0, 0
        self.window_latency_sum = self.window_latency_max = 0.0

    def report_total(self, now: float) -> None:
        ordered = sorted(self.latencies)
        percentiles = ", ".join(
            f"{ordered[min(int(len(ordered) * p), len(ordered) - 1)]:.0f} ms {name}"
            for p, name in PERCENTILES) if ordered else ", ".join(
            f"0 ms {name}" for _, name in PERCENTILES)
        line = _line(self.records, self.bytes, now - self.started, sum(self.latencies),
                     max(self.latencies, default=0.0))
        print(f"{line[:-1]}, {percentiles}.", flush=True)


def _line(records: int, size: int, seconds: float, latency_sum: float,
          latency_max: float) -> str:
    seconds = max(seconds, 1e-9)
    average = latency_sum / records if records else 0.0
    return (f"{records} records sent, {records / seconds:.1f} records/sec "
            f"({size / MB / seconds:.2f} MB/sec), {average:.1f} ms avg latency, "
            f"{latency_max:.1f} ms max latency.")


def _payload(size: int) -> bytes:
    return "".join(random.choices(string.ascii_uppercase, k=size)).encode()


def _produce(args: argparse.Namespace) -> int:
    if args.throughput == 0 or args.throughput < -1:
        raise ToolError("--throughput must be a positive rate or -1 (no limit)", 2)
    producer = WatchedProducer(client_config(args))
    payload = _payload(args.record_size)
    stats = Stats(time.perf_counter())
    stats.window_start = stats.started
    interval = args.reporting_interval / 1000
    pace = throttle(args.throughput, stats.started)

    def delivered(sent: float) -> Callable[[KafkaError | None, Message], None]:
        def report(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                stats.fail(error)
            else:
                stats.record((time.perf_counter() - sent) * 1000, len(payload))
        return report

    sent = 0
    with stop_on_signals() as stop:
        for number in range(args.num_records):
            if stop.requested:
                break
            send(producer, args.topic, payload, on_delivery=delivered(time.perf_counter()))
            sent += 1
            now = time.perf_counter()
            if now - stats.window_start >= interval:
                stats.report_window(now)
            pace(number + 1, stop)
        stop.wait(producer.flush)
    stats.report_total(time.perf_counter())
    # failed or never reported; not len(producer), where librdkafka's log events wait too
    if undelivered := sent - stats.records:
        complain(f"{NAME} produce", f"{undelivered} records were not "
                                    f"delivered: {stats.first_error or 'stopped'}")
        return FAILED
    return 0


# -- consume --------------------------------------------------------------------------------------


def _consume(args: argparse.Namespace) -> int:
    start = OFFSET_END if args.from_latest else OFFSET_BEGINNING
    consumer = WatchedConsumer(client_config(args, {
        "group.id": args.group or "sparklog-perf-consumer",
        "auto.offset.reset": "latest" if args.from_latest else "earliest",
        "enable.auto.commit": bool(args.group),
    }))
    began = time.time()
    try:
        with stop_on_signals() as stop:
            if args.group:
                consumer.subscribe([args.topic])
            else:
                consumer.assign(assignment(consumer, args.topic, None, start))
            count, size, timed_out = _read(consumer, args, stop)
    finally:
        consumer.close()
    ended = time.time()
    seconds = max(ended - began, 1e-9)
    print("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, "
          "nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
    print(f"{_time(began)}, {_time(ended)}, {size / MB:.4f}, {size / MB / seconds:.4f}, "
          f"{count}, {count / seconds:.4f}, 0, {seconds * 1000:.0f}, "
          f"{size / MB / seconds:.4f}, {count / seconds:.4f}")
    if timed_out:
        complain(f"{NAME} consume", f"no record for {args.timeout} ms: read {count} of "
                                    f"{args.messages}")
        return FAILED
    return 0


def _time(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s).strftime("%Y-%m-%d %H:%M:%S:%f")[:-3]


def _read(consumer: Consumer, args: argparse.Namespace, stop: Stop) -> tuple[int, int, bool]:
    """Read until ``--messages``, a stop or ``--timeout``: (records, bytes, timed out)."""
    count = size = 0
    interval = args.reporting_interval / 1000
    last_report = last_record = time.perf_counter()
    window_count = window_size = 0
    while count < args.messages and not stop.requested:
        batch = stop.wait(consumer.consume, min(args.messages - count, 500), 0.2) or []
        now = time.perf_counter()
        for message in batch:
            if message.error() is not None:
                if message.error().fatal():
                    raise ToolError(message.error().str())
                continue
            count += 1
            window_count += 1
            length = len(message.value() or b"") + len(message.key() or b"")
            size += length
            window_size += length
            last_record = now
        if now - last_record >= args.timeout / 1000:
            return count, size, True
        if now - last_report >= interval:
            seconds = max(now - last_report, 1e-9)
            print(f"{count} records consumed, {window_count / seconds:.1f} records/sec "
                  f"({window_size / MB / seconds:.2f} MB/sec).", flush=True)
            last_report, window_count, window_size = now, 0, 0
    return count, size, False
