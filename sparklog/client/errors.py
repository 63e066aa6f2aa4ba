"""How the Kafka client fails: for good (``KafkaClientError``), or worth a retry.

Invariants:
- A ``KafkaClientError`` message names the broker, API or partition and the Kafka error
  (``sparklog.errors.error_name``: Kafka's name and the code, ``NOT_LEADER_OR_FOLLOWER (6)``).
- ``RETRIABLE`` holds the error codes after which a request is retried once the cached
  leader is dropped (Kafka's retriable metadata and leadership errors); ``RetriableError``
  carries such a failure, or a dropped connection, to the client's retry loop and never
  leaves the client.
"""

from __future__ import annotations

from sparklog.errors import ErrorCode, error_name

RETRIABLE = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.REPLICA_NOT_AVAILABLE,
})


COORDINATOR_RETRIABLE = frozenset({
    ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS,
})
"""Errors after which a coordinator request is retried with a fresh FindCoordinator."""


class KafkaClientError(RuntimeError):
    """A request failed for good: the broker, API or partition and the Kafka error named."""

    @classmethod
    def of(cls, what: str, code: int, message: str | None = None) -> KafkaClientError:
        """``what`` failed with Kafka error ``code`` (and the broker's ``message``)."""
        return cls(f"{what} failed: {error_name(code)}" + (f": {message}" if message else ""))


class RetriableError(Exception):
    """A failure worth retrying after a metadata refresh (wrapped for the retry loop)."""


