"""Transactions end to end with real clients (confluent-kafka, kafka-python, aiokafka) against
the in-process broker: what read_committed and read_uncommitted consumers see, offsets sent
to a transaction, fencing of a second producer, the coordinator's timeout, and refusals.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from broker_fixtures import (
    CONSUMERS,
    TIMEOUT,
    RawConnection,
    create_topic,
    raw_produce,
    unique_topic,
    wait_until,
)
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka import KafkaProducer

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.cli import main
from sparklog.coordinator.txn_metadata import TransactionState
from sparklog.errors import ErrorCode
from sparklog.record.records import build_batch

CONFIG = {
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100",
    "transaction.max.timeout.ms": "60000",
}
Steps = Sequence[tuple[Sequence[bytes], bool]]
"""Transactions to run in order: (values, commit?)."""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path_factory.mktemp("txn") / "data", CONFIG) as running:
        yield running


@pytest.fixture
def topic(broker: EmbeddedBroker, request: pytest.FixtureRequest) -> str:
    return create_topic(broker.bootstrap, unique_topic(request.node.name))


# -- transactional producers of each client ----------------------------------------------------


def transact_confluent(bootstrap: str, tid: str, topic: str, steps: Steps) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                         "log_level": 3})
    producer.init_transactions(TIMEOUT)
    for values, commit in steps:
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value)
        producer.flush(TIMEOUT)  # sent, so an abort has records to abort
        if commit:
            producer.commit_transaction(TIMEOUT)
        else:
            producer.abort_transaction(TIMEOUT)


def transact_kafka_python(bootstrap: str, tid: str, topic: str, steps: Steps) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
    try:
        producer.init_transactions()
        for values, commit in steps:
            producer.begin_transaction()
            for value in values:
                producer.send(topic, value)
            producer.flush(TIMEOUT)
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(TIMEOUT)


def transact_aiokafka(bootstrap: str, tid: str, topic: str, steps: Steps) -> None:
    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
        await producer.start()
        try:
            for values, commit in steps:
                await producer.begin_transaction()
                for value in values:
                    await producer.send_and_wait(topic, value)
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(run(), TIMEOUT * 2))


TRANSACTORS: dict[str, Callable[[str, str, str, Steps], None]] = {
    "confluent": transact_confluent, "kafka-python": transact_kafka_python,
    "aiokafka": transact_aiokafka,
}
ISOLATION = {"confluent": "isolation.level", "kafka-python": "isolation_level",
             "aiokafka": "isolation_level"}


def consume(client: str, bootstrap: str, topic: str, count: int, isolation: str) -> list[bytes]:
    records = CONSUMERS[client](bootstrap, topic, count, **{ISOLATION[client]: isolation})
    return [r.value for r in records if r.value is not None]


# -- what consumers see ----------------------------------------------------------------------


def _values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(count)]


@pytest.mark.parametrize("producer", list(TRANSACTORS))
def test_committed_records_are_read_and_aborted_ones_only_read_uncommitted(
        broker: EmbeddedBroker, topic: str, producer: str) -> None:
    committed, aborted, more = _values("c", 5), _values("a", 3), _values("m", 2)
    TRANSACTORS[producer](broker.bootstrap, f"tid-{topic}", topic,
                          [(committed, True), (aborted, False), (more, True)])
    for consumer in CONSUMERS:
        assert consume(consumer, broker.bootstrap, topic, 7, "read_committed") == (
            committed + more), consumer
    for consumer in CONSUMERS:  # the aborted records are still in the log
        assert consume(consumer, broker.bootstrap, topic, 10, "read_uncommitted") == (
            committed + aborted + more), consumer


def test_an_open_transaction_holds_read_committed_readers_at_the_stable_offset(
        broker: EmbeddedBroker, topic: str) -> None:
    TRANSACTORS["confluent"](broker.bootstrap, f"first-{topic}", topic, [(_values("x", 3), True)])
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": topic,
                         "log_level": 3})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.produce(topic, b"open")
    producer.flush(TIMEOUT)  # offset 4 (after 3 records and a marker): open
    committed = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lso",
                          "isolation.level": "read_committed"})
    uncommitted = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lso",
                            "isolation.level": "read_uncommitted"})
    try:
        tp = TopicPartition(topic, 0)
        assert committed.get_watermark_offsets(tp, TIMEOUT, cached=False) == (0, 4)
        assert uncommitted.get_watermark_offsets(tp, TIMEOUT, cached=False) == (0, 5)
        producer.commit_transaction(TIMEOUT)  # marker at 5
        assert committed.get_watermark_offsets(tp, TIMEOUT, cached=False) == (0, 6)
    finally:
        committed.close()
        uncommitted.close()


# -- offsets sent to a transaction --------------------------------------------------------------


def test_consume_transform_produce_moves_group_offsets_only_on_commit(
        broker: EmbeddedBroker) -> None:
    source = create_topic(broker.bootstrap, unique_topic("ctp-in"))
    sink = create_topic(broker.bootstrap, unique_topic("ctp-out"))
    group = f"{source}-g"
    TRANSACTORS["confluent"](broker.bootstrap, f"feed-{source}", source,
                             [(_values("in", 10), True)])
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": group,
                         "log_level": 3})
    producer.init_transactions(TIMEOUT)
    tp = TopicPartition(source, 0)
    try:
        consumer.assign([TopicPartition(source, 0, 0)])
        for commit in (True, False):
            batch = _read(consumer, 5)
            producer.begin_transaction()
            for message in batch:
                producer.produce(sink, message.value().upper())
            producer.send_offsets_to_transaction(
                [TopicPartition(source, 0, batch[-1].offset() + 1)],
                consumer.consumer_group_metadata(), TIMEOUT)
            if commit:
                producer.commit_transaction(TIMEOUT)
            else:
                producer.abort_transaction(TIMEOUT)
            (committed,) = consumer.committed([tp], TIMEOUT)
            assert committed.offset == 5  # the aborted transaction's offsets never count
    finally:
        consumer.close()
    assert consume("confluent", broker.bootstrap, sink, 5, "read_committed") == [
        v.upper() for v in _values("in", 5)]


def _read(consumer: Consumer, count: int) -> list:
    got: list = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < count:
        assert time.monotonic() < deadline, f"read {len(got)} of {count}"
        for message in consumer.consume(count - len(got), 0.5):
            assert message.error() is None, message.error()
            got.append(message)
    return got


# -- fencing, timeouts, refusals ----------------------------------------------------------------


def _fatal(exc: KafkaException) -> KafkaError:
    return exc.args[0]


def open_transaction(bootstrap: str, tid: str, topic: str, value: bytes) -> Producer:
    """A confluent-kafka producer whose transaction holds ``value`` and stays open."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                         "log_level": 0})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.produce(topic, value)
    producer.flush(TIMEOUT)
    return producer


