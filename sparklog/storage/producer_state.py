"""Idempotent-producer state of one partition: epoch and recent sequence ranges per producer.

Invariants:
- For each producer id the state keeps its current epoch and the metadata of its last five
  batches (first/last sequence, first/last offset), as Kafka does, which is how many batches
  a producer may have in flight. A retry of one of those batches is a duplicate: it is
  answered with the original offsets and not appended again.
- Within one epoch a batch's first sequence must follow the previous batch's last sequence
  (wrapping at int32); a new epoch must start at sequence 0; an older epoch is fenced.
- The state is derived from the log: it is rebuilt by replaying batch headers after the
  latest snapshot (``<offset>.snapshot``, written on roll and clean shutdown), so it survives
  restarts without reading whole batches.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from sparklog.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from sparklog.record.batch import BatchHeader
from sparklog.storage.checkpoint import write_atomically

SNAPSHOT_SUFFIX = ".snapshot"
MAX_CACHED_BATCHES = 5
_INT32_WRAP = 1 << 31


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


class ProducerStateManager:
    """Producer id -> ProducerEntry for one partition, with snapshots on disk."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, header: BatchHeader) -> BatchMetadata | None:
        """Validate a producer batch before append; return the original if it is a duplicate."""
        if header.producer_id < 0 or header.base_sequence < 0:
            return None
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return None
        if header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {header.producer_epoch} is fenced by "
                f"epoch {entry.epoch}"
            )
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise OutOfOrderSequenceError(
                    f"producer {header.producer_id} new epoch {header.producer_epoch} must start "
                    f"at sequence 0, not {header.base_sequence}"
                )
            return None
        for batch in entry.batches:
            if batch.first_seq == header.base_sequence and batch.last_seq == header.last_sequence:
                return batch
        expected = (entry.last_seq + 1) % _INT32_WRAP
        if entry.batches and header.base_sequence != expected:
            raise OutOfOrderSequenceError(
                f"producer {header.producer_id} sent sequence {header.base_sequence}, "
                f"expected {expected}"
            )
        return None

    def update(self, header: BatchHeader) -> None:
        """Record an appended batch (offsets assigned)."""
        if header.producer_id < 0:
            return
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = self.producers[header.producer_id] = ProducerEntry(header.producer_epoch)
        if header.base_sequence >= 0:
            entry.batches.append(BatchMetadata(
                header.base_sequence, header.last_sequence, header.base_offset, header.last_offset
            ))

    def last_data_offsets(self) -> dict[int, int]:
        """Producer id -> last offset of its latest batch: the batches compaction keeps (empty
        if need be) so the sequence state can be rebuilt from the log."""
        return {pid: entry.batches[-1].last_offset
                for pid, entry in self.producers.items() if entry.batches}

    # -- snapshots -----------------------------------------------------------------------
    def snapshot_offsets(self) -> list[int]:
        return sorted(int(p.stem) for p in self.directory.glob(f"*{SNAPSHOT_SUFFIX}")
                      if p.stem.isdigit())

    def snapshot(self, offset: int) -> bytes:
        """The state as of ``offset``, serialised (cheap; writing it is the slow part)."""
        state = {
            str(pid): {"epoch": e.epoch, "batches": [
                [b.first_seq, b.last_seq, b.first_offset, b.last_offset] for b in e.batches]}
            for pid, e in self.producers.items()
        }
        return json.dumps({"offset": offset, "producers": state}).encode()

    def write_snapshot(self, offset: int, data: bytes | None = None) -> None:
        """Atomically write the state as of ``offset`` (or ``data`` taken then by
        ``snapshot``); keep the two newest snapshots."""
        path = self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"
        write_atomically(path, self.snapshot(offset) if data is None else data)
        for old in self.snapshot_offsets()[:-2]:
            (self.directory / f"{old:020d}{SNAPSHOT_SUFFIX}").unlink(missing_ok=True)

    def load_snapshot(self, max_offset: int) -> int:
        """Load the newest readable snapshot at or below ``max_offset``; return its offset.

        Returns -1 (and an empty state) when there is none; snapshots above the log end
        (from before a truncation) are deleted.
        """
        self.producers = {}
        for offset in reversed(self.snapshot_offsets()):
            path = self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"
            if offset > max_offset:
                path.unlink(missing_ok=True)
                continue
            try:
                _, self.producers = read_snapshot(path)
            except (OSError, ValueError):
                path.unlink(missing_ok=True)
                continue
            return offset
        return -1


def read_snapshot(path: Path) -> tuple[int, dict[int, ProducerEntry]]:
    """A snapshot file's offset and producers; ``ValueError`` when it is not one."""
    try:
        data = json.loads(path.read_text())
        producers = {}
        for pid, raw in data["producers"].items():
            entry = ProducerEntry(raw["epoch"])
            entry.batches.extend(BatchMetadata(*b) for b in raw["batches"])
            producers[int(pid)] = entry
        return int(data["offset"]), producers
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path.name} is not a producer-state snapshot: {exc!r}") from None
