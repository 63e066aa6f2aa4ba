"""Spark's leftover of a driver killed while it wrote a query's first offsets, which keeps
the query from ever starting again, and its removal before a start.

Spark writes each offsets-log entry to a temporary file ``.<batch>.<uuid>.tmp`` and then
renames it; a SIGKILL between the two leaves the temporary file, which Spark never reads.
Since Spark 4.1 (SPARK-53103, ``spark.sql.streaming.verifyCheckpointDirectoryEmptyOnStart``)
a query that starts at batch 0 refuses an offsets directory that is not empty
(STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY), so a query killed while it wrote its first
batch's offsets cannot start again from that checkpoint. Spark's check runs before any data
source is created, so no source or sink can clear it: call ``clear_interrupted_first_batch``
before ``start()`` (the jobs do).

Invariants:
- Files are deleted only when the offsets directory holds nothing but such temporary files:
  no batch has offsets, so the query never got past its first offsets write, and nothing
  deleted was ever an entry of the log. Call it only while the query is stopped.
- Only a local checkpoint (a path or a ``file:`` URI) is looked at; elsewhere nothing is
  touched. Each deletion is logged.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

log = logging.getLogger(__name__)

_TEMPORARY = re.compile(r"\.\d+\.[0-9a-f-]+\.tmp")


def clear_interrupted_first_batch(checkpoint_location: str) -> list[Path]:
    """Delete the temporary files a driver killed during its first offsets write left in
    ``<checkpoint_location>/offsets`` (see the invariants); the paths deleted."""
    scheme, sep, rest = checkpoint_location.partition("://")
    if sep and scheme.lower() != "file":
        return []
    offsets = Path(rest if sep else checkpoint_location.removeprefix("file:")) / "offsets"
    try:
        entries = list(offsets.iterdir())
    except OSError:  # no such directory yet: a new checkpoint
        return []
    if not entries or not all(_TEMPORARY.fullmatch(entry.name) for entry in entries):
        return []
    for entry in entries:
        entry.unlink(missing_ok=True)
        log.warning("deleted %s, left by a driver killed while Spark wrote the query's first "
                    "offsets (Spark would refuse to start the query with it)", entry)
    return entries
