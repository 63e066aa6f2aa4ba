"""Transactions in the log, against a model: ongoing transactions and the last stable offset,
COMMIT and ABORT markers, the aborted-transaction index (``.txnindex``), and both surviving
clean and unclean restarts (the index rebuilt from the log); ``committed_only``, the filter
the Spark source applies to read_committed answers, on the same logs; and compaction of such
logs (aborted data removed, markers kept while their data is, read_committed unchanged).

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
from compaction_support import RETENTION_MS, TP, cleaner_for, compacted_manager
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch
from storage_support import NOW, TOPIC, Clock, restart

from sparklog.errors import ErrorCode, InvalidProducerEpochError, KafkaError
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
    aborted_offsets: set[int] = field(default_factory=set)
    abort_markers: dict[int, tuple[int, int]] = field(default_factory=dict)  # -> (pid, first)
    sequences: dict[int, int] = field(default_factory=dict)
    rows: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)  # offset -> key, value
    appended: int = 0

    @property
    def last_stable_offset(self) -> int:
        firsts = [offsets[0] for offsets in self.ongoing.values()]
        return min(firsts) if firsts else self.next_offset

    def committed_below(self, bound: int) -> list[int]:
        return sorted(o for o in self.visible if o < bound)


def _records(count: int, tag: int = 0) -> list[tuple[bytes, bytes, tuple, int]]:
    """Keys k0.. (so later batches overwrite earlier ones), values unique per ``tag``."""
    return [(b"k%d" % i, b"v%d-%d" % (tag, i), (), NOW) for i in range(count)]


def _append(log: PartitionLog, model: Model, records: list, **producer: object) -> range:
    info = log.append(build_batch(records, **producer), now_ms=NOW)  # type: ignore[arg-type]
    offsets = range(info.base_offset, info.last_offset + 1)
    model.rows.update({o: (r[0], r[1]) for o, r in zip(offsets, records, strict=True)})
    model.appended += 1
    model.next_offset = info.last_offset + 1
    return offsets


def apply(log: PartitionLog, model: Model, op: tuple) -> None:
    kind = op[0]
    if kind == "plain":
        model.visible += _append(log, model, _records(op[1], model.appended))
    elif kind == "txn":
        pid, count = op[1], op[2]
        sequence = model.sequences.get(pid, 0)
        offsets = _append(log, model, _records(count, model.appended), producer_id=pid,
                          producer_epoch=EPOCH, base_sequence=sequence, transactional=True)
        model.sequences[pid] = sequence + count
        model.ongoing.setdefault(pid, []).extend(offsets)
    else:  # "end"
        pid, commit = op[1], op[2]
        info = log.append_marker(ControlType.COMMIT if commit else ControlType.ABORT, pid,
                                 EPOCH, 3, now_ms=NOW)
        offsets = model.ongoing.pop(pid, [])
        if commit:
            model.visible += offsets
        elif offsets:
            model.aborted.append((pid, offsets[0]))
            model.aborted_offsets.update(offsets)
            model.abort_markers[info.base_offset] = (pid, offsets[0])
        model.next_offset = info.last_offset + 1


Row = tuple[int, bytes | None, bytes | None]


def read_committed_rows(log: PartitionLog) -> list[Row]:
    """(offset, key, value) of what a read_committed Kafka consumer gets from the start to
    the LSO (Kafka's consumer algorithm over the raw batches and the log's aborted
    transactions; a control batch the cleaner emptied is skipped, as Kafka's consumer does)."""
    bound = log.last_stable_offset
    aborted = [(t.first_offset, t.producer_id) for t in log.aborted_transactions(0, bound)]
    heapq.heapify(aborted)
    aborting: set[int] = set()
    seen: list[Row] = []
    for path in sorted(log.directory.glob("*.log")):
        data = path.read_bytes()
        for header in split_batches(data):
            if header.base_offset >= bound:
                return seen
            batch = DefaultRecordBatch(data[header.position:header.position + header.size])
            while aborted and aborted[0][0] <= header.last_offset:
                aborting.add(heapq.heappop(aborted)[1])
            if batch.is_control_batch:
                markers = list(batch)
                if markers and struct.unpack(">hh", markers[0].key)[1] == ControlType.ABORT:
                    aborting.discard(batch.producer_id)
                continue
            if batch.is_transactional and batch.producer_id in aborting:
                continue
            seen += [(r.offset, r.key, r.value) for r in batch if r.offset < bound]
    return seen


def read_committed(log: PartitionLog) -> list[int]:
    return [offset for offset, _, _ in read_committed_rows(log)]


def filtered_by_sparklog(log: PartitionLog) -> list[int]:
    """The same view through ``sparklog.record.transactions.committed_only`` (what the Spark
    source applies to a read_committed Fetch answer)."""
    bound = log.last_stable_offset
    aborted = [(t.producer_id, t.first_offset) for t in log.aborted_transactions(0, bound)]
    data = b"".join(path.read_bytes() for path in sorted(log.directory.glob("*.log")))
    kept = committed_only(data, aborted)
    return [r.offset for h in split_batches(kept) if not h.is_control
            for r in DefaultRecordBatch(kept[h.position:h.position + h.size]) if r.offset < bound]


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


def test_a_clients_transactional_batch_needs_its_verification_still_current(
        tmp_path: Path) -> None:
    """KIP-890 part 1 in the log: a client's transactional batch (``verify``) is refused
    INVALID_TXN_STATE without an ongoing transaction or its verification's guard; a guard
    lets the first batch in, later ones need none; a marker written between the
    coordinator's answer and the append retires the guard (the batch would open a hanging
    transaction); a guard of another epoch does not count."""
    manager = LogManager(tmp_path / "data", clock=Clock())
    manager.create_topic(TOPIC, 1)
    log = manager.get_log(TOPIC, 0)
    state = log.producer_state

    def batch(sequence: int, epoch: int = 0) -> bytes:
        return build_batch(_records(1, sequence), producer_id=7, producer_epoch=epoch,
                           base_sequence=sequence, transactional=True)

    with pytest.raises(KafkaError) as refused:
        log.append(batch(0), now_ms=NOW, verify=True)
    assert refused.value.code == ErrorCode.INVALID_TXN_STATE
    assert log.log_end_offset == 0
    guard = state.start_verification(7, 0)
    assert state.start_verification(7, 0) is guard  # one per producer and epoch
    log.append(batch(0), now_ms=NOW, verify=True, guard=guard)
    assert not state.needs_verification(7, 0)
    log.append(batch(1), now_ms=NOW, verify=True)  # the transaction is ongoing here
    log.append_marker(ControlType.COMMIT, 7, 0, 5, now_ms=NOW)
    assert state.needs_verification(7, 0)
    late = state.start_verification(7, 0)  # verified for the next transaction ...
    log.append_marker(ControlType.ABORT, 7, 0, 5, now_ms=NOW)  # ... which ended meanwhile
    with pytest.raises(KafkaError) as refused:
        log.append(batch(2), now_ms=NOW, verify=True, guard=late)
    assert refused.value.code == ErrorCode.INVALID_TXN_STATE
    stale = state.start_verification(7, 0)
    with pytest.raises(KafkaError):  # a guard of epoch 0 does not let epoch 1 in
        log.append(batch(0, epoch=1), now_ms=NOW, verify=True, guard=stale)
    log.append(batch(2), now_ms=NOW)  # no client's batch (a follower's, a replay): as before
    assert log.last_stable_offset == 4
    manager.close()


# -- compaction of a log with transactions ---------------------------------------------------


def _latest(rows: list[Row]) -> dict[bytes | None, bytes | None]:
    return {key: value for _, key, value in rows}  # in offset order: the last one wins


def check_compacted(log: PartitionLog, model: Model, checkpoint: int) -> None:
    """After cleans: read_committed reads a subset of what it read without them, with the
    same latest value per key; aborted records are gone from the cleaned section; nothing is
    left open."""
    assert log.last_stable_offset == model.last_stable_offset
    for txn in log.aborted_transactions(0, log.log_end_offset):
        pid, first = model.abort_markers[txn.last_offset]  # an ABORT marker of the model's
        # (a rebuilt index starts at the transaction's first batch the cleaner left)
        assert txn.producer_id == pid and txn.first_offset >= first
    rows = read_committed_rows(log)
    visible = model.committed_below(model.last_stable_offset)
    assert {offset for offset, _, _ in rows} <= set(visible)
    assert _latest(rows) == _latest([(o, *model.rows[o]) for o in visible])
    assert filtered_by_sparklog(log) == [offset for offset, _, _ in rows]
    for path in sorted(log.directory.glob("*.log")):
        data = path.read_bytes()
        for header in split_batches(data):
            if header.base_offset < checkpoint and not header.is_control:
                assert not set(range(header.base_offset, header.last_offset + 1)) & (
                    model.aborted_offsets) or header.record_count == 0


compaction_operations = st.lists(st.one_of(
    st.tuples(st.just("plain"), st.integers(1, 4)),
    st.tuples(st.just("txn"), st.sampled_from(PIDS), st.integers(1, 4)),
    st.tuples(st.just("end"), st.sampled_from(PIDS), st.booleans()),
    st.tuples(st.just("restart"), st.booleans()),
    st.tuples(st.just("clean"), st.sampled_from([0, RETENTION_MS + 1])),
), min_size=8, max_size=60)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=compaction_operations)
def test_compaction_keeps_what_read_committed_reads(tmp_path_factory: pytest.TempPathFactory,
                                                    ops: list[tuple]) -> None:
    """Cleans at any point of a transactional log (time moving past delete.retention.ms or
    not), restarts included: read_committed readers see the compacted view of what they saw
    before, and after restarts nothing is left open by emptied batches or removed markers."""
    root = tmp_path_factory.mktemp("txn-compact")
    clock = Clock()
    manager = compacted_manager(root / "data", clock)
    model = Model()
    crashes = 0
    checkpoint = -1  # offsets below it were cleaned at least once
    for op in ops:
        if op[0] == "restart":
            crashes += 1
            manager = restart(manager, clean=op[1], crash_dir=root / f"crash-{crashes}")
        elif op[0] == "clean":
            clock.advance(op[1])
            cleaner = cleaner_for(manager)
            cleaner.clean_log(TP)
            checkpoint = max(checkpoint, cleaner.checkpoint(TP) or -1)
            cleaner.stop()
        else:
            apply(manager.get_log(*TP), model, op)
        if checkpoint < 0:
            check(manager.get_log(*TP), model)
        else:
            check_compacted(manager.get_log(*TP), model, checkpoint)
    manager.close()


