"""The sink's producers outlive their tasks (``datasource/write/producer_cache``).

What a user relies on: a later task or micro-batch in the same Python worker reuses the
producer of an earlier one (the broker sees one idempotent producer, not one per task, and
the task pays for no new connection, metadata or producer id), while every task still fails
on its own records' delivery errors; a producer whose task failed is never reused; idle
producers are closed after ``spark.kafka.producer.cache.timeout``. With exactly-once, a
task resumes the producer of the same transactional id an earlier task left in the worker
only once the driver committed that producer's transaction (one producer id and epoch for
every micro-batch); a transaction the driver did not commit, or a producer another one of
the id fenced, gets a new producer, which aborts what was left open. The tasks here are
``TaskProducer``s driven directly, as a write task drives them, against a broker process;
``tests/test_spark_sink.py`` has the same through Spark.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from broker_fixtures import create_topic, wait_until
from committed_reader import read_committed
from pyspark.sql.types import BinaryType, StructField, StructType

from sparklog.broker.process import BrokerProcess
from sparklog.client.cluster import TopicPartition
from sparklog.client.kafka import KafkaClient
from sparklog.client.settings import ClientConfig, RetryPolicy, parse_bootstrap
from sparklog.client.transactions import describe_producers
from sparklog.client.watch import WatchedProducer
from sparklog.datasource.options import OptionError
from sparklog.datasource.write import producer as producer_module
from sparklog.datasource.write import transactional_producer
from sparklog.datasource.write.commit_message import SinkCommitMessage
from sparklog.datasource.write.producer import SinkDeliveryError, TaskProducer
from sparklog.datasource.write.producer_cache import ProducerCache
from sparklog.datasource.write.two_phase_commit import TransactionCommitter
from sparklog.datasource.write.write_options import sink_spec

SCHEMA = StructType([StructField("value", BinaryType())])


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("cache") / "data") as running:
        yield running


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch) -> Iterator[ProducerCache]:
    """A cache of the test's own in place of the worker's."""
    fresh = ProducerCache()
    monkeypatch.setattr(producer_module, "PRODUCERS", fresh)
    yield fresh
    fresh.close()


def task(broker: BrokerProcess, topic: str, values: list[bytes], **options: str) -> int:
    """One write task of ``values``: the records it says the broker acknowledged."""
    spec = sink_spec({"kafka.bootstrap.servers": broker.bootstrap, "topic": topic, **options},
                     SCHEMA)
    producer = TaskProducer(spec)
    try:
        producer.send(pa.record_batch([pa.array(values)], names=["value"]))
        return producer.finish().records
    except BaseException:
        producer.abandon()
        raise


def producer_ids(broker: BrokerProcess, topic: str) -> set[int]:
    config = ClientConfig(parse_bootstrap(broker.bootstrap, "bootstrap"))
    with KafkaClient(config, RetryPolicy(timeout_s=10.0, backoff_s=0.1)) as client:
        return {p.producer_id for p in describe_producers(client, TopicPartition(topic, 0))}


def test_later_tasks_reuse_the_producer(broker: BrokerProcess, cache: ProducerCache) -> None:
    topic = f"cached-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)
    for n in range(3):
        assert task(broker, topic, [b"%d" % n] * 10) == 10
    assert len(producer_ids(broker, topic)) == 1
    assert cache.idle_count() == 1
    other = f"cached-{uuid.uuid4().hex[:8]}"  # other settings: another producer
    create_topic(broker.bootstrap, other)
    task(broker, other, [b"x"], **{"kafka.linger.ms": "1"})
    assert cache.idle_count() == 2


def test_later_tasks_ask_no_metadata_before_producing(
        broker: BrokerProcess, cache: ProducerCache, monkeypatch: pytest.MonkeyPatch) -> None:
    """The topic is looked up once per producer, not once per task (a Metadata round per
    micro-batch)."""
    topic = f"cached-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)
    lookups: list[str | None] = []
    looked_up = WatchedProducer.list_topics

    def counted(self: WatchedProducer, topic: str | None = None, timeout: float = -1) -> Any:
        lookups.append(topic)
        return looked_up(self, topic, timeout)

    monkeypatch.setattr(WatchedProducer, "list_topics", counted)
    for n in range(3):
        assert task(broker, topic, [b"%d" % n]) == 1
    assert lookups == [topic]


def test_a_failed_task_fails_alone_and_its_producer_is_not_reused(
        broker: BrokerProcess, cache: ProducerCache) -> None:
    topic = f"cached-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic, config={"max.message.bytes": "2000"})
    assert task(broker, topic, [b"small"]) == 1
    with pytest.raises(SinkDeliveryError, match=r"of 2 records failed delivery"):
        task(broker, topic, [b"ok", b"x" * 10_000])
    assert cache.idle_count() == 0  # the failed task's producer was dropped
    assert task(broker, topic, [b"after"]) == 1  # a new producer, and no stale failure
    assert len(producer_ids(broker, topic)) == 2


def test_idle_producers_are_closed_after_the_timeout(broker: BrokerProcess,
                                                     cache: ProducerCache) -> None:
    topic = f"cached-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap, topic)
    task(broker, topic, [b"x"], **{"spark.kafka.producer.cache.timeout": "200ms"})
    assert cache.idle_count() == 1
    started = time.monotonic()
    wait_until(lambda: cache.idle_count() == 0, message="the idle producer closed")
    assert time.monotonic() - started < 5


def test_a_bad_timeout_names_the_option(broker: BrokerProcess) -> None:
    with pytest.raises(OptionError, match=r"option spark\.kafka\.producer\.cache\.timeout "
                                          r"must be a duration"):
        sink_spec({"kafka.bootstrap.servers": broker.bootstrap, "topic": "t",
                   "spark.kafka.producer.cache.timeout": "soon"}, SCHEMA)


# -- exactly-once: transactional producers pooled per transactional id -----------------------

def eo_task(broker: BrokerProcess, topic: str, prefix: str, values: list[bytes],
            monkeypatch: pytest.MonkeyPatch, partition_id: int = 0) -> SinkCommitMessage:
    """One exactly-once write task of partition ``partition_id``, attempt 0: its records in
    a transaction left open, as a Spark task leaves it."""
    monkeypatch.setattr(transactional_producer, "task_transactional_id",
                        lambda p: f"{p}-{partition_id}-0")
    spec = sink_spec({"kafka.bootstrap.servers": broker.bootstrap, "topic": topic,
                      "deliveryGuarantee": "exactly-once", "transactionalIdPrefix": prefix},
                     SCHEMA)
    producer = transactional_producer.TransactionalTaskProducer(spec)
    try:
        producer.send(pa.record_batch([pa.array(values)], names=["value"]))
        return producer.finish()
    except BaseException:
        producer.abandon()
        raise


def topic_and_driver(broker: BrokerProcess, prefix: str, checkpoint: Path
                     ) -> tuple[str, TransactionCommitter]:
    """A new topic of one partition, and the driver's committer of the sink's prefix."""
    topic = create_topic(broker.bootstrap, f"eo-cached-{uuid.uuid4().hex[:8]}")
    return topic, TransactionCommitter(ClientConfig(parse_bootstrap(broker.bootstrap)),
                                       prefix, str(checkpoint))


def test_exactly_once_tasks_resume_the_pooled_producer_once_the_driver_committed(
        broker: BrokerProcess, cache: ProducerCache, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    topic, driver = topic_and_driver(broker, "eo-resume", tmp_path)
    transactions = []
    for batch_id in range(3):
        message = eo_task(broker, topic, "eo-resume", [b"%d" % batch_id] * 5, monkeypatch)
        assert cache.idle_count() == 1  # back in the pool, its transaction open
        transactions.append(message.transaction)
        driver.commit_batch([message], batch_id)
    # one producer id and epoch for every batch: no new producer, no InitProducerId
    assert len({(t.producer_id, t.producer_epoch) for t in transactions}) == 1
    assert sorted(read_committed(broker.bootstrap, topic, 1)) == [b"0"] * 5 + [b"1"] * 5 + [
        b"2"] * 5


def test_a_pooled_producer_is_not_resumed_unless_the_driver_committed_its_transaction(
        broker: BrokerProcess, cache: ProducerCache, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    topic, driver = topic_and_driver(broker, "eo-fenced", tmp_path)
    first = eo_task(broker, topic, "eo-fenced", [b"undecided"], monkeypatch).transaction
    # No commit (a driver died before deciding): the next task must not commit it, and
    # aborts it by fencing with a new producer.
    second = eo_task(broker, topic, "eo-fenced", [b"second"], monkeypatch).transaction
    assert second.producer_epoch > first.producer_epoch
    driver.commit_batch([SinkCommitMessage(1, 6, second)], 0)
    # Another worker's producer of the id fences the pooled one after that commit.
    elsewhere = ProducerCache()
    monkeypatch.setattr(producer_module, "PRODUCERS", elsewhere)
    third = eo_task(broker, topic, "eo-fenced", [b"elsewhere"], monkeypatch).transaction
    driver.commit_batch([SinkCommitMessage(1, 9, third)], 1)
    elsewhere.close()
    monkeypatch.setattr(producer_module, "PRODUCERS", cache)
    fourth = eo_task(broker, topic, "eo-fenced", [b"back"], monkeypatch).transaction
    assert fourth.producer_epoch > third.producer_epoch
    driver.commit_batch([SinkCommitMessage(1, 4, fourth)], 2)
    assert sorted(read_committed(broker.bootstrap, topic, 1)) == [b"back", b"elsewhere",
                                                                   b"second"]


def test_a_worker_keeps_few_idle_transactional_producers(broker: BrokerProcess) -> None:
    cache = ProducerCache(max_idle_transactional=2)
    configs = [{"bootstrap.servers": broker.bootstrap, "transactional.id": f"few-{n}"}
               for n in range(4)]

    def lease(config: dict[str, str]) -> Any:
        return cache.lease(config, lambda error, message: None, timeout_s=60)

    try:
        leases = [lease(config) for config in configs]
        for used in leases:
            used.release()
        lease({"bootstrap.servers": broker.bootstrap}).release()  # not transactional
        assert cache.idle_count() == 3
        # the longest idle went first
        assert lease(configs[3]).producer is leases[3].producer
        assert lease(configs[0]).producer is not leases[0].producer
    finally:
        cache.close()


def test_each_live_worker_of_a_host_has_its_own_slot(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The slot in the transactional id: a worker keeps its own; a worker that exited
    frees it for the next."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(transactional_producer, "_slot", [])
    mine = transactional_producer.worker_slot()
    assert transactional_producer.worker_slot() == mine == 0
    code = ("from sparklog.datasource.write.transactional_producer import worker_slot; "
            "print(worker_slot())")
    others = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env={**os.environ, "TMPDIR": str(tmp_path)}
                             ).stdout.strip() for _ in range(2)]
    assert others == ["1", "1"]
