"""``make demo``: sparklog end to end on this machine, printing what it does.

1. The segment store alone: append a few thousand records to a partition log in a
   temporary directory, read them back by offset and by timestamp, reopen it after an
   unclean stop and show that everything acknowledged is still there.
2. The broker: start ``sparklog broker`` on 127.0.0.1, produce with confluent-kafka (the
   client a Kafka user already has), consume everything back, and stop it cleanly.

Invariant: everything lives in a temporary directory that is removed at the end; the
process exits non-zero if any record is missing or out of order.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from sparklog.broker.process import BrokerProcess
from sparklog.protocol.records import build_batch, decode_records
from sparklog.storage.batch import parse_header
from sparklog.storage.log_manager import LogManager

RECORDS = 5000
PER_BATCH = 50


def _storage_demo(root: Path) -> None:
    data_dir = root / "store"
    logs = LogManager(data_dir, {"log.segment.bytes": str(64 * 1024)})
    logs.create_topic("events", 1)
    log = logs.get_log("events", 0)
    now = int(time.time() * 1000)
    for start in range(0, RECORDS, PER_BATCH):
        batch = build_batch([
            (f"user-{i % 97}".encode(), f'{{"n": {i}}}'.encode(), (), now + i)
            for i in range(start, start + PER_BATCH)
        ])
        log.append(batch, now_ms=now + start)
    print(f"appended {RECORDS} records in {RECORDS // PER_BATCH} batches to "
          f"{log.directory}: {len(log.segments)} segments, offsets "
          f"{log.log_start_offset}..{log.log_end_offset - 1}")
    for name in sorted(os.listdir(log.directory))[:6]:
        print(f"   {name}")
    found = log.read(1234, 4096)
    assert found is not None
    data = found.read()
    first = decode_records(data, parse_header(data))
    record = next(r for r in first if r.offset == 1234)
    print(f"read offset 1234 -> key={record.key!r} value={record.value!r}")
    offset, _ = log.offset_for_timestamp(now + 4000) or (-1, -1)
    print(f"first offset at or after timestamp now+4000 ms -> {offset}")
    # Drop the log without closing it (as a crash would) and reopen: recovery runs.
    logs.checkpoint()
    del logs, log
    reopened = LogManager(data_dir).get_log("events", 0)
    print(f"reopened after an unclean stop: offsets {reopened.log_start_offset}.."
          f"{reopened.log_end_offset - 1}, nothing lost")
    if reopened.log_end_offset != RECORDS:
        raise SystemExit(f"expected {RECORDS} records after recovery")


def _broker_demo(root: Path) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    with BrokerProcess(root / "broker") as broker:
        print(f"broker listening on {broker.bootstrap}")
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5,
                             "enable.idempotence": True, "compression.type": "zstd"})
        for i in range(RECORDS):
            producer.produce("clicks", key=f"user-{i % 13}".encode(), value=f"click {i}".encode())
        if producer.flush(30):
            raise SystemExit("some records were not delivered")
        del producer
        print(f"produced {RECORDS} records (idempotent, zstd) to topic clicks")
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "demo",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition("clicks", 0, 0)])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < RECORDS and time.monotonic() < deadline:
            for message in consumer.consume(1000, 1.0):
                if message.error():
                    raise SystemExit(f"consume failed: {message.error()}")
                if message.value() != f"click {seen}".encode():
                    raise SystemExit(f"out of order at {seen}: {message.value()!r}")
                seen += 1
        consumer.close()
        print(f"consumed {seen} records back in order with confluent-kafka")
        if seen != RECORDS:
            raise SystemExit(f"expected {RECORDS} records, got {seen}")
    print("broker stopped cleanly (SIGTERM)")


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="sparklog-demo-"))
    try:
        print("== 1. segment store")
        _storage_demo(root)
        print("== 2. broker with a real Kafka client")
        _broker_demo(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("demo finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
