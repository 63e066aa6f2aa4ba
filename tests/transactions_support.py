"""Transactions under broker kills, for the cluster test and ``bench/transactions.py``.

No Python client speaks transactions v2 (KIP-890 part 2), so ``RawTxnProducer`` is one
written for the purpose on sparklog's protocol client. At transaction version 2 it sends
InitProducerId, Produce v12 (no AddPartitionsToTxn: the leader adds the partition) and EndTxn
v5 (every end bumps the epoch, sequences start again at 0); at version 1 the same client
sends AddPartitionsToTxn v3 before a partition's first batch, Produce v11 and EndTxn v4 (the
epoch kept), so the two protocols can be compared with one client. It retries what a
producer retries (a leader or coordinator moving, NOT_ENOUGH_REPLICAS while a leader cannot
reach the coordinator, a connection lost), resending a batch with its sequence so a
duplicate is recognised; anything else aborts the transaction.

``kill_loop`` runs transactions of a v1 client (confluent-kafka) and of ``RawTxnProducer`` in
turn, committing two of three and aborting the third, while a thread SIGKILLs, one at a
time, the broker coordinating a transactional id or leading a partition and starts it
again. Each transaction's outcome is what its producer was told: committed, aborted (never
sent a commit, or told the abort succeeded) or uncertain (a commit sent and not answered).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from broker_fixtures import Cluster, create_topic
from confluent_kafka import KafkaException, Producer

from sparklog.client.cluster import TopicPartition
from sparklog.client.errors import KafkaClientError, RetriableError
from sparklog.client.kafka import KafkaClient
from sparklog.client.settings import ClientConfig, RetryPolicy, parse_bootstrap
from sparklog.errors import ErrorCode
from sparklog.protocol.versions import ApiKey, CoordinatorType
from sparklog.record.records import build_batch

TIMEOUT = 60.0
PRODUCE_VERSION = {1: 11, 2: 12}
END_TXN_VERSION = {1: 4, 2: 5}
RETRIABLE = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS,
                       ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT,
                       ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
                       ErrorCode.NETWORK_EXCEPTION, ErrorCode.FENCED_LEADER_EPOCH,
                       ErrorCode.CONCURRENT_TRANSACTIONS})


COORDINATOR_RETRIABLE = frozenset({
    ErrorCode.NETWORK_EXCEPTION, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS})


class TransactionFailed(Exception):
    """The transaction cannot go on (its producer aborts it)."""


class RawTxnProducer:
    """A transactional producer speaking transaction ``version`` 1 or 2 (see the module)."""

    def __init__(self, bootstrap: str, transactional_id: str, version: int = 2) -> None:
        self.tid = transactional_id
        self.version = version
        self.added: set[TopicPartition] = set()
        self.client = KafkaClient(ClientConfig(parse_bootstrap(bootstrap)),
                                  RetryPolicy(TIMEOUT, 0.2))
        self.producer_id, self.epoch = -1, -1
        self.sequences: dict[TopicPartition, int] = {}
        self.init()

    def close(self) -> None:
        self.client.close()

    def _coordinator(self, api_key: ApiKey, body: dict[str, Any], version: int = 5) -> Any:
        """``body`` at ``version`` to the id's coordinator, retried while it moves."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                _, address = self.client.coordinator(self.tid, CoordinatorType.TRANSACTION)
                answer = self.client._connection(address).request(api_key, version, body)
                code = ErrorCode(getattr(answer, "error_code", ErrorCode.NONE))
                if api_key == ApiKey.ADD_PARTITIONS_TO_TXN:  # per partition
                    code = max((ErrorCode(p.partition_error_code)
                                for t in answer.results_by_topic_v3_and_below
                                for p in t.results_by_partition), default=ErrorCode.NONE)
            except (OSError, KafkaClientError, RetriableError) as exc:
                code, answer = ErrorCode.NETWORK_EXCEPTION, exc
            if code not in COORDINATOR_RETRIABLE:
                return answer
            if time.monotonic() > deadline:
                raise TransactionFailed(f"{api_key.name}: {answer}")
            time.sleep(0.2)

    def init(self) -> None:
        """InitProducerId (KIP-360: naming the current producer, once there is one)."""
        answer = self._coordinator(ApiKey.INIT_PRODUCER_ID, {
            "transactional_id": self.tid, "transaction_timeout": timedelta(seconds=60),
            "producer_id": self.producer_id, "producer_epoch": self.epoch})
        if answer.error_code != ErrorCode.NONE:
            raise TransactionFailed(f"InitProducerId: {ErrorCode(answer.error_code).name}")
        self.producer_id, self.epoch = answer.producer_id, answer.producer_epoch
        self.sequences, self.added = {}, set()

    def send(self, topic: str, partition: int, values: list[bytes]) -> None:
        """One batch of ``values``, acknowledged by the ISR (retried as a producer does)."""
        tp = TopicPartition(topic, partition)
        if self.version == 1 and tp not in self.added:
            answer = self._coordinator(ApiKey.ADD_PARTITIONS_TO_TXN, {
                "v3_and_below_transactional_id": self.tid,
                "v3_and_below_producer_id": self.producer_id,
                "v3_and_below_producer_epoch": self.epoch,
                "v3_and_below_topics": [{"name": topic, "partitions": [partition]}]}, 3)
            errors = {p.partition_error_code for t in answer.results_by_topic_v3_and_below
                      for p in t.results_by_partition}
            if errors != {ErrorCode.NONE}:
                raise TransactionFailed(f"AddPartitionsToTxn: {errors}")
            self.added.add(tp)
        sequence = self.sequences.get(tp, 0)
        batch = build_batch([(None, v, (), int(time.time() * 1000)) for v in values],
                            producer_id=self.producer_id, producer_epoch=self.epoch,
                            base_sequence=sequence, transactional=True)
        body = {"transactional_id": self.tid, "acks": -1, "timeout": timedelta(seconds=30),
                "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]}
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                connection = self.client._connection(self.client.leader_address(tp))
                answer = connection.request(ApiKey.PRODUCE, PRODUCE_VERSION[self.version],
                                            body)
                code = ErrorCode(answer.responses[0].partition_responses[0].error_code)
            except (OSError, KafkaClientError, RetriableError) as exc:
                code, why = ErrorCode.NETWORK_EXCEPTION, str(exc)
            else:
                why = code.name
            if code == ErrorCode.NONE:
                self.sequences[tp] = sequence + len(values)
                return
            if code not in RETRIABLE or time.monotonic() > deadline:
                raise TransactionFailed(f"Produce to {topic}-{partition}: {why}")
            time.sleep(0.2)
            try:
                self.client._metadata([topic])
            except (OSError, KafkaClientError, RetriableError):
                pass  # the next round asks again

    def end(self, commit: bool) -> None:
        """EndTxn (v5: the epoch it answers is the next transaction's)."""
        answer = self._coordinator(ApiKey.END_TXN, {
            "transactional_id": self.tid, "producer_id": self.producer_id,
            "producer_epoch": self.epoch, "committed": commit}, END_TXN_VERSION[self.version])
        if answer.error_code != ErrorCode.NONE:
            raise TransactionFailed(f"EndTxn: {ErrorCode(answer.error_code).name}")
        self.added = set()
        if self.version == 2:
            self.producer_id, self.epoch = answer.producer_id, answer.producer_epoch
            self.sequences = {}


@dataclass
class Outcomes:
    """Each transaction's values by what its producer was told."""

    committed: list[list[bytes]] = field(default_factory=list)
    aborted: list[list[bytes]] = field(default_factory=list)
    uncertain: list[list[bytes]] = field(default_factory=list)

    def check(self, seen: list[bytes | None]) -> None:
        """read_committed's ``seen`` holds every committed value once, no aborted one,
        and each uncertain transaction whole or not at all."""
        counts: dict[bytes | None, int] = {}
        for value in seen:
            counts[value] = counts.get(value, 0) + 1
        doubled = [v for v, n in counts.items() if n > 1]
        assert doubled == [], f"read twice: {doubled[:5]}"
        missing = [v for t in self.committed for v in t if v not in counts]
        assert missing == [], f"committed and not read: {missing[:5]}"
        leaked = [v for t in self.aborted for v in t if v in counts]
        assert leaked == [], f"aborted and read: {leaked[:5]}"
        for values in self.uncertain:
            found = {v in counts for v in values}
            assert len(found) == 1, f"part of a transaction read: {values[:3]}"
        known = {v for t in self.committed + self.uncertain for v in t}
        assert set(counts) <= known, "read a value no transaction wrote"


class V1Producer:
    """confluent-kafka's transactional producer (transaction.version 1), as ``RawTxnProducer``."""

    def __init__(self, bootstrap: str, transactional_id: str) -> None:
        self.config = {"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                       "log_level": 3, "transaction.timeout.ms": 60000}
        self.producer = Producer(self.config)
        self.producer.init_transactions(TIMEOUT)
        self.open = False

    def send(self, topic: str, partition: int, values: list[bytes]) -> None:
        if not self.open:
            self.producer.begin_transaction()
            self.open = True
        for value in values:
            self.producer.produce(topic, value, partition=partition)
        try:
            self.producer.flush(TIMEOUT)
        except KafkaException as exc:
            raise TransactionFailed(str(exc)) from exc

    def end(self, commit: bool) -> None:
        self.open = False
        while True:
            try:
                if commit:
                    self.producer.commit_transaction(TIMEOUT)
                else:
                    self.producer.abort_transaction(TIMEOUT)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise TransactionFailed(str(exc)) from exc

    def init(self) -> None:
        """After a failure: abort what is open, or start over with a new producer."""
        try:
            self.producer.abort_transaction(TIMEOUT)
        except KafkaException:
            self.producer = Producer(self.config)
            self.producer.init_transactions(TIMEOUT)
        self.open = False

    def close(self) -> None:
        self.producer.flush(1)


def spread_topic(cluster: Cluster, name: str) -> None:
    """A topic of three RF 3 partitions, each led by a different broker."""
    create_topic(cluster.bootstrap, name, 3, replication_factor=3)
    leaders = {cluster.wait_for_isr(name, {0, 1, 2}, p).leader for p in range(3)}
    assert leaders == {0, 1, 2}


def run_transaction(producer: V1Producer | RawTxnProducer, topic: str, partitions: int,
                    values: list[bytes], commit: bool, outcomes: Outcomes) -> None:
    """Write ``values`` spread over ``partitions`` and end the transaction; its outcome."""
    try:
        for p in range(partitions):
            producer.send(topic, p, values[p::partitions])
    except TransactionFailed:
        commit = False  # it cannot commit: abort it
    try:
        producer.end(commit)
    except TransactionFailed:
        (outcomes.uncertain if commit else outcomes.aborted).append(values)
        producer.init()  # aborts what is left open: a commit sent may have landed
        return
    (outcomes.committed if commit else outcomes.aborted).append(values)


@dataclass
class Killer:
    """SIGKILLs one broker at a time (``victims()`` picks it) and starts it again."""

    brokers: list[Any]
    victims: Callable[[], int]
    down_s: float = 3.0
    between_s: float = 4.0
    killed: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self, kills: int) -> Killer:
        def run() -> None:
            for _ in range(kills):
                if self._stop.wait(self.between_s):
                    return
                victim = self.victims()
                self.brokers[victim].kill()
                self.killed.append(victim)
                self._stop.wait(self.down_s)
                self.brokers[victim].start()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    @property
    def killing(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def join(self) -> None:
        assert self._thread is not None
        self._thread.join()

    def stop(self) -> None:
        self._stop.set()
        self.join()


def kill_loop(bootstrap: Callable[[], str], topic: str, partitions: int,
              transactions: int, killer: Killer, per_transaction: int = 30) -> Outcomes:
    """At least ``transactions`` transactions, v1 and v2 clients in turn, every third
    aborted, and more until ``killer`` has done its kills; the producers' outcomes (see the
    module)."""
    outcomes = Outcomes()
    producers: list[V1Producer | RawTxnProducer] = [
        V1Producer(bootstrap(), f"{topic}-v1"), RawTxnProducer(bootstrap(), f"{topic}-v2")]
    counter = itertools.count()
    try:
        for n in itertools.count():
            if n >= transactions and not killer.killing:
                break
            values = [f"{n}-{next(counter)}".encode() for _ in range(per_transaction)]
            run_transaction(producers[n % 2], topic, partitions, values, n % 3 != 2,
                            outcomes)
    finally:
        killer.stop()
        for producer in producers:
            producer.close()
    return outcomes
