"""The transaction coordinator (KIP-98): transactional ids, their producer ids and epochs, and
the two-phase end of each transaction.

Behaviour (Kafka's ``TransactionCoordinator``):
- InitProducerId with a transactional id gives a producer id (a new one the first time) and
  a bumped epoch, which fences every older producer of that id. An open transaction of the
  id is aborted first, under a fencing epoch: that call answers CONCURRENT_TRANSACTIONS once
  PrepareAbort is replicated (its markers are written meanwhile, as in Kafka) and the
  client's retries get the next epoch once the abort is complete. A timeout above
  ``transaction.max.timeout.ms`` is INVALID_TRANSACTION_TIMEOUT. The epoch that would
  overflow (32766 and up) is never handed out: the next producer gets a new producer id at
  epoch 0.
- KIP-360: an InitProducerId naming the producer's current id and epoch resumes that
  producer under the next epoch (its retry, naming the epoch it left, is answered the
  current one again); one naming the id whose epochs ran out, at its last epoch, is the
  retry of that rotation; any other is PRODUCER_FENCED.
- AddPartitionsToTxn / AddOffsetsToTxn add partitions (a group's ``__consumer_offsets``
  partition for the latter) and open the transaction; a partition leader's verification
  (``verify_partitions``, KIP-890 part 1) answers whether partitions are in the
  transaction, adding none; a leader's add for a transaction.version 2 client (its Produce
  v12+ or TxnOffsetCommit v5+) marks the transaction as that client's (``client_version``).
- KIP-890 part 2: an EndTxn v5+ ends the transaction under the next epoch (PrepareCommit /
  PrepareAbort carry it, so do the markers, which fence the ended transaction's producer
  state in each partition); at the last epoch the prepared state names a new producer id
  (``next_producer_id``), which the complete state takes at epoch 0 (the old one kept as
  ``previous_producer_id``). The answer is the producer id and epoch to go on with; a
  retry naming the epoch before (or, after the move, the previous producer id at its last
  epoch) is answered the same, by this coordinator or the next one, which reads these
  fields from ``__transaction_state``.
  EndTxn writes PrepareCommit or PrepareAbort, then the markers (``write_markers``:
  COMMIT/ABORT control batches in every partition of the transaction), then CompleteCommit
  or CompleteAbort, and answers.
- A request from an older epoch is PRODUCER_FENCED, from another producer id
  INVALID_PRODUCER_ID_MAPPING; a request while markers are written CONCURRENT_TRANSACTIONS;
  an EndTxn that does not fit the state INVALID_TXN_STATE (a retried EndTxn of a completed
  transaction succeeds).
- Transactions open longer than their timeout are aborted under a fencing epoch, checked
  every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``; ids idle (finished)
  for ``transactional.id.expiration.ms`` are removed (tombstoned).

Invariants:
- Every state change is appended to ``__transaction_state`` and replicated (``replicated``:
  in a cluster, until the ISR has it) before it is applied in memory or answered,
  PrepareCommit/PrepareAbort before any marker; while a change is being written, other
  requests of its id are answered CONCURRENT_TRANSACTIONS. A write the ISR did not take in
  time changes nothing in memory (answered COORDINATOR_NOT_AVAILABLE, as Kafka does).
- After a crash, or when the coordinator moves (``load`` on becoming the leader of a
  ``__transaction_state`` partition, with its leader epoch as the coordinator epoch),
  ``load`` replays the partition and finishes every transaction found in PrepareCommit or
  PrepareAbort, so a transaction ends exactly as recorded. ``unload`` forgets the ids of a
  partition and cancels their marker writing (the next coordinator finishes them); their
  requests are answered NOT_COORDINATOR from then on.
- A transaction is recorded CompleteCommit/CompleteAbort only once the marker writer
  returned, i.e. every marker is written (in a cluster: by each partition's leader, past
  its high watermark); a refused CompleteCommit/CompleteAbort write is retried while this
  coordinator still holds the id, so no id stays prepared after its markers are written.
- Its inputs are narrow (settings, its ``InternalTopic``, a replication wait, a producer-id
  allocator, a partition-count lookup, the group's offsets partition, a marker writer, a
  clock); it never touches storage or the broker, and serves only ids of the partitions it
  has loaded (NOT_COORDINATOR otherwise).
- All of it runs on the broker's event loop; ``fault_point`` names the steps of a commit a
  crash test can stop the process at.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from sparklog.coordinator.group_records import partition_for
from sparklog.coordinator.internal_topic import (
    InternalTopic,
    Record,
    append_records,
    coordinator_error,
    replay,
)
from sparklog.coordinator.txn_metadata import (
    COMPLETING,
    FINISHED,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TransactionState,
    epoch_exhausted,
)
from sparklog.coordinator.txn_records import (
    TRANSACTION_TOPIC,
    TV_2,
    TopicPartition,
    decode_txn_key,
    decode_txn_value,
    txn_key,
    txn_value,
)
from sparklog.errors import ErrorCode, KafkaError
from sparklog.faults import fault_point

log = logging.getLogger(__name__)

S = TransactionState
COMPLETE_RETRY_BACKOFF_S = 0.5
MarkerWriter = Callable[[list[TopicPartition], int, int, bool, int], Awaitable[None]]
"""``(partitions, producer id, producer epoch, commit, coordinator epoch)``: write the
markers; returns once every marker is written (retrying what a leader refused or what
could not reach it); cancelled when the coordinator unloads the id's partition."""
Replicated = Callable[[int], Awaitable[ErrorCode]]
"""``(partition)``: wait until what was appended to that ``__transaction_state`` partition
is replicated; NONE, or the error (Kafka's codes) that kept it from the ISR."""

