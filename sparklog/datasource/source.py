"""The DataSource class: the format name, the schema, and which reader or writer serves.

Invariants:
- The read schema is Spark's Kafka source schema (``schema.source_schema``), with the
  ``headers`` column only when ``includeHeaders`` is true; a user-given schema is refused.
  With ``valueFormat`` / ``keyFormat``, that column is the struct of its schema, resolved
  (from the registry) at ``load()``.
- Readers and writers are built lazily here and import their modules on demand, so the
  driver's planning worker loads only what the query uses.
- Option problems (unknown, conflicting, badly typed) raise ``OptionError`` naming the
  option and what is allowed, at ``load()``: Spark calls ``schema`` in the driver then
  (never for writes), so the read options are validated there; what depends on batch or
  stream is checked when the reader is built. PySpark's streaming source runner hides an
  error raised by ``streamReader`` behind its own (``UnboundLocalError`` about 'reader'), so
  a stream reader that cannot be built is returned as ``FailedStreamReader``, which raises
  the error from the first call Spark makes, where Spark reports it.
- ``load()`` also checks the cluster (``client.kafka.check_bootstrap``): when no bootstrap
  server accepts a connection for ``BOOTSTRAP_TIMEOUT_S``, or one refuses the login or
  speaks another security protocol, it fails there naming the servers, not a minute later
  in the first batch.
- ``df.write`` appends: save mode ``overwrite`` is refused (a topic cannot be overwritten,
  as Spark's Kafka sink refuses it). Spark itself refuses the other modes, including the
  default ``errorifexists``, for every Python data source, so writes say
  ``.mode("append")``. A streaming write's ``overwrite`` (complete output mode) appends
  each batch, as Spark's Kafka sink does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

from sparklog.datasource.schema import source_schema

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType


class SparklogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "sparklog"

    def schema(self) -> StructType:
        from sparklog.client.kafka import check_bootstrap
        from sparklog.datasource.read.read_options import parse_read_options

        options = parse_read_options(self.options, streaming=None)
        check_bootstrap(options.client)
        if options.typed is None:
            return source_schema(options.include_headers)
        from sparklog.datasource.read.typed_columns import resolve

        decoding = resolve(options.typed, options.subscription)
        return source_schema(options.include_headers, decoding.arrow_type("key"),
                             decoding.arrow_type("value"))

    def reader(self, schema: StructType) -> DataSourceReader:
        from sparklog.datasource.read.batch_reader import SparklogBatchReader

        return SparklogBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from sparklog.datasource.read.stream_reader import (
            FailedStreamReader,
            SparklogStreamReader,
        )

        try:
            return SparklogStreamReader(self.options, schema)
        except Exception as error:
            return FailedStreamReader(error)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            from sparklog.datasource.options import OptionError

            raise OptionError(
                'save mode "overwrite" is not allowed: a topic cannot be overwritten, the '
                'sparklog sink appends records to it; use .mode("append")')
        from sparklog.datasource.write.writer import SparklogBatchWriter

        return SparklogBatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from sparklog.datasource.write.writer import SparklogStreamWriter

        return SparklogStreamWriter(self.options, schema)
