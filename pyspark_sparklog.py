"""Auto-registration shim: PySpark imports top-level ``pyspark_*`` modules that export
``DefaultSource`` and registers it under ``DefaultSource.name()`` (here ``"sparklog"``), so
``spark.readStream.format("sparklog")`` works without ``spark.dataSource.register``."""

from sparklog.datasource.source import SparklogDataSource as DefaultSource

__all__ = ["DefaultSource"]
