"""Storage benchmark: appends, sendfile reads and crash recovery against plain file I/O.

    .venv/bin/python bench/storage.py [--quick] [--dir DIR]

- append: ``PartitionLog.append`` of 1 KiB, 16 KiB and 1 MiB batches (uncompressed, random
  values, pre-built) against ``os.write`` of the same batches to an O_APPEND file in the same
  directory. They are interleaved in 8 MiB rounds so all meet the same page-cache state.
  Each pass appends to a new log whose ``segment.bytes`` is half the pass, so every pass rolls
  once (and fsyncs the sealed segment in the background, as ``roll`` does).
  Two reference rows, each interleaved with an ``os.write`` baseline of its own in passes of
  their own (two writers at a time, like the first): the floor of any Python append (CRC check,
  offset rewrite and one ``writev``; no indexes, producer state or rolls) and ``os.write``
  into blocks reserved ahead as segments reserve them (what the kernel side gains). Each
  pair runs three passes of 256 MiB (one of 16 MiB with ``--quick``), each after a
  ``sync``; the median pass (by ratio) is shown.
- read: the 16 KiB log fetched from offset 0 in 1 MiB ``PartitionLog.read`` slices sent with
  ``os.sendfile`` to /dev/null and to a loopback TCP socket drained by a thread, and the same
  slices copied through Python (``pread`` + ``write``) to that socket, against a plain
  sequential read of the segment files. All from the page cache (the log was just written);
  the fastest of three passes counts.
- recovery: a 1 GiB log dropped without ``close()`` and without a checkpoint (recovery point
  0), timed while ``LogManager`` reopens it (every batch CRC-checked, indexes rebuilt),
  against a plain sequential read of the same segment files (page cache warm for both).

Peak RSS is the process peak so far when each row was measured. The last line printed is
``append_ratio_16KiB=<ratio>``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from _common import MiB, Row, Stopwatch, peak_rss_mib, print_table, scratch_dir

from sparklog.record.batch import prepare_append, validate_produced
from sparklog.record.records import build_batch
from sparklog.storage.config import LogConfig
from sparklog.storage.log import PartitionLog
from sparklog.storage.log_manager import LogManager
from sparklog.storage.reservation import BlockReservation
from sparklog.storage.segment import LOG_SUFFIX

BATCH_SIZES = {"1KiB": 1 << 10, "16KiB": 16 << 10, "1MiB": 1 << 20}
RECORD_SIZE = 1 << 10  # each batch holds batch_size / 1 KiB records (at least one)
POOL = 16  # distinct pre-built batches per size, appended round robin
ROUND_BYTES = 8 * MiB  # append and os.write alternate in rounds of this many bytes
FETCH_BYTES = 1 * MiB
READ_CHUNK = 1 * MiB
READ_PASSES = 3
TOPIC = "bench"


@dataclass(frozen=True)
class Result:
    """One measured path against its plain baseline, both over ``nbytes``."""

    name: str
    nbytes: int
    seconds: float
    baseline: str
    baseline_seconds: float
    peak_rss_mib: float

    @property
    def ratio(self) -> float:
        """Throughput of the path over the baseline's (1.0: as fast as the plain operation)."""
        return self.baseline_seconds / self.seconds

    def row(self) -> Row:
        return Row(self.name, f"{self.nbytes / MiB:.0f}", f"{self.seconds:.2f}",
                   f"{self.nbytes / MiB / self.seconds:.0f}", self.baseline,
                   f"{self.baseline_seconds:.2f}",
                   f"{self.nbytes / MiB / self.baseline_seconds:.0f}", f"{self.ratio:.2f}",
                   f"{self.peak_rss_mib:.0f}")


HEADERS = ("measurement", "MiB", "s", "MiB/s", "baseline", "base s", "base MiB/s", "ratio",
           "peak RSS MiB")


