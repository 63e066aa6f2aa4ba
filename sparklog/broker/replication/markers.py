"""Transaction markers written into the partitions this broker leads
(``ReplicaManager.write_marker``): what WriteTxnMarkers asks of a partition leader, and what
the marker channel asks directly for the partitions this broker leads itself.

Invariants:
- A marker is appended with the producer's id and epoch and the coordinator's epoch
  (``PartitionLog.append_marker``); fetches waiting on the partition are woken, and a marker
  in ``__consumer_offsets`` completes the transaction's offsets in the group coordinator
  (they count from a COMMIT on, never after an ABORT).
- Only the partition's leader writes a marker, as an acks=all append: the answer waits
  until the high watermark passed it (NOT_ENOUGH_REPLICAS below ``min.insync.replicas``,
  REQUEST_TIMED_OUT after ``MARKER_REPLICATION_TIMEOUT_MS``, NOT_LEADER_OR_FOLLOWER
  elsewhere: the coordinator retries those), and a transaction's offsets count in the group
  coordinator only then.
- A partition that no longer exists has nothing to end: it is skipped. A marker from an
  epoch the partition already saw superseded is refused (INVALID_PRODUCER_EPOCH) and the
  rest are still written, as Kafka's coordinator gives up on such a marker (``GIVEN_UP``).
"""

from __future__ import annotations

import logging

from sparklog.errors import ErrorCode

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

MARKER_REPLICATION_TIMEOUT_MS = 5000
"""How long a leader waits for its ISR to take a marker before answering REQUEST_TIMED_OUT
(the coordinator then writes it again)."""

GIVEN_UP = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_PRODUCER_EPOCH,
                      ErrorCode.TRANSACTION_COORDINATOR_FENCED})
"""Marker errors that end the marker's writing: nothing left to end there, or a newer
producer or coordinator already ended it."""


def log_marker_error(tp: TopicPartition, producer_id: int, producer_epoch: int,
                     error: ErrorCode) -> None:
    """Say why a marker the coordinator gives up on was not written."""
    if error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        log.info("%s-%d no longer exists: no marker to write there", *tp)
    else:
        log.warning("marker of producer %d epoch %d in %s-%d refused: %s",
                    producer_id, producer_epoch, *tp, error.name)
