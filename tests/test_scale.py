"""Partitions beyond the descriptor limit and cheap connections (issue 31, items 1 and 2).

- Segment files go through one bounded cache of open files: a log manager with far more
  segments than the cache holds appends to and reads all of them with at most that many
  open; a ``FileSlice`` (what a Fetch sends with ``sendfile``) keeps its file open however
  the cache evicts meanwhile, and never reads a descriptor number reused by another file.
- A broker started with 256 descriptors (soft and hard) serves 1,000 partitions, produced
  to and read back by confluent-kafka, and comes back from SIGKILL with them; CreateTopics
  and CreatePartitions past its partition budget are refused up front with POLICY_VIOLATION
  and a message naming the budget, and nothing is created.
- ``max.connections.per.ip`` and ``max.connections`` refuse (close) the connection past
  them, count it, and take new ones once others closed; an idle connection holds no
  receive buffer.
"""

from __future__ import annotations

import gc
import os
import socket
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_fixtures import (
    RawConnection,
    assert_healthy,
    consume_confluent,
    produce_per_partition,
    request_frame,
    wait_until,
)
from confluent_kafka import KafkaError as CkError
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from storage_support import make_batch

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.process import BrokerProcess
from sparklog.broker.server import connection_quotas
from sparklog.protocol.versions import ApiKey
from sparklog.storage.file_handles import OPEN_FILES, open_descriptors
from sparklog.storage.log_manager import LogManager

NOW = 1_700_000_000_000


@pytest.fixture
def small_cache() -> Iterator[None]:
    """Whatever a test's log manager sets, the process's cache size is restored after."""
    capacity = OPEN_FILES.capacity
    yield
    OPEN_FILES.capacity = capacity
    OPEN_FILES.shrink(capacity)


def test_segments_beyond_the_cache_stay_readable_and_writable(
        tmp_path: Path, small_cache: None) -> None:
    manager = LogManager(tmp_path / "data", {"log.open.files.max": "16",
                                             "log.segment.bytes": "2048"})
    assert OPEN_FILES.capacity == 16
    before = open_descriptors()
    manager.create_topic("many", 60)
    batch = make_batch(3, value_size=200)  # two batches a segment
    for round_ in range(5):
        for partition in range(60):
            manager.get_log("many", partition).append(batch, now_ms=NOW + round_)
        for partition in range(60):  # rolled segments fsynced, snapshots written
            manager.get_log("many", partition).await_rolled_flushes()
        assert len(OPEN_FILES) <= 16
        assert open_descriptors() - before <= 16
    for partition in range(60):
        log = manager.get_log("many", partition)
        assert len(log.segments) >= 2
        assert [len(batch) for batch in log.batches(1 << 16)] == [len(batch)] * 5
    assert len(OPEN_FILES) <= 16
    manager.close()
    reopened = LogManager(tmp_path / "data", {"log.open.files.max": "16"})
    assert reopened.clean_start
    assert all(reopened.get_log("many", p).log_end_offset == 15 for p in range(60))
    assert len(OPEN_FILES) <= 16
    reopened.close()


def test_a_slice_keeps_its_file_open_across_evictions(tmp_path: Path, small_cache: None) -> None:
    manager = LogManager(tmp_path / "data", {"log.open.files.max": "4"})
    manager.create_topic("sent", 1)
    log = manager.get_log("sent", 0)
    batch = make_batch(5, value_size=100)
    log.append(batch, now_ms=NOW)
    found = log.read(0, 1 << 20)
    assert found is not None
    expected = found.read()
    assert len(expected) == len(batch)
    stat = os.fstat(found.fd)
    OPEN_FILES.shrink(0)  # the cache lets go of every file: the slice still holds its own
    assert not log.active.is_open
    others = [os.open(os.devnull, os.O_RDONLY) for _ in range(20)]  # would take a freed number
    try:
        assert found.fd not in others
        assert (os.fstat(found.fd).st_ino, os.fstat(found.fd).st_dev) == (stat.st_ino,
                                                                          stat.st_dev)
        sender, receiver = socket.socketpair()
        with sender, receiver:
            assert os.sendfile(sender.fileno(), found.fd, found.position,
                               found.length) == len(expected)
            assert receiver.recv(1 << 20) == expected
    finally:
        for fd in others:
            os.close(fd)
    assert log.read(0, 1 << 20) is not None  # reopened on use
    manager.close()


# -- a broker short of descriptors ----------------------------------------------------------


def _refused(future: object) -> str:
    with pytest.raises(KafkaException) as caught:
        future.result(30)  # type: ignore[attr-defined]
    error = caught.value.args[0]
    assert error.code() == CkError.POLICY_VIOLATION, error
    return str(error.str())


