"""Producer state of one partition: per producer its epoch, recent sequence ranges and open
transaction; and the partition's ongoing transactions, which bound its last stable offset.

Invariants:
- For each producer id the state keeps its current epoch and the metadata of its last five
  batches (first/last sequence, first/last offset), as Kafka does, which is how many batches
  a producer may have in flight. A retry of one of those batches is a duplicate: it is
  answered with the original offsets and not appended again.
- Within one epoch a batch's first sequence must follow the previous batch's last sequence
  (wrapping at int32); a new epoch must start at sequence 0; an older epoch is fenced.
- A transaction starts at its producer's first transactional batch and ends at the control
  batch (COMMIT or ABORT marker) the coordinator has written for it; ``update`` returns the
  ``CompletedTxn`` a marker ends (a control batch the log cleaner emptied ends nothing).
  ``first_unstable_offset`` is the smallest first offset of an ongoing transaction: the last
  stable offset is it, or the log end when none is open.
- A marker from an older epoch than the producer's is fenced (INVALID_PRODUCER_EPOCH); one
  from a newer epoch moves the producer to it, so its next batch must start at sequence 0.
- Each producer keeps the max timestamp of its last batch or marker and the coordinator
  epoch of its last marker (-1 before any), as Kafka's ``ProducerStateEntry``: what
  DescribeProducers shows.
- KIP-890 part 1: a client's transactional batch (``check`` with ``verify``) is appended only
  while its producer has an ongoing transaction here at its epoch, or with the
  ``VerificationStateEntry`` the leader obtained before asking the transaction coordinator
  (``start_verification``), still the producer's current one: the coordinator confirmed
  the partition is in the transaction; else INVALID_TXN_STATE, nothing appended. The entry
  goes when the transaction starts here (its first batch) or a marker of the producer is
  written, so a verification answered before a marker cannot let a batch of the ended
  transaction in, and a transaction costs one verification per partition, not one per
  batch. Entries are kept in memory only (as Kafka's): a restart asks again.
- The state is derived from the log: it is rebuilt by replaying batch headers after the
  latest snapshot (``<offset>.snapshot``, written on roll and clean shutdown; it carries open
  transactions), so it survives restarts without reading whole batches. ``snapshot_at``
  names the snapshot file that holds exactly the state in memory, if one does: a clean
  shutdown with nothing appended since writes none again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sparklog.errors import (
    ErrorCode,
    InvalidProducerEpochError,
    KafkaError,
    OutOfOrderSequenceError,
)
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


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker ended in this partition."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


@dataclass(eq=False, slots=True)
class VerificationStateEntry:
    """A verification under way or done for a producer's epoch (Kafka's
    ``VerificationStateEntry``; the object itself is the guard an append shows)."""

    producer_id: int
    epoch: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    # the last MAX_CACHED_BATCHES, oldest first (a list: a deque takes 760 bytes however
    # short, and most partitions hold a producer or two)
    batches: list[BatchMetadata] = field(default_factory=list)
    txn_first_offset: int = -1  # the ongoing transaction's first offset, -1 when none
    last_timestamp: int = -1
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def _snapshot_name(offset: int) -> str:
    """The file name of the snapshot of the state as of ``offset``."""
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


class ProducerStateManager:
    """Producer id -> ProducerEntry for one partition, with snapshots on disk."""

    __slots__ = ("directory", "ongoing", "producers", "snapshot_at", "verifications")

    def __init__(self, directory: str | Path) -> None:
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.verifications: dict[int, VerificationStateEntry] = {}
        # The offset of the snapshot file that holds exactly this state (loaded or written
        # since the last change), -1 when none does: a clean close whose log end it is
        # writes none again (Kafka's rule: a snapshot only at a new offset).
        self.snapshot_at = -1

    def needs_verification(self, producer_id: int, epoch: int) -> bool:
        """Whether a transactional batch of ``producer_id`` at ``epoch`` must be verified
        (no ongoing transaction of that epoch here)."""
        entry = self.producers.get(producer_id)
        return entry is None or entry.txn_first_offset < 0 or entry.epoch != epoch

    def start_verification(self, producer_id: int, epoch: int) -> VerificationStateEntry:
        """The producer's entry for ``epoch`` (the one under way, else a new one)."""
        entry = self.verifications.get(producer_id)
        if entry is None or entry.epoch != epoch:
            entry = self.verifications[producer_id] = VerificationStateEntry(producer_id, epoch)
        return entry

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest ongoing transaction, None when none is open."""
        return min(self.ongoing.values()) if self.ongoing else None

    def check(self, header: BatchHeader, *, verify: bool = False,
              guard: VerificationStateEntry | None = None) -> BatchMetadata | None:
        """Validate a producer batch before append; return the original if it is a duplicate.
        ``verify``: a client's batch, whose transactional batch needs an ongoing transaction
        or ``guard`` (see the module)."""
        if header.is_control:
            self._check_marker_epoch(header)
            return None
        if (verify and header.is_transactional
                and self.needs_verification(header.producer_id, header.producer_epoch)
                and (guard is None or guard.epoch != header.producer_epoch
                     or self.verifications.get(header.producer_id) is not guard)):
            raise KafkaError(f"producer {header.producer_id} epoch {header.producer_epoch}: "
                             "the partition was not added to the transaction",
                             ErrorCode.INVALID_TXN_STATE)
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

    def _check_marker_epoch(self, header: BatchHeader) -> None:
        entry = self.producers.get(header.producer_id)
        if entry is not None and header.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"marker of producer {header.producer_id} epoch {header.producer_epoch} is "
                f"fenced by epoch {entry.epoch}")

    def update(self, header: BatchHeader, aborted: bool = False,
               coordinator_epoch: int = -1) -> CompletedTxn | None:
        """Record an appended batch (offsets assigned); a marker (``aborted`` says which kind,
        ``coordinator_epoch`` is the one it carries) returns the transaction it completed."""
        pid = header.producer_id
        if pid < 0:
            return None
        self.snapshot_at = -1
        entry = self.producers.get(pid)
        if entry is None or header.producer_epoch > entry.epoch:
            old = entry if entry is not None else ProducerEntry(-1)
            entry = self.producers[pid] = ProducerEntry(
                header.producer_epoch, txn_first_offset=old.txn_first_offset,
                coordinator_epoch=old.coordinator_epoch)
        entry.last_timestamp = header.max_timestamp
        if header.is_control or header.is_transactional:
            self.verifications.pop(pid, None)  # the transaction started or ended here
        if header.is_control:
            if header.record_count:
                entry.coordinator_epoch = coordinator_epoch
            # An emptied control batch (the log cleaner's) is no marker: its transaction's
            # data went before it did, so there is nothing to end.
            return self._complete(entry, pid, header, aborted) if header.record_count else None
        if header.base_sequence >= 0:
            batches = entry.batches
            batches.append(BatchMetadata(
                header.base_sequence, header.last_sequence, header.base_offset, header.last_offset
            ))
            if len(batches) > MAX_CACHED_BATCHES:
                del batches[0]
        if header.is_transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = self.ongoing[pid] = header.base_offset
        return None

    def _complete(self, entry: ProducerEntry, pid: int, header: BatchHeader,
                  aborted: bool) -> CompletedTxn | None:
        first, entry.txn_first_offset = entry.txn_first_offset, -1
        self.ongoing.pop(pid, None)
        if first < 0:
            return None  # a marker for a transaction with no data here (a retried marker)
        return CompletedTxn(pid, first, header.base_offset, aborted)

    def last_data_offsets(self) -> dict[int, int]:
        """Producer id -> last offset of its latest batch: the batches compaction keeps (empty
        if need be) so the sequence state can be rebuilt from the log."""
        return {pid: entry.batches[-1].last_offset
                for pid, entry in self.producers.items() if entry.batches}

    # -- snapshots -----------------------------------------------------------------------
    def snapshot_offsets(self, names: Iterable[str] | None = None) -> list[int]:
        """The snapshots' offsets, ascending, among ``names`` (the directory's files, when
        the caller has listed them) or the directory's listing."""
        cut = -len(SNAPSHOT_SUFFIX)
        return sorted(int(name[:cut]) for name in
                      (os.listdir(self.directory) if names is None else names)
                      if name.endswith(SNAPSHOT_SUFFIX) and name[:cut].isdigit())

    def snapshot(self, offset: int) -> bytes:
        """The state as of ``offset``, serialised (cheap; writing it is the slow part)."""
        state = {
            str(pid): {"epoch": e.epoch, "txn": e.txn_first_offset, "ts": e.last_timestamp,
                       "coordinator_epoch": e.coordinator_epoch, "batches": [
                [b.first_seq, b.last_seq, b.first_offset, b.last_offset] for b in e.batches]}
            for pid, e in self.producers.items()
        }
        return json.dumps({"offset": offset, "producers": state}).encode()

    def write_snapshot(self, offset: int, data: bytes | None = None, *,
                       sync: bool = True) -> None:
        """Atomically write the state as of ``offset`` (or ``data`` taken then by
        ``snapshot``); keep the two newest snapshots. ``sync`` False leaves the fsyncs to
        the caller (``checkpoint.write_atomically``)."""
        path = Path(self.directory, _snapshot_name(offset))
        write_atomically(path, self.snapshot(offset) if data is None else data, sync=sync)
        if data is None:  # (``data`` taken earlier may be older than the state now)
            self.snapshot_at = offset
        for old in self.snapshot_offsets()[:-2]:
            Path(self.directory, _snapshot_name(old)).unlink(missing_ok=True)

    def replayed_to(self, offset: int, names: Iterable[str]) -> None:
        """The state was rebuilt up to ``offset`` from the log (a recovery replays from
        before the newest snapshot): a snapshot of that offset among ``names``, the
        directory's files, holds this same state, derived from the same batches."""
        if _snapshot_name(offset) in names:
            self.snapshot_at = offset

    def load_snapshot(self, max_offset: int, log_end: int,
                      names: Iterable[str] | None = None) -> int:
        """Load the newest readable snapshot at or below ``max_offset`` (``names``: the
        directory's files, if listed already); return its offset.

        Returns -1 (and an empty state) when there is none; snapshots above ``log_end`` (from
        before a truncation) are deleted.
        """
        self.producers, self.ongoing, self.verifications = {}, {}, {}
        self.snapshot_at = -1
        for offset in reversed(self.snapshot_offsets(names)):
            path = Path(self.directory, _snapshot_name(offset))
            if offset > log_end:
                path.unlink(missing_ok=True)
                continue
            if offset > max_offset:
                continue
            try:
                _, self.producers = read_snapshot(path)
            except (OSError, ValueError):
                path.unlink(missing_ok=True)
                continue
            self.ongoing = {pid: entry.txn_first_offset
                            for pid, entry in self.producers.items()
                            if entry.txn_first_offset >= 0}
            self.snapshot_at = offset
            return offset
        return -1


def read_snapshot(path: Path) -> tuple[int, dict[int, ProducerEntry]]:
    """A snapshot file's offset and producers; ``ValueError`` when it is not one."""
    try:
        with open(path, "rb") as file:
            data = json.loads(file.read())
        producers = {}
        for pid, raw in data["producers"].items():
            entry = ProducerEntry(raw["epoch"], txn_first_offset=raw.get("txn", -1),
                                  last_timestamp=raw.get("ts", -1),
                                  coordinator_epoch=raw.get("coordinator_epoch", -1))
            entry.batches.extend(BatchMetadata(*b) for b in raw["batches"][-MAX_CACHED_BATCHES:])
            producers[int(pid)] = entry
        return int(data["offset"]), producers
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path.name} is not a producer-state snapshot: {exc!r}") from None