@dataclass(frozen=True, slots=True)
class TxnConfig:
    """The broker settings the transaction coordinator reads (Kafka's names and defaults)."""

    max_timeout_ms: int = 900000
    id_expiration_ms: int = 604800000
    abort_check_ms: int = 10000
    expire_check_ms: int = 3600000
    load_buffer_bytes: int = 5 * 1024 * 1024

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> TxnConfig:
        default = cls()

        def get(key: str, fallback: int) -> int:
            return int(props.get(key, fallback))

        return cls(
            max_timeout_ms=get("transaction.max.timeout.ms", default.max_timeout_ms),
            id_expiration_ms=get("transactional.id.expiration.ms", default.id_expiration_ms),
            abort_check_ms=get("transaction.abort.timed.out.transaction.cleanup.interval.ms",
                               default.abort_check_ms),
            expire_check_ms=get("transaction.remove.expired.transaction.cleanup.interval.ms",
                                default.expire_check_ms),
            load_buffer_bytes=get("transaction.state.log.load.buffer.size",
                                  default.load_buffer_bytes),
        )


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


def _resumes(meta: TransactionMetadata, producer_id: int, producer_epoch: int) -> bool:
    """Kafka's ``isValidProducerId``: an InitProducerId naming ``producer_id`` continues the
    id's producer (its current producer id, or the one its epochs ran out on, retried)."""
    return producer_id == meta.producer_id or (producer_id == meta.last_producer_id
                                               and epoch_exhausted(producer_epoch))


