"""Exactly-once appends of Spark DataFrames into Delta tables (delta-rs commits, no Delta jars).

``write_batch_exactly_once(df, batch_id, table_path, app_id)`` is the ``foreachBatch`` helper;
``DeltaSink`` is the same machinery for callers with several txn ids per batch.
"""

from sparklog.delta.schema import SchemaChangeError
from sparklog.delta.sink import BatchResult, DeltaSink, write_batch_exactly_once

__all__ = ["BatchResult", "DeltaSink", "SchemaChangeError", "write_batch_exactly_once"]
