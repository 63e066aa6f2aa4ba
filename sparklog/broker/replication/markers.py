"""Writing transaction markers into the partitions this broker leads: what WriteTxnMarkers
asks of a partition leader, and what the transaction coordinator of a single node asks
directly.

Invariants:
- A marker is appended with the producer's id and epoch and the coordinator's epoch
  (``PartitionLog.append_marker``); fetches waiting on the partition are woken, and a marker
  in ``__consumer_offsets`` completes the transaction's offsets in the group coordinator
  (they count from a COMMIT on, never after an ABORT).
- In a cluster only the partition's leader writes a marker, as an acks=all append
  (``ReplicaManager.append_marker``): the answer waits until the high watermark passed it
  (NOT_ENOUGH_REPLICAS below ``min.insync.replicas``, REQUEST_TIMED_OUT after
  ``MARKER_REPLICATION_TIMEOUT_MS``, NOT_LEADER_OR_FOLLOWER elsewhere: the coordinator
  retries those), and a transaction's offsets count in the group coordinator only then.
- A partition that no longer exists has nothing to end: it is skipped. A marker from an
  epoch the partition already saw superseded is refused (INVALID_PRODUCER_EPOCH) and the
  rest are still written, as Kafka's coordinator gives up on such a marker.
- ``fault_point("txn_marker_written", n)`` follows the n-th marker of a transaction, so a
  crash test can stop the broker between two markers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sparklog.coordinator.group_records import OFFSETS_TOPIC
from sparklog.coordinator.txn_coordinator import MarkerWriter
from sparklog.errors import ErrorCode, KafkaError
from sparklog.faults import fault_point
from sparklog.record.control import ControlType

if TYPE_CHECKING:
    from sparklog.broker.state import Broker

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

MARKER_REPLICATION_TIMEOUT_MS = 5000
"""How long a leader waits for its ISR to take a marker before answering REQUEST_TIMED_OUT
(the coordinator then writes it again)."""

GIVEN_UP = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_PRODUCER_EPOCH,
                      ErrorCode.TRANSACTION_COORDINATOR_FENCED})
"""Marker errors that end the marker's writing: nothing left to end there, or a newer
producer or coordinator already ended it."""


async def write_marker(broker: Broker, tp: TopicPartition, producer_id: int,
                       producer_epoch: int, commit: bool, coordinator_epoch: int) -> ErrorCode:
    """Append one marker (replicated in a cluster); the error code a WriteTxnMarkers
    response carries for it."""
    topic, partition = tp
    kind = ControlType.COMMIT if commit else ControlType.ABORT
    try:
        if broker.cluster is None:
            broker.get_log(topic, partition).append_marker(
                kind, producer_id, producer_epoch, coordinator_epoch, now_ms=broker.now_ms(),
                leader_epoch=broker.leader_epoch)
            broker.notify_append(tp)
        else:
            await broker.cluster.append_marker(topic, partition, kind, producer_id,
                                               producer_epoch, coordinator_epoch,
                                               broker.now_ms(), MARKER_REPLICATION_TIMEOUT_MS)
    except KafkaError as exc:
        return exc.code
    if topic == OFFSETS_TOPIC:
        broker.coordinator.complete_txn(partition, producer_id, commit)
    return ErrorCode.NONE


def log_marker_error(tp: TopicPartition, producer_id: int, producer_epoch: int,
                     error: ErrorCode) -> None:
    """Say why a marker the coordinator gives up on was not written."""
    if error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        log.info("%s-%d no longer exists: no marker to write there", *tp)
    else:
        log.warning("marker of producer %d epoch %d in %s-%d refused: %s",
                    producer_id, producer_epoch, *tp, error.name)


def local_marker_writer(broker: Broker) -> MarkerWriter:
    """The transaction coordinator's marker writer on a single node: this broker leads every
    partition, so markers are appended here directly."""

    async def write(partitions: list[TopicPartition], producer_id: int, producer_epoch: int,
                    commit: bool, coordinator_epoch: int) -> None:
        for n, tp in enumerate(partitions):
            error = await write_marker(broker, tp, producer_id, producer_epoch, commit,
                                       coordinator_epoch)
            if error != ErrorCode.NONE:
                log_marker_error(tp, producer_id, producer_epoch, error)
            fault_point("txn_marker_written", n)

    return write