def test_a_second_producer_with_the_same_id_fences_the_first(broker: EmbeddedBroker,
                                                             topic: str) -> None:
    tid = f"fence-{topic}"
    zombie = open_transaction(broker.bootstrap, tid, topic, b"zombie")
    TRANSACTORS["confluent"](broker.bootstrap, tid, topic, [([b"new"], True)])
    with pytest.raises(KafkaException) as refused:
        zombie.commit_transaction(TIMEOUT)
    assert _fatal(refused.value).fatal() or _fatal(refused.value).code() in (
        KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    # the zombie's open transaction was aborted when the new producer took the id
    assert consume("confluent", broker.bootstrap, topic, 1, "read_committed") == [b"new"]


def test_a_transaction_open_past_its_timeout_is_aborted(broker: EmbeddedBroker,
                                                        topic: str) -> None:
    tid = f"slow-{topic}"
    slow = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid,
                     "transaction.timeout.ms": 1000, "log_level": 0})
    slow.init_transactions(TIMEOUT)
    slow.begin_transaction()
    slow.produce(topic, b"late")
    slow.flush(TIMEOUT)

    def state() -> TransactionState:
        return broker.call(lambda b: b.txn_coordinator.transactions[tid].state)

    wait_until(lambda: state() is TransactionState.COMPLETE_ABORT,
               message="the coordinator to abort the transaction")
    with pytest.raises(KafkaException):
        slow.commit_transaction(TIMEOUT)  # fenced: the coordinator bumped the epoch
    TRANSACTORS["confluent"](broker.bootstrap, f"other-{tid}", topic, [([b"after"], True)])
    assert consume("confluent", broker.bootstrap, topic, 1, "read_committed") == [b"after"]


