"""Transactions in the log, against a model: ongoing transactions and the last stable offset,
COMMIT and ABORT markers, the aborted-transaction index (``.txnindex``), and both surviving
clean and unclean restarts (the index rebuilt from the log); and ``committed_only``, the
filter the Spark source applies to read_committed answers, on the same logs.

The read_committed view is computed the way a Kafka consumer computes it (its algorithm,
reading the segment files with kafka-python's record classes), from the log's aborted
transaction list and the raw batches, and compared with the model's committed records.
"""

from __future__ import annotations

import heapq
import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch
from storage_support import NOW, TOPIC, Clock, restart

from sparklog.errors import InvalidProducerEpochError
from sparklog.record.batch import split_batches
from sparklog.record.control import ControlType
from sparklog.record.records import build_batch
from sparklog.record.transactions import committed_only
from sparklog.storage.log import PartitionLog
from sparklog.storage.log_manager import LogManager

EPOCH = 0
PIDS = (10, 11, 12)


@dataclass
class Model:
    """What a read_committed consumer must see, and what must still be open."""

    next_offset: int = 0
    visible: list[int] = field(default_factory=list)  # offsets a read_committed reader gets
    ongoing: dict[int, list[int]] = field(default_factory=dict)  # pid -> offsets of its txn
    aborted: list[tuple[int, int]] = field(default_factory=list)  # (pid, first offset)
    sequences: dict[int, int] = field(default_factory=dict)

    @property
    def last_stable_offset(self) -> int:
        firsts = [offsets[0] for offsets in self.ongoing.values()]
        return min(firsts) if firsts else self.next_offset

    def committed_below(self, bound: int) -> list[int]:
        return sorted(o for o in self.visible if o < bound)


def _records(count: int) -> list[tuple[bytes, bytes, tuple, int]]:
    return [(b"k%d" % i, b"v%d" % i, (), NOW) for i in range(count)]


def apply(log: PartitionLog, model: Model, op: tuple) -> None:
    kind = op[0]
    if kind == "plain":
        info = log.append(build_batch(_records(op[1])), now_ms=NOW)
        model.visible += range(info.base_offset, info.last_offset + 1)
        model.next_offset = info.last_offset + 1
    elif kind == "txn":
        pid, count = op[1], op[2]
        sequence = model.sequences.get(pid, 0)
        batch = build_batch(_records(count), producer_id=pid, producer_epoch=EPOCH,
                            base_sequence=sequence, transactional=True)
        info = log.append(batch, now_ms=NOW)
        model.sequences[pid] = sequence + count
        model.ongoing.setdefault(pid, []).extend(range(info.base_offset, info.last_offset + 1))
        model.next_offset = info.last_offset + 1
    else:  # "end"
        pid, commit = op[1], op[2]
        info = log.append_marker(ControlType.COMMIT if commit else ControlType.ABORT, pid,
                                 EPOCH, 3, now_ms=NOW)
        offsets = model.ongoing.pop(pid, [])
        if commit:
            model.visible += offsets
        elif offsets:
            model.aborted.append((pid, offsets[0]))
        model.next_offset = info.last_offset + 1


def read_committed(log: PartitionLog) -> list[int]:
    """Offsets a read_committed Kafka consumer gets from the start to the LSO (Kafka's
    consumer algorithm over the raw batches and the log's aborted transactions)."""
    bound = log.last_stable_offset
    aborted = [(t.first_offset, t.producer_id) for t in log.aborted_transactions(0, bound)]
    heapq.heapify(aborted)
    aborting: set[int] = set()
    seen = []
    for path in sorted(log.directory.glob("*.log")):
        data = path.read_bytes()
        for header in split_batches(data):
            if header.base_offset >= bound:
                return seen
            batch = DefaultRecordBatch(data[header.position:header.position + header.size])
            while aborted and aborted[0][0] <= header.last_offset:
                aborting.add(heapq.heappop(aborted)[1])
            if batch.is_control_batch:
                (record,) = list(batch)
                if struct.unpack(">hh", record.key)[1] == ControlType.ABORT:
                    aborting.discard(batch.producer_id)
                continue
            if batch.is_transactional and batch.producer_id in aborting:
                continue
            seen += [record.offset for record in batch if record.offset < bound]
    return seen


