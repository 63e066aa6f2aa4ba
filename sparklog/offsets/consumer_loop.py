"""A consumer loop with Kafka's shutdown-hook pattern: poll, process, commit, close.

Invariants:
- Only processed records are committed: after ``process(message)`` returns, the partition's
  commit position becomes ``offset + 1``. Commits run asynchronously (compare-and-set) every
  ``commit_interval_s``, synchronously when partitions are revoked and once more at close.
- A record whose processing raises pauses its partition; after ``retry_backoff_s`` the
  partition is sought back to that record and resumed, so records are retried in order and
  nothing after it is processed first. After ``max_attempts`` failures ``on_give_up`` is
  called (for example, to send it to a dead-letter topic) and the loop moves past it; with no
  ``on_give_up`` the error is raised and the loop closes (committing what was processed).
- ``wakeup()`` only requests a stop (``sparklog.signals.Stop``), so it is safe from another
  thread or a signal handler; the loop notices within one poll timeout, then commits
  synchronously and closes the consumer. After ``install_signal_handlers`` the first SIGTERM
  or SIGINT does the same, and a second one aborts as it would have without the loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, Message, TopicPartition

from sparklog.offsets.committer import OffsetCommitter
from sparklog.signals import Stop

log = logging.getLogger(__name__)

TP = tuple[str, int]


class ConsumerLoop:
    def __init__(
        self,
        consumer: Consumer,
        topics: list[str],
        process: Callable[[Message], None],
        *,
        committer: OffsetCommitter | None = None,
        commit_interval_s: float = 1.0,
        max_attempts: int = 3,
        retry_backoff_s: float = 0.5,
        on_give_up: Callable[[Message, Exception], None] | None = None,
        poll_timeout_s: float = 0.2,
    ) -> None:
        self.consumer = consumer
        self.topics = topics
        self.process = process
        self.committer = committer or OffsetCommitter(consumer)
        self.commit_interval_s = commit_interval_s
        self.max_attempts = max_attempts
        self.retry_backoff_s = retry_backoff_s
        self.on_give_up = on_give_up
        self.poll_timeout_s = poll_timeout_s
        self.processed: dict[TP, int] = {}  # next offset to read, per partition
        self.processed_count = 0
        self._committed: dict[TP, int] = {}
        self._paused: dict[TP, tuple[float, int]] = {}  # resume time, offset to retry
        self._attempts: dict[tuple[TP, int], int] = {}
        self._stop = Stop()

    def wakeup(self) -> None:
        """Ask the loop to stop (thread- and signal-safe)."""
        self._stop.request()

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT call ``wakeup`` (Kafka's shutdown hook) until the loop closes."""
        self._stop.install()

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> None:
        self.consumer.subscribe(self.topics, on_revoke=self._on_revoke)
        next_commit = time.monotonic() + self.commit_interval_s
        try:
            while not self._stop.requested:
                self._resume_due()
                message = self.consumer.poll(self.poll_timeout_s)
                if message is not None:
                    self._handle(message)
                if time.monotonic() >= next_commit:
                    self._commit_async()
                    next_commit = time.monotonic() + self.commit_interval_s
            if self._stop.signal is not None:
                log.info("%s: stopping the consumer loop", self._stop.signal.name)
        finally:
            self.close()

    def _handle(self, message: Message) -> None:
        if message.error() is not None:
            log.warning("consumer error: %s", message.error())
            return
        tp = (message.topic(), message.partition())
        if tp in self._paused:
            return  # fetched before the pause; it is read again after the seek back
        offset = message.offset()
        try:
            self.process(message)
        except Exception as exc:
            self._failed(message, tp, offset, exc)
            return
        self._attempts.pop((tp, offset), None)
        self.processed[tp] = offset + 1
        self.processed_count += 1

    def _failed(self, message: Message, tp: TP, offset: int, exc: Exception) -> None:
        attempts = self._attempts[(tp, offset)] = self._attempts.get((tp, offset), 0) + 1
        if attempts >= self.max_attempts:
            self._attempts.pop((tp, offset), None)
            if self.on_give_up is None:
                raise exc
            log.warning("giving up on %s-%d@%d after %d attempts: %s", *tp, offset, attempts, exc)
            self.on_give_up(message, exc)
            self.processed[tp] = offset + 1
            return
        log.info("pausing %s-%d at %d after attempt %d failed: %s", *tp, offset, attempts, exc)
        self.consumer.pause([TopicPartition(*tp)])
        self._paused[tp] = (time.monotonic() + self.retry_backoff_s * attempts, offset)

    def _resume_due(self) -> None:
        now = time.monotonic()
        for tp, (when, offset) in list(self._paused.items()):
            if now >= when:
                del self._paused[tp]
                self.consumer.seek(TopicPartition(*tp, offset))
                self.consumer.resume([TopicPartition(*tp)])

    # -- commits ---------------------------------------------------------------------------
    def _pending(self, partitions: set[TP] | None = None) -> dict[TP, int]:
        return {tp: off for tp, off in self.processed.items()
                if self._committed.get(tp) != off and (partitions is None or tp in partitions)}

    def _commit_async(self) -> None:
        pending = self._pending()
        if pending:
            self.committer.commit_async(pending)
            self._committed.update(pending)

    def _commit_sync(self, partitions: set[TP] | None = None) -> None:
        pending = self._pending(partitions)
        if pending:
            self.committer.commit_sync(pending)
            self._committed.update(pending)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = {(tp.topic, tp.partition) for tp in partitions}
        try:
            self._commit_sync(revoked)
        except Exception as exc:  # the group moved on; the next owner re-reads these records
            log.warning("commit on revoke failed: %s", exc)
        for tp in revoked:
            self.processed.pop(tp, None)
            self._committed.pop(tp, None)
            self._paused.pop(tp, None)

    def close(self) -> None:
        """Final synchronous commit of everything processed, then close the consumer."""
        try:
            self._commit_sync()
        finally:
            self._stop.restore()
            self.committer.close()
            self.consumer.close()
            log.info("consumer loop closed after %d records", self.processed_count)
