"""A full disk loses nothing and stops nothing else (issue 31): a broker whose data directory
is a small tmpfs made for the test, filled by a ballast file, answers KAFKA_STORAGE_ERROR to
the writes that do not fit (confluent-kafka retries them), keeps serving reads of what was
acknowledged, answers the offsets and transaction state topics' failures as Kafka does
(NOT_COORDINATOR, retriable), shows the failure in its metrics (Kafka's
OfflineLogDirectoryCount and a per-partition gauge) and status, and writes again by itself
once space returns: every acknowledged record is readable, none twice, and the segment files
hold only whole, valid batches with index entries inside them.

The test mounts a tmpfs, so it needs root (CI runs as root); elsewhere it is skipped."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import struct
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_fixtures import (
    TIMEOUT,
    RawConnection,
    assert_healthy,
    consume_confluent,
    create_topic,
    internal_errors,
    kp_build,
    kp_request,
    kp_response,
    stored_batches,
    wait_until,
)
from compaction_support import TP, cleaner_for, compacted_manager, records_of
from confluent_kafka import KafkaError, Producer
from storage_support import NOW, Clock, make_batch

from sparklog.broker.process import BrokerProcess
from sparklog.errors import ErrorCode, KafkaStorageError
from sparklog.protocol.versions import ApiKey
from sparklog.record.batch import split_batches
from sparklog.storage import log_manager
from sparklog.storage.checkpoint import read_checkpoint
from sparklog.storage.index import OffsetIndex
from sparklog.storage.log_manager import RECOVERY_CHECKPOINT, LogManager

DISK = "4m"
CHUNK = 64 << 10
RECORDS, RECORD_BYTES = 3000, 1000
CONFIG = {"metrics.listener": "http://127.0.0.1:0", "offsets.topic.num.partitions": "1",
          "log.segment.bytes": str(256 << 10)}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs mounted for this test, unmounted after it."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK}", "tmpfs",
                              str(mount_point)], capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for a small disk (needs root): "
                    f"{mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(disk: Path, leave: int, name: str = "ballast") -> Path:
    """A ballast file filling ``disk`` but for about ``leave`` bytes."""
    ballast = disk / name
    with open(ballast, "wb", buffering=0) as f, contextlib.suppress(OSError):  # ENOSPC: full
        while True:
            f.write(b"\0" * CHUNK)
    size = ballast.stat().st_size
    with open(ballast, "r+b") as f:
        f.truncate(max(0, size - leave))
    return ballast


def _get(broker: BrokerProcess, path: str) -> str:
    assert broker.metrics_url is not None
    with urllib.request.urlopen(broker.metrics_url + path, timeout=TIMEOUT) as response:
        return str(response.read().decode())


def metric(broker: BrokerProcess, line_start: str) -> float:
    """The value of the one sample whose line starts with ``line_start``."""
    (value,) = [float(line.rsplit(" ", 1)[1]) for line in _get(broker, "metrics").splitlines()
                if line.startswith(line_start)]
    return value


def storage_errors(broker: BrokerProcess) -> list[list[str]]:
    return list(json.loads(_get(broker, "status.json"))["status"]["storage_errors"])


def commit_offset(broker: BrokerProcess, topic: str) -> int:
    """OffsetCommit v9 of offset 1 for group ``full-disk-group``: the partition's error."""
    request = kp_build(kp_request(ApiKey.OFFSET_COMMIT), 9, {
        "group_id": "full-disk-group", "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": topic, "partitions": [{
            "partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
            "committed_metadata": ""}]}]})
    with RawConnection(broker.bootstrap) as conn:
        answer = conn.call(request, kp_response(ApiKey.OFFSET_COMMIT))
    return int(answer.topics[0].partitions[0].error_code)


def init_transactional_id(broker: BrokerProcess) -> int:
    """InitProducerId v5 for transactional id ``full-disk-txn``: its error."""
    request = kp_build(kp_request(ApiKey.INIT_PRODUCER_ID), 5, {
        "transactional_id": "full-disk-txn", "transaction_timeout_ms": 60_000,
        "producer_id": -1, "producer_epoch": -1})
    with RawConnection(broker.bootstrap) as conn:
        return int(conn.call(request, kp_response(ApiKey.INIT_PRODUCER_ID)).error_code)