def filtered_by_sparklog(log: PartitionLog) -> list[int]:
    """The same view through ``sparklog.record.transactions.committed_only`` (what the Spark
    source applies to a read_committed Fetch answer)."""
    bound = log.last_stable_offset
    aborted = [(t.producer_id, t.first_offset) for t in log.aborted_transactions(0, bound)]
    data = b"".join(path.read_bytes() for path in sorted(log.directory.glob("*.log")))
    kept = committed_only(data, aborted)
    return [o for h in split_batches(kept) if not h.is_control
            for o in range(h.base_offset, h.last_offset + 1) if o < bound]


def check(log: PartitionLog, model: Model) -> None:
    assert log.last_stable_offset == model.last_stable_offset
    assert sorted((t.producer_id, t.first_offset)
                  for t in log.aborted_transactions(0, log.log_end_offset)) == sorted(
        model.aborted)
    expected = model.committed_below(model.last_stable_offset)
    assert read_committed(log) == expected
    assert filtered_by_sparklog(log) == expected


operations = st.lists(st.one_of(
    st.tuples(st.just("plain"), st.integers(1, 4)),
    st.tuples(st.just("txn"), st.sampled_from(PIDS), st.integers(1, 4)),
    st.tuples(st.just("end"), st.sampled_from(PIDS), st.booleans()),
    st.tuples(st.just("restart"), st.booleans()),
), min_size=8, max_size=60)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
def test_transactions_match_the_model_across_restarts(tmp_path_factory: pytest.TempPathFactory,
                                                      ops: list[tuple]) -> None:
    root = tmp_path_factory.mktemp("txn")
    clock = Clock()
    manager = LogManager(root / "data", clock=clock)
    manager.create_topic(TOPIC, 1, {"segment.bytes": 400})  # a roll every few batches
    model = Model()
    crashes = 0
    for op in ops:
        if op[0] == "restart":
            crashes += 1
            manager = restart(manager, clean=op[1], crash_dir=root / f"crash-{crashes}")
        else:
            apply(manager.get_log(TOPIC, 0), model, op)
        check(manager.get_log(TOPIC, 0), model)
    manager.close()


def test_an_abort_marker_writes_kafkas_txnindex_entry(tmp_path: Path) -> None:
    manager = LogManager(tmp_path / "data", clock=Clock())
    manager.create_topic(TOPIC, 1)
    log = manager.get_log(TOPIC, 0)
    log.append(build_batch(_records(2)), now_ms=NOW)  # offsets 0-1
    log.append(build_batch(_records(3), producer_id=7, producer_epoch=0, base_sequence=0,
                           transactional=True), now_ms=NOW)  # 2-4
    assert log.last_stable_offset == 2
    log.append_marker(ControlType.ABORT, 7, 0, 5, now_ms=NOW)  # 5
    assert log.last_stable_offset == 6
    manager.close()
    raw = (tmp_path / "data" / f"{TOPIC}-0" / "00000000000000000000.txnindex").read_bytes()
    # version, producer id, first offset, last offset (the marker), last stable offset
    assert raw == struct.pack(">hqqqq", 0, 7, 2, 5, 6)


def test_a_marker_from_an_older_epoch_is_fenced(tmp_path: Path) -> None:
    manager = LogManager(tmp_path / "data", clock=Clock())
    manager.create_topic(TOPIC, 1)
    log = manager.get_log(TOPIC, 0)
    log.append(build_batch(_records(1), producer_id=7, producer_epoch=2, base_sequence=0,
                           transactional=True), now_ms=NOW)
    with pytest.raises(InvalidProducerEpochError):
        log.append_marker(ControlType.ABORT, 7, 1, 5, now_ms=NOW)
    assert log.last_stable_offset == 0  # still open
    log.append_marker(ControlType.ABORT, 7, 3, 5, now_ms=NOW)  # a newer epoch fences it
    assert log.last_stable_offset == log.log_end_offset
    with pytest.raises(InvalidProducerEpochError):  # the old producer is fenced now
        log.append(build_batch(_records(1), producer_id=7, producer_epoch=2, base_sequence=1,
                               transactional=True), now_ms=NOW)
    manager.close()
