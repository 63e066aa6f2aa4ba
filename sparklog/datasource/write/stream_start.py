"""The streaming sink's cluster check at the stream's start, not at every micro-batch.

Spark builds a streaming writer twice per micro-batch (to plan the batch's tasks, and to
commit it), each time in a Python worker process of the driver (started for it or reused)
whose parent lives as long as the Spark application (the JVM, or the PySpark daemon it
forks workers from; in local mode the planning and the commit workers have one parent
each). A writer checks the cluster (``client.kafka.check_bootstrap``: a connection and a
Metadata round) only if no writer of the same query and settings did under the same
parent: a stream that cannot reach its cluster, or is refused, still fails at its start,
and its micro-batches then pay no connection of their own, nor fail because a broker was
down for a moment (their tasks' producers and the commit's client retry it).

Invariants:
- The mark is a file in the local temporary directory, named by a digest of the parent's
  process id and start time (a reused process id is another parent) and of the writer's
  options (its checkpoint location, servers and credentials: a query restarted with other
  settings is checked again). It is written only after a check passed.
- Without a ``checkpointLocation`` option, or where the parent's start time cannot be read
  (no ``/proc``), every writer checks.
- A query stopped and started again under the same parent with the same options is not
  checked again (its first micro-batch fails instead, after the clients' retries).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

MARKS_DIR = "sparklog-sink-checked"


def _parent_identity() -> str | None:
    """The parent process's id and start time (clock ticks since boot), or None."""
    parent = os.getppid()
    try:
        stat = Path(f"/proc/{parent}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces: count fields after its closing ')'.
    start_time = stat[stat.rindex(")") + 2:].split()[19]
    return f"{parent}-{start_time}"


def _mark(options: Mapping[str, str]) -> Path | None:
    parent = _parent_identity()
    if parent is None or not any(k.lower() == "checkpointlocation" for k in options):
        return None
    digest = hashlib.sha256(repr((parent, sorted(options.items()))).encode()).hexdigest()
    return Path(tempfile.gettempdir()) / MARKS_DIR / digest[:32]


def check_at_stream_start(options: Mapping[str, str], check: Callable[[], None]) -> None:
    """Run ``check`` unless a writer of this query and these options under this parent
    process already passed it."""
    mark = _mark(options)
    if mark is not None and mark.exists():
        return
    check()
    if mark is not None:
        mark.parent.mkdir(exist_ok=True)
        mark.touch()
