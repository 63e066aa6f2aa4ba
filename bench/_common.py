"""Shared benchmark helpers: accumulated timing, peak RSS, scratch directories, result tables.

Benchmarks compare a sparklog path with the plain operation it is built on, in the same run,
and print ratios next to absolute figures, so results can be compared across machines.
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

MiB = 1 << 20


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def vm_hwm_mib(pid: int | None) -> float:
    """Peak resident set size of another process, from /proc/<pid>/status (VmHWM), in MiB;
    NaN when there is no such process (any more)."""
    return _status_mib(pid, "VmHWM")


def vm_rss_mib(pid: int | None) -> float:
    """Resident set size of another process now (VmRSS), in MiB; NaN without the process."""
    return _status_mib(pid, "VmRSS")


def _status_mib(pid: int | None, field: str) -> float:
    try:
        status = Path(f"/proc/{pid}/status").read_text() if pid is not None else ""
    except OSError:
        status = ""
    for line in status.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int | None, thread: int | None = None, *, user_only: bool = False) -> float:
    """CPU seconds (user + system, or user only) another process (or one of its threads: the
    main thread's id is the pid) used so far, from /proc; less sensitive than wall-clock time
    to what else the machine runs. User time leaves out the kernel's share, which write-back
    of earlier runs' data can inflate."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    fields = _stat_fields(Path(path))
    ticks = int(fields[11]) + (0 if user_only else int(fields[12]))
    return ticks / os.sysconf("SC_CLK_TCK")


def _stat_fields(path: Path) -> list[str]:
    """The fields of a /proc stat file after the command name (field 3 of proc(5) first:
    the state, then the parent pid; utime and stime are 11 and 12 here)."""
    return path.read_text().rsplit(")", 1)[1].split()


def spark_cpu_seconds(jvm_pid: int, broker_pid: int | None) -> dict[str, dict[int, float]]:
    """CPU seconds so far, per process, of the driver JVM, of its Python workers (its
    descendants: the planner, the source runner, the executor workers) and of the broker."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = _stat_fields(entry / "stat")
        except OSError:  # the process ended meanwhile
            continue
        parents[int(entry.name)] = int(fields[1])
        used[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick

    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == jvm_pid:
                return True
        return False

    return {"jvm": {jvm_pid: used.get(jvm_pid, 0.0)},
            "python workers": {pid: t for pid, t in used.items() if descends(pid)},
            "broker": {pid: t for pid, t in used.items() if pid == broker_pid}}


class Stopwatch:
    """Adds up the wall-clock time spent inside ``with stopwatch:`` blocks."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __enter__(self) -> Stopwatch:
        self._started = time.perf_counter()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.seconds += time.perf_counter() - self._started


class Row(tuple[str, ...]):
    """One table row: its cells, already formatted."""

    def __new__(cls, *cells: str) -> Row:
        return super().__new__(cls, cells)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    """Print aligned columns: the first left-aligned (labels), the others right-aligned."""
    table = [tuple(headers), *(tuple(row) for row in rows)]
    widths = [max(len(row[i]) if i < len(row) else 0 for row in table)
              for i in range(len(headers))]
    table.insert(1, tuple("-" * w for w in widths))
    for row in table:
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                        for i, (cell, w) in enumerate(zip(row, widths, strict=False))).rstrip())


@contextmanager
def scratch_dir(parent: str | None, prefix: str) -> Iterator[Path]:
    """A fresh directory under ``parent`` (default: the system temp dir), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def create_topic(bootstrap: str, name: str, partitions: int) -> str:
    """Create ``name`` with ``partitions`` partitions (confluent-kafka's admin client)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions)])[name].result(30)
    return name


def start_spark(app: str, **conf: str) -> Any:
    """The benchmarks' ``local[2]`` session (no UI, 2 GiB driver), with ``conf`` added."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.master("local[2]").appName(app)
               .config("spark.ui.enabled", "false").config("spark.driver.memory", "2g")
               .config("spark.ui.showConsoleProgress", "false"))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