def check_files(partition_dir: Path) -> None:
    """Whole, CRC-valid batches only (``split_batches`` refuses a torn tail), and every
    offset index entry names the last offset and position of a batch of its segment."""
    for log_file in sorted(partition_dir.glob("*.log")):
        ends, position = {}, 0
        for header in split_batches(log_file.read_bytes()):
            ends[position] = header.last_offset
            position += header.size
        index = log_file.with_suffix(".index")
        data = index.read_bytes() if index.exists() else b""
        assert len(data) % 8 == 0, index
        for relative, at in struct.iter_unpack(">ii", data):
            assert ends.get(at) == int(log_file.stem) + relative, (index, relative, at)


def test_a_full_disk_refuses_writes_keeps_reads_and_resumes_when_space_returns(
        small_disk: Path, tmp_path: Path) -> None:
    broker = BrokerProcess(small_disk / "data", CONFIG,
                           log_file=tmp_path / "broker.log").start()
    try:
        topic = "full-disk"
        create_topic(broker.bootstrap, topic)
        ballast = fill(small_disk, leave=512 << 10)
        acknowledged: list[bytes] = []
        failed: list[KafkaError] = []

        def delivered(error: KafkaError | None, message: object) -> None:
            if error is None:
                acknowledged.append(message.value())  # type: ignore[attr-defined]
            else:
                failed.append(error)

        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5,
                             "message.timeout.ms": 120_000, "retry.backoff.ms": 200})
        values = [b"%06d" % i + b"x" * (RECORD_BYTES - 6) for i in range(RECORDS)]
        for value in values:
            producer.produce(topic, value, on_delivery=delivered)
            producer.poll(0)

        def refusing() -> bool:
            producer.poll(0.1)
            return metric(broker, "kafka_log_logmanager_offlinelogdirectorycount") == 1
        wait_until(refusing, message="the broker refusing writes for want of space")
        assert metric(broker, f'kafka_log_log_storageerror{{partition="0",topic="{topic}"}}') == 1
        assert [where for where, _ in storage_errors(broker)] == [f"{topic}-0"]
        producer.poll(1)
        assert not failed and len(acknowledged) < RECORDS

        # reads go on: everything acknowledged so far, in order
        so_far = list(acknowledged)
        assert [r.value for r in consume_confluent(broker.bootstrap, topic, len(so_far))] == \
            so_far
        assert_healthy(broker)

        # the coordinators' topics: a commit and a transactional id's first write cannot
        # be stored, and are answered as Kafka answers them (retriable, NOT_COORDINATOR)
        more = fill(small_disk, leave=0, name="more")
        assert commit_offset(broker, topic) == ErrorCode.NOT_COORDINATOR
        assert init_transactional_id(broker) == ErrorCode.NOT_COORDINATOR
        more.unlink()
        ballast.unlink()  # space returns: the producer's retries now succeed
        assert producer.flush(TIMEOUT * 3) == 0
        assert not failed
        assert acknowledged == values  # all of them, once each, in order
        read = consume_confluent(broker.bootstrap, topic, RECORDS)
        assert [r.value for r in read] == values
        assert commit_offset(broker, topic) == ErrorCode.NONE
        assert init_transactional_id(broker) == ErrorCode.NONE
        assert metric(broker, "kafka_log_logmanager_offlinelogdirectorycount") == 0
        assert storage_errors(broker) == []
        assert len(stored_batches(broker, topic)) >= 1
        check_files(broker.data_dir / f"{topic}-0")
    finally:
        errors = internal_errors(broker)
        code = broker.stop()
    assert errors == [], broker.log_file.read_text()[-3000:]
    assert code == 0
    check_files(small_disk / "data" / f"{topic}-0")


