"""Compaction seen by real clients: a broker child process and confluent-kafka.

A compacted topic with small segments gets several values per key and some tombstones; once
the broker's cleaner thread has cleaned everything but the active segment (its cleaner
checkpoint reaches the active segment's base offset), a consumer reading from the beginning
sees one record per key below the checkpoint, each key's latest value, and tombstones as null
values; a read_committed consumer of a topic with aborted transactions reads the same after
cleaning, and the aborted records are gone. With a short ``delete.retention.ms`` the
tombstones are gone after a later clean. A record without a key is refused with
INVALID_RECORD. Every clean logs its byte counts and dirty ratios at INFO.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from committed_reader import read_committed_records
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.broker.process import BrokerProcess
from sparklog.storage.checkpoint import read_checkpoint
from sparklog.storage.cleaner import CLEANER_CHECKPOINT

TIMEOUT = 30.0
Consumed = list[tuple[int, bytes | None, bytes | None]]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("compaction") / "data"
    process = BrokerProcess(data_dir, config={"log.cleaner.backoff.ms": "200"}).start()
    yield process
    process.stop()
    log = process.log_file.read_text()
    assert "Traceback" not in log
    assert "dirty ratio" in log  # the INFO line of each clean


def _create_topic(broker: BrokerProcess, **configs: str) -> str:
    name = f"compacted-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = NewTopic(name, num_partitions=1, replication_factor=1, config={
        "cleanup.policy": "compact", "segment.bytes": "1024",
        "min.cleanable.dirty.ratio": "0.01", "file.delete.delay.ms": "0", **configs})
    admin.create_topics([topic])[name].result(TIMEOUT)
    return name


def _produce(broker: BrokerProcess, topic: str,
             records: list[tuple[bytes | None, bytes | None]]) -> list[KafkaError | None]:
    """Send in small batches (so segments roll often); return each delivery's error."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                         "batch.num.messages": 4, "message.send.max.retries": 0})
    errors: list[KafkaError | None] = []
    for key, value in records:
        producer.produce(topic, key=key, value=value,
                         on_delivery=lambda err, _msg: errors.append(err))
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0
    return errors


def _consume_all(broker: BrokerProcess, topic: str) -> Consumed:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), TIMEOUT)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: Consumed = []
        deadline = time.monotonic() + TIMEOUT
        while (not out or out[-1][0] < high - 1) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                out.append((message.offset(), message.key(), message.value()))
        assert out and out[-1][0] == high - 1, "did not reach the end of the partition"
        return out
    finally:
        consumer.close()


def _active_base(broker: BrokerProcess, topic: str) -> int:
    return max(int(p.stem) for p in (broker.data_dir / f"{topic}-0").glob("*.log"))


def _cleaned_to(broker: BrokerProcess, topic: str) -> int | None:
    return read_checkpoint(broker.data_dir / CLEANER_CHECKPOINT).get((topic, 0))


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _wait_until_cleaned(broker: BrokerProcess, topic: str) -> int:
    """Wait until everything but the active segment is cleaned; return the checkpoint."""
    _wait_for(lambda: _cleaned_to(broker, topic) == _active_base(broker, topic),
              f"the cleaner to reach the active segment of {topic}")
    checkpoint = _cleaned_to(broker, topic)
    assert checkpoint is not None
    return checkpoint


def _expected(records: list[tuple[bytes | None, bytes | None]]) -> dict[bytes, bytes | None]:
    return {key: value for key, value in records if key is not None}


def test_consumer_sees_latest_values_and_tombstones(broker: BrokerProcess) -> None:
    topic = _create_topic(broker)
    written = [(b"key-%d" % (n % 20), b"value-%d-" % n + b"x" * 40) for n in range(120)]
    written += [(b"key-%d" % n, None) for n in (3, 7, 11)]
    written += [(b"key-%d" % n, b"final-%d" % n) for n in range(12, 20)]
    assert _produce(broker, topic, written) == [None] * len(written)
    checkpoint = _wait_until_cleaned(broker, topic)
    assert checkpoint > 0
    consumed = _consume_all(broker, topic)
    cleaned_keys = [key for offset, key, _ in consumed if offset < checkpoint]
    assert len(cleaned_keys) == len(set(cleaned_keys))
    assert len(consumed) < len(written)
    latest = {key: value for _, key, value in consumed}
    assert latest == _expected(written)
    assert all(latest[b"key-%d" % n] is None for n in (3, 7, 11))


def test_tombstones_go_after_delete_retention(broker: BrokerProcess) -> None:
    topic = _create_topic(broker, **{"delete.retention.ms": "1000"})
    first = [(b"key-%d" % (n % 10), b"value-%d-" % n + b"x" * 40) for n in range(60)]
    first += [(b"key-%d" % n, None) for n in (1, 2)]
    first += [(b"filler-%d" % n, b"y" * 60) for n in range(30)]
    _produce(broker, topic, first)
    checkpoint = _wait_until_cleaned(broker, topic)
    tombstones = [(o, k) for o, k, v in _consume_all(broker, topic) if v is None]
    assert {k for o, k in tombstones if o < checkpoint} == {b"key-1", b"key-2"}
    time.sleep(1.2)  # past the horizon the first clean gave them
    _produce(broker, topic, [(b"later-%d" % n, b"z" * 60) for n in range(40)])
    _wait_for(lambda: (_cleaned_to(broker, topic) or 0) > checkpoint
              and _cleaned_to(broker, topic) == _active_base(broker, topic),
              "a second clean")
    keys = {key for _, key, _ in _consume_all(broker, topic)}
    assert b"key-1" not in keys and b"key-2" not in keys and b"key-3" in keys


def test_null_key_is_refused(broker: BrokerProcess) -> None:
    topic = _create_topic(broker)
    errors = _produce(broker, topic, [(None, b"no key")])
    assert errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD
    assert _produce(broker, topic, [(b"k", b"keyed")]) == [None]


def test_read_committed_is_unchanged_by_cleaning_aborted_transactions(
        broker: BrokerProcess) -> None:
    """Committed and aborted transactions of a confluent-kafka producer on a compacted topic:
    after the cleaner has run over them, a read_committed consumer reads each key's latest
    committed value and never an aborted one, and the aborted records are gone from the
    cleaned segments (a read_uncommitted consumer no longer finds them there)."""
    topic = _create_topic(broker)
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": f"txn-{topic}", "linger.ms": 0,
                         "batch.num.messages": 4})
    producer.init_transactions(TIMEOUT)
    committed: dict[bytes, bytes] = {}
    aborted: set[bytes] = set()
    for txn in range(12):
        producer.begin_transaction()
        written = {b"key-%d" % (n % 8): b"t%d-%d-" % (txn, n) + b"x" * 40 for n in range(10)}
        for key, value in written.items():
            producer.produce(topic, key=key, value=value)
        producer.flush(TIMEOUT)
        if txn % 3 == 1:
            producer.abort_transaction(TIMEOUT)
            aborted |= set(written.values())
        else:
            producer.commit_transaction(TIMEOUT)
            committed.update(written)
    filler = [(b"filler-%d" % n, b"y" * 60) for n in range(40)]  # rolls the active segment
    assert _produce(broker, topic, filler) == [None] * len(filler)
    checkpoint = _wait_until_cleaned(broker, topic)
    records = read_committed_records(broker.bootstrap, topic, 1)
    assert not {value for _, _, _, value in records} & aborted
    assert {k: v for _, _, k, v in records if not k.startswith(b"filler")} == committed
    below = [value for offset, _, value in _consume_all(broker, topic) if offset < checkpoint]
    assert below and not set(below) & aborted
