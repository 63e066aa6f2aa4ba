"""The write task's half of the exactly-once sink: every record of the task in one Kafka
transaction, left open for the driver to commit (Flink's KafkaWriter, precommit stage).

Invariants:
- The transactional id is ``<prefix>-<partition id>-<attempt number>`` of the Spark task:
  the same ids serve every micro-batch (nothing accumulates at the coordinator), and a
  retried task or stage reuses or adds an id per attempt, never one per batch.
- ``init_transactions`` fences any earlier producer of the id and aborts its open
  transaction: a zombie of an earlier attempt can neither write into nor commit this one.
- ``finish`` returns only once every record is acknowledged inside the transaction; it then
  reads the transaction's producer id and epoch from its coordinator (DescribeTransactions:
  confluent-kafka does not expose them) and reports them in the commit message. The
  transaction stays open when the producer is destroyed (librdkafka 2.16 sends no EndTxn
  on destroy; ``tests/test_spark_exactly_once.py`` would see it if that changed).
- A failed task aborts its transaction at once (best effort: the driver aborts whatever
  is left open of its prefix when it commits or aborts the batch).
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException
from pyspark import TaskContext

from sparklog.client.kafka import KafkaClient
from sparklog.client.settings import RetryPolicy
from sparklog.client.transactions import ONGOING, describe_transaction
from sparklog.datasource.write.commit_intents import SinkTransaction
from sparklog.datasource.write.commit_message import SinkCommitMessage
from sparklog.datasource.write.producer import SinkDeliveryError, TaskProducer
from sparklog.datasource.write.write_options import SinkSpec

log = logging.getLogger("sparklog.sink")

INIT_TIMEOUT_S = 60.0
"""How long a task waits for its producer's transactional id to be initialised."""
ABORT_TIMEOUT_S = 10.0
RETRY = RetryPolicy(timeout_s=60.0, backoff_s=0.2)


def task_transactional_id(prefix: str) -> str:
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("the exactly-once sink writes from Spark tasks only")
    return f"{prefix}-{context.partitionId()}-{context.attemptNumber()}"


class TransactionalTaskProducer(TaskProducer):
    """A ``TaskProducer`` whose records all go into one transaction left open at ``finish``."""

    def __init__(self, spec: SinkSpec) -> None:
        assert spec.transactional_id_prefix is not None
        self._transactional_id = task_transactional_id(spec.transactional_id_prefix)
        super().__init__(spec, self._transactional_id)
        try:
            self._producer.init_transactions(INIT_TIMEOUT_S)
            self._producer.begin_transaction()
        except KafkaException as error:
            raise SinkDeliveryError(
                f"cannot start a transaction as {self._transactional_id!r} on "
                f"{spec.bootstrap}: {error.args[0].str()}") from None

    def finish(self) -> SinkCommitMessage:
        message = super().finish()
        with KafkaClient(self._spec.client_config(), RETRY) as client:
            state = describe_transaction(client, self._transactional_id)
        if state.state != ONGOING:
            raise SinkDeliveryError(
                f"transaction {self._transactional_id!r} is {state.state}, not open, after "
                "its records were sent: another producer with this id fenced this task")
        transaction = SinkTransaction(self._transactional_id, state.producer_id,
                                      state.producer_epoch, message.records)
        return SinkCommitMessage(message.records, message.bytes, transaction)

    def abandon(self) -> None:
        try:
            self._producer.abort_transaction(ABORT_TIMEOUT_S)
        except KafkaException as error:
            log.info("sparklog sink: could not abort %s after the task failed (%s); the driver "
                     "aborts it", self._transactional_id, error.args[0].str())
        super().abandon()
