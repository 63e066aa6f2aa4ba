"""A job as a program: logging, settings, a SparkSession, and a clean stop on SIGTERM/Ctrl-C.

Invariants:
- Settings are loaded and ``check``-ed before Spark starts, so a bad setting fails at once;
  a failure the user can act on (a setting, a ``--schema`` that does not parse, a topic that
  is missing or cannot be created, a registry subject without a usable schema
  (``RegistrySchemaError``), a refused login or a client of another security protocol
  than the listener's, ``client.failures.ConnectionFailure``, and no bootstrap server
  answering, raised by the job or carried in the error of a Spark query whose sparklog
  source or sink raised it) ends the job with one line naming it and exit code 1, not a
  traceback.
- The session is stopped however the job ends.
- ``run_job`` (the long-running jobs) handles SIGTERM and SIGINT from when the session is up
  (it replaces PySpark's SIGINT handler, which raises KeyboardInterrupt into whatever py4j
  call is running): the first signal requests a stop that the job polls between two steps
  (``sparklog.signals.Stop``), and the job then exits 0 with one log line of its own; a
  second signal ends the process at once. A stop that cuts a batch short is not an error of
  the job (the batch is replayed at the next start), so ``quiet_interrupted_batch`` silences
  Spark's and py4j's reports of it before the query is stopped.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from sparklog.client.admin import TopicError
from sparklog.client.failures import ConnectionFailure
from sparklog.dlq.parse import ParseSpec, SchemaError
from sparklog.jobs.registry_values import RegistrySchemaError
from sparklog.jobs.settings import JobSettings
from sparklog.jobs.spark import build_spark
from sparklog.signals import Stop, stop_on_signals

if TYPE_CHECKING:
    import argparse

    from pyspark.sql import SparkSession

_CLIENT_FAILURE = re.compile(r"^sparklog\.client\.(?:failures\.ConnectionFailure: |"
                             r"errors\.KafkaClientError: (?=no broker answered at ))(.*)$",
                             re.MULTILINE)
"""A refused connection a Spark error carries in the Python traceback it quotes."""

JobRun = Callable[["SparkSession", "argparse.Namespace", JobSettings, Stop], int]


def setup_logging(level: str = "INFO") -> None:
    """The job's log lines on stderr at ``level`` (``-v`` / ``--log-level``); py4j's (one
    line per call at DEBUG) at WARNING whatever the level."""
    logging.basicConfig(level=getattr(logging, level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)


def quiet_interrupted_batch(spark: SparkSession) -> None:
    """Silence Spark's (JVM) and py4j's logs from here on: called once a stop is requested,
    before stopping a query, so the batch the stop interrupts is not reported as failing."""
    spark.sparkContext.setLogLevel("OFF")
    logging.getLogger("py4j").setLevel(logging.CRITICAL + 1)


@contextmanager
def spark_job(app_name: str, args: argparse.Namespace,
              check: Callable[[JobSettings], object] | None = None,
              ) -> Iterator[tuple[SparkSession, JobSettings]]:
    """Logging, settings (``check`` refuses bad ones before Spark starts) and a session that
    is stopped at the end; a ``TopicError`` or ``ConnectionFailure`` (also one inside a
    Spark error) becomes the job's one-line failure."""
    setup_logging(args.log_level)
    settings = JobSettings.load(args.conf_dir, args.set)
    if check is not None:
        check(settings)
    spark = build_spark(app_name, settings, args.master)
    try:
        if args.schema:
            ParseSpec.from_ddl(args.schema)  # a bad --schema fails now, before any work
        yield spark, settings
    except (TopicError, SchemaError, RegistrySchemaError, ConnectionFailure) as error:
        raise SystemExit(str(error)) from None
    except Exception as error:
        cause = _CLIENT_FAILURE.search(str(error))
        if cause is None:
            raise
        raise SystemExit(cause.group(1)) from None
    finally:
        spark.stop()


def run_job(app_name: str, args: argparse.Namespace, run: JobRun,
            check: Callable[[JobSettings], object] | None = None) -> int:
    """The long-running jobs' main: ``run`` under ``spark_job`` with a stop on signals."""
    with spark_job(app_name, args, check) as (spark, settings), \
            stop_on_signals(exit_on_second=True) as stop:
        return run(spark, args, settings, stop)
