"""Transactions on a real cluster: one ZooKeeper (module), three broker processes, the
confluent-kafka transactional producer and read_committed consumers.

What a user relies on: a transaction over partitions led by different brokers commits
(read_committed sees all of it) or aborts (sees none of it) as a whole; consume-transform-
produce commits the group's offsets (kept by another broker than the transaction's
coordinator) with the output; transactions committed at once all complete; when the
coordinator's broker is SIGKILLed after the commit was requested, the new coordinator (the
new leader of ``__transaction_state``) finishes it, and when the leader of one of its
partitions is SIGKILLed as the markers reach it, the coordinator writes that marker to the
partition's new leader: either way no read_committed consumer ever sees part of the
transaction, and the producer carries on with its next one. Transactions of a v1 and a v2
(KIP-890) client, committed and aborted, through a loop of such kills read the same way.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_fixtures import (
    TIMEOUT,
    Cluster,
    confluent_consumer,
    wait_until,
    zookeeper,
)
from committed_reader import read_committed
from confluent_kafka import KafkaException, Producer, TopicPartition
from transactions_support import Killer, kill_loop, spread_topic

from sparklog.cli import main
from sparklog.cluster.zookeeper_server import ZooKeeperServer
from sparklog.coordinator.group_records import partition_for

__all__ = ["zookeeper"]  # fixtures, imported for pytest

PARTITIONS = 3
CONFIG = {"offsets.topic.num.partitions": str(PARTITIONS), "group.initial.rebalance.delay.ms": "0"}
TXN_STATE = "__transaction_state"


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = Cluster(zookeeper, tmp_path_factory.mktemp("txn"), "txn", config=CONFIG)
    try:
        yield running.start()
    finally:
        running.stop()


def transactional_producer(cluster: Cluster, tid: str) -> Producer:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid,
                         "log_level": 3})
    producer.init_transactions(TIMEOUT)
    return producer


def produce_everywhere(producer: Producer, topic: str, prefix: str) -> list[bytes]:
    values = [f"{prefix}-{p}-{i}".encode() for p in range(PARTITIONS) for i in range(4)]
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, partition=int(value.split(b"-")[1]))
    producer.flush(TIMEOUT)  # sent, so an abort has records to abort
    return values


def read_all(cluster: Cluster, topic: str, isolation: str) -> list[bytes]:
    """Every value of ``topic`` up to the (stable) end of each partition."""
    consumer = confluent_consumer(cluster.bootstrap, **{
        "group.id": f"check-{topic}", "isolation.level": isolation,
        "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got: list[bytes] = []
        ends: set[int] = set()

        def done() -> bool:
            for message in consumer.consume(100, 0.2):
                if message.error():
                    ends.add(message.partition())
                else:
                    got.append(message.value())
            return len(ends) == PARTITIONS

        wait_until(done, message=f"the end of every partition of {topic}")
        return sorted(got)
    finally:
        consumer.close()


def test_a_transaction_over_three_leaders_commits_or_aborts_whole(
        cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    spread_topic(cluster, "orders")
    producer = transactional_producer(cluster, "orders-writer")
    committed = produce_everywhere(producer, "orders", "commit")
    producer.commit_transaction(TIMEOUT)
    aborted = produce_everywhere(producer, "orders", "abort")
    producer.abort_transaction(TIMEOUT)
    assert read_all(cluster, "orders", "read_committed") == sorted(committed)
    assert read_all(cluster, "orders", "read_uncommitted") == sorted(committed + aborted)
    coordinator = cluster.partition(TXN_STATE).leader
    assert coordinator in (0, 1, 2)
    assert len(cluster.partition(TXN_STATE).replicas) == 3  # replicated
    # the tool finds the id at its coordinator, the leader of its partition
    assert main(["transactions", "describe", "--bootstrap-server", cluster.bootstrap,
                 "--transactional-id", "orders-writer"]) == 0
    (row,) = capsys.readouterr().out.splitlines()[1:]
    assert row.split()[0] == str(coordinator) and "CompleteAbort" in row.split()


def test_consume_transform_produce_across_brokers(cluster: Cluster) -> None:
    spread_topic(cluster, "raw")
    spread_topic(cluster, "enriched")
    coordinator = transactional_producer(cluster, "raw-feed")
    source = produce_everywhere(coordinator, "raw", "raw")
    coordinator.commit_transaction(TIMEOUT)
    txn_coordinator = cluster.partition(TXN_STATE).leader
    # a group whose offsets another broker than the transaction coordinator keeps
    group = next(g for g in (f"enricher-{n}" for n in range(100))
                 if cluster.partition("__consumer_offsets", partition_for(g, PARTITIONS)
                                      ).leader != txn_coordinator)
    consumer = confluent_consumer(cluster.bootstrap, **{
        "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "isolation.level": "read_committed"})
    producer = transactional_producer(cluster, group)
    try:
        consumer.subscribe(["raw"])
        got: list[Any] = []
        wait_until(lambda: got.extend(m for m in consumer.consume(100, 0.5) if not m.error())
                   or len(got) >= len(source), message="every raw record consumed")
        producer.begin_transaction()
        for message in got:
            producer.produce("enriched", message.value().upper(), partition=message.partition())
        producer.send_offsets_to_transaction(
            [TopicPartition("raw", p, 4) for p in range(PARTITIONS)],
            consumer.consumer_group_metadata(), TIMEOUT)
        producer.commit_transaction(TIMEOUT)
    finally:
        consumer.close()
    assert read_all(cluster, "enriched", "read_committed") == sorted(v.upper() for v in source)
    reader = confluent_consumer(cluster.bootstrap, **{"group.id": group})
    try:
        found = reader.committed([TopicPartition("raw", p) for p in range(PARTITIONS)],
                                 timeout=TIMEOUT)
        assert [t.offset for t in found] == [4] * PARTITIONS
    finally:
        reader.close()


def test_concurrent_commits_share_the_coordinator_and_the_leaders(cluster: Cluster) -> None:
    spread_topic(cluster, "ledger")
    producers = [transactional_producer(cluster, f"ledger-{n}") for n in range(4)]
    ready = threading.Barrier(len(producers))
    written: list[bytes] = []
    failures: list[BaseException] = []

    def commit(n: int, producer: Producer) -> None:
        try:
            values = produce_everywhere(producer, "ledger", f"w{n}")
            ready.wait(TIMEOUT)  # every transaction's markers wanted at once
            producer.commit_transaction(TIMEOUT)
            written.extend(values)
        except BaseException as exc:  # reported below, in the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=commit, args=(n, p)) for n, p in enumerate(producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT * 2)
    assert failures == []
    assert len(written) == 4 * 4 * PARTITIONS
    assert read_all(cluster, "ledger", "read_committed") == sorted(written)


class CommittedReader:
    """A read_committed consumer of every partition of a topic, polling in the background
    while the test kills brokers: what it saw, in order."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        self.consumer = confluent_consumer(cluster.bootstrap, **{
            "group.id": f"watch-{topic}", "isolation.level": "read_committed"})
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        self.seen: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self.consumer.consume(100, 0.2):
                if not message.error():
                    self.seen.append(message.value())

    def stop(self) -> list[bytes]:
        self._stop.set()
        self._thread.join(TIMEOUT)
        self.consumer.close()
        return self.seen


