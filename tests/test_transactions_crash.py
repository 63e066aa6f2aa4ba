"""Crashes in the middle of a transaction: the broker (and its producer) killed with SIGKILL
at each step of a commit, then the broker restarted. A transaction ends exactly as the
coordinator recorded it: committed once PrepareCommit was durable (the restart writes the
missing markers before serving), aborted otherwise (its timeout runs out after the
restart); no read_committed consumer ever sees part of it.

Each crash is placed with a named fault point (``sparklog.faults``): the broker pauses there,
writes a marker file, and the test kills it, so it dies exactly at that step.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from broker_fixtures import RawConnection, create_topic, kp_request, kp_response, wait_until
from confluent_kafka import Consumer, TopicPartition

from sparklog.broker.process import BrokerProcess
from sparklog.protocol.versions import ApiKey

CONFIG = {
    "transaction.state.log.num.partitions": "2",
    "offsets.topic.num.partitions": "2",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
}
TOPIC, PARTITIONS, PER_PARTITION = "orders", 3, 4
TXN_TIMEOUT_MS = 3000

# The producer runs in a process of its own, killed with the broker: no client survives the
# crash to finish (or retry) the transaction behind the coordinator's back.
_PRODUCER = textwrap.dedent("""
    import sys
    from confluent_kafka import Producer
    bootstrap, topic, partitions, per_partition, timeout_ms, commit = sys.argv[1:7]
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "crash",
                         "transaction.timeout.ms": int(timeout_ms), "log_level": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    for p in range(int(partitions)):
        for i in range(int(per_partition)):
            producer.produce(topic, f"{p}-{i}".encode(), partition=p)
    producer.flush(30)
    print("FLUSHED", flush=True)
    if commit == "commit":
        producer.commit_transaction(60)
        print("COMMITTED", flush=True)
""")


def _start(data: Path, point: str | None = None, marker: Path | None = None) -> BrokerProcess:
    env = {"SPARKLOG_FAULT_POINT": point, "SPARKLOG_FAULT_MARKER": str(marker)} if point else {}
    return BrokerProcess(data, CONFIG, env=env).start()  # type: ignore[arg-type]


def _transaction_state(bootstrap: str) -> str:
    """The transactional id's state, as DescribeTransactions answers it."""
    request = kp_request(ApiKey.DESCRIBE_TRANSACTIONS)(version=0, transactional_ids=["crash"])
    with RawConnection(bootstrap) as conn:
        response = conn.call(request, kp_response(ApiKey.DESCRIBE_TRANSACTIONS))
    (state,) = response.transaction_states
    return state.transaction_state


def _read_committed(bootstrap: str) -> list[bytes]:
    """Everything a read_committed consumer gets up to the stable offsets."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check",
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "log_level": 0})
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        got, ends = [], 0
        deadline = time.monotonic() + 30
        while ends < PARTITIONS:
            assert time.monotonic() < deadline, "the consumer did not reach the stable offsets"
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                ends += 1
            else:
                got.append(message.value())
        return sorted(got)
    finally:
        consumer.close()


ALL = sorted(f"{p}-{i}".encode() for p in range(PARTITIONS) for i in range(PER_PARTITION))


@pytest.mark.parametrize(("point", "committed"), [
    (None, False),  # killed while the transaction is open (before EndTxn)
    ("txn_end_prepared:before", False),  # EndTxn(commit) arrived, PrepareCommit not written
    ("txn_end_prepared:after", True),  # PrepareCommit durable, no marker yet
    ("txn_marker_written:0", True),  # one marker of three written
    ("txn_markers_written:all", True),  # every marker written, CompleteCommit not yet
])
def test_a_transaction_ends_as_the_coordinator_recorded_it(tmp_path: Path, point: str | None,
                                                           committed: bool) -> None:
    data, marker = tmp_path / "data", tmp_path / "reached"
    broker = _start(data, point, marker)
    create_topic(broker.bootstrap, TOPIC, PARTITIONS)
    producer = subprocess.Popen(
        [sys.executable, "-c", _PRODUCER, broker.bootstrap, TOPIC, str(PARTITIONS),
         str(PER_PARTITION), str(TXN_TIMEOUT_MS), "commit" if point else "none"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert producer.stdout is not None
        assert producer.stdout.readline().strip() == "FLUSHED"
        if point is not None:
            wait_until(marker.exists, 60, f"the broker to reach {point}")
        broker.kill()
    finally:
        producer.kill()
        producer.wait()
    assert not any(line.strip() == "COMMITTED" for line in producer.stdout or ())

    restarted = BrokerProcess(data, CONFIG, port=broker.port).start()
    try:
        # Served only once the recorded outcome is complete: a commit that was prepared is
        # whole at once; an open transaction holds the stable offset until its timeout.
        if committed:
            assert _transaction_state(restarted.bootstrap) == "CompleteCommit"
            assert _read_committed(restarted.bootstrap) == ALL
        else:
            assert _read_committed(restarted.bootstrap) == []  # held at the stable offset
            wait_until(lambda: _transaction_state(restarted.bootstrap) == "CompleteAbort", 30,
                       "the coordinator to abort the transaction past its timeout")
            assert _read_committed(restarted.bootstrap) == []
        log = restarted.log_file.read_text()
        assert "Traceback" not in log, log[-3000:]
    finally:
        restarted.stop()