def test_the_log_and_its_checkpoints_on_a_full_disk(small_disk: Path) -> None:
    """Storage level: a batch that does not fit is KAFKA_STORAGE_ERROR and leaves the file
    exactly as before (no torn tail, producer state and offsets unchanged), checkpoints keep
    their old files (no temp file left), and both work again once space returns."""
    manager = LogManager(small_disk / "data", {"log.segment.bytes": str(128 << 10)},
                         clock=Clock())
    manager.create_topic("t", 1)
    partition_log = manager.get_log("t", 0)
    manager.checkpoint()
    ballast = fill(small_disk, leave=256 << 10)
    stored = 0
    with pytest.raises(KafkaStorageError):
        while True:
            partition_log.append(make_batch(8, value_size=1000), now_ms=NOW)
            stored += 8
    assert partition_log.log_end_offset == stored
    assert partition_log.storage_error is not None
    active = partition_log.active
    assert active.log_path.stat().st_size == active.size
    more = fill(small_disk, leave=0, name="more")  # checkpoints fail: the old files stay
    before = (small_disk / "data" / RECOVERY_CHECKPOINT).read_bytes()
    manager.checkpoint()
    assert manager.checkpoint_error is not None
    assert (small_disk / "data" / RECOVERY_CHECKPOINT).read_bytes() == before
    assert not list((small_disk / "data").glob("*.tmp"))
    assert manager.storage_errors().keys() == {"t-0", "checkpoints"}
    assert partition_log.read(0, 1 << 20) is not None  # reads go on

    ballast.unlink()
    more.unlink()
    partition_log.append(make_batch(8, value_size=1000), now_ms=NOW)
    manager.checkpoint()
    assert manager.storage_errors() == {}
    manager.close()
    check_files(small_disk / "data" / "t-0")
    reopened = LogManager(small_disk / "data", clock=Clock())
    try:
        assert reopened.get_log("t", 0).log_end_offset == stored + 8
    finally:
        reopened.close()


def test_a_clean_on_a_full_disk_changes_nothing_and_works_once_space_returns(
        small_disk: Path) -> None:
    """The cleaner cannot write its cleaned segment: nothing is swapped, no ``.cleaned`` file
    stays, the records read as before; with space back the same clean succeeds."""
    manager = compacted_manager(small_disk / "data", Clock(), **{"segment.bytes": 64 << 10})
    partition_log = manager.get_log(*TP)
    for _ in range(40):  # the same 8 keys over and over: most of it is cleanable
        partition_log.append(make_batch(8, value_size=1000), now_ms=NOW)
    partition_log.roll(NOW)
    before = records_of(partition_log)
    cleaner = cleaner_for(manager)
    more = fill(small_disk, leave=0)
    assert cleaner.clean_log(TP) is None
    assert not list(partition_log.directory.glob("*.cleaned"))
    assert records_of(partition_log) == before
    more.unlink()
    result = cleaner.clean_log(TP)
    assert result is not None and result.bytes_written < result.bytes_read
    assert [(key, value) for _, key, value in records_of(partition_log)] == \
        [(key, value) for _, key, value in before[-8:]]
    manager.close()


def test_an_index_that_cannot_write_its_file_keeps_its_entries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The active offset index loses its file mid-append: lookups keep answering from
    memory, the file goes (never a torn one, nor one with a hole: a write after the failure
    that would succeed is not made, though the open-file cache may reopen it), and closing
    writes it whole, as a reopen reads it."""
    name = "00000000000000000000.index"
    index = OffsetIndex(tmp_path, name, 0, 1 << 20)
    index.open_for_append()
    index.append(10, 100)

    def full(fd: int, data: bytes, position: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as disk_full:
        disk_full.setattr(os, "pwrite", full)  # the disk fills up
        index.append(20, 200)
    index.append(30, 300)  # space came back: still not written until the close
    assert not index.path.exists()
    assert index.lookup(25) == (20, 200) and index.entries == 3
    index.close()
    assert OffsetIndex(tmp_path, name, 0, 1 << 20).lookup(35) == (30, 300)


def test_a_shutdown_whose_write_back_fails_is_not_clean(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clean shutdown writes every log without an fsync each and then syncs the
    filesystem once: when that write-back fails (EIO, or ENOSPC on a thin device), nothing
    written since the last checkpoint is known durable, so the recovery points stay where
    they were and no clean-shutdown marker is written: the next start recovers the logs
    (every record still there, as the page cache kept them)."""
    manager = LogManager(tmp_path / "data", clock=Clock())
    manager.create_topic("t", 2)
    for partition in (0, 1):
        manager.get_log("t", partition).append(make_batch(4), now_ms=NOW)
    manager.checkpoint()  # recovery points 0: nothing flushed yet

    def failed_write_back(directory: Path) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(log_manager, "sync_filesystem", failed_write_back)
    manager.close()
    assert read_checkpoint(tmp_path / "data" / RECOVERY_CHECKPOINT) == {("t", 0): 0,
                                                                        ("t", 1): 0}
    monkeypatch.undo()
    reopened = LogManager(tmp_path / "data", clock=Clock())
    try:
        assert not reopened.clean_start
        assert [reopened.get_log("t", p).log_end_offset for p in (0, 1)] == [4, 4]
    finally:
        reopened.close()
    again = LogManager(tmp_path / "data", clock=Clock())
    assert again.clean_start
    again.close()
