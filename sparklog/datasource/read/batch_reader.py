"""``spark.read.format("sparklog")``: a bounded read of the offset ranges the options give.

Invariants:
- Options are parsed (and refused) when the reader is built, before any I/O.
- ``partitions`` resolves the start (default earliest) and end (default latest) offsets of
  the subscribed partitions once, on the driver, and plans one task per range (split by
  ``minPartitions`` / ``maxRecordsPerPartition``); a start after its end is an error naming
  the partition. The reader keeps no connection afterwards: Spark pickles it to executors.
- Typed columns' schemas are resolved once, when the reader is built (``typed_columns``),
  and shipped in every task; ``read`` then decodes them (``typed_columns.read_typed``).
- ``read`` yields exactly the records of the task's range that exist (see ``fetcher``),
  or with ``latestPerKey`` the latest record of each key among them, tombstoned and keyless
  ones left out (see ``latest_per_key``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from sparklog.datasource.options import OptionError
from sparklog.datasource.read.offset_reader import OffsetReader
from sparklog.datasource.read.planning import KafkaInputPartition, plan
from sparklog.datasource.read.read_options import parse_read_options
from sparklog.datasource.read.typed_options import Decoding
from sparklog.datasource.worker_heap import settle


class SparklogBatchReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = parse_read_options(options, streaming=False)
        self.decoding: Decoding | None = None
        if self.options.typed is not None:
            from sparklog.datasource.read.typed_columns import resolve

            self.decoding = resolve(self.options.typed, self.options.subscription, schema,
                                    self.options.include_headers)

    def partitions(self) -> list[InputPartition]:
        options = self.options
        with OffsetReader(options) as offsets:
            tps = offsets.partitions()
            start = offsets.resolve(options.starting, tps)
            end = offsets.resolve(options.ending, tps)
            for tp in tps:
                if start[tp] > end[tp]:
                    raise OptionError(f"the starting offset {start[tp]} of {tp} is after its "
                                      f"ending offset {end[tp]}: check the starting and "
                                      "ending options")
            leaders = offsets.leaders(tps)
        settings = replace(options.task_settings, decoding=self.decoding)
        return list(plan(start, end, leaders, settings, options.min_partitions,
                         options.max_records_per_partition))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KafkaInputPartition):  # Spark's stand-in for no tasks
            return iter(())
        if partition.settings.latest_per_key:
            from sparklog.datasource.read.latest_per_key import read_latest_per_key as read
        else:
            from sparklog.datasource.read.fetcher import read_partition as read  # executors only
        settle()
        if partition.settings.decoding is not None:
            from sparklog.datasource.read.typed_columns import read_typed

            return read_typed(partition, read)
        return read(partition)
