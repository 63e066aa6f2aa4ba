"""Which Python Spark's workers run, and whether it can import sparklog.

Spark runs the data source in Python worker processes started with ``spark.pyspark.python``,
else ``$PYSPARK_PYTHON``, else ``python3`` from ``PATH``: not necessarily the interpreter of
the driver. When that Python lacks sparklog, Spark fails later with
``DATA_SOURCE_NOT_FOUND`` (the format lookup) or ``No module named 'sparklog'`` (a task), far
from the cause; ``check_worker_python`` says so first, naming the interpreter and the fix.

Invariants:
- The check runs only for local masters (``local``, ``local[N]``...), where the workers run
  on this machine; a cluster's executors are the deployment's business.
- The driver's own interpreter passes without a process being started; another one is
  asked once (``python -c "import pyspark_sparklog"``: the module Spark's format lookup
  imports, which needs sparklog and pyspark both, from the driver's working directory as
  the local workers have it), and a failure raises ``WorkerPythonError``
  whose message names the interpreter, ``PYSPARK_PYTHON`` and the README section.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

README_SECTION = "README.md, 'How Spark finds sparklog'"


class WorkerPythonError(RuntimeError):
    """Spark's Python workers cannot import sparklog; the message says how to fix it."""


def worker_python(spark: SparkSession) -> str:
    """The interpreter Spark starts its Python workers with."""
    configured = spark.conf.get("spark.pyspark.python", None)
    return configured or os.environ.get("PYSPARK_PYTHON") or "python3"


def check_worker_python(spark: SparkSession) -> None:
    """Raise ``WorkerPythonError`` when a local Spark's workers cannot import sparklog."""
    if not spark.sparkContext.master.startswith("local"):
        return
    python = worker_python(spark)
    resolved = shutil.which(python) or python
    # paths, not resolved links: every virtualenv links the same binary, with its own packages
    if os.path.abspath(resolved) == os.path.abspath(sys.executable):
        return
    try:
        found = subprocess.run([resolved, "-c", "import pyspark_sparklog"],
                               capture_output=True, timeout=60).returncode == 0
    except OSError:
        found = False
    if not found:
        raise WorkerPythonError(
            f"Spark's Python workers run {python!r}, which cannot import sparklog; set "
            f"PYSPARK_PYTHON={sys.executable} (or activate the virtualenv sparklog is "
            f"installed in) before Spark starts. See {README_SECTION}.")