def build_pool(batch_size: int, now_ms: int) -> list[bytes]:
    """POOL distinct batches of exactly ``batch_size`` bytes, stamped ``now_ms``."""
    count = max(1, batch_size // RECORD_SIZE)
    pool = []
    for _ in range(POOL):
        first = value = batch_size // count - 16
        for _attempt in range(8):  # the first value absorbs the header and varint overheads
            values = [os.urandom(first)] + [os.urandom(value) for _ in range(count - 1)]
            batch = build_batch([(None, v, (), now_ms) for v in values])
            if len(batch) == batch_size:
                break
            first += batch_size - len(batch)
        pool.append(batch)
    return pool


def records_per_batch(batch: bytes) -> int:
    return max(1, len(batch) // RECORD_SIZE)


class PlainFile:
    """An O_APPEND file beside the log, for the baselines; optionally with blocks reserved
    ahead the way segments reserve them."""

    def __init__(self, path: Path, *, reserved: bool = False) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = 0
        self.reservation = BlockReservation() if reserved else None

    def write(self, batch: bytes) -> None:
        if self.reservation is not None:
            self.reservation.ensure(self.fd, self.size, self.size + len(batch))
        self.size += os.write(self.fd, batch)

    def validate_and_writev(self, batch: bytes) -> None:
        """The least a Python append does: CRC-check, rewrite offsets, one writev."""
        header = validate_produced(batch)
        buffers, _ = prepare_append(batch, header, self.size, 0)
        self.size += os.writev(self.fd, buffers)

    def remove(self) -> None:
        os.close(self.fd)
        self.path.unlink()


def interleaved(pool: list[bytes], volume: int, measured: Callable[[bytes], object],
                plain: PlainFile) -> tuple[float, float]:
    """Seconds of ``measured`` and of ``plain.write`` over ``volume`` bytes of the pool's
    batches, alternating in ROUND_BYTES rounds so both meet the same page-cache state."""
    count = volume // len(pool[0])
    per_round = max(1, ROUND_BYTES // len(pool[0]))
    measuring, writing = Stopwatch(), Stopwatch()
    for start in range(0, count, per_round):
        batches = [pool[i % POOL] for i in range(start, min(count, start + per_round))]
        with measuring:
            for batch in batches:
                measured(batch)
        with writing:
            for batch in batches:
                plain.write(batch)
    return measuring.seconds, writing.seconds


def bench_append(root: Path, label: str, pool: list[bytes], volume: int,
                 passes: int) -> tuple[list[Result], PartitionLog]:
    """``PartitionLog.append`` against ``os.write``, then two reference points, each against
    an ``os.write`` of its own (two writers at a time, so the page cache and writeback meet
    each pair alike): the floor of any Python append (validation and writev; no indexes,
    producer state or rolls) and ``os.write`` into reserved blocks (what the kernel side
    gains). Each pair runs ``passes`` times, after a ``sync``; the median pass counts (the
    kernel's share of a write varies from pass to pass, and with it the ratio). Each append
    pass writes a new log whose segments hold half a pass, so every pass meets one roll and
    its background fsync; the last log is returned, open."""
    now_ms = int(time.time() * 1000)
    config = LogConfig.of({"segment.bytes": volume // 2})
    logs: list[PartitionLog] = []

    def fresh_log() -> tuple[Callable[[bytes], object], None]:
        if logs:  # the previous pass's log: closed (fsynced) and deleted outside the timing
            logs[-1].close(now_ms)
            shutil.rmtree(logs[-1].directory)
        log = PartitionLog(root / f"{TOPIC}-{label}-{len(logs)}", config, now_ms=now_ms)
        logs.append(log)
        return (lambda batch: log.append(batch, now_ms=now_ms)), None

    nbytes = volume // len(pool[0]) * len(pool[0])
    results = []
    for name, make in (
        (f"append {label} batches", fresh_log),
        (f"  floor: validate+writev {label}", lambda: _file_writer(root, "floor", False)),
        (f"  os.write {label}, reserved blocks", lambda: _file_writer(root, "reserved", True)),
    ):
        measured_passes = []
        for _ in range(passes):
            measured, own = make()
            os.sync()  # no writeback backlog from an earlier pass throttles this one
            plain = PlainFile(root / f"plain-{label}.bin")
            try:
                measured_passes.append(interleaved(pool, volume, measured, plain))
            finally:
                plain.remove()
                if own is not None:
                    own.remove()
        seconds, plain_seconds = sorted(measured_passes, key=lambda p: p[1] / p[0])[passes // 2]
        results.append(Result(name, nbytes, seconds, "os.write", plain_seconds, peak_rss_mib()))
    assert logs[-1].log_end_offset == volume // len(pool[0]) * records_per_batch(pool[0])
    return results, logs[-1]


def _file_writer(root: Path, name: str, reserved: bool) -> tuple[Callable[[bytes], None],
                                                                  PlainFile]:
    """A reference writer on a file of its own: plain writes into reserved blocks, or the
    floor of a Python append (``validate_and_writev``)."""
    target = PlainFile(root / f"{name}.bin", reserved=reserved)
    return (target.write if reserved else target.validate_and_writev), target


class Drain:
    """A loopback TCP connection whose far end a thread reads and discards."""

    def __init__(self) -> None:
        with socket.create_server(("127.0.0.1", 0)) as server:
            self.sender = socket.create_connection(server.getsockname())
            self._receiver, _ = server.accept()
        self._received = 0
        self._arrived = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        buffer = bytearray(4 * MiB)
        while n := self._receiver.recv_into(buffer):
            with self._arrived:
                self._received += n
                self._arrived.notify()

    def wait_for(self, total: int) -> None:
        """Block until ``total`` bytes in all have reached the far end."""
        with self._arrived:
            self._arrived.wait_for(lambda: self._received >= total)

    def close(self) -> None:
        self.sender.close()
        self._thread.join()
        self._receiver.close()


def fetch_all(log: PartitionLog, out_fd: int, batch_size: int, per_batch: int,
              *, zero_copy: bool) -> int:
    """Fetch the whole log in FETCH_BYTES slices into ``out_fd``; return the bytes sent."""
    offset, total = log.log_start_offset, 0
    while (found := log.read(offset, FETCH_BYTES)) is not None:
        copy = None if zero_copy else memoryview(found.read())
        sent = 0
        while sent < found.length:
            if copy is None:
                sent += os.sendfile(out_fd, found.fd, found.position + sent, found.length - sent)
            else:
                sent += os.write(out_fd, copy[sent:])
        total += found.length
        offset = found.first_offset + found.length // batch_size * per_batch
    return total


def read_files(paths: list[Path]) -> tuple[float, int]:
    """Seconds and bytes to read ``paths`` sequentially into one reused buffer."""
    buffer = bytearray(READ_CHUNK)
    total = 0
    started = time.perf_counter()
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buffer):
                total += n
    return time.perf_counter() - started, total


def segment_paths(directory: Path) -> list[Path]:
    return sorted(directory.glob(f"*{LOG_SUFFIX}"))


def bench_read(log: PartitionLog, batch_size: int, per_batch: int) -> list[Result]:
    """Each path and the plain read run READ_PASSES times; the fastest pass counts."""
    paths = segment_paths(log.directory)
    plain_seconds = min(read_files(paths)[0] for _ in range(READ_PASSES))
    drain = Drain()
    null = os.open(os.devnull, os.O_WRONLY)
    results, sent_by_tcp = [], 0
    try:
        for name, out_fd, zero_copy in (
            ("sendfile to /dev/null", null, True),
            ("sendfile to TCP", drain.sender.fileno(), True),
            ("pread+write to TCP", drain.sender.fileno(), False),
        ):
            passes = []
            for _ in range(READ_PASSES):
                started = time.perf_counter()
                sent = fetch_all(log, out_fd, batch_size, per_batch, zero_copy=zero_copy)
                if out_fd != null:
                    sent_by_tcp += sent
                    drain.wait_for(sent_by_tcp)
                passes.append(time.perf_counter() - started)
                assert sent == log.size
            results.append(Result(f"fetch 1MiB slices, {name}", log.size, min(passes),
                                  "file read", plain_seconds, peak_rss_mib()))
    finally:
        os.close(null)
        drain.close()
    return results


def bench_recovery(root: Path, pool: list[bytes], volume: int, segment_bytes: int) -> Result:
    data_dir = root / "recovery"
    manager = LogManager(data_dir)
    manager.create_topic(TOPIC, 1, {"segment.bytes": segment_bytes})
    log = manager.get_log(TOPIC, 0)
    now_ms = manager.now_ms()
    for i in range(volume // len(pool[0])):
        log.append(pool[i % POOL], now_ms=now_ms)
    end, size = log.log_end_offset, log.size
    for segment in log.segments:  # dropped, not closed: no marker, no checkpoint
        os.close(segment.fd)
    plain_seconds, plain_bytes = read_files(segment_paths(log.directory))
    started = time.perf_counter()
    reopened = LogManager(data_dir)
    seconds = time.perf_counter() - started
    recovered = reopened.get_log(TOPIC, 0)
    assert not reopened.clean_start and recovered.log_end_offset == end
    assert plain_bytes == size == recovered.size
    result = Result(f"recover {len(log.segments)} segments, {len(pool[0]) // 1024}KiB batches",
                    size, seconds, "file read", plain_seconds, peak_rss_mib())
    reopened.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small volumes: seconds, not minutes")
    parser.add_argument("--dir", help="parent directory for the data (default: system temp)")
    args = parser.parse_args()
    volume, recovery_volume, segment_bytes, passes = (
        (16 * MiB, 64 * MiB, 8 * MiB, 1) if args.quick else (256 * MiB, 1024 * MiB, 256 * MiB, 3))
    now_ms = int(time.time() * 1000)
    pools = {label: build_pool(size, now_ms) for label, size in BATCH_SIZES.items()}
    appends: dict[str, list[Result]] = {}
    reads: list[Result] = []
    with scratch_dir(args.dir, "sparklog-bench-storage-") as root:
        for label, pool in pools.items():
            appends[label], log = bench_append(root, label, pool, volume, passes)
            print(f"{appends[label][0].name}: ratio {appends[label][0].ratio:.2f}", flush=True)
            if label == "16KiB":
                reads = bench_read(log, len(pool[0]), records_per_batch(pool[0]))
            log.close(now_ms)
        recovery = bench_recovery(root, pools["16KiB"], recovery_volume, segment_bytes)
    print()
    rows = [r.row() for results in appends.values() for r in results]
    print_table(HEADERS, rows + [r.row() for r in (*reads, recovery)])
    print(f"append_ratio_16KiB={appends['16KiB'][0].ratio:.2f}")

if __name__ == "__main__":
    main()
