"""Writing transaction markers into this broker's partitions: what WriteTxnMarkers asks of a
partition leader, and what the local transaction coordinator asks directly.

Invariants:
- A marker is appended with the producer's id and epoch and the coordinator's epoch
  (``PartitionLog.append_marker``); fetches waiting on the partition are woken, and a marker
  in ``__consumer_offsets`` completes the transaction's offsets in the group coordinator
  (they count from a COMMIT on, never after an ABORT).
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


def write_marker(broker: Broker, tp: TopicPartition, producer_id: int, producer_epoch: int,
                 commit: bool, coordinator_epoch: int) -> ErrorCode:
    """Append one marker; the error code a WriteTxnMarkers response carries for it."""
    topic, partition = tp
    try:
        partition_log = broker.get_log(topic, partition)
        partition_log.append_marker(ControlType.COMMIT if commit else ControlType.ABORT,
                                    producer_id, producer_epoch, coordinator_epoch,
                                    now_ms=broker.now_ms(), leader_epoch=broker.leader_epoch)
    except KafkaError as exc:
        return exc.code
    broker.notify_append(tp)
    if topic == OFFSETS_TOPIC:
        broker.coordinator.complete_txn(partition, producer_id, commit)
    return ErrorCode.NONE


def local_marker_writer(broker: Broker) -> MarkerWriter:
    """The transaction coordinator's marker writer on a single node: this broker leads every
    partition, so markers are appended here directly."""

    async def write(partitions: list[TopicPartition], producer_id: int, producer_epoch: int,
                    commit: bool, coordinator_epoch: int) -> None:
        for n, tp in enumerate(partitions):
            error = write_marker(broker, tp, producer_id, producer_epoch, commit,
                                 coordinator_epoch)
            if error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                log.info("%s-%d no longer exists: no marker to write there", *tp)
            elif error != ErrorCode.NONE:
                log.warning("marker of producer %d epoch %d in %s-%d refused: %s",
                            producer_id, producer_epoch, *tp, error.name)
            fault_point("txn_marker_written", n)

    return write
