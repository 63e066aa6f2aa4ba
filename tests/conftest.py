"""Session-wide fixtures: one local SparkSession for the whole test run, and the check that
no test passes over an internal error of an in-process broker.

Invariants:
- Spark starts at most once per pytest session (it takes ~10 s), lazily, only when a test
  asks for ``spark``; its Python workers run this interpreter (PYSPARK_PYTHON), which has
  the package and its dependencies installed.
- A test during which sparklog code in this process logged a traceback or an "internal
  error" fails, as the broker-process fixtures fail on such a line in a broker's log: an
  in-process broker logs a crashing handler and closes the connection, the client
  reconnects, and the test would otherwise pass. A test that provokes one on purpose says
  so with ``@pytest.mark.internal_errors_expected``.
- Hypothesis runs without its per-example deadline (a timer: on a busy CI machine it fails
  examples for being slow, and speed is measured in ``bench/``, never asserted here).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator

import pytest
from hypothesis import settings

settings.register_profile("sparklog", deadline=None)
settings.load_profile("sparklog")

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("sparklog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


class _InternalErrors(logging.Handler):
    """Collects what the broker-process fixtures look for in a log: tracebacks and
    "internal error" lines."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if record.exc_info or "internal error" in message:
            self.found.append(f"{record.name}: {message}\n{self.format(record)}")


@pytest.fixture(autouse=True)
def _no_internal_errors(request: pytest.FixtureRequest) -> Iterator[None]:
    handler = _InternalErrors()
    logger = logging.getLogger("sparklog")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
    if handler.found and request.node.get_closest_marker("internal_errors_expected") is None:
        pytest.fail("sparklog logged an internal error during the test:\n"
                    + "\n".join(handler.found)[:6000], pytrace=False)