def commit_retrying(producer: Producer) -> None:
    """commit_transaction, called again while it fails retriably (librdkafka's contract)."""
    while True:
        try:
            producer.commit_transaction(TIMEOUT)
            return
        except KafkaException as exc:
            if not exc.args[0].retriable():
                raise


@pytest.mark.parametrize(("victim", "point"), [
    # __transaction_state-0's preferred leader, broker 0, coordinates: it stops once the
    # PrepareCommit of the transaction is in the ISR, before any marker is written
    (0, "txn_end_prepared:after"),
    # broker 1 leads payments-1: it stops when the coordinator's markers reach it
    (1, "txn_markers_received:leader"),
])
def test_a_commit_survives_the_kill_of_a_broker_it_needs(
        zookeeper: ZooKeeperServer, tmp_path: Path, victim: int, point: str) -> None:
    moving = Cluster(zookeeper, tmp_path, f"kill-{victim}", config=CONFIG)
    reached = tmp_path / "reached"
    moving.brokers[victim].env = {"SPARKLOG_FAULT_POINT": point,
                                  "SPARKLOG_FAULT_MARKER": str(reached)}
    moving.start()
    try:
        spread_topic(moving, "payments")
        producer = transactional_producer(moving, "payments-writer")
        assert moving.partition(TXN_STATE).leader == 0
        watcher = CommittedReader(moving, "payments")
        first = produce_everywhere(producer, "payments", "first")
        committing = threading.Thread(target=commit_retrying, args=(producer,))
        committing.start()
        wait_until(reached.exists, message=f"broker {victim} to reach {point}")
        moving.brokers[victim].kill()
        committing.join(TIMEOUT * 3)
        assert not committing.is_alive(), "the commit did not finish"
        # the coordinator is (now) a live broker, the one that finished the commit
        assert moving.partition(TXN_STATE).leader not in (-1, victim)
        second = produce_everywhere(producer, "payments", "second")
        producer.commit_transaction(TIMEOUT)
        wait_until(lambda: len(watcher.seen) >= len(first + second),
                   message="the watcher to see both transactions")
        seen = watcher.stop()
        assert sorted(seen) == sorted(first + second)  # each record once
        for p in range(PARTITIONS):  # in each partition, all of the first, then the second
            ours = [v for v in seen if v.split(b"-")[1] == str(p).encode()]
            assert ours == [v for v in first + second if v.split(b"-")[1] == str(p).encode()]
        assert read_all(moving, "payments", "read_committed") == sorted(first + second)
    finally:
        moving.stop()


def test_transactions_of_both_versions_survive_a_kill_loop(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """KIP-890 on a cluster: transactions of a v1 client (confluent-kafka: AddPartitionsToTxn,
    then batches each leader verifies with the coordinator, over the inter-broker listener
    when it is another broker) and of a v2 client (Produce v12's implicit adds, EndTxn v5's
    epoch bumps), two of three committed, while the coordinator's broker and partition
    leaders are SIGKILLed in turn and started again: read_committed reads every committed
    record once, no aborted one, and an unanswered commit whole or not at all. A bigger
    loop: ``bench/transactions.py --kill-loop``."""
    moving = Cluster(zookeeper, tmp_path, "kill-loop", config=CONFIG)
    moving.start()
    try:
        spread_topic(moving, "ledger")
        turns = itertools.cycle([lambda: moving.leader(TXN_STATE),
                                 *(lambda p=p: moving.leader("ledger", p)
                                   for p in range(PARTITIONS))])
        killer = Killer(moving.brokers, lambda: next(turns)()).start(kills=3)
        outcomes = kill_loop(lambda: moving.bootstrap, "ledger", PARTITIONS, 24, killer)
        assert len(killer.killed) >= 1, "the loop ended before any kill"
        assert len(outcomes.committed) >= 8 and outcomes.aborted
        for broker in moving.brokers:
            if not broker.running:
                broker.start()
        for p in range(PARTITIONS):
            moving.wait_for_isr("ledger", {0, 1, 2}, p)
        outcomes.check(read_committed(moving.bootstrap, "ledger", PARTITIONS))
    finally:
        moving.stop()
