"""Offset management (sparklog.offsets): compare-and-set async commits, sync commits, and the
consumer loop's retry, pause and final commit — against the real broker and group coordinator.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.fault_hooks import Fault
from sparklog.broker.process import BrokerProcess
from sparklog.errors import ErrorCode
from sparklog.offsets import CommitFailedError, ConsumerLoop, OffsetCommitter
from sparklog.offsets.committer import consumer_commit_fn
from sparklog.protocol.versions import ApiKey

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    config = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "4",
              "group.min.session.timeout.ms": "1000"}
    with BrokerProcess(tmp_path_factory.mktemp("offsets") / "data", config) as running:
        yield running


def _topic(broker: BrokerProcess | EmbeddedBroker, partitions: int = 1, records: int = 0) -> str:
    name = f"offsets-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    if records:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        for i in range(records):
            producer.produce(name, value=str(i).encode(), partition=i % partitions)
        assert producer.flush(30) == 0
    return name


def _consumer(broker: BrokerProcess | EmbeddedBroker, group: str, **extra: object) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000, **extra})


def _committed(broker: BrokerProcess | EmbeddedBroker, group: str, topic: str,
               partitions: int = 1) -> list[int]:
    consumer = _consumer(broker, group)
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 30)
        return [tp.offset for tp in found]
    finally:
        consumer.close()


def _timed_out() -> KafkaException:
    return KafkaException(KafkaError(KafkaError.REQUEST_TIMED_OUT))


# -- compare-and-set --------------------------------------------------------------------------
def test_stale_async_commit_failing_after_a_newer_commit_is_not_retried(
    broker: BrokerProcess,
) -> None:
    """Async commit 1 is in flight; a newer sync commit succeeds; then 1 fails (retriable).
    It must not be retried: the committed offset stays the newer one."""
    topic, group = _topic(broker), f"g-{uuid.uuid4().hex[:6]}"
    consumer = _consumer(broker, group)
    in_flight, newer_done = threading.Event(), threading.Event()
    real = consumer_commit_fn(consumer)

    def commit(partitions: list[TopicPartition]) -> None:
        if partitions[0].offset == 5:  # the old async commit: fails once the newer one landed
            in_flight.set()
            newer_done.wait(10)
            raise _timed_out()
        real(partitions)

    committer = OffsetCommitter(commit_fn=commit, retry_backoff_s=0.01)
    old = committer.commit_async({(topic, 0): 5})
    assert in_flight.wait(10)
    committer.commit_sync({(topic, 0): 9})
    newer_done.set()
    assert committer.flush(10)
    result = next(r for r in committer.results if r.sequence == old)
    assert result.outcome == "superseded" and result.attempts == 1
    assert _committed(broker, group, topic) == [9]
    committer.close()
    consumer.close()


def test_failed_async_commit_is_retried_while_it_is_the_newest(broker: BrokerProcess) -> None:
    topic, group = _topic(broker), f"g-{uuid.uuid4().hex[:6]}"
    consumer = _consumer(broker, group)
    real, failures = consumer_commit_fn(consumer), [2]

    def flaky(partitions: list[TopicPartition]) -> None:
        if failures[0]:
            failures[0] -= 1
            raise _timed_out()
        real(partitions)

    committer = OffsetCommitter(commit_fn=flaky, retry_backoff_s=0.01)
    sequence = committer.commit_async({(topic, 0): 7})
    assert committer.flush(10)
    result = next(r for r in committer.results if r.sequence == sequence)
    assert (result.outcome, result.attempts) == ("committed", 3)
    assert _committed(broker, group, topic) == [7]
    committer.close()
    consumer.close()


def test_queued_newer_commit_supersedes_a_failing_older_one(broker: BrokerProcess) -> None:
    """Many async commits race with failures: whatever happens, the final committed offset is
    the newest one issued, never an older retry."""
    topic, group = _topic(broker), f"g-{uuid.uuid4().hex[:6]}"
    consumer = _consumer(broker, group)
    real, calls = consumer_commit_fn(consumer), [0]

    def every_other_fails(partitions: list[TopicPartition]) -> None:
        calls[0] += 1
        time.sleep(0.002)
        if calls[0] % 2:
            raise _timed_out()
        real(partitions)

    committer = OffsetCommitter(commit_fn=every_other_fails, retry_backoff_s=0.005)
    for offset in range(1, 41):
        committer.commit_async({(topic, 0): offset})
    assert committer.flush(30)
    outcomes = {r.outcome for r in committer.results}
    assert "superseded" in outcomes and "failed" not in outcomes
    assert committer.results[-1].outcome == "committed"
    assert _committed(broker, group, topic) == [40]
    committer.close()
    consumer.close()


def test_sync_commit_raises_on_a_fatal_error() -> None:
    def fenced(partitions: list[TopicPartition]) -> None:
        raise KafkaException(KafkaError(KafkaError.UNKNOWN_MEMBER_ID))

    committer = OffsetCommitter(commit_fn=fenced)
    with pytest.raises(CommitFailedError, match="offset commit failed"):
        committer.commit_sync({("t", 0): 1})
    committer.close()


# -- the consumer loop --------------------------------------------------------------------------
def test_failing_record_pauses_its_partition_and_is_retried_in_order(
    broker: BrokerProcess,
) -> None:
    topic, group = _topic(broker, records=20), f"g-{uuid.uuid4().hex[:6]}"
    seen: list[int] = []
    failures = {7: 2}  # offset 7 fails twice, then succeeds
    loop: ConsumerLoop

    def process(message: object) -> None:
        offset = message.offset()  # type: ignore[attr-defined]
        if failures.get(offset, 0):
            failures[offset] -= 1
            raise RuntimeError(f"cannot process {offset} yet")
        seen.append(offset)
        if len(seen) == 20:
            loop.wakeup()

    loop = ConsumerLoop(_consumer(broker, group), [topic], process, retry_backoff_s=0.1,
                        max_attempts=5, commit_interval_s=0.2)
    loop.run()
    assert seen == list(range(20))  # in order, nothing skipped, 7 once
    assert _committed(broker, group, topic) == [20]


def test_record_failing_past_max_attempts_goes_to_the_give_up_hook(
    broker: BrokerProcess,
) -> None:
    topic, group = _topic(broker, records=10), f"g-{uuid.uuid4().hex[:6]}"
    given_up: list[int] = []
    seen: list[int] = []

    def process(message: object) -> None:
        offset = message.offset()  # type: ignore[attr-defined]
        if offset == 3:
            raise ValueError("poison")
        seen.append(offset)
        if offset == 9:
            loop.wakeup()

    loop = ConsumerLoop(_consumer(broker, group), [topic], process, retry_backoff_s=0.05,
                        max_attempts=2, on_give_up=lambda m, e: given_up.append(m.offset()))
    loop.run()
    assert given_up == [3]
    assert seen == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert _committed(broker, group, topic) == [10]


_LOOP_CHILD = textwrap.dedent("""
    import sys
    from confluent_kafka import Consumer
    from sparklog.offsets import ConsumerLoop
    bootstrap, topic, group, out = sys.argv[1:5]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    sink = open(out, "a", buffering=1)
    def process(message):
        sink.write(f"{message.partition()} {message.offset()}\\n")
    loop = ConsumerLoop(consumer, [topic], process, commit_interval_s=3600)
    loop.install_signal_handlers()
    loop.run()
    print("closed", loop.processed_count, flush=True)
