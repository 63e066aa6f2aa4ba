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

from sparklog.datasource.source import SparklogDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SparklogDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Register the ``sparklog`` format on ``spark`` (auto-registration does this too) and
    install the listener that commits a ``groupId`` stream's last batch synchronously when
    the query stops (the reader commits every batch by itself; only code in the driver sees
    the stop, so call this once per session)."""
    from sparklog.datasource.group_commits import install

    spark.dataSource.register(SparklogDataSource)
    install(spark)
