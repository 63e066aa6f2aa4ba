"""Scale benchmark: many partitions and many idle connections on one broker, against the same
broker with 4 partitions and no extra connections, in one run.

Usage: ``python bench/scale.py [--quick] [--partitions 1000,10000,100000]
[--connections 1000,10000] [--dir DIR]``

Each case starts a fresh broker (a child process; the descriptor limit is this process's,
which the broker raises to its hard limit) with one topic ``work`` of 4 partitions: the
baseline is that broker alone. Clients use their default settings (confluent-kafka: only
``bootstrap.servers``, and a group id for the consumer).

- partitions (1,000 / 10,000 / 100,000; ``--quick``: 1,000 / 4,000): topics of 1,000
  partitions each, one CreateTopics request each; then one 100 B record into every
  partition with kafka-python (small logs, and every partition's active segment written
  once through the open-file cache). Printed (each case's row as it is done, then the
  table):
  the create time, the broker's RSS once idle and the RSS per partition over the
  baseline's, Metadata latency for the one topic ``work`` (median of 20) and for every
  topic (median of 3), the time a restart takes until ``work`` answers Metadata, after a
  clean stop and after SIGKILL (every active segment recovered), and confluent-kafka's
  produce throughput into ``work`` (100 B records); each as a ratio to the baseline.
- connections (1,000 / 10,000; ``--quick``: 1,000): that many TCP connections, each sending
  one ApiVersions request and then staying idle (as a client between requests). Printed:
  the broker's RSS with them open and its growth per connection (RSS just before and just
  after they opened, the first time: later ones reuse the memory the first freed), then
  produce and consume throughput of ``work`` with the connections open, as a ratio to the
  same broker's without them (runs ordered without, with, with, without; best of two each).

The last line printed is ``rss_per_partition_bytes=<n>`` for the largest partition count.

Figures (2 cores, descriptor limit 20,000):

- connections (``--partitions "" --connections 1000,10000``), a quiet machine: 1,000 idle
  connections 69 MiB (6.7 KiB each), 10,000 idle connections 132 MiB (6.1 KiB each);
  produce beside them 1.60 and 0.58 of the broker without, consume 0.94 and 1.18; a second
  run of 10,000: 129 MiB, produce 1.07, consume 0.68 (runs of 200,000 records swing both
  ways). Shared with other work (load average 5-12): 69 and
  129 MiB. The 753 MiB an earlier run showed at 10,000 was memory kept
  after 10,000 connections closed at once (each held a 64 KiB staging buffer until its task
  ended; ``frame_protocol``), measured by that run's second round; it is gone.
- partitions (``--partitions 100000 --connections ""``, a quiet machine): 100,000
  one-record partitions created in 91.7 s; RSS 383 MiB against the baseline's 58, 3,408 B
  per partition (4,842 traced bytes before: a deque per producer, a ``Path`` per
  partition, three file-name strings per segment); Metadata of one topic 0.4 ms (0.99 of
  the baseline), of all 1,313 ms; restart until Metadata answers 19.6 s after a clean stop
  (59.7 s before a clean stop stopped rewriting every producer snapshot already on disk)
  and 12.7 s after SIGKILL, every active segment recovered (26.8 s in the same conditions
  before; 38 s and 79 s on the loaded machine above); produce into ``work`` beside them
  1.38 of the baseline's (noise).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from _common import Row, print_table, scratch_dir, vm_rss_mib
from broker import produce_confluent
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

from sparklog.broker.process import BrokerProcess

WORK, WORK_PARTITIONS = "work", 4
TOPIC_PARTITIONS = 1_000
TOPICS_PER_REQUEST = 1
VALUE = b"v" * 100
LOAD_TIMEOUT_S = 600
MiB = 1 << 20


@dataclass
class Figures:
    create_s: float
    rss_mib: float
    metadata_one_ms: float
    metadata_all_ms: float
    restart_clean_s: float
    restart_killed_s: float
    produce_per_s: float


def start(root: Path) -> BrokerProcess:
    """A broker on ``root/data``, logging to ``root/broker.log`` (gone with the root)."""
    return BrokerProcess(root / "data", {"log.retention.check.interval.ms": "3600000"},
                         log_file=root / "broker.log").start(LOAD_TIMEOUT_S)


def admin(broker: BrokerProcess) -> AdminClient:
    """An admin client that waits as long as creating thousands of partitions takes."""
    return AdminClient({"bootstrap.servers": broker.bootstrap,
                        "socket.timeout.ms": 300_000})  # librdkafka's largest


def create_topics(broker: BrokerProcess, names: list[str], partitions: int) -> None:
    client = admin(broker)
    for first in range(0, len(names), TOPICS_PER_REQUEST):
        batch = [NewTopic(name, partitions, 1) for name in names[first:first + TOPICS_PER_REQUEST]]
        for future in client.create_topics(batch, request_timeout=LOAD_TIMEOUT_S).values():
            future.result(LOAD_TIMEOUT_S)


def fill(broker: BrokerProcess, names: list[str], partitions: int) -> None:
    """One record into every partition of ``names``, with kafka-python (default settings):
    it puts every ready partition of a broker in one Produce request, where librdkafka
    sends one partition per request (an hour for 100,000 partitions)."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for name in names:
        for partition in range(partitions):
            producer.send(name, VALUE, partition=partition)
    producer.flush(LOAD_TIMEOUT_S)
    producer.close()


