"""Keep a Python worker's long-lived objects out of the full collection Spark runs after
every task.

PySpark's daemon runs ``gc.collect()`` in a reused Python worker after each task. That
collection walks every object the worker holds: PySpark's, pyarrow's, confluent-kafka's and
sparklog's modules and classes, some 64,000 objects in a worker that ran sparklog's read and
write tasks, about 25 ms of CPU after every task (a sparklog task's own work is 1 to 2 ms),
on the same cores as the driver's commit of the micro-batch. ``settle`` moves what is alive
into the permanent generation (``sparklog.heap.freeze_alive``), which collections
skip.

Invariants:
- ``settle`` runs at the start of sparklog's read and write tasks. It collects and freezes
  only when the worker imported modules since it last did (the first sparklog task of a
  worker, and a task of a kind, or a code path, that worker had not run), else it returns
  at once: a worker settles a bounded number of times (once per new set of modules), and
  in between nothing is frozen.
- What is frozen is what is alive (``freeze_alive`` collects first): modules and classes
  mostly, and the current task's few objects, which refcounting still frees when the task
  drops them. Memory stays bounded: what a settle can keep beyond its use is the cyclic
  part of one task's objects, once per settle.
- Everything made after a settle (each task's garbage, pooled producers) is collected as
  before.
"""

from __future__ import annotations

import sys

from sparklog.heap import freeze_alive

_modules_at_settle = 0  # len(sys.modules) when this process last settled; 0: never


def settle() -> None:
    """Freeze what the worker holds now, if it imported modules since it last did."""
    global _modules_at_settle
    if len(sys.modules) == _modules_at_settle:
        return
    freeze_alive()
    _modules_at_settle = len(sys.modules)
