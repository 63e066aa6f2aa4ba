"""Named fault points: deterministic places where a crash test can stop a job and kill it.

``SPARKLOG_FAULT_POINT=name:batch[,name:batch...]`` makes ``fault_point(name, batch)`` pause
the process forever once it reaches that point for that batch (``name:*``: for any batch),
after creating the file named by ``SPARKLOG_FAULT_MARKER`` (when set) with ``name:batch`` in
it. A test waits for the marker,
then SIGKILLs the job's process group: the job dies exactly there, not somewhere near.

Invariant: with the variable unset (production), ``fault_point`` only reads one environment
variable and returns.
"""

from __future__ import annotations

import logging
import os
import time

log = logging.getLogger(__name__)

POINT_ENV = "SPARKLOG_FAULT_POINT"
MARKER_ENV = "SPARKLOG_FAULT_MARKER"


def _armed() -> set[tuple[str, str]]:
    spec = os.environ.get(POINT_ENV, "")
    points = set()
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, batch = item.partition(":")
        points.add((name, batch))
    return points


def fault_point(name: str, batch: int | str) -> None:
    """Pause here forever when ``name:batch`` is armed; otherwise return at once."""
    if not os.environ.get(POINT_ENV):
        return
    armed = _armed()
    if (name, str(batch)) not in armed and (name, "*") not in armed:
        return
    log.warning("fault point %s:%s reached: pausing until killed", name, batch)
    marker = os.environ.get(MARKER_ENV)
    if marker:
        tmp = f"{marker}.tmp"
        with open(tmp, "w") as f:
            f.write(f"{name}:{batch}\n")
        os.replace(tmp, marker)
    while True:
        time.sleep(3600)