def metadata_ms(broker: BrokerProcess, topic: str | None, rounds: int) -> float:
    client = admin(broker)
    client.list_topics(timeout=LOAD_TIMEOUT_S)  # connected before timing
    took = []
    for _ in range(rounds):
        started = time.perf_counter()
        if topic is None:
            client.list_topics(timeout=LOAD_TIMEOUT_S)
        else:
            client.list_topics(topic, timeout=LOAD_TIMEOUT_S)
        took.append(time.perf_counter() - started)
    return statistics.median(took) * 1000


def restart_s(broker: BrokerProcess, how: Callable[[], object]) -> float:
    """Stop the broker with ``how``; seconds from the start until ``work`` answers."""
    how()
    started = time.perf_counter()
    broker.start(LOAD_TIMEOUT_S)
    admin(broker).list_topics(WORK, timeout=LOAD_TIMEOUT_S)
    return time.perf_counter() - started


def produce_per_s(broker: BrokerProcess, count: int) -> float:
    started = time.perf_counter()
    produce_confluent(broker.bootstrap, WORK, VALUE, count, {})
    return count / (time.perf_counter() - started)


def consume_per_s(broker: BrokerProcess, count: int) -> float:
    """Read ``count`` records of ``work`` from its start (every partition)."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "scale-bench"})
    consumer.assign([TopicPartition(WORK, p, 0) for p in range(WORK_PARTITIONS)])
    started, seen = time.perf_counter(), 0
    while seen < count:
        seen += len(consumer.consume(10_000, 5.0))
    took = time.perf_counter() - started
    consumer.close()
    return seen / took


def settle_rss(pid: int | None) -> float:
    """The broker's RSS once it is idle (two readings a second apart agree within 1%)."""
    last = vm_rss_mib(pid)
    for _ in range(10):
        time.sleep(1)
        now = vm_rss_mib(pid)
        if abs(now - last) <= last / 100:
            return now
        last = now
    return last