def test_thousand_partitions_under_256_descriptors(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data, {}, max_open_files=256).start()
    try:
        client = AdminClient({"bootstrap.servers": broker.bootstrap,
                              "socket.timeout.ms": 120_000})
        client.create_topics([NewTopic("wide", 1000, 1)], request_timeout=120)["wide"].result(120)
        produce_per_partition(broker.bootstrap, "wide", dict.fromkeys(range(1000), 1))
        assert len(consume_confluent(broker.bootstrap, "wide", 1000, range(1000))) == 1000
        assert len(os.listdir(f"/proc/{broker.pid}/fd")) < 256
        message = _refused(client.create_topics([NewTopic("wider", 2000, 1)])["wider"])
        assert "max.broker.partitions" in message and "2560" in message, message
        message = _refused(client.create_partitions([NewPartitions("wide", 3000)])["wide"])
        assert "max.broker.partitions" in message, message
        topics = client.list_topics(timeout=30).topics
        assert "wider" not in topics and len(topics["wide"].partitions) == 1000
        assert not list(data.glob("wider-*")) and not (data / "wide-1000").exists()
        assert_healthy(broker)
        broker.kill()
        broker.start()
        assert len(consume_confluent(broker.bootstrap, "wide", 1000, range(1000))) == 1000
        assert_healthy(broker)
    finally:
        assert broker.stop() == 0


# -- connections ----------------------------------------------------------------------------


def _api_versions(conn: RawConnection) -> None:
    conn.send(request_frame(ApiKey.API_VERSIONS, 0, conn.next_correlation_id()))
    conn.recv_frame()


def _refuses(bootstrap: str, source: str = "127.0.0.1") -> bool:
    with _From(bootstrap, source) as conn:
        return conn.read_until_closed(5.0) == b""


class _From(RawConnection):
    """A raw connection from the loopback address ``source``."""

    def __init__(self, bootstrap: str, source: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10,
                                             source_address=(source, 0))
        self._correlation = 0


def test_connections_past_the_limits_are_refused_and_counted(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "data", {"max.connections.per.ip": "3",
                                            "max.connections": "5"}) as broker:
        quotas = broker.call(connection_quotas)
        held = [RawConnection(broker.bootstrap) for _ in range(3)]
        for conn in held:
            _api_versions(conn)
        assert _refuses(broker.bootstrap)  # a fourth from 127.0.0.1
        assert quotas.refused == 1
        held.pop().close()
        wait_until(lambda: quotas.total == 2)
        with RawConnection(broker.bootstrap) as again:
            _api_versions(again)
        wait_until(lambda: quotas.total == 2)
        others = [_From(broker.bootstrap, "127.0.0.2") for _ in range(3)]  # 5 in all
        for conn in others:
            _api_versions(conn)
        assert _refuses(broker.bootstrap, "127.0.0.3")  # past max.connections
        assert quotas.refused == 2
        for conn in held + others:
            conn.close()
        wait_until(lambda: quotas.total == 0)


def test_idle_connections_hold_no_receive_buffer(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "data") as broker:
        warm = _answered_connections(broker, 20)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            idle = _answered_connections(broker, 200)
            time.sleep(0.5)
            gc.collect()
            per_connection = (tracemalloc.get_traced_memory()[0] - before) / len(idle)
        finally:
            tracemalloc.stop()
        for conn in warm + idle:
            conn.close()
        assert per_connection < 16 * 1024, per_connection  # a staging buffer is 64 KiB


def test_connections_closed_together_hold_no_receive_buffer(tmp_path: Path) -> None:
    """Clients that close at once: the read that finds each end of stream takes a staging
    buffer, given back at once, not held until the connection's task ends (10,000 closed
    in a burst grew the broker by 600 MiB at its peak, memory it never gave back)."""
    with EmbeddedBroker(tmp_path / "data") as broker:
        quotas = broker.call(connection_quotas)
        idle = _answered_connections(broker, 200)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for conn in idle:
                conn.close()
            wait_until(lambda: quotas.total == 0)
            peak = (tracemalloc.get_traced_memory()[1] - before) / len(idle)
        finally:
            tracemalloc.stop()
    assert peak < 16 * 1024, peak  # a staging buffer is 64 KiB


def _answered_connections(broker: EmbeddedBroker, count: int) -> list[RawConnection]:
    """``count`` connections, each answered one ApiVersions, then idle."""
    connections = [RawConnection(broker.bootstrap) for _ in range(count)]
    for conn in connections:
        _api_versions(conn)
    return connections
