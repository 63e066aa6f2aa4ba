"""The driver's half of the exactly-once sink: a two-phase commit of the write tasks'
Kafka transactions (Flink's KafkaCommitter, on Spark's writer commit and abort).

Each write task leaves its records in an open transaction of its own transactional id
(``<prefix>-<partition>-<attempt>-<worker slot>``) and reports it (``SinkTransaction``: id,
producer id and epoch). The driver then ends those transactions on the tasks' behalf with EndTxn.

Streaming (``commit(messages, batch_id)``):
1. If the batch has no intent yet, its transactions are written as one
   (``commit_intents``): from here on the batch is decided.
2. Every transaction of the intent is committed (EndTxn, repeatable), then the intent is
   marked committed.
3. Every transaction of the prefix still open is aborted: those of failed and speculative
   task attempts, and, when the batch is a re-run whose intent already existed, the
   re-run's own.

Invariants:
- A batch's records become visible to read_committed readers exactly once: either the
  transactions of its intent are committed (and a re-run of the batch publishes nothing),
  or no intent was written and none of its transactions is ever committed.
- ``roll_forward`` (run whenever the writer is created, which Spark does on the driver
  before each micro-batch's tasks, and again for each commit) finishes an intent left
  unfinished by a driver that died. It runs before a re-run's tasks reuse transactional
  ids, so their producers cannot fence and abort a decided transaction.
- If the broker aborted every transaction of an unfinished intent (they outlived
  ``transaction.timeout.ms``), none was published: the intent is dropped, the commit fails
  (``TransactionsExpiredError``) and the batch's re-run writes it again. If it aborted some
  after others were committed, the batch is partly published: ``PartialCommitError`` stops
  the query, naming the transactions.
- ``abort`` after an intent was written finishes the intent (the decision stands); before,
  it aborts every open transaction of the prefix, and again every ``ZOMBIE_GRACE_S`` until
  none is left: killed tasks may still be starting theirs.
- Batch writes (``df.write``) are one transaction per task too, committed in ``commit``
  without an intent (Spark never re-runs a batch write on its own).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence

from pyspark.sql.datasource import WriterCommitMessage

from sparklog.client.kafka import KafkaClient
from sparklog.client.settings import ClientConfig, RetryPolicy
from sparklog.client.transactions import (
    ONGOING,
    TransactionError,
    abort_by_id,
    describe_transaction,
    end_transaction,
    list_transactions,
)
from sparklog.datasource.write.commit_intents import CommitIntent, CommitIntents, SinkTransaction
from sparklog.datasource.write.commit_message import SinkCommitMessage
from sparklog.errors import ErrorCode
from sparklog.faults import fault_point

log = logging.getLogger("sparklog.sink")

RETRY = RetryPolicy(timeout_s=120.0, backoff_s=0.2)
ZOMBIE_GRACE_S = 4.0
"""Longer than Spark gives a killed task's Python worker to stop on its own
(``spark.python.task.killTimeout``, 2 s) before it destroys the worker."""
"""How long the driver keeps retrying a coordinator that moves or loads."""
_ENDED_BY_OTHERS = frozenset({
    ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.INVALID_TXN_STATE,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING,
})
"""EndTxn answers meaning the transaction was ended without us (by a timeout or a fence)."""


class PartialCommitError(RuntimeError):
    """Some transactions of a decided batch were aborted by the broker after others were
    committed: the batch is partly published and exactly-once cannot be restored."""


def transactions_of(messages: Sequence[WriterCommitMessage | None]) -> tuple[SinkTransaction,
                                                                             ...]:
    return tuple(m.transaction for m in messages
                 if isinstance(m, SinkCommitMessage) and m.transaction is not None)


class TransactionCommitter:
    """Ends the transactions of one sink (one transactional id prefix)."""

    def __init__(self, config: ClientConfig, prefix: str, checkpoint_location: str | None
                 ) -> None:
        self._config = config
        self._prefix = prefix
        self._intents = CommitIntents(checkpoint_location) if checkpoint_location else None

    def _client(self) -> KafkaClient:
        return KafkaClient(self._config, RETRY)

    # -- streaming --------------------------------------------------------------------------
    def roll_forward(self) -> None:
        """Finish the newest intent if a dead driver left it unfinished."""
        assert self._intents is not None
        intent = self._intents.latest()
        if intent is None or intent.committed:
            return
        log.warning("sparklog sink: micro-batch %d was decided but not finished when the "
                    "query stopped: committing its %d transactions now", intent.batch_id,
                    len(intent.transactions))
        with self._client() as client:
            self._finish(client, intent)

    def commit_batch(self, messages: Sequence[WriterCommitMessage | None],
                     batch_id: int) -> None:
        assert self._intents is not None
        with self._client() as client:
            intent = self._intents.get(batch_id)
            if intent is None:
                intent = CommitIntent(batch_id, transactions_of(messages))
                self._intents.write(intent)
                fault_point("sink_intent_written", batch_id)
            else:
                log.warning("sparklog sink: micro-batch %d was published by an earlier run; "
                            "this run's records are aborted", batch_id)
            published = self._finish(client, intent)
            self._abort_open(client)
        if not published:
            raise TransactionsExpiredError(batch_id)

    def abort_batch(self, messages: Sequence[WriterCommitMessage | None],
                    batch_id: int) -> None:
        assert self._intents is not None
        intent = self._intents.get(batch_id)
        with self._client() as client:
            if intent is not None:
                self._finish(client, intent)
            self._abort_open_until_settled(client)

    def _finish(self, client: KafkaClient, intent: CommitIntent) -> bool:
        """Commit every transaction of ``intent`` and mark it committed; False (and the
        intent deleted) if the broker had aborted all of them, so nothing was published."""
        assert self._intents is not None
        if intent.committed:
            return True
        committed, lost = [], []
        for n, txn in enumerate(intent.transactions):
            (committed if self._end(client, txn, commit=True) else lost).append(txn)
            fault_point("sink_transaction_committed", f"{intent.batch_id}-{n}")
        if lost and not committed:
            log.warning("sparklog sink: every transaction of micro-batch %d was aborted by the "
                        "broker before it could be committed (they outlived "
                        "kafka.transaction.timeout.ms): nothing of it was published, and it "
                        "is written again when it runs again", intent.batch_id)
            self._intents.delete(intent.batch_id)
            return False
        if lost:
            raise PartialCommitError(
                f"micro-batch {intent.batch_id} is partly published: the broker aborted "
                f"{len(lost)} of its {len(intent.transactions)} transactions "
                f"({', '.join(t.transactional_id for t in lost)}) before they could be "
                "committed, most likely because they outlived kafka.transaction.timeout.ms; "
                "raise it above the longest batch plus a driver restart")
        self._intents.write(CommitIntent(intent.batch_id, intent.transactions, committed=True))
        return True

    # -- batch writes ------------------------------------------------------------------------
    def commit_write(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        transactions = transactions_of(messages)
        with self._client() as client:
            lost = [t for t in transactions if not self._end(client, t, commit=True)]
            self._abort_open(client)
        if lost:
            raise PartialCommitError(
                f"the broker aborted {len(lost)} of the write's {len(transactions)} "
                f"transactions ({', '.join(t.transactional_id for t in lost)}) before they "
                "could be committed; raise kafka.transaction.timeout.ms")

    def abort_write(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        with self._client() as client:
            self._abort_open_until_settled(client)

    # -- ending transactions -----------------------------------------------------------------
    def _end(self, client: KafkaClient, txn: SinkTransaction, *, commit: bool) -> bool:
        """End ``txn``; False if it was ended another way first (aborted by the broker)."""
        try:
            end_transaction(client, txn.transactional_id, txn.producer_id, txn.producer_epoch,
                            commit=commit)
            return True
        except TransactionError as exc:
            if exc.code not in _ENDED_BY_OTHERS:
                raise
        state = describe_transaction(client, txn.transactional_id)
        done = "CompleteCommit" if commit else "CompleteAbort"
        return (state.producer_id, state.producer_epoch, state.state) == (
            txn.producer_id, txn.producer_epoch, done)

    def _abort_open(self, client: KafkaClient) -> int:
        """Abort every open transaction of this sink's prefix; called once the transactions
        to publish are ended, so what is still open is not part of the output: failed or
        speculative task attempts, a re-run of a published batch, an aborted batch."""
        ours = re.compile(rf"{re.escape(self._prefix)}-\d+-\d+(-\d+)?")  # older: no slot
        aborted = 0
        for listing in list_transactions(client, states=[ONGOING]):
            tid = listing.transactional_id
            if ours.fullmatch(tid):
                abort_by_id(client, tid)
                aborted += 1
                log.info("sparklog sink: aborted transaction %s, not part of the output", tid)
        return aborted

    def _abort_open_until_settled(self, client: KafkaClient) -> None:
        """``_abort_open`` after a failed job, again every ``ZOMBIE_GRACE_S`` until a round
        finds nothing: tasks Spark is still killing can begin a transaction after the first
        round, and each would otherwise hold read_committed readers back until its
        ``transaction.timeout.ms``."""
        self._abort_open(client)
        while True:
            time.sleep(ZOMBIE_GRACE_S)
            if not self._abort_open(client):
                return


class TransactionsExpiredError(RuntimeError):
    """Every transaction of a decided batch was aborted by the broker: nothing was published
    and the intent is gone, so the batch must run again (Spark re-runs it on restart)."""

    def __init__(self, batch_id: int) -> None:
        super().__init__(
            f"the transactions of micro-batch {batch_id} were aborted by the broker before "
            "they could be committed (they outlived kafka.transaction.timeout.ms); nothing of "
            "the batch was published and it runs again when the query restarts")