def test_a_timeout_above_the_broker_maximum_is_refused(broker: EmbeddedBroker) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "too-long",
                         "transaction.timeout.ms": 120_000, "log_level": 0})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(TIMEOUT)
    assert _fatal(refused.value).code() == KafkaError.INVALID_TRANSACTION_TIMEOUT


def test_transaction_state_survives_a_restart(tmp_path: Path) -> None:
    """The id keeps its producer id and epoch across a restart, so the next producer of the
    id gets the next epoch (and a zombie from before the restart stays fenced)."""
    with EmbeddedBroker(tmp_path / "data", CONFIG) as broker:
        topic = create_topic(broker.bootstrap, "restart")
        TRANSACTORS["confluent"](broker.bootstrap, "keep", topic, [([b"1"], True)])
        before = broker.call(lambda b: b.txn_coordinator.transactions["keep"].record())
    with EmbeddedBroker(tmp_path / "data", CONFIG) as broker:
        after = broker.call(lambda b: b.txn_coordinator.transactions["keep"].record())
        assert after == before
        TRANSACTORS["confluent"](broker.bootstrap, "keep", topic, [([b"2"], True)])
        bumped = broker.call(lambda b: b.txn_coordinator.transactions["keep"].record())
        assert (bumped.producer_id, bumped.producer_epoch) == (before.producer_id,
                                                              before.producer_epoch + 1)
        assert consume("confluent", broker.bootstrap, topic, 2, "read_committed") == [b"1",
                                                                                      b"2"]


# -- sparklog transactions (like kafka-transactions.sh) -----------------------------------------


