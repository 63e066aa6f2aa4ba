"""Committing consumer offsets to a consumer group: compare-and-set async, retried sync.

Invariants:
- Offsets name the NEXT offset to read (Kafka's convention): committing ``{tp: 10}`` means
  records up to 9 were processed.
- Every commit gets a sequence number from one monotonically increasing counter, async and
  sync alike. An async commit that fails with a retriable error is retried only while it is
  still the newest commit issued (compare-and-set on the sequence number), so a stale retry
  can never overwrite a newer committed offset.
- Async commits run in order on one worker thread; ``commit_async`` never blocks on the
  network. The staleness check and the commit happen under one lock that sync commits also
  take, so an older commit can never reach the broker after a newer one.
- ``commit_sync`` first bumps the sequence (making pending async commits stale), then
  commits on the caller's thread, retrying retriable errors until its timeout and raising
  ``CommitFailedError`` on fatal ones (a rebalance, an unknown member, a fenced instance),
  as Kafka's ``commitSync`` does.
- Works with any Kafka-protocol broker through confluent-kafka; the consumer need not be a
  group member (an ``assign()``-mode consumer commits as a simple consumer).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

log = logging.getLogger(__name__)

Offsets = Mapping[tuple[str, int], int]

RETRIABLE = frozenset({
    KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.REQUEST_TIMED_OUT,
    KafkaError.NETWORK_EXCEPTION, KafkaError._TRANSPORT, KafkaError._TIMED_OUT,
    KafkaError._WAIT_COORD, KafkaError._ALL_BROKERS_DOWN,
})
FATAL = frozenset({
    KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION,
    KafkaError.REBALANCE_IN_PROGRESS, KafkaError.FENCED_INSTANCE_ID,
    KafkaError._FENCED,
})


class CommitFailedError(Exception):
    """A commit that cannot succeed by retrying (the group moved on, or a fatal error)."""

    def __init__(self, message: str, error: KafkaError | None = None) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What happened to one commit: ``committed``, ``superseded`` (a stale async retry was
    dropped) or ``failed`` (with the error)."""

    sequence: int
    offsets: dict[tuple[str, int], int]
    outcome: str
    error: KafkaError | None = None
    attempts: int = 1


RESULTS_KEPT = 1000
"""Async outcomes kept in ``OffsetCommitter.results`` (a stream commits once per batch)."""

CommitFn = Callable[[list[TopicPartition]], None]


def _is_retriable(error: KafkaError) -> bool:
    return error.code() in RETRIABLE or (error.retriable() and error.code() not in FATAL)


class OffsetCommitter:
    """Async (compare-and-set) and sync commits for one consumer.

    ``commit_fn`` defaults to a synchronous ``consumer.commit``; tests inject failures by
    wrapping it. ``on_result`` sees every async outcome (on the worker thread).
    """

    def __init__(self, consumer: Consumer | None = None, *, commit_fn: CommitFn | None = None,
                 retry_backoff_s: float = 0.1, max_async_attempts: int = 10,
                 on_result: Callable[[CommitResult], None] | None = None) -> None:
        if commit_fn is None:
            if consumer is None:
                raise ValueError("OffsetCommitter needs a consumer or a commit_fn")
            commit_fn = consumer_commit_fn(consumer)
        self._commit = commit_fn
        self._backoff = retry_backoff_s
        self._max_attempts = max_async_attempts
        self._on_result = on_result
        self._lock = threading.Lock()
        self._commit_lock = threading.Lock()
        self._sequence = 0
        self._queue: queue.Queue[tuple[int, dict[tuple[str, int], int]] | None] = queue.Queue()
        self._idle = threading.Event()
        self._idle.set()
        self.results: deque[CommitResult] = deque(maxlen=RESULTS_KEPT)
        """The latest async outcomes, oldest first."""
        self._worker = threading.Thread(target=self._run, name="offset-committer", daemon=True)
        self._worker.start()

    # -- sequence --------------------------------------------------------------------------
    def _next_sequence(self) -> int:
        with self._lock:
            self._sequence += 1
            return self._sequence

    # -- async -----------------------------------------------------------------------------
    def commit_async(self, offsets: Offsets) -> int:
        """Queue a commit; returns its sequence number. Empty offsets commit nothing."""
        if not offsets:
            return self._sequence
        sequence = self._next_sequence()
        self._idle.clear()
        self._queue.put((sequence, dict(offsets)))
        return sequence

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            sequence, offsets = item
            result = self._attempt_async(sequence, offsets)
            self.results.append(result)
            if result.outcome == "failed":
                log.warning("async offset commit %d failed: %s", sequence, result.error)
            if self._on_result is not None:
                self._on_result(result)
            if self._queue.empty():
                self._idle.set()

    def _attempt_async(self, sequence: int, offsets: dict[tuple[str, int], int]) -> CommitResult:
        attempts, error = 0, None
        while True:
            with self._commit_lock:  # the check and the commit are one step
                if sequence != self._sequence:
                    # Compare-and-set: a newer commit was issued, so this one must not run
                    # (again): it could only overwrite a newer offset.
                    return CommitResult(sequence, offsets, "superseded", error, attempts)
                attempts += 1
                error = self._try(offsets)
            if error is None:
                return CommitResult(sequence, offsets, "committed", attempts=attempts)
            if not _is_retriable(error) or attempts >= self._max_attempts:
                return CommitResult(sequence, offsets, "failed", error, attempts)
            time.sleep(self._backoff * attempts)

    def flush(self, timeout_s: float = 30) -> bool:
        """Wait until every queued async commit has finished; False on timeout."""
        return self._idle.wait(timeout_s)

    # -- sync ------------------------------------------------------------------------------
    def commit_sync(self, offsets: Offsets, timeout_s: float = 30) -> None:
        """Commit now; retry retriable errors until ``timeout_s``; raise on fatal ones."""
        if not offsets:
            return
        self._next_sequence()  # pending async retries become stale
        deadline = time.monotonic() + timeout_s
        attempt = 0
        while True:
            attempt += 1
            with self._commit_lock:
                error = self._try(dict(offsets))
            if error is None:
                return
            if not _is_retriable(error):
                raise CommitFailedError(f"offset commit failed: {error.str()}", error)
            if time.monotonic() + self._backoff * attempt > deadline:
                raise CommitFailedError(
                    f"offset commit still failing after {attempt} attempts: {error.str()}", error)
            time.sleep(self._backoff * attempt)

    def _try(self, offsets: dict[tuple[str, int], int]) -> KafkaError | None:
        partitions = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        try:
            self._commit(partitions)
        except KafkaException as exc:
            return exc.args[0]
        return None

    def close(self, timeout_s: float = 30) -> None:
        """Finish queued async commits, then stop the worker thread."""
        self.flush(timeout_s)
        self._queue.put(None)
        self._worker.join(timeout_s)


def consumer_commit_fn(consumer: Consumer) -> CommitFn:
    """A synchronous commit through ``consumer`` that raises on any partition's error."""

    def commit(partitions: list[TopicPartition]) -> None:
        result = consumer.commit(offsets=partitions, asynchronous=False)
        for tp in result or ():
            if tp.error is not None:
                raise KafkaException(tp.error)

    return commit
