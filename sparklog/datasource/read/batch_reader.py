"""``spark.read.format("sparklog")``: a bounded read of the offset ranges the options give.

Invariants:
- Options are parsed (and refused) when the reader is built, before any I/O.
- ``partitions`` resolves the start (default earliest) and end (default latest) offsets of
  the subscribed partitions once, on the driver, and plans one task per range (split by
  ``minPartitions`` / ``maxRecordsPerPartition``); a start after its end is an error naming
  the partition. The reader keeps no connection afterwards: Spark pickles it to executors.
- ``read`` yields exactly the records of the task's range that exist (see ``fetcher``),
  or with ``latestPerKey`` the latest record of each key among them, tombstoned and keyless
  ones left out (see ``latest_per_key``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from sparklog.datasource.options import OptionError
from sparklog.datasource.read.offset_reader import OffsetReader
from sparklog.datasource.read.planning import KafkaInputPartition, plan
from sparklog.datasource.read.read_options import parse_read_options


class SparklogBatchReader(DataSourceReader):
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = parse_read_options(options, streaming=False)

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
        return list(plan(start, end, leaders, options.task_settings, options.min_partitions,
                         options.max_records_per_partition))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KafkaInputPartition):  # Spark's stand-in for no tasks
            return iter(())
        if partition.settings.latest_per_key:
            from sparklog.datasource.read.latest_per_key import read_latest_per_key

            return read_latest_per_key(partition)
        from sparklog.datasource.read.fetcher import read_partition  # executors only

        return read_partition(partition)