""")


def test_sigterm_makes_the_consumer_loop_commit_synchronously_and_close(
    broker: BrokerProcess, tmp_path: Path,
) -> None:
    """No periodic commit happens (interval 1 h): the committed offsets come only from the
    final sync commit that SIGTERM triggers, and they equal what was processed."""
    topic, group = _topic(broker, partitions=2, records=200), f"g-{uuid.uuid4().hex[:6]}"
    out = tmp_path / "processed.txt"
    child = subprocess.Popen([sys.executable, "-c", _LOOP_CHILD, broker.bootstrap, topic, group,
                              str(out)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        not out.exists() or len(out.read_text().splitlines()) < 200
    ):
        time.sleep(0.1)
    child.send_signal(signal.SIGTERM)
    stdout, _ = child.communicate(timeout=60)
    assert child.returncode == 0 and "closed 200" in stdout
    processed = [line.split() for line in out.read_text().splitlines()]
    expected = [sum(1 for p, _ in processed if p == str(n)) for n in range(2)]
    assert _committed(broker, group, topic, partitions=2) == expected
    assert sum(expected) == 200


# -- the broker misbehaving (fault hooks of the in-process broker) -----------------------------


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    config = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "4",
              "group.min.session.timeout.ms": "1000"}
    with EmbeddedBroker(tmp_path_factory.mktemp("faults") / "data", config) as running:
        yield running
        running.faults.clear()


@pytest.mark.parametrize("error", [ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                   ErrorCode.NOT_COORDINATOR, ErrorCode.REQUEST_TIMED_OUT])
def test_sync_commit_rides_out_retriable_broker_errors(embedded: EmbeddedBroker,
                                                       error: ErrorCode) -> None:
    """The coordinator answers a retriable error twice; the commit still lands, once."""
    topic, group = _topic(embedded), f"g-{uuid.uuid4().hex[:6]}"
    consumer = _consumer(embedded, group)
    committer = OffsetCommitter(consumer, retry_backoff_s=0.05)
    fault = embedded.faults.add(Fault(ApiKey.OFFSET_COMMIT, error=error, times=2))
    try:
        committer.commit_sync({(topic, 0): 5})
    finally:
        committer.close()
        consumer.close()
    assert fault.hits == 2
    assert _committed(embedded, group, topic) == [5]


def test_sync_commit_stops_at_a_fatal_broker_error(embedded: EmbeddedBroker) -> None:
    topic, group = _topic(embedded), f"g-{uuid.uuid4().hex[:6]}"
    consumer = _consumer(embedded, group)
    committer = OffsetCommitter(consumer, retry_backoff_s=0.05)
    fault = embedded.faults.add(Fault(ApiKey.OFFSET_COMMIT, error=ErrorCode.UNKNOWN_MEMBER_ID,
                                      times=3))
    try:
        with pytest.raises(CommitFailedError, match="Unknown member"):
            committer.commit_sync({(topic, 0): 5})
    finally:
        committer.close()
        consumer.close()
        embedded.faults.clear()
    assert fault.hits == 1  # not retried


def test_async_commit_retried_after_broker_errors_lands(embedded: EmbeddedBroker) -> None:
    topic, group = _topic(embedded), f"g-{uuid.uuid4().hex[:6]}"
    consumer = _consumer(embedded, group)
    committer = OffsetCommitter(consumer, retry_backoff_s=0.05)
    fault = embedded.faults.add(Fault(ApiKey.OFFSET_COMMIT, error=ErrorCode.NOT_COORDINATOR,
                                      times=2))
    try:
        sequence = committer.commit_async({(topic, 0): 9})
        assert committer.flush(30)
        assert next(r for r in committer.results if r.sequence == sequence).outcome == \
            "committed"
    finally:
        committer.close()
        consumer.close()
    assert fault.hits == 2
    assert _committed(embedded, group, topic) == [9]


def test_consumer_loop_reads_through_leader_errors_in_order(embedded: EmbeddedBroker) -> None:
    """Fetches of the partition fail with NOT_LEADER_OR_FOLLOWER a few times (as during a
    leader election): the loop still processes every record once, in order, and commits."""
    topic, group = _topic(embedded, records=30), f"g-{uuid.uuid4().hex[:6]}"
    fault = embedded.faults.add(Fault(ApiKey.FETCH, error=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                      topic=topic, times=3))
    seen: list[int] = []

    def process(message: object) -> None:
        seen.append(message.offset())  # type: ignore[attr-defined]
        if len(seen) == 30:
            loop.wakeup()

    loop = ConsumerLoop(_consumer(embedded, group), [topic], process, commit_interval_s=0.2)
    loop.run()
    assert fault.hits == 3
    assert seen == list(range(30))
    assert _committed(embedded, group, topic) == [30]
