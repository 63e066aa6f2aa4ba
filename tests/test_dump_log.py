"""``sparklog dump-log``: batch and record lines, torn tails, index files, streaming reads.

The segments are built, and the expected batch lines computed, with kafka-python's record
classes: an encoder and decoder independent of the code under test.
"""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from sparklog.cli import main

HEADER_SIZE = 61  # Kafka's record batch v2 header
_CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

Spec = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def kp_batch(records: list[Spec], *, base_offset: int = 0, codec: int = 0,
             producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
             leader_epoch: int = -1, transactional: bool = False, control: bool = False,
             log_append_time: int | None = None) -> bytes:
    """A batch as kafka-python builds it, with what a broker and a coordinator change: the
    base offset and leader epoch (outside the CRC), and for control batches and
    LogAppendTime the attributes (and max timestamp), resealed."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec,
                                        is_transactional=transactional, producer_id=producer_id,
                                        producer_epoch=producer_epoch,
                                        base_sequence=base_sequence, batch_size=1 << 20)
    for delta, (key, value, headers, timestamp) in enumerate(records):
        builder.append(delta, timestamp=timestamp, key=key, value=value, headers=headers)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    struct.pack_into(">i", data, 12, leader_epoch)
    if control or log_append_time is not None:
        (attributes,) = struct.unpack_from(">h", data, 21)
        attributes |= (0x20 if control else 0) | (0x08 if log_append_time is not None else 0)
        struct.pack_into(">h", data, 21, attributes)
        if log_append_time is not None:
            struct.pack_into(">q", data, 35, log_append_time)
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


FIRST = kp_batch(
    [(b"k1", b"hello", [("trace", b"1"), ("span", None)], 1_000), (None, b"w\norld", [], 1_005)],
    base_offset=0, producer_id=7, producer_epoch=2, base_sequence=10, leader_epoch=3,
)
# a header that compresses well: kafka-python sends a batch uncompressed when gzip would not
# make it smaller
SECOND = kp_batch([(b"k3", None, [("pad", b"x" * 200)], 2_000)], base_offset=2, codec=1)
COMMIT_MARKER = kp_batch(  # Kafka's EndTransactionMarker: COMMIT (1), coordinator epoch 5
    [(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 5), [], 3_000)],
    base_offset=3, producer_id=7, producer_epoch=2, transactional=True, control=True,
)


def batch_line(batch: bytes, position: int, *, valid: bool = True) -> str:
    """kafka-dump-log.sh's batch line, from kafka-python's reading of the batch."""
    b = DefaultRecordBatch(batch)
    flag = {True: "true", False: "false"}
    last_sequence = b.last_sequence if b.base_sequence >= 0 else -1
    kind = "LogAppendTime" if b.timestamp_type else "CreateTime"
    return (
        f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} "
        f"count: {b.records_count} baseSequence: {b.base_sequence} "
        f"lastSequence: {last_sequence} producerId: {b.producer_id} "
        f"producerEpoch: {b.producer_epoch} partitionLeaderEpoch: {b.leader_epoch} "
        f"isTransactional: {flag[b.is_transactional]} isControl: {flag[b.is_control_batch]} "
        f"position: {position} {kind}: {b.max_timestamp} size: {len(batch)} magic: 2 "
        f"compresscodec: {_CODECS[b.compression_type]} crc: {b.crc} isvalid: {flag[valid]}"
    )


def segment(tmp_path: Path, *batches: bytes, name: str = "00000000000000000000.log") -> Path:
    path = tmp_path / name
    path.write_bytes(b"".join(batches))
    return path


def dump(capsys: pytest.CaptureFixture[str], path: Path, *flags: str) -> tuple[int, list[str]]:
    code = main(["dump-log", str(path), *flags])
    return code, capsys.readouterr().out.splitlines()


def test_print_data_log_shows_batches_and_records(tmp_path: Path, capsys) -> None:
    path = segment(tmp_path, FIRST, SECOND, COMMIT_MARKER)
    code, lines = dump(capsys, path, "--print-data-log")
    assert code == 0
    second_at, marker_at = len(FIRST), len(FIRST) + len(SECOND)
    assert lines == [
        f"Dumping {path}",
        "Log starting offset: 0",
        batch_line(FIRST, 0),
        "| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 5 sequence: 10 "
        "headerKeys: [trace,span] key: k1 payload: hello",
        "| offset: 1 CreateTime: 1005 keySize: -1 valueSize: 6 sequence: 11 "
        "headerKeys: [] payload: w\\x0aorld",
        batch_line(SECOND, second_at),
        "| offset: 2 CreateTime: 2000 keySize: 2 valueSize: -1 sequence: -1 headerKeys: [pad] "
        "key: k3",
        batch_line(COMMIT_MARKER, marker_at),
        "| offset: 3 CreateTime: 3000 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 5",
    ]
    assert "compresscodec: gzip" in lines[5] and "isTransactional: true isControl: true" in lines[7]


def test_batch_lines_only_without_deep_iteration(tmp_path: Path, capsys) -> None:
    code, lines = dump(capsys, segment(tmp_path, FIRST, SECOND))
    assert code == 0
    assert lines[2:] == [batch_line(FIRST, 0), batch_line(SECOND, len(FIRST))]


def test_deep_iteration_prints_records_without_data(tmp_path: Path, capsys) -> None:
    code, lines = dump(capsys, segment(tmp_path, SECOND), "--deep-iteration")
    assert code == 0
    assert lines[3] == (
        "| offset: 2 CreateTime: 2000 keySize: 2 valueSize: -1 sequence: -1 headerKeys: [pad]"
    )


def test_log_append_time_batches_say_so(tmp_path: Path, capsys) -> None:
    batch = kp_batch([(b"k", b"v", [], 10), (b"k", b"v", [], 20)], log_append_time=20)
    _, lines = dump(capsys, segment(tmp_path, batch), "--deep-iteration")
    assert "LogAppendTime: 20 size" in lines[2]
    assert [line.split()[4] for line in lines[3:]] == ["20", "20"]


@pytest.mark.parametrize("kept", [HEADER_SIZE - 1, HEADER_SIZE + 3, len(SECOND) - 1])
def test_torn_last_batch_exits_1_and_names_its_position(tmp_path: Path, capsys, kept: int) -> None:
    code, lines = dump(capsys, segment(tmp_path, FIRST, SECOND[:kept]), "--print-data-log")
    assert code == 1
    assert lines[2] == batch_line(FIRST, 0)
    assert lines[-1].startswith(
        f"Found a torn or corrupt tail at position {len(FIRST)} ({kept} bytes): "
    )


def test_garbage_tail_exits_1(tmp_path: Path, capsys) -> None:
    code, lines = dump(capsys, segment(tmp_path, FIRST, b"\x00" * 100))
    assert code == 1
    assert lines[-1].startswith(f"Found a torn or corrupt tail at position {len(FIRST)} (100 ")
    assert "magic 0" in lines[-1]


def test_crc_failure_is_flagged_and_iteration_goes_on(tmp_path: Path, capsys) -> None:
    damaged = bytearray(FIRST)
    damaged[FIRST.index(b"hello")] ^= 0x20
    code, lines = dump(capsys, segment(tmp_path, bytes(damaged), SECOND), "--print-data-log")
    assert code == 1
    assert lines[2] == batch_line(FIRST, 0, valid=False)
    assert "payload: Hello" in lines[3]
    assert lines[5] == batch_line(SECOND, len(FIRST))


def test_undecodable_records_are_reported(tmp_path: Path, capsys) -> None:
    damaged = bytearray(FIRST)
    damaged[HEADER_SIZE] = 0x7F  # first record length -64
    code, lines = dump(capsys, segment(tmp_path, bytes(damaged), SECOND), "--deep-iteration")
    assert code == 1
    assert lines[3].startswith("| corrupt records in the batch at position 0: record 0 has")
    assert lines[4] == batch_line(SECOND, len(FIRST))


def test_empty_segment_is_intact(tmp_path: Path, capsys) -> None:
    assert dump(capsys, segment(tmp_path))[0] == 0


def test_reads_one_batch_at_a_time(tmp_path: Path, capsys, monkeypatch) -> None:
    path = segment(tmp_path, *([FIRST] * 50))
    reads: list[int] = []
    real_open = Path.open

    class SpyFile:
        def __init__(self, file) -> None:
            self.file = file

        def __enter__(self) -> SpyFile:
            return self

        def __exit__(self, *exc: object) -> None:
            self.file.close()

        def read(self, size: int) -> bytes:
            reads.append(size)
            return self.file.read(size)

        def fileno(self) -> int:
            return self.file.fileno()

    monkeypatch.setattr(Path, "open", lambda self, *a, **k: SpyFile(real_open(self, *a, **k)))
    assert dump(capsys, path)[0] == 0
    assert len(reads) == 100 and max(reads) <= len(FIRST)


def write_index(tmp_path: Path, name: str, layout: str, entries: list[tuple[int, int]],
                padding: int = 0, tail: bytes = b"") -> Path:
    path = tmp_path / name
    path.write_bytes(b"".join(struct.pack(layout, *e) for e in entries) + bytes(padding) + tail)
    return path


def test_offset_index_entries_are_absolute(tmp_path: Path, capsys) -> None:
    path = write_index(tmp_path, "00000000000000000100.index", ">ii", [(0, 0), (5, 4096)],
                       padding=8 * 10)
    code, lines = dump(capsys, path)
    assert code == 0
    assert lines == [f"Dumping {path}", "offset: 100 position: 0", "offset: 105 position: 4096"]


def test_time_index_entries(tmp_path: Path, capsys) -> None:
    path = write_index(tmp_path, "00000000000000000100.timeindex", ">qi",
                       [(1_000, 0), (2_000, 7)], padding=12 * 3)
    code, lines = dump(capsys, path)
    assert code == 0
    assert lines[1:] == ["timestamp: 1000 offset: 100", "timestamp: 2000 offset: 107"]


def test_torn_index_entry_exits_1(tmp_path: Path, capsys) -> None:
    path = write_index(tmp_path, "00000000000000000000.index", ">ii", [(0, 0), (1, 80)],
                       tail=b"\x00\x00\x00")
    code, lines = dump(capsys, path)
    assert code == 1
    assert lines[-1] == "Found a torn entry at position 16: 3 of 8 bytes"


def test_not_a_segment_file_is_a_usage_error(tmp_path: Path, capsys) -> None:
    path = segment(tmp_path, FIRST, name="data.log")
    assert main(["dump-log", str(path)]) == 2
    assert "not a segment file" in capsys.readouterr().err


def test_missing_file_exits_1(tmp_path: Path, capsys) -> None:
    assert main(["dump-log", str(tmp_path / "00000000000000000000.log")]) == 1