def partition_case(root: Path, partitions: int, records: int) -> Figures:
    broker = start(root)
    try:
        create_topics(broker, [WORK], WORK_PARTITIONS)
        names = [f"scale-{n}" for n in range(partitions // TOPIC_PARTITIONS)]
        per_topic = TOPIC_PARTITIONS if names else 0
        if partitions and not names:
            names, per_topic = ["scale-0"], partitions
        started = time.perf_counter()
        create_topics(broker, names, per_topic)
        create = time.perf_counter() - started
        fill(broker, names, per_topic)
        rss = settle_rss(broker.pid)
        one = metadata_ms(broker, WORK, 20)
        every = metadata_ms(broker, None, 3)
        clean = restart_s(broker, lambda: broker.stop(LOAD_TIMEOUT_S))
        killed = restart_s(broker, broker.kill)
        produced = produce_per_s(broker, records)
        return Figures(create, rss, one, every, clean, killed, produced)
    finally:
        broker.stop()


def api_versions_frame(correlation_id: int) -> bytes:
    """ApiVersions v0 (key 18): header v1 with client id ``scale``, an empty body."""
    body = struct.pack(">hhih", 18, 0, correlation_id, 5) + b"scale"
    return struct.pack(">i", len(body)) + body


def open_idle(broker: BrokerProcess, count: int) -> list[socket.socket]:
    """``count`` connections, each answered one ApiVersions, then left idle."""
    host, port = broker.bootstrap.rsplit(":", 1)
    sockets = []
    for n in range(count):
        sock = socket.create_connection((host, int(port)))
        sock.sendall(api_versions_frame(n))
        (size,) = struct.unpack(">i", _read(sock, 4))
        _read(sock, size)
        sockets.append(sock)
    return sockets


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        more = sock.recv(size - len(data))
        if not more:
            raise SystemExit("scale benchmark: the broker closed an idle connection")
        data += more
    return data


def connection_case(root: Path, counts: list[int], records: int) -> list[Row]:
    broker = start(root)
    rows = []
    try:
        create_topics(broker, [WORK], WORK_PARTITIONS)
        produce_per_s(broker, records)  # warm up, and records for the consumer
        for count in counts:
            produced, consumed = {}, {}
            growth = with_rss = 0.0
            for label in ("without", "with", "with", "without"):
                sockets = []
                if label == "with":
                    before = settle_rss(broker.pid)
                    sockets = open_idle(broker, count)
                    with_rss = settle_rss(broker.pid)
                    growth = growth or with_rss - before  # the first time: memory new
                produced[label] = max(produced.get(label, 0), produce_per_s(broker, records))
                consumed[label] = max(consumed.get(label, 0), consume_per_s(broker, records))
                for sock in sockets:
                    sock.close()
                time.sleep(1)
            rows.append(Row(
                f"{count:,} idle connections", f"{with_rss:.0f} MiB",
                f"{growth * MiB / count / 1024:.1f} KiB",
                f"{produced['with']:,.0f}/s", f"{produced['with'] / produced['without']:.2f}",
                f"{consumed['with']:,.0f}/s", f"{consumed['with'] / consumed['without']:.2f}"))
    finally:
        broker.stop()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--partitions", help="comma-separated partition counts")
    parser.add_argument("--connections", help="comma-separated connection counts")
    parser.add_argument("--dir", help="where the data directories go (default: temp)")
    args = parser.parse_args()
    partitions = _counts(args.partitions, "1000,4000" if args.quick else "1000,10000,100000")
    connections = _counts(args.connections, "1000" if args.quick else "1000,10000")
    records = 50_000 if args.quick else 200_000
    print(f"descriptor limit (soft/hard): {os.sysconf('SC_OPEN_MAX')}")
    with scratch_dir(args.dir, "scale-base-") as root:
        base = partition_case(root, 0, records)
    rows = [_partition_row(f"{WORK_PARTITIONS} partitions (baseline)", base, base, 0)]
    print(" | ".join(rows[-1]), flush=True)  # as it comes: the whole run takes long
    for count in partitions:
        with scratch_dir(args.dir, "scale-partitions-") as root:
            figures = partition_case(root, count, records)
        rows.append(_partition_row(f"{count:,} partitions", figures, base, count))
        print(" | ".join(rows[-1]), flush=True)
    print_table(("case", "create", "RSS", "RSS/partition", "Metadata one", "Metadata all",
                 "restart clean", "restart SIGKILL", "produce"), rows)
    print("(ratios to the baseline in brackets)")
    if connections:
        with scratch_dir(args.dir, "scale-connections-") as root:
            print_table(("case", "RSS", "RSS/connection", "produce", "ratio", "consume",
                         "ratio"), connection_case(root, connections, records))
    if partitions:
        print(f"rss_per_partition_bytes={_per_partition(figures, base, partitions[-1]):.0f}")
    return 0


def _counts(given: str | None, default: str) -> list[int]:
    """A comma-separated list of counts (an empty one: none, that part is skipped)."""
    return [int(n) for n in (default if given is None else given).split(",") if n]


def _per_partition(figures: Figures, base: Figures, count: int) -> float:
    return (figures.rss_mib - base.rss_mib) * MiB / count if count else 0.0


def _partition_row(label: str, f: Figures, base: Figures, count: int) -> Row:
    def ratio(value: float, baseline: float) -> str:
        return f"({value / baseline:.2f})" if baseline else ""

    return Row(
        label, f"{f.create_s:.1f} s", f"{f.rss_mib:.0f} MiB ({f.rss_mib / base.rss_mib:.2f})",
        f"{_per_partition(f, base, count):,.0f} B",
        f"{f.metadata_one_ms:.1f} ms {ratio(f.metadata_one_ms, base.metadata_one_ms)}",
        f"{f.metadata_all_ms:.0f} ms {ratio(f.metadata_all_ms, base.metadata_all_ms)}",
        f"{f.restart_clean_s:.1f} s {ratio(f.restart_clean_s, base.restart_clean_s)}",
        f"{f.restart_killed_s:.1f} s {ratio(f.restart_killed_s, base.restart_killed_s)}",
        f"{f.produce_per_s:,.0f}/s {ratio(f.produce_per_s, base.produce_per_s)}")


if __name__ == "__main__":
    raise SystemExit(main())
