"""Transactions: what they cost a producer, and what read_committed costs a consumer.

Usage: ``python bench/transactions.py [--quick] [--kill-loop KILLS]``

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
- the two transaction protocols with one client (no Python client speaks transactions v2,
  KIP-890: ``RawTxnProducer`` of ``tests/transactions_support.py``, sparklog's protocol
  client sending batches of 100 one after the other): transaction.version 1
  (AddPartitionsToTxn before a partition's first batch, Produce v11, EndTxn v4) against 2
  (Produce v12 adds the partition, EndTxn v5 bumps the epoch), the same transactions of
  1,000 records; each leader verifies with the coordinator either way;
- consuming those transactional records with read_committed against read_uncommitted (the
  baseline): ratio, target >= 0.9;
- the broker's peak RSS (VmHWM).
With ``--kill-loop KILLS`` it runs instead the cluster test's kill loop, bigger: three
brokers, transactions of confluent-kafka (v1) and ``RawTxnProducer`` (v2) in turn, two of
three committed, while KILLS SIGKILLs hit the coordinator's broker and partition leaders in
turn; it prints the transactions' outcomes and checks read_committed (every committed
record once, no aborted one).
Each measure runs three times, alternating with its baseline; the median run counts.
The last line is ``transactional_produce_ratio=<r> client_ceiling_ratio=<r>
read_committed_ratio=<r> v2_to_v1_ratio=<r>`` (the ceiling's ratio to the same baseline; the
raw client's transactions per second at version 2 over version 1).
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from _common import Row, peak_rss_mib, print_table, scratch_dir, vm_hwm_mib
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.broker.process import BrokerProcess

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the shared loop
from broker_fixtures import Cluster
from committed_reader import read_committed
from transactions_support import Killer, RawTxnProducer, kill_loop, spread_topic

from sparklog.cluster.zookeeper_server import ZooKeeperServer

MB = 1_000_000
SIZE = 1024
PER_TRANSACTION = 1000
RAW_BATCH = 100
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


def produce_raw(bootstrap: str, topic: str, count: int, version: int) -> float:
    """Transactions of PER_TRANSACTION records by the one client at transaction ``version``."""
    producer = RawTxnProducer(bootstrap, f"bench-{topic}", version)
    value = os.urandom(SIZE)
    start = time.perf_counter()
    for _ in range(count // PER_TRANSACTION):
        for _ in range(PER_TRANSACTION // RAW_BATCH):
            producer.send(topic, 0, [value] * RAW_BATCH)
        producer.end(commit=True)
    elapsed = time.perf_counter() - start
    producer.close()
    return elapsed


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
    parser.add_argument("--kill-loop", type=int, metavar="KILLS",
                        help="run the kill loop on a cluster instead (see the module)")
    args = parser.parse_args()
    if args.kill_loop:
        return run_kill_loop(args.kill_loop)
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
          f"read_committed_ratio={ratios[2]:.2f} v2_to_v1_ratio={ratios[3]:.2f}")
    return 0


def run_kill_loop(kills: int) -> int:
    """The cluster test's kill loop with ``kills`` kills (see the module)."""
    with scratch_dir(tempfile.gettempdir(), "sparklog-bench-txn-kill-") as root:
        zookeeper = ZooKeeperServer(root / "zookeeper").start()
        cluster = Cluster(zookeeper, root, "kill-loop")
        try:
            cluster.start()
            spread_topic(cluster, "ledger")
            turns = itertools.cycle([lambda: cluster.leader("__transaction_state"),
                                     *(lambda p=p: cluster.leader("ledger", p)
                                       for p in range(3))])
            killer = Killer(cluster.brokers, lambda: next(turns)()).start(kills)
            start = time.perf_counter()
            outcomes = kill_loop(lambda: cluster.bootstrap, "ledger", 3, 100, killer)
            elapsed = time.perf_counter() - start
            for broker in cluster.brokers:
                if not broker.running:
                    broker.start()
            for p in range(3):
                cluster.wait_for_isr("ledger", {0, 1, 2}, p)
            outcomes.check(read_committed(cluster.bootstrap, "ledger", 3))
        finally:
            cluster.stop()
            zookeeper.stop()
    print(f"{kills} kills ({', '.join(map(str, killer.killed))}) in {elapsed:.0f} s: "
          f"{len(outcomes.committed)} committed, {len(outcomes.aborted)} aborted, "
          f"{len(outcomes.uncertain)} uncertain transactions; read_committed: every "
          f"committed record once, no aborted one")
    return 0


def measure(broker: BrokerProcess, count: int
            ) -> tuple[list[Row], tuple[float, float, float, float]]:
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
    produce: dict[str, list[float]] = {"idempotent": [], "flushed": [], "raw-v1": [],
                                       "raw-v2": [], "transactional": []}
    for _ in range(ROUNDS):
        for kind, run in (("idempotent", produce_idempotent),
                          ("flushed", partial(produce_idempotent, flush_every=PER_TRANSACTION)),
                          ("raw-v1", partial(produce_raw, version=1)),
                          ("raw-v2", partial(produce_raw, version=2)),
                          ("transactional", produce_transactional)):
            topic = fresh(kind)
            os.sync()  # no write-back of the previous run's records under this one
            produce[kind].append(run(bootstrap, topic, count))
    transactions = topic  # the last run's: committed transactions of PER_TRANSACTION
    uncommitted, committed = [], []
    for _ in range(ROUNDS):
        uncommitted.append(consume(bootstrap, transactions, count, "read_uncommitted"))
        committed.append(consume(bootstrap, transactions, count, "read_committed"))
    baseline, flushed, raw_v1, raw_v2, transactional = (statistics.median(r)
                                                        for r in produce.values())
    read_uncommitted, committed_read = statistics.median(uncommitted), statistics.median(committed)
    ratios = (baseline / transactional, baseline / flushed, read_uncommitted / committed_read,
              raw_v1 / raw_v2)
    rows = [
        row("produce, idempotent (baseline)", baseline, 1.0),
        row(f"produce, idempotent, flushed every {PER_TRANSACTION:,} (the client's ceiling)",
            flushed, ratios[1]),
        row(f"produce, transactions of {PER_TRANSACTION:,}", transactional, ratios[0]),
        row(f"produce, transactions of {PER_TRANSACTION:,}, raw client, transaction.version 1",
            raw_v1, baseline / raw_v1),
        row(f"produce, transactions of {PER_TRANSACTION:,}, raw client, transaction.version 2",
            raw_v2, baseline / raw_v2),
        row("consume, read_uncommitted (baseline)", read_uncommitted, 1.0),
        row("consume, read_committed", committed_read, ratios[2]),
    ]
    return rows, ratios


if __name__ == "__main__":
    sys.exit(main())
