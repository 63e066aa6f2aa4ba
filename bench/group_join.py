"""How long three consuming members pause while a fourth joins them: KIP-848's consumer
protocol against the classic one.

Usage: ``python bench/group_join.py [--runs N]``

An in-process broker (heartbeats every 500 ms for the consumer protocol, librdkafka's
defaults otherwise: eager assignors, heartbeats every 3 s for the classic protocol); three
confluent-kafka members consume a 12-partition topic fed about 1,000 records/s, then a fourth
joins (``tests/consumer_members.join_fourth``). For each protocol, over N runs (default 3),
the median of: the longest gap in any of the three's consumption from the join until the
group settled, the longest gap over as long a time before the join (the noise floor: fetch
waits, threads, the producer's pace), and the records consumed twice. Prints each
protocol's gap against its own noise, the consumer protocol's gap against the classic one,
and peak RSS (this process: broker and clients).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

from _common import Row, peak_rss_mib, print_table  # bench/ on path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from consumer_members import JoinRun, join_fourth  # tests/ on path

from sparklog.broker.embedded import EmbeddedBroker

CONFIG = {
    "offsets.topic.num.partitions": "3",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
}
PROTOCOLS = ("consumer", "classic")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[JoinRun]] = {protocol: [] for protocol in PROTOCOLS}
    with tempfile.TemporaryDirectory(prefix="bench-join-") as scratch, \
            EmbeddedBroker(Path(scratch) / "data", CONFIG) as broker:
        for n in range(args.runs):
            for protocol in PROTOCOLS:
                run = join_fourth(broker.bootstrap, f"bench-{uuid.uuid4().hex[:8]}", protocol)
                runs[protocol].append(run)
                print(f"run {n + 1}/{args.runs} {protocol}: gap {run.gap():.3f} s, "
                      f"noise {run.noise():.3f} s", flush=True)
    gaps = {p: statistics.median(r.gap() for r in runs[p]) for p in PROTOCOLS}
    rows = []
    for protocol in PROTOCOLS:
        noise = statistics.median(r.noise() for r in runs[protocol])
        twice = statistics.median(r.consumed_twice() for r in runs[protocol])
        rows.append(Row(protocol, f"{gaps[protocol] * 1000:.0f}", f"{noise * 1000:.0f}",
                        f"{gaps[protocol] / noise:.2f}", f"{twice:.0f}",
                        f"{gaps[protocol] / gaps['classic']:.2f}"))
    print()
    print_table(["protocol", "join gap ms", "noise ms", "gap/noise", "consumed twice",
                 "gap/classic"], rows)
    print(f"peak RSS {peak_rss_mib():.0f} MiB")
    print(f"join_gap_ratio={gaps['consumer'] / gaps['classic']:.3f}")


if __name__ == "__main__":
    main()
