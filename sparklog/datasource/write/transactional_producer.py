"""The write task's half of the exactly-once sink: every record of the task in one Kafka
transaction, left open for the driver to commit (Flink's KafkaWriter, precommit stage).

Invariants:
- The transactional id is ``<prefix>-<partition id>-<attempt number>-<worker slot>``: the
  Spark task's partition and attempt (no two tasks running at once share them), and the
  number of the Python worker among those alive on its host (``worker_slot``: the lowest
  whose lock file in the temporary directory it could lock, held until it exits). Spark
  does not keep a partition on one worker; with the slot in the id, the workers that take
  a partition's tasks in turn each keep a producer of their own id, where one shared id
  had each new producer fence the other worker's. The same ids serve every micro-batch
  (slots are reused as workers come and go: nothing accumulates at the coordinator), and
  a retried task or stage reuses or adds an id per attempt, never one per batch.
- Producers are pooled per transactional id in the Python worker (``producer_cache``): a
  task takes the producer an earlier task of the same id left in this worker, whose last
  transaction is still open on the producer's side (only the driver ended it), and resumes
  it only if the id's coordinator says (DescribeTransactions) that transaction is
  ``CompleteCommit`` at the producer id and epoch the producer had: the driver committed it
  and no other producer of the id came since. The producer then ends it on its side with a
  repeated EndTxn commit (Kafka answers a repeated end of a completed transaction with no
  error; the transaction is not touched) and begins the next. Otherwise (aborted, fenced by
  another worker's producer of the id or by the driver's aborts, still open because a
  driver died, or the coordinator forgot the id) the producer is dropped and a new one is
  made, whose ``init_transactions`` fences any earlier producer of the id and aborts its
  open transaction: a zombie of an earlier attempt can neither write into nor commit this
  one. A resumed producer saves librdkafka's start (a connection, metadata, the
  coordinator lookup, InitProducerId: 50 to 500 ms, most of it librdkafka's timers).
- ``finish`` returns only once every record is acknowledged inside the transaction; it then
  checks with the coordinator that the transaction is still open (at the producer id and
  epoch a resumed producer had), keeps that id and epoch with the producer and reports
  them in the commit message. The transaction stays open when the producer is destroyed
  (librdkafka 2.16 sends no EndTxn on destroy; ``tests/test_spark_exactly_once.py`` would
  see it if that changed), and the producer goes back to the worker's pool with it open.
- A failed task aborts its transaction at once (best effort: the driver aborts whatever
  is left open of its prefix when it commits or aborts the batch) and drops its producer.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import IO

from confluent_kafka import KafkaException
from pyspark import TaskContext

from sparklog.client.kafka import KafkaClient
from sparklog.client.settings import RetryPolicy
from sparklog.client.transactions import (
    ONGOING,
    TransactionDescription,
    TransactionError,
    describe_transaction,
)
from sparklog.datasource.write.commit_intents import SinkTransaction
from sparklog.datasource.write.commit_message import SinkCommitMessage
from sparklog.datasource.write.producer import SinkDeliveryError, TaskProducer
from sparklog.datasource.write.write_options import SinkSpec

log = logging.getLogger("sparklog.sink")

INIT_TIMEOUT_S = 60.0
"""How long a task waits for its producer's transactional id to be initialised."""
ABORT_TIMEOUT_S = 10.0
RESUME_TIMEOUT_S = 10.0
"""How long a resumed producer waits for the repeated EndTxn of its committed transaction."""
RETRY = RetryPolicy(timeout_s=60.0, backoff_s=0.2)
COMPLETE_COMMIT = "CompleteCommit"


@dataclass
class TransactionSession:
    """What a pooled transactional producer keeps between tasks: a protocol client for its
    coordinator, and the producer id and epoch of the transaction it left open (-1 until
    its first task finishes)."""

    client: KafkaClient
    producer_id: int = -1
    producer_epoch: int = -1

    def close(self) -> None:
        self.client.close()

    def ran(self, state: TransactionDescription, transaction_state: str) -> bool:
        """Whether ``state`` is this producer's last transaction in ``transaction_state``."""
        return (state.producer_id, state.producer_epoch, state.state) == (
            self.producer_id, self.producer_epoch, transaction_state)


SLOTS_DIR = "sparklog-sink-workers"
_slot: list[tuple[int, IO[str]]] = []
"""This worker's slot and the open lock file that holds it (set once)."""


def worker_slot() -> int:
    """This Python worker's number among the live ones of its host (0 without ``fcntl``)."""
    if not _slot:
        try:
            import fcntl
        except ImportError:  # no advisory locks (Windows): one slot, ids shared by workers
            return 0
        directory = Path(tempfile.gettempdir()) / SLOTS_DIR
        directory.mkdir(exist_ok=True)
        for number in count():
            handle = open(directory / f"{number}.lock", "a")  # held until the worker exits
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            _slot.append((number, handle))
            break
    return _slot[0][0]


def task_transactional_id(prefix: str) -> str:
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("the exactly-once sink writes from Spark tasks only")
    return f"{prefix}-{context.partitionId()}-{context.attemptNumber()}-{worker_slot()}"


class TransactionalTaskProducer(TaskProducer):
    """A ``TaskProducer`` whose records all go into one transaction left open at ``finish``."""

    def __init__(self, spec: SinkSpec) -> None:
        assert spec.transactional_id_prefix is not None
        self._transactional_id = task_transactional_id(spec.transactional_id_prefix)
        super().__init__(spec, self._transactional_id)
        try:
            if not self._resumed():
                self._producer.init_transactions(INIT_TIMEOUT_S)
            self._producer.begin_transaction()
        except KafkaException as error:
            raise SinkDeliveryError(
                f"cannot start a transaction as {self._transactional_id!r} on "
                f"{spec.bootstrap}: {error.args[0].str()}") from None
        self._session = self._lease.session or TransactionSession(
            KafkaClient(spec.client_config(), RETRY))
        self._lease.session = self._session

    def _describe(self, session: TransactionSession) -> TransactionDescription:
        return describe_transaction(session.client, self._transactional_id)

    def _resumed(self) -> bool:
        """Whether the leased producer is an earlier task's whose transaction the driver
        committed, now ended on its side too; if it is another's, a new producer is leased
        in its place (not yet initialised)."""
        session = self._lease.session
        if session is None:
            return False
        assert isinstance(session, TransactionSession)
        try:
            state = self._describe(session)
            if session.ran(state, COMPLETE_COMMIT):
                self._producer.commit_transaction(RESUME_TIMEOUT_S)
                return True
            why = f"it is {state.state} at epoch {state.producer_epoch}"
        except (TransactionError, KafkaException) as error:
            why = str(error)
        log.info("sparklog sink: a new producer for %s: the pooled one's last transaction "
                 "was not committed by the driver alone (%s)", self._transactional_id, why)
        self._lease.discard()
        self._lease = self._lease_producer()
        if self._spec.topic is not None:
            self._check_topic(self._spec.topic)
        return False

    def finish(self) -> SinkCommitMessage:
        message = self._drain()
        session = self._session
        state = self._describe(session)
        if state.state != ONGOING or (session.producer_id >= 0
                                      and not session.ran(state, ONGOING)):
            self._lease.discard()
            raise SinkDeliveryError(
                f"transaction {self._transactional_id!r} is {state.state} at epoch "
                f"{state.producer_epoch} after its records were sent, not open at this "
                "task's: another producer with this id fenced this task")
        session.producer_id, session.producer_epoch = state.producer_id, state.producer_epoch
        self._lease.release()
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
