"""The ``sparklog`` PySpark data source (Python Data Source API, pyspark 4.2).

``spark.read`` / ``spark.readStream`` / ``df.write`` / ``df.writeStream``
``.format("sparklog")`` with the options and schema of Spark's built-in Kafka source and
sink. The module ``pyspark_sparklog`` registers it automatically; ``register(spark)`` does it
explicitly.

Layout: ``source`` (the DataSource class), ``schema`` and ``options`` (shared by both
sides), ``read/`` (readers), ``write/`` (writers), ``group_offsets`` (committing a
``groupId`` stream's offsets, which the stream reader does) and ``group_commits`` (the
driver's listener that adds the final commit when a query stops). The source talks to
brokers through ``sparklog.client`` and commits through ``sparklog.offsets``; it never
imports the broker, storage or coordinator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from py4j.protocol import Py4JError

from sparklog.datasource.source import SparklogDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SparklogDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Register the ``sparklog`` format on ``spark`` unless auto-registration already did
    (so Spark does not warn that it replaced it), and install the listener that commits a
    ``groupId`` stream's last batch synchronously when the query stops (the reader commits
    every batch by itself; only code in the driver sees the stop, so call this once per
    session).

    First, for a local master, it checks that Spark's Python workers can import sparklog
    (``workers.check_worker_python``): without that, every query would fail later with an
    error that does not name the cause."""
    from sparklog.datasource.group_commits import install
    from sparklog.datasource.workers import check_worker_python

    check_worker_python(spark)
    if not _registered(spark):
        spark.dataSource.register(SparklogDataSource)
    install(spark)


def _registered(spark: SparkSession) -> bool:
    """Whether the session knows the format already (statically, by auto-registration, or
    by an earlier ``register``); False where the JVM cannot be asked (Spark Connect)."""
    try:
        manager = spark._jsparkSession.sessionState().dataSourceManager()
        return bool(manager.dataSourceExists(SparklogDataSource.name()))
    except (AttributeError, Py4JError):  # not classic PySpark: registering again is harmless
        return False
