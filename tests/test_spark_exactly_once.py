"""The sink's ``deliveryGuarantee=exactly-once`` through Spark, against a real broker process,
read back by a read_committed consumer (``committed_reader``: it also fails on any
transaction left open).

In the shared session: batch writes (published by the driver's commit; nothing of a failed
write is visible), and a micro-batch Spark re-runs after losing its commit-log entry, which
exactly-once publishes once and at-least-once twice. In child processes (``sink_query.py``,
its own SparkSession): a streaming query whose driver is SIGKILLed twenty times, at random
moments and inside its commit, then run to the end: every source record is in the sink
topic exactly once. The same kills with at-least-once leave duplicates.
"""

from __future__ import annotations

import random
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from child_runner import ChildRunner
from committed_reader import read_committed
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import SparkSession

from sparklog.broker.process import BrokerProcess
from sparklog.client.kafka import KafkaClient
from sparklog.client.settings import ClientConfig, RetryPolicy, parse_bootstrap
from sparklog.client.transactions import ONGOING, list_transactions

pytestmark = pytest.mark.spark

PARTITIONS = 3
TIMEOUT = 30.0
QUERY = Path(__file__).parent / "sink_query.py"
KILLS = 20
PER_ROUND = 600  # new source records before each run: two micro-batches of sink_query's 300
BROKER_CONFIG = {
    "transaction.state.log.num.partitions": "2",
    "offsets.topic.num.partitions": "2",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("exactly-once") / "data",
                       config=BROKER_CONFIG) as running:
        yield running


def new_topic(broker: BrokerProcess, hint: str) -> str:
    name = f"{hint}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS)])[name].result(TIMEOUT)
    return name


