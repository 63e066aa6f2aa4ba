"""Helpers of the compaction tests: reading a whole log back, and the model of a compacted log.

``Model`` is the oracle: it replays appends and cleans on plain Python lists. A clean at time
``now`` that ends at ``end`` (the new cleaner checkpoint) keeps, below ``end``, only each key's
latest record; a kept tombstone gets the horizon ``now + delete.retention.ms`` the first time
a clean covers it and goes at the first clean at or after that horizon. Records from ``end``
on are untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sparklog.record.batch import BatchHeader, split_batches
from sparklog.record.records import Record, decode_records
from sparklog.storage.cleaner import CleanerConfig, LogCleaner
from sparklog.storage.log import CrashPoint, PartitionLog, no_crash
from sparklog.storage.log_manager import LogManager
from sparklog.storage.offset_map import KeyOffsets, new_offset_map

TOPIC = "compacted"
TP = (TOPIC, 0)
RETENTION_MS = 1000
"""delete.retention.ms of the test topics."""


def read_all(log: PartitionLog) -> list[tuple[BatchHeader, list[Record]]]:
    """Every batch from the log start, CRC-checked, with its records, through ``read``."""
    out: list[tuple[BatchHeader, list[Record]]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        found = log.read(offset, 1 << 30)
        if found is None:
            break
        data = found.read()
        for header in split_batches(data):
            out.append((header, decode_records(data, header)))
            offset = header.next_offset
    return out


def records_of(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record, checking offsets strictly increase."""
    out = []
    last = -1
    for header, records in read_all(log):
        assert header.base_offset > last, "batches overlap"
        for record in records:
            assert record.offset > last, "offsets do not increase"
            out.append((record.offset, record.key, record.value))
            last = record.offset
        last = max(last, header.last_offset)
    return out


@dataclass
class ModelRecord:
    offset: int
    key: bytes
    value: bytes | None
    horizon: int | None = None


@dataclass
class Model:
    records: list[ModelRecord] = field(default_factory=list)

    def append(self, base_offset: int, items: list[tuple[bytes, bytes | None]]) -> None:
        self.records += [ModelRecord(base_offset + i, k, v) for i, (k, v) in enumerate(items)]

    def clean(self, end: int, now_ms: int) -> None:
        latest: dict[bytes, int] = {}
        for record in self.records:
            if record.offset < end:
                latest[record.key] = record.offset
        kept = []
        for record in self.records:
            if record.offset < end:
                if latest[record.key] != record.offset:
                    continue
                if record.value is None:
                    if record.horizon is None:
                        record.horizon = now_ms + RETENTION_MS
                    elif now_ms >= record.horizon:
                        continue
            kept.append(record)
        self.records = kept

    def expected(self) -> list[tuple[int, bytes | None, bytes | None]]:
        return [(r.offset, r.key, r.value) for r in self.records]

    def horizons(self) -> dict[int, int]:
        return {r.offset: r.horizon for r in self.records if r.horizon is not None}


def compacted_manager(data_dir: Path, clock: Callable[[], float], **configs: object
                      ) -> LogManager:
    """A LogManager over ``data_dir`` with the compacted test topic created if missing."""
    manager = LogManager(data_dir, clock=clock)
    if TOPIC not in manager.topics:
        manager.create_topic(TOPIC, 1, {
            "cleanup.policy": "compact", "segment.bytes": 400, "file.delete.delay.ms": 0,
            "delete.retention.ms": RETENTION_MS, "min.cleanable.dirty.ratio": 0, **configs,
        })
    return manager


def cleaner_for(manager: LogManager, dedupe_bytes: int = 1 << 20,
                crash_point: CrashPoint = no_crash,
                offset_map: Callable[[int], KeyOffsets] = new_offset_map) -> LogCleaner:
    return LogCleaner(manager, CleanerConfig(dedupe_buffer_size=dedupe_bytes),
                      crash_point=crash_point, offset_map=offset_map)
