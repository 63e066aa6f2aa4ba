"""The ``sparklog`` PySpark data source (Python Data Source API, pyspark 4.2).

``spark.read`` / ``spark.readStream`` / ``df.write`` / ``df.writeStream``
``.format("sparklog")`` with the options and schema of Spark's built-in Kafka source and
sink. The module ``pyspark_sparklog`` registers it automatically; ``register(spark)`` does it
explicitly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparklog.datasource.source import SparklogDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SparklogDataSource", "register"]


def register(spark: SparkSession) -> None:
    """Register the ``sparklog`` format on ``spark`` (auto-registration does this too) and
    install the listener that commits ``groupId`` streams' progress to their consumer group
    (only code in the driver can do that, so call this once per session)."""
    from sparklog.datasource.group_commits import install

    spark.dataSource.register(SparklogDataSource)
    install(spark)
