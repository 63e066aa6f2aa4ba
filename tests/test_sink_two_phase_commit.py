"""The exactly-once sink's two-phase commit (``TransactionCommitter``) against the in-process
broker, without Spark: "tasks" are confluent-kafka transactional producers that flush and
are destroyed with their transaction open, as the sink's write tasks are; the driver's side
is the committer, its intents in a checkpoint directory. What read_committed consumers see
is the measure: every batch exactly once, nothing of an aborted attempt, no transaction
left open (the last stable offset reaches the log end).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from broker_fixtures import TIMEOUT, create_topic, unique_topic, wait_until
from committed_reader import read_committed
from confluent_kafka import Producer

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.client.kafka import KafkaClient
from sparklog.client.settings import ClientConfig, RetryPolicy, parse_bootstrap
from sparklog.client.transactions import ONGOING, describe_transaction, list_transactions
from sparklog.datasource.write.commit_intents import CommitIntent, CommitIntents, SinkTransaction
from sparklog.datasource.write.commit_message import SinkCommitMessage
from sparklog.datasource.write.two_phase_commit import (
    PartialCommitError,
    TransactionCommitter,
    TransactionsExpiredError,
)

CONFIG = {
    "transaction.state.log.num.partitions": "2",
    "offsets.topic.num.partitions": "2",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100",
}
PARTITIONS = 2
SHORT_TIMEOUT_MS = 1000


def _sink_client(broker: EmbeddedBroker) -> ClientConfig:
    return ClientConfig(parse_bootstrap(broker.bootstrap), client_id="sparklog-sink")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path_factory.mktemp("two-phase") / "data", CONFIG) as running:
        yield running


@pytest.fixture
def topic(broker: EmbeddedBroker, request: pytest.FixtureRequest) -> str:
    return create_topic(broker.bootstrap, unique_topic(request.node.name), PARTITIONS)


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    return unique_topic(f"sink-{request.node.name}")


def client(bootstrap: str, isolation: int = 0) -> KafkaClient:
    return KafkaClient(ClientConfig(parse_bootstrap(bootstrap), isolation_level=isolation),
                       RetryPolicy(30.0, 0.1))


def task(bootstrap: str, tid: str, topic: str, partition: int, values: Sequence[bytes],
         timeout_ms: int = 60_000) -> SinkCommitMessage:
    """A write task: its records in an open transaction, flushed, the producer destroyed."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                         "transaction.timeout.ms": timeout_ms, "log_level": 0})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value, partition=partition)
    assert producer.flush(TIMEOUT) == 0
    del producer
    with client(bootstrap) as c:
        state = describe_transaction(c, tid)
    assert state.state == ONGOING
    txn = SinkTransaction(tid, state.producer_id, state.producer_epoch, len(values))
    return SinkCommitMessage(len(values), sum(map(len, values)), txn)


def batch(bootstrap: str, prefix: str, topic: str, tag: str, attempt: int = 0,
          timeout_ms: int = 60_000) -> list[SinkCommitMessage]:
    """One task per partition, as one micro-batch's tasks are."""
    return [task(bootstrap, f"{prefix}-{p}-{attempt}", topic, p,
                 [f"{tag}-{p}-{i}".encode() for i in range(3)], timeout_ms)
            for p in range(PARTITIONS)]


def committed(bootstrap: str, topic: str) -> list[bytes | None]:
    return sorted(read_committed(bootstrap, topic, PARTITIONS))  # type: ignore[type-var]


def expected(*tags: str) -> list[bytes]:
    return sorted(f"{tag}-{p}-{i}".encode() for tag in tags for p in range(PARTITIONS)
                  for i in range(3))


def open_ids(bootstrap: str, prefix: str) -> list[str]:
    with client(bootstrap) as c:
        return [t.transactional_id for t in list_transactions(c, [ONGOING])
                if t.transactional_id.startswith(prefix)]


