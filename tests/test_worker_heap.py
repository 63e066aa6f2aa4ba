"""A Python worker that ran sparklog's tasks keeps its modules out of the full collection
PySpark's daemon runs after every task (``datasource/worker_heap``).

What a user relies on: the per-task collection walks what the tasks made since, not the tens
of thousands of objects of PySpark's, pyarrow's, confluent-kafka's and sparklog's modules
(the CPU it spent there was most of a sparklog micro-batch's Python work); garbage made
after a settle is still collected (memory stays bounded); settling again freezes nothing
unless the worker imported modules since. Each case runs in a child process, a worker's
stand-in, so the test process's own heap is left alone.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

WORKER = """
import gc, json, sys, weakref
import pyarrow, pyspark.sql.datasource
import sparklog.datasource.read.fetcher, sparklog.datasource.write.producer
from sparklog.datasource.worker_heap import settle

out = {"walked_before": len(gc.get_objects())}
settle()
out["walked_after"] = len(gc.get_objects())
out["frozen"] = gc.get_freeze_count()

class Node:
    pass

def cycle():
    node = Node()
    node.me = node  # freed by the cyclic collector only
    return weakref.ref(node)

garbage = cycle()
gc.collect()
out["cycle_collected"] = garbage() is None

settle()
out["frozen_again"] = gc.get_freeze_count()
import xml.dom.minidom  # a module this process had not imported
settle()
out["frozen_after_import"] = gc.get_freeze_count()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def seen() -> dict[str, object]:
    """What one worker stand-in saw (both tests read the same run)."""
    done = subprocess.run([sys.executable, "-c", WORKER], capture_output=True, text=True,
                          timeout=120, check=True)
    return json.loads(done.stdout)


def test_the_collection_after_a_task_walks_only_what_came_after(
        seen: dict[str, object]) -> None:
    walked_before, walked_after = seen["walked_before"], seen["walked_after"]
    assert isinstance(walked_before, int) and isinstance(walked_after, int)
    assert walked_before > 20_000  # the modules a sparklog task loads
    assert walked_after < walked_before // 20, seen
    assert seen["cycle_collected"], "garbage made after a settle must still be collected"


def test_settling_again_freezes_only_after_new_imports(seen: dict[str, object]) -> None:
    frozen, again, after_import = (seen["frozen"], seen["frozen_again"],
                                   seen["frozen_after_import"])
    assert isinstance(frozen, int) and isinstance(again, int)
    assert isinstance(after_import, int)
    assert again == frozen, "a settle without new modules must freeze nothing"
    assert after_import > again
