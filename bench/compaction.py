"""Compaction benchmark: one full clean of a large log against a plain read of its files.

    .venv/bin/python bench/compaction.py [--quick] [--dir DIR] [--record-bytes N]

- The log: 1 GiB (``--quick``: 64 MiB) of records of ~1 KiB (``--record-bytes``: a 16-byte
  key and a random value filling the rest), 16 records per uncompressed batch, in 64 MiB
  segments (``--quick``: 4 MiB). Keys are drawn uniformly from 10% as many distinct keys as
  there are records, so each key has ~10 values and a full clean keeps ~10% of the bytes.
  Every segment but the active one is dirty (no cleaner checkpoint yet).
- plain read: every segment file read sequentially in 1 MiB ``read`` calls.
- clean: ``LogCleaner.clean_log`` of the whole log (offset map over the dirty section, every
  inactive segment rewritten, fsynced and swapped in), with Kafka's default 128 MiB dedupe
  buffer. Throughput counts the bytes of the segments cleaned.
- The page cache is warm for both (the log was just written, then read).

Peak RSS is the process peak (ru_maxrss) when each row was measured. The last line printed is
``cleaner_ratio=<cleaner MB/s / read MB/s>``.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path

from _common import MiB, Row, Stopwatch, peak_rss_mib, print_table, scratch_dir

from sparklog.record.records import build_batch
from sparklog.storage.cleaner import CleanerConfig, LogCleaner
from sparklog.storage.log_manager import LogManager
from sparklog.storage.segment import LOG_SUFFIX

TOPIC = "bench-compacted"
RECORDS_PER_BATCH = 16
DISTINCT_KEY_FRACTION = 0.10
VALUE_POOL = 64  # distinct random values, reused (batches are not compressed)
READ_CHUNK = 1 * MiB


def write_log(manager: LogManager, volume: int, record_bytes: int) -> int:
    """Append ``volume`` bytes of keyed records; return the number of records."""
    log = manager.get_log(TOPIC, 0)
    rng = random.Random(7)
    value_bytes = max(1, record_bytes - 16 - 8)  # key and per-record overhead
    values = [os.urandom(value_bytes) for _ in range(VALUE_POOL)]
    per_batch = len(build_batch([(b"k" * 16, values[0], (), 0)] * RECORDS_PER_BATCH))
    batches = max(1, volume // per_batch)
    records = batches * RECORDS_PER_BATCH
    distinct = max(1, int(records * DISTINCT_KEY_FRACTION))
    now = manager.now_ms()
    offset = 0
    for _ in range(batches):
        batch = [(b"key-%012d" % rng.randrange(distinct), values[rng.randrange(VALUE_POOL)], (),
                  now) for _ in range(RECORDS_PER_BATCH)]
        log.append_as_follower(build_batch(batch, base_offset=offset), now_ms=now)
        offset += RECORDS_PER_BATCH
    log.roll(now)  # every record in an inactive segment: all of it is cleanable
    return records


def plain_read(directory: Path) -> tuple[int, float]:
    total, watch = 0, Stopwatch()
    with watch:
        for path in sorted(directory.glob(f"*{LOG_SUFFIX}")):
            with open(path, "rb", buffering=0) as file:
                while chunk := file.read(READ_CHUNK):
                    total += len(chunk)
    return total, watch.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="64 MiB instead of 1 GiB")
    parser.add_argument("--dir", help="parent directory for the data (default: system temp)")
    parser.add_argument("--record-bytes", type=int, default=1024, help="bytes per record")
    args = parser.parse_args()
    volume = 64 * MiB if args.quick else 1024 * MiB
    segment_bytes = 4 * MiB if args.quick else 64 * MiB

    with scratch_dir(args.dir, "sparklog-bench-compaction-") as root:
        manager = LogManager(root / "data")
        manager.create_topic(TOPIC, 1, {"cleanup.policy": "compact",
                                        "segment.bytes": segment_bytes,
                                        "file.delete.delay.ms": 0})
        log = manager.get_log(TOPIC, 0)
        started = time.perf_counter()
        records = write_log(manager, volume, args.record_bytes)
        write_seconds = time.perf_counter() - started
        segments_before, bytes_before = len(log.segments) - 1, log.size
        print(f"log: {bytes_before / MiB:.0f} MiB, {records} records of ~{args.record_bytes} B, "
              f"{int(records * DISTINCT_KEY_FRACTION)} distinct keys, {segments_before} "
              f"segments of {segment_bytes // MiB} MiB (written in {write_seconds:.1f} s, "
              f"peak RSS {peak_rss_mib():.0f} MiB)", flush=True)

        read_bytes, read_seconds = plain_read(log.directory)
        read_rss = peak_rss_mib()
        cleaner = LogCleaner(manager, CleanerConfig())
        result = cleaner.clean_log((TOPIC, 0))
        assert result is not None and result.bytes_read == bytes_before
        clean_rss = peak_rss_mib()
        read_rate = read_bytes / MiB / read_seconds
        clean_rate = result.bytes_read / MiB / result.seconds
        print_table(
            ("measurement", "MiB in", "MiB out", "segments", "s", "MiB/s", "peak RSS MiB"),
            [Row("plain sequential read", f"{read_bytes / MiB:.0f}", "-",
                 f"{segments_before}", f"{read_seconds:.2f}", f"{read_rate:.0f}",
                 f"{read_rss:.0f}"),
             Row("clean (map + rewrite + swap)", f"{result.bytes_read / MiB:.0f}",
                 f"{result.bytes_written / MiB:.1f}",
                 f"{result.segments_before} -> {result.segments_after}",
                 f"{result.seconds:.2f}", f"{clean_rate:.1f}", f"{clean_rss:.0f}")])
        print(f"records {result.records_read} -> {result.records_kept}, offset map "
              f"{result.map_entries} entries; log {bytes_before / MiB:.1f} MiB -> "
              f"{log.size / MiB:.1f} MiB")
        manager.close()
    print(f"cleaner_ratio={clean_rate / read_rate:.4f}")


if __name__ == "__main__":
    main()