def produce(broker: BrokerProcess, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for n, value in enumerate(values):
        producer.produce(topic, value, key=str(n).encode())
    assert producer.flush(TIMEOUT) == 0


def open_transactions(broker: BrokerProcess, prefix: str) -> list[str]:
    config = ClientConfig(parse_bootstrap(broker.bootstrap))
    with KafkaClient(config, RetryPolicy(TIMEOUT, 0.1)) as client:
        return [t.transactional_id for t in list_transactions(client, [ONGOING])
                if t.transactional_id.startswith(prefix)]


def sink_options(broker: BrokerProcess, topic: str, guarantee: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": broker.bootstrap, "topic": topic,
            "deliveryGuarantee": guarantee}


# -- in the shared session -------------------------------------------------------------------


def test_a_batch_write_is_published_by_the_commit(spark: SparkSession,
                                                  broker: BrokerProcess) -> None:
    topic = new_topic(broker, "eo-batch")
    prefix = f"write-{topic}"
    values = [f"v{i}" for i in range(1000)]
    (spark.createDataFrame([(v,) for v in values], "value string").repartition(4)
     .write.format("sparklog").options(**sink_options(broker, topic, "exactly-once"))
     .option("transactionalIdPrefix", prefix).mode("append").save())
    assert sorted(read_committed(broker.bootstrap, topic, PARTITIONS)) == sorted(
        v.encode() for v in values)
    assert open_transactions(broker, prefix) == []


def test_nothing_of_a_failed_batch_write_is_visible(spark: SparkSession,
                                                    broker: BrokerProcess) -> None:
    topic = new_topic(broker, "eo-failed")
    prefix = f"write-{topic}"

    def fail_late(rows: Iterator) -> Iterator:
        for row in rows:
            if row.value == "v1999":
                raise ValueError("this task fails after the others wrote")
            yield row

    frame = spark.createDataFrame([(f"v{i}",) for i in range(2000)], "value string")
    with pytest.raises(Exception, match="this task fails"):
        (frame.coalesce(2).rdd.mapPartitions(fail_late).toDF("value string")
         .write.format("sparklog").options(**sink_options(broker, topic, "exactly-once"))
         .option("transactionalIdPrefix", prefix).mode("append").save())
    assert read_committed(broker.bootstrap, topic, PARTITIONS) == []
    assert open_transactions(broker, prefix) == []


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_a_rerun_micro_batch_is_published_once(spark: SparkSession, broker: BrokerProcess,
                                               tmp_path: Path, guarantee: str) -> None:
    """Spark re-runs a micro-batch its commit log lacks (a driver that died after the sink's
    commit): removing the log entry makes the same re-run happen without a kill."""
    source, sink = new_topic(broker, "eo-src"), new_topic(broker, "eo-sink")
    values = [f"r{i}".encode() for i in range(300)]
    produce(broker, source, values)
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        (spark.readStream.format("sparklog").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("subscribe", source).option("startingOffsets", "earliest").load()
         .select("key", "value").writeStream.format("sparklog")
         .options(**sink_options(broker, sink, guarantee))
         .option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start().awaitTermination())

    run()
    (checkpoint / "commits" / "0").unlink()
    (checkpoint / "commits" / ".0.crc").unlink(missing_ok=True)
    run()
    seen = Counter(read_committed(broker.bootstrap, sink, PARTITIONS))
    assert set(seen) == set(values)
    if guarantee == "exactly-once":
        assert set(seen.values()) == {1}
    else:
        assert set(seen.values()) == {2}


def test_options_of_the_guarantee_are_checked(spark: SparkSession,
                                              broker: BrokerProcess) -> None:
    frame = spark.createDataFrame([("v",)], "value string")

    def write(**options: str) -> None:
        (frame.write.format("sparklog").option("kafka.bootstrap.servers", broker.bootstrap)
         .option("topic", "unused").options(**options).mode("append").save())

    with pytest.raises(Exception, match=r"deliveryGuarantee=exactly_once is not a delivery "
                                        r"guarantee.*allowed: at-least-once, exactly-once"):
        write(deliveryGuarantee="exactly_once")
    with pytest.raises(Exception, match="transactionalIdPrefix needs "
                                        "deliveryGuarantee=exactly-once"):
        write(transactionalIdPrefix="p")
    with pytest.raises(Exception, match=r"kafka\.transactional\.id is not allowed.*"
                                        r"transactionalIdPrefix"):
        write(**{"kafka.transactional.id": "mine", "deliveryGuarantee": "exactly-once"})


# -- drivers killed in child processes -------------------------------------------------------


def _runner(broker: BrokerProcess, workdir: Path, source: str, sink: str,
            guarantee: str) -> ChildRunner:
    return ChildRunner(workdir, [sys.executable, str(QUERY), broker.bootstrap, source, sink,
                                 str(workdir / "checkpoint"), guarantee])


def _kill_after_start(runner: ChildRunner, delay_s: float) -> str:
    """Run, and SIGKILL the process group ``delay_s`` after the query started."""
    started: list[float] = []

    def due() -> bool:
        if not started and "query started" in runner.log_path.read_text():
            started.append(time.monotonic())
        return bool(started) and time.monotonic() - started[0] >= delay_s

    outcome, _ = runner.run(stop_when=due, stop_with=signal.SIGKILL)
    return outcome


FAULTS = ("sink_intent_written:*", "sink_transaction_committed:*")
"""Kill points inside the driver's commit: the intent written, nothing committed; one
transaction of the batch committed, the others not."""


@pytest.mark.timeout(2400)
def test_exactly_once_survives_twenty_driver_kills(broker: BrokerProcess,
                                                   tmp_path: Path) -> None:
    source, sink = new_topic(broker, "kill-src"), new_topic(broker, "kill-sink")
    runner = _runner(broker, tmp_path, source, sink, "exactly-once")
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    produced: list[bytes] = []
    outcomes = []
    for kill in range(KILLS):
        batch = [f"{kill}-{i}".encode() for i in range(PER_ROUND)]
        produce(broker, source, batch)
        produced += batch
        if kill % 3 == 2:
            outcome, log = runner.run(FAULTS[kill % 2])
        else:
            outcome = _kill_after_start(runner, rng.uniform(0.0, 4.0))
        outcomes.append(outcome)
    outcome, log = runner.run()
    assert outcome == "exit 0", log
    assert outcomes.count("killed") + outcomes.count("exit -9 after SIGKILL") >= KILLS * 3 // 4, (
        f"seed {seed}: too few runs were killed while working: {outcomes}")
    seen = Counter(read_committed(broker.bootstrap, sink, PARTITIONS))
    missing = set(produced) - set(seen)
    doubled = {v: n for v, n in seen.items() if n > 1}
    assert not missing and not doubled, (
        f"seed {seed}: {len(missing)} missing, {len(doubled)} doubled; outcomes {outcomes}")
    assert sum(seen.values()) == len(produced)


@pytest.mark.timeout(900)
def test_at_least_once_duplicates_after_the_same_kills(broker: BrokerProcess,
                                                       tmp_path: Path) -> None:
    source, sink = new_topic(broker, "alo-src"), new_topic(broker, "alo-sink")
    runner = _runner(broker, tmp_path, source, sink, "at-least-once")
    produced = [f"a-{i}".encode() for i in range(PER_ROUND)]
    produce(broker, source, produced)
    outcome, log = runner.run("sink_commit:*")  # the batch's records are out, not committed
    assert outcome == "killed", log
    outcome, log = runner.run()
    assert outcome == "exit 0", log
    seen = Counter(read_committed(broker.bootstrap, sink, PARTITIONS))
    assert set(seen) == set(produced)
    assert max(seen.values()) == 2  # the re-run micro-batch was written again