def run_tool(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    code = main(["transactions", *args])
    out = capsys.readouterr()
    return code, out.out.splitlines() + [f"ERR {line}" for line in out.err.splitlines()]


def test_the_tool_lists_describes_and_aborts_by_id(broker: EmbeddedBroker, topic: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    tid = f"tool-{topic}"
    producer = open_transaction(broker.bootstrap, tid, topic, b"stuck")
    server = ["--bootstrap-server", broker.bootstrap]

    code, lines = run_tool(capsys, "list", *server, "--state", "Ongoing")
    assert code == 0
    assert lines[0].split() == ["TRANSACTIONALID", "COORDINATOR", "PRODUCERID",
                                "TRANSACTIONSTATE"]
    assert [line.split()[0::3] for line in lines[1:]] == [[tid, "Ongoing"]]
    code, lines = run_tool(capsys, "describe", *server, "--transactional-id", tid)
    assert code == 0
    row = dict(zip(lines[0].split(), lines[1].split(), strict=True))
    assert (row["TRANSACTIONSTATE"], row["TOPICPARTITIONS"], row["PRODUCEREPOCH"]) == (
        "Ongoing", f"{topic}-0", "0")

    code, lines = run_tool(capsys, "abort", *server, "--transactional-id", tid)
    assert (code, lines) == (0, [f"aborted the open transaction of {tid!r} (producer "
                                 f"{row['PRODUCERID']} is now at epoch 2)"])
    code, lines = run_tool(capsys, "describe", *server, "--transactional-id", tid)
    assert "CompleteAbort" in lines[1].split() or "Empty" in lines[1].split()
    with pytest.raises(KafkaException):
        producer.commit_transaction(TIMEOUT)  # fenced by the abort
    assert consume("confluent", broker.bootstrap, topic, 0, "read_committed") == []

    code, lines = run_tool(capsys, "describe", *server, "--transactional-id", "nobody")
    assert code == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in lines[-1]


def test_the_tool_aborts_a_hanging_transaction_with_a_marker(
        broker: EmbeddedBroker, topic: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A transactional batch no coordinator knows of holds the stable offset (a hanging
    transaction); an ABORT marker written by the tool releases it. A producer can no longer
    write one (KIP-890: the leader verifies with the coordinator, INVALID_TXN_STATE), so it
    is put in the log as a broker before verification wrote it."""
    batch = build_batch([(None, b"hanging", (), int(time.time() * 1000))],
                        producer_id=999_999, producer_epoch=3, base_sequence=0,
                        transactional=True)
    with RawConnection(broker.bootstrap) as conn:
        assert raw_produce(conn, topic, 0, batch).error_code == ErrorCode.INVALID_TXN_STATE
    broker.call(lambda b: b.logs.get_log(topic, 0).append(batch, now_ms=int(time.time() * 1000)))
    stable = broker.call(lambda b: b.logs.get_log(topic, 0).last_stable_offset)
    assert stable == 0
    code, lines = run_tool(capsys, "abort", "--bootstrap-server", broker.bootstrap, "--topic",
                           topic, "--partition", "0", "--producer-id", "999999",
                           "--producer-epoch", "3", "--coordinator-epoch", "0")
    assert (code, lines) == (0, [f"wrote an ABORT marker for producer 999999 epoch 3 to "
                                 f"{topic}-0"])
    assert broker.call(lambda b: b.logs.get_log(topic, 0).last_stable_offset) == 2
    code, lines = run_tool(capsys, "abort", "--bootstrap-server", broker.bootstrap,
                           "--topic", topic)
    assert code == 2 and "give --transactional-id" in lines[-1]


def test_the_tool_finds_hanging_transactions(broker: EmbeddedBroker, topic: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """kafka-transactions.sh find-hanging: an open transaction older than the timeout that no
    coordinator knows of is listed; a live transaction, and one younger than the timeout,
    are not. (A producer can no longer leave one, KIP-890's verification refuses it, so it is
    put in the log as a broker before verification would have written it.)"""
    written = int(time.time() * 1000) - 20 * 60_000
    batch = build_batch([(None, b"hanging", (), written)], producer_id=888_888,
                        producer_epoch=2, base_sequence=0, transactional=True)
    broker.call(lambda b: b.logs.get_log(topic, 0).append(batch, now_ms=written))
    live = open_transaction(broker.bootstrap, f"live-{topic}", topic, b"live")
    server = ["--bootstrap-server", broker.bootstrap]
    wanted = [["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
               "StartOffset", "LastTimestamp", "Duration(min)"],
              [topic, "0", "888888", "2", "-1", "0", str(written), "20"]]
    for scope in (["--topic", topic], ["--topic", topic, "--partition", "0"],
                  ["--broker-id", "0"]):
        code, lines = run_tool(capsys, "find-hanging", *server, *scope)
        assert code == 0, lines
        assert [line.split() for line in lines if "888888" in line or "Topic" in line] == wanted
        assert len(lines) == 2, lines  # the live transaction is not hanging
    code, lines = run_tool(capsys, "find-hanging", *server, "--topic", topic,
                           "--max-transaction-timeout", "30")
    assert (code, lines) == (0, [" ".join(wanted[0])])
    code, lines = run_tool(capsys, "find-hanging", *server, "--partition", "1")
    assert code == 2 and "requires either --topic or --broker-id" in lines[-1]
    code, lines = run_tool(capsys, "find-hanging", *server, "--broker-id", "0", "--partition",
                           "1")
    assert code == 2 and "The --partition argument requires --topic" in lines[-1]
    live.abort_transaction(TIMEOUT)