def _markers(log: PartitionLog) -> list[tuple[int, int]]:
    """(offset, delete horizon) of each marker still holding its record."""
    return [(h.base_offset, h.delete_horizon_ms)
            for path in sorted(log.directory.glob("*.log"))
            for h in split_batches(path.read_bytes()) if h.is_control and h.record_count]


@pytest.mark.parametrize("commit", [True, False])
def test_a_marker_outlives_its_data_by_delete_retention(tmp_path: Path, commit: bool) -> None:
    """Kafka's rule: the clean removing a transaction's data keeps its marker; the next one
    gives the marker a delete horizon; a clean after the horizon removes it. (A producer's
    latest batch stays, emptied, for its sequence state, and with it its marker: so the
    producer here writes a second transaction, whose data survives.)"""
    clock = Clock()
    manager = compacted_manager(tmp_path / "data", clock)
    log = manager.get_log(*TP)
    end = ControlType.COMMIT if commit else ControlType.ABORT
    log.append(build_batch([(b"k0", b"in txn", (), NOW)], producer_id=7, producer_epoch=0,
                           base_sequence=0, transactional=True), now_ms=NOW)  # offset 0
    log.append_marker(end, 7, 0, 1, now_ms=NOW)  # 1
    log.append(build_batch([(b"k1", b"kept", (), NOW)], producer_id=7, producer_epoch=0,
                           base_sequence=1, transactional=True), now_ms=NOW)  # 2
    log.append_marker(ControlType.COMMIT, 7, 0, 1, now_ms=NOW)  # 3
    for tag in range(11):  # k0 again and again: the first transaction's record is overwritten
        log.append(build_batch(_records(1, tag)), now_ms=NOW)
    cleaner = cleaner_for(manager)

    def clean() -> list[tuple[int, int]]:
        cleaner.clean_log(TP)
        return _markers(log)

    assert clean() == [(1, -1), (3, -1)]  # the data went in this clean; its marker stays
    indexed = [t.last_offset for t in log.aborted_transactions(0, log.log_end_offset)]
    assert indexed == ([] if commit else [1])  # an ABORT marker kept keeps its index entry
    assert clean() == [(1, NOW + RETENTION_MS), (3, -1)]  # nothing of it left: a horizon
    clock.advance(RETENTION_MS + 1)
    assert clean() == [(3, -1)]
    assert _latest(read_committed_rows(log)) == {b"k0": b"v10-0", b"k1": b"kept"}
    cleaner.stop()
    manager.close()
