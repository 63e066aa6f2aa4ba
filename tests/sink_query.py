"""A streaming query from one sparklog topic into another, run as a child process by the
exactly-once kill tests: ``python sink_query.py BOOTSTRAP SOURCE SINK CHECKPOINT GUARANTEE``.

It reads everything available (``Trigger.AvailableNow``, ``maxOffsetsPerTrigger`` records
per micro-batch), writes key and value unchanged with ``deliveryGuarantee=GUARANTEE``, prints
``query started`` once the query runs, and exits 0 when it has caught up.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from sparklog.datasource.checkpoints import clear_interrupted_first_batch

MAX_OFFSETS_PER_TRIGGER = "300"


def main(bootstrap: str, source: str, sink: str, checkpoint: str, guarantee: str) -> None:
    spark = (SparkSession.builder.master("local[2]").appName("sink-query")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    stream = (spark.readStream.format("sparklog")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", MAX_OFFSETS_PER_TRIGGER)
              .load())
    clear_interrupted_first_batch(checkpoint)  # as a user's restart script would
    query = (stream.select("key", "value").writeStream.format("sparklog")
             .option("kafka.bootstrap.servers", bootstrap)
             .option("topic", sink)
             .option("deliveryGuarantee", guarantee)
             .option("checkpointLocation", checkpoint)
             .trigger(availableNow=True)
             .start())
    print("query started", flush=True)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
