"""The cost of KIP-848's server-side assignors as the group grows.

Usage: ``python bench/assignors.py [--quick]``

Groups of members x partitions from 10 x 100 to 1000 x 100,000 (topics of 100 partitions),
each case timed in a child process of its own so its peak RSS is its own:
- ``uniform first``: a homogeneous group's first assignment (no current assignment);
- ``uniform join``: one member joins the settled homogeneous group (the sticky path: keep
  what the quotas allow, move the rest);
- ``uniform hetero join``: half the members subscribe to every topic, the others to half
  of them (the general builder with its balancing passes), one member joins;
- ``range``: a homogeneous group's assignment (recomputed from scratch, as Kafka's).
Prints the best of three runs (one at the largest size) in milliseconds, the ratio to the
same case at the smallest size, microseconds per partition, and the child's peak RSS (the
interpreter's own share included, shown in the ``baseline`` row).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

from _common import Row, peak_rss_mib, print_table  # bench/ is on sys.path

from sparklog.coordinator.assignors import (
    Assignment,
    MemberSubscription,
    RangeAssignor,
    TopicKey,
    UniformAssignor,
)

SIZES = ((10, 100), (100, 1_000), (100, 10_000), (1_000, 10_000), (1_000, 100_000))
QUICK_SIZES = SIZES[:3]
TOPIC_PARTITIONS = 100
CASES = ("baseline", "uniform first", "uniform join", "uniform hetero join", "range")

Members = dict[str, MemberSubscription]


def group(members: int, partitions: int, *, hetero: bool) -> tuple[Members, dict[TopicKey, int]]:
    topics = [uuid.UUID(int=n + 1) for n in range(max(1, partitions // TOPIC_PARTITIONS))]
    counts = {topic: TOPIC_PARTITIONS for topic in topics}
    everything = frozenset(topics)
    half = frozenset(topics[: max(1, len(topics) // 2)])
    return {f"member-{n:05d}": MemberSubscription(half if hetero and n % 2 else everything)
            for n in range(members)}, counts


def settled(members: Members, counts: dict[TopicKey, int]) -> Members:
    """The group after its first assignment, and a new member subscribed to everything."""
    result: dict[str, Assignment] = UniformAssignor().assign(members, counts)
    group_ = {m: MemberSubscription(s.topics, None, None, result[m]) for m, s in members.items()}
    group_["member-joining"] = MemberSubscription(frozenset(counts))
    return group_


def setup(case: str, members: int, partitions: int) -> Callable[[], object]:
    """What to time for one case (built outside the timing)."""
    if case == "baseline":
        return lambda: None
    if case == "range":
        group_, counts = group(members, partitions, hetero=False)
        return lambda: RangeAssignor().assign(group_, counts)
    group_, counts = group(members, partitions, hetero=case == "uniform hetero join")
    if case != "uniform first":
        group_ = settled(group_, counts)
    return lambda: UniformAssignor().assign(group_, counts)


def child(case: str, members: int, partitions: int) -> None:
    """Time one case here and print its figures as JSON."""
    run = setup(case, members, partitions)
    best = float("inf")
    for _ in range(1 if partitions >= 100_000 else 3):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    print(json.dumps({"seconds": best, "rss": peak_rss_mib()}))


def measure(case: str, members: int, partitions: int) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", case, str(members), str(partitions)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="stop at 100 x 10,000")
    parser.add_argument("--child", nargs=3, metavar=("CASE", "MEMBERS", "PARTITIONS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), int(args.child[2]))
        return
    rows = []
    smallest: dict[str, float] = {}
    for members, partitions in QUICK_SIZES if args.quick else SIZES:
        for case in CASES:
            figures = measure(case, members, partitions)
            seconds = figures["seconds"]
            smallest.setdefault(case, seconds)
            rows.append(Row(case, f"{members} x {partitions:,}", f"{seconds * 1000:.2f}",
                            f"{seconds / smallest[case]:.1f}" if case != "baseline" else "-",
                            f"{seconds / partitions * 1e6:.2f}" if case != "baseline" else "-",
                            f"{figures['rss']:.0f}"))
    print_table(("case", "members x partitions", "ms", "x smallest", "us/partition",
                 "peak RSS MiB"), rows)


if __name__ == "__main__":
    main()
