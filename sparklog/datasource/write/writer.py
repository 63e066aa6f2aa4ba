"""The sparklog sink's Spark writers: ``df.write`` (batch) and ``df.writeStream`` (streaming).

Both are Arrow writers: a task receives its rows as ``pyarrow.RecordBatch``es and hands them
to one ``TaskProducer``.

Invariants:
- The constructors run on the driver and raise every error found without a broker (options,
  producer settings, the input schema) before any task starts. They keep only a picklable
  ``SinkSpec``: the writer is pickled to the tasks, and a streaming writer is re-created in a
  fresh process for each micro-batch's commit.
- ``write`` returns a ``SinkCommitMessage`` only when the broker acknowledged every record of
  the task; otherwise it raises and the task fails (Spark retries it or fails the job).
- Guarantee: at-least-once. A retried task or a re-run micro-batch sends its records again
  (a new producer session, so the broker cannot recognise them as duplicates), and records
  acknowledged before a failure stay in the topic. Exactly-once needs transactions.
- ``commit`` publishes nothing (records are visible once acknowledged): it logs the totals
  at INFO on the ``sparklog.sink`` logger; ``abort`` logs what the finished tasks left in
  the topics, at WARNING.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from sparklog.datasource.write.producer import SinkCommitMessage, TaskProducer, check_config
from sparklog.datasource.write.write_options import SinkSpec, sink_spec

log = logging.getLogger("sparklog.sink")
if log.level == logging.NOTSET:
    # Spark's Python worker logging (spark.sql.pyspark.worker.logging.enabled) and any
    # handler a user installs then see the totals; without a handler, INFO is not printed.
    log.setLevel(logging.INFO)


def _totals(messages: Sequence[WriterCommitMessage | None], spec: SinkSpec) -> str:
    done = [m for m in messages if isinstance(m, SinkCommitMessage)]
    records = sum(m.records for m in done)
    nbytes = sum(m.bytes for m in done)
    where = f"topic {spec.topic!r}" if spec.topic is not None else "the topics of column topic"
    return (f"{records} records ({nbytes} key+value bytes) from {len(done)} of "
            f"{len(messages)} tasks to {where}")


class _SinkWriter:
    """What the batch and the streaming writer share: validation and the task's write."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self._spec = sink_spec(options, schema)
        check_config(self._spec.producer_config)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        producer: TaskProducer | None = None  # none for a task without rows
        for batch in iterator:
            if batch.num_rows:
                producer = producer or TaskProducer(self._spec)
                producer.send(batch)
        return producer.finish() if producer else SinkCommitMessage(records=0, bytes=0)


class SparklogBatchWriter(_SinkWriter, DataSourceArrowWriter):
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("sparklog sink: write committed: %s", _totals(messages, self._spec))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("sparklog sink: write aborted; the finished tasks wrote %s, which stay "
                    "in the topics with whatever the failed tasks sent (at-least-once)",
                    _totals(messages, self._spec))


class SparklogStreamWriter(_SinkWriter, DataSourceStreamArrowWriter):
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("sparklog sink: micro-batch %d committed: %s", batchId,
                 _totals(messages, self._spec))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("sparklog sink: micro-batch %d aborted; the finished tasks wrote %s, "
                    "which stay in the topics with whatever the failed tasks sent, and are "
                    "sent again when the batch is re-run (at-least-once)", batchId,
                    _totals(messages, self._spec))
