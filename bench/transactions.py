"""Transactions: what they cost a producer, and what read_committed costs a consumer.

Usage: ``python bench/transactions.py [--quick]``

Starts its own broker (a child process on a temporary data directory) and measures, in one
run, with confluent-kafka at its default settings (idempotence on for the producers, as
transactions require):
- transactional produce: transactions of 1,000 records of 1 KiB, each begun, filled and
  committed (EndTxn, markers) in turn, against the same records produced by an idempotent
  non-transactional producer (the baseline): ratio, target >= 0.7;
- the client's ceiling for that: the idempotent producer flushing after every 1,000 records,
  as a commit must (``commit_transaction`` returns only once every record of the
  transaction is acknowledged, and librdkafka starts the next transaction only then), with
  no coordinator at all: no transactional producer of this client can be faster;
- consuming those transactional records with read_committed against read_uncommitted (the
  baseline): ratio, target >= 0.9;
- the broker's peak RSS (VmHWM).
Each measure runs three times, alternating with its baseline; the median run counts.
The last line is ``transactional_produce_ratio=<r> client_ceiling_ratio=<r>
read_committed_ratio=<r>`` (the ceiling's ratio to the same baseline).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from functools import partial

from _common import Row, peak_rss_mib, print_table, scratch_dir, vm_hwm_mib
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.broker.process import BrokerProcess

MB = 1_000_000
SIZE = 1024
PER_TRANSACTION = 1000
ROUNDS = 3


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1)]).values():
        future.result(30)


def _send(producer: Producer, topic: str, value: bytes, count: int) -> None:
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)


def produce_idempotent(bootstrap: str, topic: str, count: int,
                       flush_every: int | None = None) -> float:
    """``count`` records with the idempotent producer; with ``flush_every``, waiting for
    each that many to be acknowledged, as a transaction's commit does (the client's
    ceiling for transactions of that size)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    value = os.urandom(SIZE)
    producer.produce(topic, value)  # get the producer id first, as init_transactions does
    producer.flush(30)
    step = flush_every or count
    start = time.perf_counter()
    for _ in range(count // step):
        _send(producer, topic, value, step)
        if producer.flush(120):
            raise SystemExit("idempotent produce: records left undelivered")
    return time.perf_counter() - start


def produce_transactional(bootstrap: str, topic: str, count: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{topic}"})
    producer.init_transactions(30)  # outside the clock: a producer does it once
    value = os.urandom(SIZE)
    start = time.perf_counter()
    for _ in range(count // PER_TRANSACTION):
        producer.begin_transaction()
        _send(producer, topic, value, PER_TRANSACTION)
        producer.commit_transaction(120)  # flushes, then EndTxn: markers written
    return time.perf_counter() - start


def consume(bootstrap: str, topic: str, count: int, isolation: str) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{isolation}",
                         "enable.auto.commit": False, "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    start = time.perf_counter()
    while seen < count:
        for message in consumer.consume(10_000, 5.0):
            if message.error() is not None:
                raise SystemExit(f"consume benchmark: {message.error()}")
            seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small volumes (a smoke run)")
    args = parser.parse_args()
    count = 20_000 if args.quick else 200_000
    with scratch_dir(tempfile.gettempdir(), "sparklog-bench-txn-") as root:
        broker = BrokerProcess(root / "data").start()
        try:
            rows, ratios = measure(broker, count)
        finally:
            broker.stop()
    print_table(["measure", "records/s", "MB/s", "ratio", "broker peak RSS"], rows)
    print(f"bench process peak RSS: {peak_rss_mib():.0f} MiB")
    print(f"transactional_produce_ratio={ratios[0]:.2f} client_ceiling_ratio={ratios[1]:.2f} "
          f"read_committed_ratio={ratios[2]:.2f}")
    return 0


def measure(broker: BrokerProcess, count: int
            ) -> tuple[list[Row], tuple[float, float, float]]:
    """Each measure ROUNDS times, alternating with its baseline (the machine's share of the
    two cores moves between runs); the median run of each counts."""
    bootstrap = broker.bootstrap

    def row(label: str, seconds: float, ratio: float) -> Row:
        return Row(label, f"{count / seconds:,.0f}", f"{count * SIZE / seconds / MB:,.1f}",
                   f"{ratio:.2f}", f"{vm_hwm_mib(broker.pid):.0f} MiB")

    def fresh(prefix: str) -> str:
        topic = f"{prefix}-{time.time_ns()}"
        create_topic(bootstrap, topic)
        return topic

    produce_idempotent(bootstrap, fresh("warm-up"), count // 10)
    produce: dict[str, list[float]] = {"idempotent": [], "flushed": [], "transactional": []}
    for _ in range(ROUNDS):
        for kind, run in (("idempotent", produce_idempotent),
                          ("flushed", partial(produce_idempotent, flush_every=PER_TRANSACTION)),
                          ("transactional", produce_transactional)):
            topic = fresh(kind)
            os.sync()  # no write-back of the previous run's records under this one
            produce[kind].append(run(bootstrap, topic, count))
    transactions = topic  # the last run's: committed transactions of PER_TRANSACTION
    uncommitted, committed = [], []
    for _ in range(ROUNDS):
        uncommitted.append(consume(bootstrap, transactions, count, "read_uncommitted"))
        committed.append(consume(bootstrap, transactions, count, "read_committed"))
    baseline, flushed, transactional = (statistics.median(r) for r in produce.values())
    read_uncommitted, read_committed = statistics.median(uncommitted), statistics.median(committed)
    ratios = baseline / transactional, baseline / flushed, read_uncommitted / read_committed
    rows = [
        row("produce, idempotent (baseline)", baseline, 1.0),
        row(f"produce, idempotent, flushed every {PER_TRANSACTION:,} (the client's ceiling)",
            flushed, ratios[1]),
        row(f"produce, transactions of {PER_TRANSACTION:,}", transactional, ratios[0]),
        row("consume, read_uncommitted (baseline)", read_uncommitted, 1.0),
        row("consume, read_committed", read_committed, ratios[2]),
    ]
    return rows, ratios


if __name__ == "__main__":
    sys.exit(main())
