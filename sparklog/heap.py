"""Moving what a process holds now out of the cyclic garbage collector's reach.

Long-lived objects (a broker's partition logs, the modules of a Spark Python worker) cost
every full collection a walk over them, however little garbage there is. ``freeze_alive``
moves them into the permanent generation (``gc.freeze``), which collections skip.

Invariants:
- It collects first, so only objects alive at that moment are frozen, no garbage.
- Freezing hides objects from the cyclic collector only: refcounting still frees a frozen
  object that is dropped later (only a frozen cycle dropped later stays), and everything
  made afterwards is collected as before.
"""

from __future__ import annotations

import gc


def freeze_alive() -> None:
    """Collect, then freeze every object still alive."""
    gc.collect()
    gc.freeze()
