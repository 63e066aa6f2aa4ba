"""One partition as this broker sees it, and its replica here: Kafka's ``cluster/Partition``.

A ``Partition`` exists for every partition of every topic the broker knows (a single node
and a cluster alike); it has a replica here (``local``: the log and its leader-epoch cache)
when the topic's assignment names this broker. Its ``state`` (leader, leader epoch, ISR)
is the controller's last word on it: ZooKeeper's state znode in a cluster, "this node, epoch
0, ISR of itself" on a single node.

Invariants:
- Everything here runs on the broker's event loop; nothing blocks.
- Leader: the high watermark is the smallest log end offset over the ISR (its own, and each
  follower's last fetch offset) and never moves back (``maybe_increment_leader_hw``, run
  after every append and every follower fetch); on a single node that is the log end
  offset once an append returns. Waiting fetches are woken when the log end or the high
  watermark moves (``wake``).
- A follower behind the leader's log end that has not reached it for ``lag_ms`` is a
  laggard (``laggards``: the replica manager writes the shrunk ISR); a live follower that
  reaches the high watermark and the start of the leader's epoch joins again
  (``update_follower_fetch_state`` returns the grown ISR to write).
- acks=all: fewer ISR members than the effective ``min.insync.replicas`` (the topic's,
  capped at its replication factor: a single node's internal topics keep Kafka's default
  of 2 and still take writes) refuses the append before it (NOT_ENOUGH_REPLICAS); after it
  the request waits for the high watermark to pass it (the delayed produce, woken by high
  watermark moves), then answers NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR shrank
  below the minimum meanwhile), REQUEST_TIMED_OUT or NOT_LEADER_OR_FOLLOWER (leadership
  went). An append already acknowledged when it returns (acks 0 or 1, or an ISR of the
  leader alone) is answered without waiting.
- ``make_leader`` records the new epoch's start offset in the leader-epoch cache and forgets
  the followers' progress; ``make_follower`` and ``detach`` answer waiting produces
  NOT_LEADER_OR_FOLLOWER and stop the fetcher.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from sparklog.cluster.layout import NO_LEADER, PartitionState
from sparklog.errors import ErrorCode, KafkaError
from sparklog.record.control import ControlType
from sparklog.storage.leader_epochs import LeaderEpochCache
from sparklog.storage.log import AppendInfo, PartitionLog
from sparklog.storage.producer_state import VerificationStateEntry

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass
class _FollowerState:
    """What the leader knows of one follower (Kafka's ``Replica`` state)."""

    log_end_offset: int = -1
    caught_up_ms: int = 0  # the last time it had everything the leader had
    last_fetch: tuple[int, int] | None = None  # (time, leader log end then)


@dataclass(slots=True)
class Partition:
    topic: str
    partition: int
    broker_id: int
    wake: Callable[[TopicPartition], None]
    """Wakes the fetches waiting on this partition."""
    replicas: tuple[int, ...] = ()
    state: PartitionState | None = None
    controller_epoch: int = -1
    high_watermark: int = 0
    fetcher: asyncio.Task[None] | None = None
    isr_write: bool = False  # an ISR change is being written
    _log: PartitionLog | None = None
    _epochs: LeaderEpochCache | None = None
    _followers: dict[int, _FollowerState] = field(default_factory=dict)
    _waiting: list[tuple[int, asyncio.Future[ErrorCode]]] = field(default_factory=list)

    # -- what the controller says ----------------------------------------------------------
    @property
    def tp(self) -> TopicPartition:
        return self.topic, self.partition

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def leader(self) -> int:
        return self.state.leader if self.state is not None else NO_LEADER

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch if self.state is not None else -1

    @property
    def isr(self) -> tuple[int, ...]:
        return self.state.isr if self.state is not None else ()

    @property
    def is_leader(self) -> bool:
        """This broker leads the partition and has its replica."""
        return self.leader == self.broker_id and self._log is not None

    # -- the replica here ------------------------------------------------------------------
    @property
    def local(self) -> bool:
        """True while this broker is one of the partition's replicas (it has the log)."""
        return self._log is not None

    @property
    def log(self) -> PartitionLog:
        if self._log is None:
            raise KafkaError(f"no replica of {self.name} here", ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return self._log

    @property
    def epochs(self) -> LeaderEpochCache:
        if self._epochs is None:
            raise KafkaError(f"no replica of {self.name} here", ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return self._epochs

    def attach(self, partition_log: PartitionLog) -> None:
        """A replica is here now: its log (and leader-epoch cache) are this partition's."""
        self._log = partition_log
        self._epochs = LeaderEpochCache(partition_log.dir_path)
        self.high_watermark = 0

    def detach(self) -> None:
        """The replica here goes: every role stops."""
        self.stop_fetcher()
        self.release(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        self._log = self._epochs = None
        self._followers = {}

    def stop_fetcher(self) -> None:
        if self.fetcher is not None:
            self.fetcher.cancel()
            self.fetcher = None

    # -- roles -----------------------------------------------------------------------------
    def make_leader(self, now_ms: int) -> None:
        self.stop_fetcher()
        end = self.log.log_end_offset
        self.epochs.assign(self.leader_epoch, end)
        self._followers = {r: _FollowerState(caught_up_ms=now_ms)
                           for r in self.replicas if r != self.broker_id}
        self.high_watermark = min(self.high_watermark, end)
        self.maybe_increment_leader_hw()

    def make_follower(self) -> None:
        self.stop_fetcher()
        self.release(ErrorCode.NOT_LEADER_OR_FOLLOWER)

    def follower_high_watermark(self, leader_high_watermark: int) -> None:
        """A follower's high watermark: the leader's, as far as this log has it."""
        self.high_watermark = min(leader_high_watermark, self.log.log_end_offset)

    # -- the leader's bookkeeping ----------------------------------------------------------
    def update_follower_fetch_state(self, follower: int, fetch_offset: int, now_ms: int,
                                    live: bool) -> tuple[int, ...] | None:
        """A follower fetched at ``fetch_offset`` (its log end); the grown ISR to write when
        it (``live``: registered, not shutting down) caught up, else None."""
        if follower not in self.replicas:
            return None
        end = self.log.log_end_offset
        state = self._followers.setdefault(follower, _FollowerState(caught_up_ms=now_ms))
        if fetch_offset >= end:
            state.caught_up_ms = now_ms
        elif state.last_fetch is not None and fetch_offset >= state.last_fetch[1]:
            state.caught_up_ms = state.last_fetch[0]
        state.last_fetch = (now_ms, end)
        state.log_end_offset = fetch_offset
        epoch_start = self.epochs.entries[-1][1] if self.epochs.entries else 0
        grown = None
        if follower not in self.isr and live and \
                fetch_offset >= max(self.high_watermark, epoch_start):
            grown = (*self.isr, follower)
        self.maybe_increment_leader_hw()
        return grown

    def laggards(self, now_ms: int, lag_ms: int) -> set[int]:
        """ISR followers behind the log end that have not caught up for ``lag_ms``."""
        end = self.log.log_end_offset
        return {m for m in self.isr if m != self.broker_id
                and (s := self._followers.get(m, _FollowerState(caught_up_ms=now_ms)))
                .log_end_offset < end and now_ms - s.caught_up_ms > lag_ms}

    def maybe_increment_leader_hw(self) -> bool:
        """Move the high watermark to what every ISR member has; whether it moved (and
        woke this partition's fetches)."""
        state, partition_log = self.state, self._log
        if state is None or state.leader != self.broker_id or partition_log is None:
            return False
        high = partition_log.log_end_offset
        if len(state.isr) > 1:  # the leader alone: its log end is the high watermark
            for member in state.isr:
                if member != self.broker_id:
                    follower = self._followers.get(member)
                    high = min(high, -1 if follower is None else follower.log_end_offset)
        if high > self.high_watermark:
            self.high_watermark = high
            self.wake(self.tp)
            still = []
            for offset, future in self._waiting:
                if offset <= high:
                    if not future.done():
                        future.set_result(ErrorCode.NONE)
                else:
                    still.append((offset, future))
            self._waiting = still
            return True
        return False

    def release(self, code: ErrorCode) -> None:
        """Answer every waiting produce with ``code``."""
        for _, future in self._waiting:
            if not future.done():
                future.set_result(code)
        self._waiting = []

    # -- appends ---------------------------------------------------------------------------
    def append_records_to_leader(self, records: bytes, acks: int, now_ms: int,
                                 timeout_ms: int, guard: VerificationStateEntry | None = None
                                 ) -> AppendInfo | Awaitable[AppendInfo]:
        """Append a producer's records; the info at once when ``acks`` is already satisfied,
        else an awaitable of it (module invariants). A transactional batch needs its
        producer's ongoing transaction here or the ``guard`` of its verification
        (``start_verification``; KIP-890), else INVALID_TXN_STATE."""
        min_isr = self._enough_replicas(acks)
        info = self.log.append(records, now_ms=now_ms, leader_epoch=self.leader_epoch,
                               verify=True, guard=guard)
        if not info.duplicate:
            self.appended()
        return self._acknowledged(info, min_isr, timeout_ms)

    def start_verification(self, producer_id: int, epoch: int
                           ) -> VerificationStateEntry | None:
        """The guard to verify a transactional batch of ``producer_id`` at ``epoch`` with
        (the transaction coordinator is asked before the append shows it); None when none
        is needed (its transaction is ongoing here)."""
        state = self.log.producer_state
        if not state.needs_verification(producer_id, epoch):
            return None
        return state.start_verification(producer_id, epoch)

    def append_marker_to_leader(self, kind: ControlType, producer_id: int, producer_epoch: int,
                                coordinator_epoch: int, now_ms: int, timeout_ms: int
                                ) -> AppendInfo | Awaitable[AppendInfo]:
        """A transaction marker, appended as acks=all (Kafka's too)."""
        min_isr = self._enough_replicas(-1)
        info = self.log.append_marker(kind, producer_id, producer_epoch, coordinator_epoch,
                                      now_ms=now_ms, leader_epoch=self.leader_epoch)
        self.appended()
        return self._acknowledged(info, min_isr, timeout_ms)

    def appended(self) -> None:
        """Something was appended to the leader's log (an internal topic's record)."""
        if not self.maybe_increment_leader_hw():
            self.wake(self.tp)  # the log end moved (followers' fetches) and the HW did not

    def _enough_replicas(self, acks: int) -> int:
        """The ISR minimum an append with ``acks`` must keep (0: none, acks 0 or 1); raises
        NOT_ENOUGH_REPLICAS, before the append, when the ISR is already below it."""
        if acks != -1:
            return 0
        min_isr = self.min_insync_replicas
        if len(self.isr) < min_isr:
            raise KafkaError(f"{self.name}: {len(self.isr)} in-sync replicas, "
                             f"min.insync.replicas is {min_isr}", ErrorCode.NOT_ENOUGH_REPLICAS)
        return min_isr

    @property
    def min_insync_replicas(self) -> int:
        return min(int(self.log.config.get("min.insync.replicas")), max(len(self.replicas), 1))

    def _acknowledged(self, info: AppendInfo, min_isr: int, timeout_ms: int
                      ) -> AppendInfo | Awaitable[AppendInfo]:
        """``info`` when the append needs no more (``min_isr`` 0: acks 0 or 1; or the high
        watermark passed it with the ISR at its minimum), else an awaitable of it."""
        if min_isr == 0 or (self.high_watermark > info.last_offset and len(self.isr) >= min_isr):
            return info
        return self._when_replicated(info, timeout_ms)

    async def _when_replicated(self, info: AppendInfo, timeout_ms: int) -> AppendInfo:
        code = await self._replicated(info.last_offset + 1, timeout_ms / 1000)
        if code != ErrorCode.NONE:
            raise KafkaError(f"{self.name}: acks=all not satisfied", code)
        return info

    async def _replicated(self, offset: int, timeout_s: float) -> ErrorCode:
        """acks=all's answer for what is below ``offset``: NONE once the high watermark
        reached it (every ISR member has it) with the ISR at its minimum,
        NOT_ENOUGH_REPLICAS_AFTER_APPEND below it, REQUEST_TIMED_OUT, or
        NOT_LEADER_OR_FOLLOWER if leadership went."""
        code = await self._high_watermark_reached(offset, timeout_s)
        if code == ErrorCode.NONE and len(self.isr) < self.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return code

    async def _high_watermark_reached(self, offset: int, timeout_s: float) -> ErrorCode:
        self.maybe_increment_leader_hw()
        if self.high_watermark >= offset:
            return ErrorCode.NONE
        if not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        self._waiting.append((offset, future))
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT

    async def internal_replicated(self, timeout_s: float) -> ErrorCode:
        """Wait until the ISR has everything appended here (as acks=all)."""
        if not self.local:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return await self._replicated(self.log.log_end_offset, timeout_s)
