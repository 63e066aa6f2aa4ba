"""The jobs' SparkSession and their ``sparklog`` reads.

Invariants:
- ``spark-local.conf`` settings apply under what Spark was already given: a setting from
  ``spark-submit`` (or ``--master``) wins.
- The session has the ``sparklog`` format and the listener that commits a ``groupId``
  stream's last batch when it stops registered; Python workers run this interpreter unless
  ``PYSPARK_PYTHON`` says otherwise.
- Every ``sparklog`` read includes headers and carries the ``source.*`` settings.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from sparklog.jobs.settings import JobSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrameReader, SparkSession
    from pyspark.sql.streaming import DataStreamReader


def build_spark(app_name: str, settings: JobSettings, master: str | None = None) -> SparkSession:
    """A SparkSession with spark-local.conf applied under what Spark was already given."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    from sparklog.datasource import register

    given = SparkConf()  # spark-submit's settings arrive as spark.* system properties
    builder = SparkSession.builder.appName(app_name)
    for key, value in settings.spark.items():
        if not given.contains(key):
            builder = builder.config(key, value)
    if master:
        builder = builder.master(master)
    spark = builder.getOrCreate()
    register(spark)  # the format, and the final synchronous --group-id commit at stop
    return spark


def sparklog_reader(reader: DataFrameReader | DataStreamReader, settings: JobSettings,
                    bootstrap: str, topic: str) -> DataFrameReader | DataStreamReader:
    reader = (reader.format("sparklog").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("includeHeaders", "true"))
    for key, value in settings.source_options().items():
        reader = reader.option(key, value)
    return reader