class TransactionCoordinator:
    def __init__(self, config: TxnConfig, topic: InternalTopic, replicated: Replicated,
                 next_producer_id: Callable[[], Awaitable[int]],
                 partition_count: Callable[[str], int],
                 offsets_partition: Callable[[str], TopicPartition],
                 write_markers: MarkerWriter, clock: Callable[[], int]) -> None:
        self.config = config
        self.topic = topic
        self._replicated = replicated
        self._next_producer_id = next_producer_id
        self._partition_count = partition_count
        self.offsets_partition = offsets_partition
        self._write_markers = write_markers
        self._now_ms = clock
        self.transactions: dict[str, TransactionMetadata] = {}
        self.loaded: dict[int, int] = {}  # partition -> coordinator epoch
        self.active = False
        self._completing: dict[str, asyncio.Task[None]] = {}  # markers being written
        self._writing: set[str] = set()  # a state change waiting for the ISR
        self._timers: list[asyncio.TimerHandle] = []
        self._tasks: set[asyncio.Task[None]] = set()

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Start serving (partitions are loaded as this broker becomes their leader:
        ``load``). Needs the running loop."""
        self.active = True
        self._schedule(self.config.abort_check_ms, self.abort_timed_out)
        self._schedule(self.config.expire_check_ms, self.expire_ids)

    def stop(self) -> None:
        self.active = False
        for timer in self._timers:
            timer.cancel()
        for task in [*self._tasks, *self._completing.values()]:
            task.cancel()
        for partition in list(self.loaded):
            self.unload(partition)

    def _schedule(self, interval_ms: int, action: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()

        def run() -> None:
            try:
                action()
            except Exception:
                log.exception("transaction coordinator maintenance failed")
            self._timers.append(loop.call_later(interval_ms / 1000, run))

        self._timers.append(loop.call_later(interval_ms / 1000, run))

    def load(self, partition: int, coordinator_epoch: int) -> None:
        """Become the coordinator of the ids of ``partition``: replay it, then finish every
        transaction it recorded as PrepareCommit or PrepareAbort."""
        found: dict[str, TransactionMetadata] = {}
        for item in replay(self.topic, partition, self.config.load_buffer_bytes):
            if item.key is None:
                continue  # no transaction writes to this topic: no markers either
            try:
                tid = decode_txn_key(item.key)
                if item.value is None:
                    found.pop(tid, None)
                else:
                    found[tid] = TransactionMetadata.from_record(tid,
                                                                 decode_txn_value(item.value))
            except ValueError as exc:
                log.warning("skipping an undecodable %s record: %s", TRANSACTION_TOPIC, exc)
        self.transactions.update(found)
        self.loaded[partition] = coordinator_epoch
        log.debug("transaction coordinator loaded %s-%d: %d transactional ids",
                 TRANSACTION_TOPIC, partition, len(found))
        for meta in found.values():
            if meta.state in COMPLETING:
                log.info("transactional id %s was %s: finishing it", meta.transactional_id,
                         meta.state.display)
                self._spawn(self._complete(meta))

    def unload(self, partition: int) -> None:
        """Stop coordinating the ids of ``partition``; markers still being written for them
        are left to the next coordinator (their writing is cancelled)."""
        self.loaded.pop(partition, None)
        for tid in [t for t in self.transactions if self.partition_of(t) == partition]:
            del self.transactions[tid]
            completing = self._completing.get(tid)
            if completing is not None:
                completing.cancel()
        if self.active:  # leadership moved (a stop unloads every partition quietly)
            log.info("transaction coordinator unloaded %s-%d", TRANSACTION_TOPIC, partition)

    async def settle(self) -> None:
        """Wait for the transactions ``load`` is finishing (a broker waits before serving,
        so no client sees a prepared transaction half-finished after a restart)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._spawned_done)

    def _spawned_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("transaction coordinator: %s", task.exception())

    def partition_of(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition of ``transactional_id``."""
        return partition_for(transactional_id, self.topic.partitions)

    def _busy(self, transactional_id: str) -> bool:
        """A state change or the markers of ``transactional_id`` are being written."""
        return transactional_id in self._completing or transactional_id in self._writing

    def _check(self, transactional_id: str | None) -> ErrorCode | None:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self.partition_of(transactional_id) not in self.loaded:
            return ErrorCode.NOT_COORDINATOR
        return None

    def _store(self, meta: TransactionMetadata) -> None:
        """Append ``meta``'s state; KafkaError (with the code to answer) if refused."""
        self._append(meta.transactional_id, [(txn_key(meta.transactional_id),
                                              txn_value(meta.record()))])

    def _append(self, transactional_id: str, records: list[Record]) -> None:
        append_records(self.topic, self.partition_of(transactional_id), records,
                       self._now_ms())

    async def _commit(self, new: TransactionMetadata) -> None:
        """Store ``new`` (a changed copy of the live state) and wait for the ISR to have it,
        then make it the live state; KafkaError (with the code to answer) otherwise."""
        tid = new.transactional_id
        self._store(new)
        self._writing.add(tid)
        try:
            code = await self._replicated(self.partition_of(tid))
        finally:
            self._writing.discard(tid)
        if code != ErrorCode.NONE:
            raise KafkaError(f"{TRANSACTION_TOPIC} write of {tid} not replicated: {code.name}",
                             coordinator_error(code))
        if self.partition_of(tid) not in self.loaded:
            raise KafkaError(f"no longer the coordinator of {tid}", ErrorCode.NOT_COORDINATOR)
        self.transactions[tid] = new

    # -- InitProducerId -------------------------------------------------------------------
    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None = None) -> ProducerIdAndEpoch:
        """Kafka's ``handleInitProducerId`` for a transactional id; ``expected`` is the
        producer's current ``(producer id, epoch)`` (InitProducerId v3+, KIP-360): it resumes
        under a bumped epoch rather than being a new producer, and its retry is answered the
        same again."""
        error = self._check(transactional_id)
        if error is None and not 0 < timeout_ms <= self.config.max_timeout_ms:
            error = ErrorCode.INVALID_TRANSACTION_TIMEOUT
        if error is not None:
            return ProducerIdAndEpoch(error)
        now = self._now_ms()
        meta = self.transactions.get(transactional_id)
        try:
            if meta is None:
                producer_id = await self._next_producer_id()
                if transactional_id in self.transactions or self._busy(transactional_id):
                    return ProducerIdAndEpoch(ErrorCode.CONCURRENT_TRANSACTIONS)
                new = TransactionMetadata(transactional_id, producer_id, 0, timeout_ms,
                                          S.EMPTY, now)
                await self._commit(new)
                return ProducerIdAndEpoch(ErrorCode.NONE, new.producer_id, new.producer_epoch)
            if self._busy(transactional_id):
                return ProducerIdAndEpoch(ErrorCode.CONCURRENT_TRANSACTIONS)
            if expected is not None and not _resumes(meta, *expected):
                return ProducerIdAndEpoch(ErrorCode.PRODUCER_FENCED)
            if meta.state in COMPLETING:
                return ProducerIdAndEpoch(ErrorCode.CONCURRENT_TRANSACTIONS)
            if meta.state is S.ONGOING:  # answered once the abort is decided, as Kafka does
                fenced = await self._fence(transactional_id, "a new producer initialised it")
                if fenced is not None:
                    self._spawn(self._complete(fenced))
                return ProducerIdAndEpoch(ErrorCode.CONCURRENT_TRANSACTIONS)
            new = await self._initialized(meta, expected, now)
            if self.transactions.get(transactional_id) is not meta \
                    or self._busy(transactional_id):
                return ProducerIdAndEpoch(ErrorCode.CONCURRENT_TRANSACTIONS)
            new.timeout_ms = timeout_ms
            new.transition(S.EMPTY, now)
            new.partitions = set()
            await self._commit(new)
        except KafkaError as exc:
            return ProducerIdAndEpoch(exc.code)
        log.info("transactional id %s: producer %d epoch %d", transactional_id,
                 new.producer_id, new.producer_epoch)
        return ProducerIdAndEpoch(ErrorCode.NONE, new.producer_id, new.producer_epoch)

    async def _initialized(self, meta: TransactionMetadata, expected: tuple[int, int] | None,
                           now: int) -> TransactionMetadata:
        """A copy of a finished id's state for the next producer (Kafka's order): a new
        producer id once the epochs are used up, else the next epoch; for a producer that
        resumes (``expected``) the epoch it had moves to ``last_producer_epoch``, and a retry
        that names that one gets the current epoch unchanged. Any other expected epoch is
        fenced (KafkaError PRODUCER_FENCED)."""
        expected_epoch = None if expected is None else expected[1]
        kept = meta.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
        if expected_epoch in (None, meta.producer_epoch):
            if epoch_exhausted(meta.producer_epoch):
                return replace(meta, producer_id=await self._next_producer_id(),
                               producer_epoch=0, last_producer_id=meta.producer_id,
                               last_producer_epoch=kept, last_update_ms=now)
            return replace(meta, producer_epoch=meta.producer_epoch + 1,
                           last_producer_epoch=kept, last_update_ms=now)
        if expected_epoch == meta.last_producer_epoch:  # a retry of a bump that succeeded
            return replace(meta, last_update_ms=now)
        raise KafkaError(f"transactional id {meta.transactional_id}: epoch {expected_epoch} "
                         f"is neither {meta.producer_epoch} nor {meta.last_producer_epoch}",
                         ErrorCode.PRODUCER_FENCED)

    async def _fence(self, transactional_id: str, reason: str) -> TransactionMetadata | None:
        """Decide to abort the id's open transaction under a bumped epoch (its producer is
        fenced): PrepareAbort written and replicated. None when, by the time this runs, the
        id has no open transaction (or another change of it is under way)."""
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.state is not S.ONGOING or self._busy(transactional_id):
            return None
        # The fencing epoch may be the last one (never answered to a producer): the retry
        # of the InitProducerId that fenced gets a new producer id.
        new = replace(meta, producer_epoch=meta.producer_epoch + 1,
                      last_producer_epoch=NO_PRODUCER_EPOCH, last_update_ms=self._now_ms(),
                      partitions=set(meta.partitions))
        new.transition(S.PREPARE_ABORT, self._now_ms())
        await self._commit(new)
        log.info("transactional id %s: aborting its transaction (%s), epoch now %d",
                 transactional_id, reason, new.producer_epoch)
        return new

    async def _fence_and_abort(self, transactional_id: str, reason: str) -> None:
        """Abort the id's open transaction under a bumped epoch, markers and all."""
        fenced = await self._fence(transactional_id, reason)
        if fenced is not None:
            await self._complete(fenced)

    # -- AddPartitionsToTxn, AddOffsetsToTxn ----------------------------------------------
    def _producer_error(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        *, pending_counts: bool = True) -> ErrorCode | None:
        """Kafka's checks of a request from a transactional producer, in its order (a change
        being written counts only with ``pending_counts``)."""
        error = self._check(transactional_id)
        if error is not None:
            return error
        meta = self.transactions.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if meta.state in COMPLETING or (pending_counts and self._busy(transactional_id)):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return None

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Iterable[TopicPartition], client_version: int = 0
                             ) -> dict[TopicPartition, ErrorCode]:
        """Add ``partitions`` to the producer's transaction (opening it); ``client_version``
        2 when a partition leader adds them for a transaction.version 2 client (its Produce
        v12+ or TxnOffsetCommit v5+: KIP-890's implicit add), which the id keeps."""
        wanted = list(dict.fromkeys(partitions))
        error = self._producer_error(transactional_id, producer_id, producer_epoch)
        if error is not None:
            return dict.fromkeys(wanted, error)
        unknown = self._unknown(wanted)
        if unknown:
            return unknown
        meta = self.transactions[transactional_id]
        if meta.state is S.ONGOING and meta.partitions.issuperset(wanted):
            return dict.fromkeys(wanted, ErrorCode.NONE)
        new = replace(meta, partitions=meta.partitions | set(wanted))
        if meta.state is not S.ONGOING:
            new.client_version = client_version
        elif client_version >= TV_2:
            new.client_version = TV_2
        new.transition(S.ONGOING, self._now_ms())
        try:
            await self._commit(new)
        except KafkaError as exc:
            return dict.fromkeys(wanted, exc.code)
        return dict.fromkeys(wanted, ErrorCode.NONE)

    def _unknown(self, wanted: list[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """Kafka's answer when some of ``wanted`` do not exist (UNKNOWN_TOPIC_OR_PARTITION,
        the rest OPERATION_NOT_ATTEMPTED); empty when all do."""
        unknown = {tp for tp in wanted if not 0 <= tp[1] < self._partition_count(tp[0])}
        if not unknown:
            return {}
        return {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in wanted}

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4+ ``verify_only`` (KIP-890 part 1, what a partition leader
        asks before it appends a transactional batch): NONE for each partition already in
        the producer's transaction, TRANSACTION_ABORTABLE for one that is not; nothing is
        added. As Kafka's, a change being written is not waited for (the leader's append
        checks again)."""
        wanted = list(dict.fromkeys(partitions))
        error = self._producer_error(transactional_id, producer_id, producer_epoch,
                                     pending_counts=False)
        if error is not None:
            return dict.fromkeys(wanted, error)
        unknown = self._unknown(wanted)
        if unknown:
            return unknown
        added = self.transactions[transactional_id].partitions
        return {tp: ErrorCode.NONE if tp in added else ErrorCode.TRANSACTION_ABORTABLE
                for tp in wanted}

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str) -> ErrorCode:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        tp = self.offsets_partition(group_id)
        return (await self.add_partitions(transactional_id, producer_id, producer_epoch,
                                          [tp]))[tp]

    # -- EndTxn ---------------------------------------------------------------------------
    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool, client_version: int = 0) -> ProducerIdAndEpoch:
        """Kafka's ``handleEndTransaction``: the producer id and epoch the producer goes on
        with (bumped for a transaction.version 2 client, ``client_version`` from EndTxn
        v5+: a new producer id once the epochs ran out), or the error."""
        error = self._check(transactional_id)
        meta = self.transactions.get(transactional_id)
        if error is None:
            error = self._end_error(meta, producer_id, producer_epoch, commit)
        if error is not None:
            return ProducerIdAndEpoch(error)
        assert meta is not None
        if meta.state is not S.ONGOING:  # a retry of an EndTxn that completed
            return ProducerIdAndEpoch(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)
        new = replace(meta, partitions=set(meta.partitions))
        if client_version >= TV_2:  # KIP-890: every end bumps the epoch
            new.client_version = TV_2
            new.producer_epoch += 1
            if epoch_exhausted(meta.producer_epoch):
                new.next_producer_id = await self._next_producer_id()
        new.transition(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, self._now_ms())
        fault_point("txn_end_prepared", "before")
        try:
            if self.transactions.get(transactional_id) is not meta:
                raise KafkaError("changed meanwhile", ErrorCode.CONCURRENT_TRANSACTIONS)
            await self._commit(new)
        except KafkaError as exc:
            return ProducerIdAndEpoch(exc.code)
        fault_point("txn_end_prepared", "after")
        try:
            await self._complete(new)
        except KafkaError as exc:  # recorded as prepared: finished at the next load
            return ProducerIdAndEpoch(exc.code)
        ended = self.transactions.get(transactional_id, new)
        return ProducerIdAndEpoch(ErrorCode.NONE, ended.producer_id, ended.producer_epoch)

    def _end_error(self, meta: TransactionMetadata | None, producer_id: int,
                   producer_epoch: int, commit: bool) -> ErrorCode | None:
        """Kafka's checks of an EndTxn, in its order. A transaction.version 2 id's ended
        transaction has the next epoch: an EndTxn naming the one before is its retry (or,
        its epochs run out, the previous producer id at the last epoch)."""
        if meta is None:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        bumped = meta.client_version >= TV_2 and meta.producer_epoch == producer_epoch + 1
        overflowed = (meta.client_version >= TV_2 and meta.previous_producer_id == producer_id
                      and epoch_exhausted(producer_epoch) and meta.producer_epoch == 0)
        if meta.producer_id != producer_id and not overflowed:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if meta.client_version < TV_2 or meta.state in (S.ONGOING, S.EMPTY):
            valid = producer_epoch == meta.producer_epoch
        elif meta.state in COMPLETING:
            valid = bumped
        else:
            valid = bumped or overflowed
        if not valid:
            return ErrorCode.PRODUCER_FENCED
        done = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        if meta.state is done and not self._busy(meta.transactional_id):
            return None
        if meta.state in COMPLETING or self._busy(meta.transactional_id):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if meta.state is not S.ONGOING:
            return ErrorCode.INVALID_TXN_STATE
        return None

    async def _complete(self, meta: TransactionMetadata) -> None:
        """Write the markers of a prepared transaction, then record it complete. The work
        runs as a task of its own: a caller that goes away does not stop it, an ``unload``
        does (NOT_COORDINATOR for the caller: the next coordinator finishes it)."""
        tid = meta.transactional_id
        task = asyncio.ensure_future(self._finish(meta))
        self._completing[tid] = task

        def done(finished: asyncio.Task[None]) -> None:
            if self._completing.get(tid) is finished:
                del self._completing[tid]
            if not finished.cancelled() and finished.exception() is not None:
                log.warning("transactional id %s not completed: %s", tid, finished.exception())

        task.add_done_callback(done)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # the caller was cancelled, not the work
            raise KafkaError(f"the coordinator of {tid} moved while its markers were written",
                             ErrorCode.NOT_COORDINATOR) from None

    async def _finish(self, meta: TransactionMetadata) -> None:
        tid = meta.transactional_id
        commit = meta.state is S.PREPARE_COMMIT
        await self._write_markers(sorted(meta.partitions), meta.producer_id,
                                  meta.producer_epoch, commit,
                                  self.loaded.get(self.partition_of(tid), 0))
        fault_point("txn_markers_written", "all")
        while self.transactions.get(tid) is meta:  # else unloaded: the next one finishes it
            new = replace(meta, partitions=set())
            if meta.next_producer_id != NO_PRODUCER_ID:  # the epochs ran out: the next id
                new.previous_producer_id, new.producer_id = meta.producer_id, meta.next_producer_id
                new.producer_epoch, new.next_producer_id = 0, NO_PRODUCER_ID
            new.transition(S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT, self._now_ms())
            try:
                await self._commit(new)
                return
            except KafkaError as exc:  # the markers are written: record it once possible
                log.warning("transactional id %s: %s not recorded (%s), retrying", tid,
                            new.state.display, exc)
                await asyncio.sleep(COMPLETE_RETRY_BACKOFF_S)

    # -- timeouts and expiration ----------------------------------------------------------
    def abort_timed_out(self) -> None:
        """Abort (under a fencing epoch) every transaction open longer than its timeout."""
        now = self._now_ms()
        for meta in list(self.transactions.values()):
            if (meta.state is S.ONGOING and not self._busy(meta.transactional_id)
                    and now - meta.start_ms > meta.timeout_ms):
                self._spawn(self._fence_and_abort(
                    meta.transactional_id, f"open longer than its timeout of {meta.timeout_ms} ms"))

    def expire_ids(self) -> None:
        """Remove ids whose last transaction finished ``transactional.id.expiration.ms`` ago."""
        now = self._now_ms()
        for meta in list(self.transactions.values()):
            if (meta.state in FINISHED and not self._busy(meta.transactional_id)
                    and now - meta.last_update_ms >= self.config.id_expiration_ms):
                try:
                    self._append(meta.transactional_id, [(txn_key(meta.transactional_id), None)])
                except KafkaError as exc:
                    log.warning("cannot expire transactional id %s: %s",
                                meta.transactional_id, exc)
                    continue
                del self.transactions[meta.transactional_id]
                log.info("transactional id %s expired", meta.transactional_id)

    # -- DescribeTransactions, ListTransactions, and the admin's abort --------------------
    def describe(self, transactional_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        error = self._check(transactional_id)
        if error is not None:
            return error, None
        meta = self.transactions.get(transactional_id)
        if meta is None:
            return ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, None
        return ErrorCode.NONE, meta

    def list(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
             min_duration_ms: int = -1, id_pattern: str | None = None
             ) -> tuple[ErrorCode, list[TransactionMetadata]]:
        """Ids in any of ``states`` (Kafka's names; all when empty), of any of
        ``producer_ids`` (all when empty), open at least ``min_duration_ms`` (-1: any), the
        whole of which ``id_pattern`` matches (a regular expression; all when empty or None,
        INVALID_REGULAR_EXPRESSION when it does not compile)."""
        if not self.active:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        try:
            pattern = re.compile(id_pattern) if id_pattern else None
        except re.error:
            return ErrorCode.INVALID_REGULAR_EXPRESSION, []
        wanted_states, pids = set(states), set(producer_ids)
        now = self._now_ms()
        return ErrorCode.NONE, [
            meta for meta in self.transactions.values()
            if (not wanted_states or meta.state.display in wanted_states)
            and (not pids or meta.producer_id in pids)
            and (pattern is None or pattern.fullmatch(meta.transactional_id) is not None)
            and (min_duration_ms < 0 or (meta.state is S.ONGOING
                                         and now - meta.start_ms >= min_duration_ms))]

    async def abort(self, transactional_id: str) -> ErrorCode:
        """Abort the id's open transaction now, fencing its producer (``sparklog
        transactions abort --transactional-id``)."""
        error, meta = self.describe(transactional_id)
        if error != ErrorCode.NONE:
            return error
        assert meta is not None
        if meta.state is not S.ONGOING or self._busy(transactional_id):
            return ErrorCode.INVALID_TXN_STATE
        try:
            await self._fence_and_abort(transactional_id, "aborted by an administrator")
        except KafkaError as exc:
            return exc.code
        return ErrorCode.NONE
