"""The sparklog sink's Spark writers: ``df.write`` (batch) and ``df.writeStream`` (streaming).

Both are Arrow writers: a task receives its rows as ``pyarrow.RecordBatch``es and hands them
to one ``TaskProducer``.

Invariants:
- The constructors run on the driver and raise every error found without a broker (options,
  producer settings, the input schema) before any task starts, then check the cluster
  (``client.kafka.check_bootstrap``): no bootstrap server accepting a connection within
  ``BOOTSTRAP_TIMEOUT_S``, a refused login or another security protocol fails the write
  (or the stream's start) there, naming the servers. A streaming writer checks only at
  the stream's start (``stream_start``), not at every micro-batch. They keep only a picklable
  ``SinkSpec``: the writer is pickled to the tasks, and a streaming writer is re-created in a
  fresh process for each micro-batch's commit.
- ``valueFormat`` / ``keyFormat`` avro or json: the constructor resolves the schemas with
  the registry (``encodings``) once the checks without a broker passed, before the
  cluster's; a task encodes those columns slice by slice
  (``schemas.encode``) before its producer sees them, so both delivery guarantees send
  encoded values alike.
- ``write`` returns a ``SinkCommitMessage`` only when the broker acknowledged every record of
  the task; otherwise it raises and the task fails (Spark retries it or fails the job).
- ``deliveryGuarantee=at-least-once`` (the default): a retried task or a re-run micro-batch
  sends its records again (a new producer session, so the broker cannot recognise them as
  duplicates), and records acknowledged before a failure stay in the topic. ``commit``
  publishes nothing (records are visible once acknowledged).
- ``deliveryGuarantee=exactly-once``: each task's records go into a transaction of its own
  (``transactional_producer``) that ``commit`` commits and ``abort`` aborts, with the
  streaming writer's commit intents in the checkpoint (``two_phase_commit``); its
  constructor, which Spark runs on the driver before every micro-batch, first finishes an
  intent a dead driver left. Readers see each record once with read_committed.
- ``commit`` logs the totals at INFO on the ``sparklog.sink`` logger; ``abort`` logs what
  it left in the topics, at WARNING.
- Spark builds a streaming writer twice per micro-batch, each time in a Python worker of
  the driver started for it or reused (to ship it to the tasks, and to commit), so this
  module imports only what every one of them needs: the tasks' producers, the protocol
  client and the exactly-once committer are imported where they are used (the commit
  messages' class lives in the light ``commit_message``).
- A writer's construction and a write task first settle their worker's heap
  (``worker_heap.settle``): PySpark collects a reused worker whole after each use.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from sparklog.datasource.worker_heap import settle
from sparklog.datasource.write.commit_message import SinkCommitMessage
from sparklog.datasource.write.write_options import SinkSpec, sink_spec
from sparklog.faults import fault_point

if TYPE_CHECKING:
    from sparklog.datasource.write.producer import TaskProducer
    from sparklog.datasource.write.two_phase_commit import TransactionCommitter

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

    streaming = False

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        settle()  # Spark builds a writer in a reused Python worker per micro-batch and commit
        self._spec = sink_spec(options, schema, streaming=self.streaming)
        self._check_cluster(options)

    def _check_cluster(self, options: Mapping[str, str]) -> None:
        from sparklog.client.kafka import check_bootstrap

        check_bootstrap(self._spec.client_config())

    def _committer(self) -> TransactionCommitter:
        from sparklog.datasource.write.two_phase_commit import TransactionCommitter

        spec = self._spec
        assert spec.transactional_id_prefix is not None
        return TransactionCommitter(spec.client_config(), spec.transactional_id_prefix,
                                    spec.checkpoint_location)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        producer: TaskProducer | None = None  # none for a task without rows
        encode = self._batch_encoder()
        settle()
        try:
            for batch in iterator:
                if batch.num_rows:
                    producer = producer or self._new_producer()
                    for part in (batch,) if encode is None else encode(batch):
                        producer.send(part)
            return producer.finish() if producer else SinkCommitMessage(records=0, bytes=0)
        except BaseException:
            if producer is not None:
                producer.abandon()
            raise

    def _batch_encoder(self) -> Callable[[pa.RecordBatch], Iterator[pa.RecordBatch]] | None:
        """valueFormat / keyFormat avro or json: the task's encoder of those columns."""
        spec = self._spec
        if spec.value_encoding is None and spec.key_encoding is None:
            return None
        from sparklog.datasource.write.encodings import batch_encoder

        return batch_encoder({"value": spec.value_encoding, "key": spec.key_encoding})

    def _new_producer(self) -> TaskProducer:
        from sparklog.datasource.write.producer import TaskProducer

        if self._spec.exactly_once:
            from sparklog.datasource.write.transactional_producer import (
                TransactionalTaskProducer,
            )

            return TransactionalTaskProducer(self._spec)
        return TaskProducer(self._spec)


class SparklogBatchWriter(_SinkWriter, DataSourceArrowWriter):
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self._spec.exactly_once:
            self._committer().commit_write(messages)
        log.info("sparklog sink: write committed: %s", _totals(messages, self._spec))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self._spec.exactly_once:
            self._committer().abort_write(messages)
            log.warning("sparklog sink: write aborted; its transactions are aborted, nothing "
                        "of it is visible to read_committed readers")
            return
        log.warning("sparklog sink: write aborted; the finished tasks wrote %s, which stay "
                    "in the topics with whatever the failed tasks sent (at-least-once)",
                    _totals(messages, self._spec))


class SparklogStreamWriter(_SinkWriter, DataSourceStreamArrowWriter):
    streaming = True

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        super().__init__(options, schema)
        if self._spec.exactly_once:
            self._committer().roll_forward()

    def _check_cluster(self, options: Mapping[str, str]) -> None:
        from sparklog.datasource.write.stream_start import check_at_stream_start

        check_at_stream_start(options, lambda: super(SparklogStreamWriter, self)
                              ._check_cluster(options))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self._spec.exactly_once:
            self._committer().commit_batch(messages, batchId)
        else:
            fault_point("sink_commit", batchId)
        log.info("sparklog sink: micro-batch %d committed: %s", batchId,
                 _totals(messages, self._spec))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self._spec.exactly_once:
            self._committer().abort_batch(messages, batchId)
            log.warning("sparklog sink: micro-batch %d aborted; nothing of it is visible to "
                        "read_committed readers", batchId)
            return
        log.warning("sparklog sink: micro-batch %d aborted; the finished tasks wrote %s, "
                    "which stay in the topics with whatever the failed tasks sent, and are "
                    "sent again when the batch is re-run (at-least-once)", batchId,
                    _totals(messages, self._spec))