def test_a_batch_is_published_once_and_its_rerun_publishes_nothing(
        broker: EmbeddedBroker, topic: str, prefix: str, tmp_path: Path) -> None:
    committer = TransactionCommitter(_sink_client(broker), prefix, str(tmp_path))
    committer.commit_batch(batch(broker.bootstrap, prefix, topic, "first"), 0)
    assert committed(broker.bootstrap, topic) == expected("first")
    # Spark re-runs batch 0 (its commit log lacked it): the same ids write new transactions
    committer.commit_batch(batch(broker.bootstrap, prefix, topic, "rerun"), 0)
    assert committed(broker.bootstrap, topic) == expected("first")
    committer.commit_batch(batch(broker.bootstrap, prefix, topic, "next"), 1)
    assert committed(broker.bootstrap, topic) == expected("first", "next")
    assert CommitIntents(str(tmp_path)).latest() == CommitIntent(
        1, CommitIntents(str(tmp_path)).get(1).transactions, committed=True)


def test_failed_and_speculative_attempts_are_aborted(broker: EmbeddedBroker, topic: str,
                                                     prefix: str, tmp_path: Path) -> None:
    failed = task(broker.bootstrap, f"{prefix}-0-0", topic, 0, [b"failed attempt"])
    assert failed.transaction is not None
    messages = batch(broker.bootstrap, prefix, topic, "won", attempt=1)
    task(broker.bootstrap, f"{prefix}-1-2", topic, 1, [b"speculative duplicate"])
    TransactionCommitter(_sink_client(broker), prefix, str(tmp_path)).commit_batch(messages, 0)
    assert committed(broker.bootstrap, topic) == expected("won")
    assert open_ids(broker.bootstrap, prefix) == []


def test_a_decided_batch_is_finished_by_the_next_driver(broker: EmbeddedBroker, topic: str,
                                                        prefix: str, tmp_path: Path) -> None:
    """The driver died right after writing the intent: the writer created at the restart
    commits the recorded transactions before any task of the re-run starts."""
    messages = batch(broker.bootstrap, prefix, topic, "decided")
    CommitIntents(str(tmp_path)).write(
        CommitIntent(4, tuple(m.transaction for m in messages if m.transaction)))
    assert sorted(open_ids(broker.bootstrap, prefix)) == [f"{prefix}-0-0", f"{prefix}-1-0"]
    TransactionCommitter(_sink_client(broker), prefix, str(tmp_path)).roll_forward()
    assert committed(broker.bootstrap, topic) == expected("decided")
    assert CommitIntents(str(tmp_path)).get(4).committed  # type: ignore[union-attr]


def test_an_abort_before_the_intent_aborts_and_after_it_commits(
        broker: EmbeddedBroker, topic: str, prefix: str, tmp_path: Path) -> None:
    committer = TransactionCommitter(_sink_client(broker), prefix, str(tmp_path))
    committer.abort_batch(batch(broker.bootstrap, prefix, topic, "aborted"), 0)
    assert committed(broker.bootstrap, topic) == []
    messages = batch(broker.bootstrap, prefix, topic, "decided")
    CommitIntents(str(tmp_path)).write(
        CommitIntent(1, tuple(m.transaction for m in messages if m.transaction)))
    committer.abort_batch(messages, 1)  # the commit failed after deciding: the decision holds
    assert committed(broker.bootstrap, topic) == expected("decided")


def test_transactions_the_broker_aborted_are_written_again_or_reported(
        broker: EmbeddedBroker, topic: str, prefix: str, tmp_path: Path) -> None:
    intents = CommitIntents(str(tmp_path))
    committer = TransactionCommitter(_sink_client(broker), prefix, str(tmp_path))
    expired = batch(broker.bootstrap, prefix, topic, "expired", timeout_ms=SHORT_TIMEOUT_MS)
    wait_until(lambda: open_ids(broker.bootstrap, prefix) == [])  # aborted by the timeout
    with pytest.raises(TransactionsExpiredError, match="micro-batch 0"):
        committer.commit_batch(expired, 0)
    assert intents.get(0) is None  # nothing published: the batch's re-run writes it again
    committer.commit_batch(batch(broker.bootstrap, prefix, topic, "rerun"), 0)
    assert committed(broker.bootstrap, topic) == expected("rerun")

    kept = task(broker.bootstrap, f"{prefix}-0-0", topic, 0, [b"kept"])
    lost = task(broker.bootstrap, f"{prefix}-1-0", topic, 1, [b"lost"], SHORT_TIMEOUT_MS)
    wait_until(lambda: open_ids(broker.bootstrap, prefix) == [f"{prefix}-0-0"])
    with pytest.raises(PartialCommitError, match=f"{prefix}-1-0"):
        committer.commit_batch([kept, lost], 1)
