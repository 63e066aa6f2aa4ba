"""ListOffsets (key 2), v0-v11.

Behaviour, as Kafka's broker without tiered storage: per partition, the timestamp asked for
is answered with an offset (and for a record lookup its timestamp; the leader epoch from v4):
- -1 latest: the high watermark, or under read_committed (``isolation_level`` 1, v2+) the
  last stable offset, with the current leader epoch.
- -2 earliest: the log start offset, with the epoch it was written in.
- -3 max timestamp (v7+, KIP-734): the offset and timestamp of the record with the largest
  timestamp (the first such record), with its batch's leader epoch; offset -1 when there is
  no record or it is not below the high watermark (the last stable offset under
  read_committed) yet.
- -4 earliest local (v8+, KIP-405): the log start offset, as -2 (the whole log is local).
- -5 latest tiered (v9+, KIP-1005) and -6 earliest pending upload (v11+, KIP-1023): offset
  -1 and leader epoch -1, Kafka's answer for a topic without remote storage.
- A timestamp >= 0: the first record whose timestamp is at or after it, with that record's
  timestamp, or offset -1 when there is none below the high watermark (the last stable
  offset under read_committed).
A negative timestamp the request's version does not have (-3 before v7, -4 before v8, -5
before v9, -6 before v11, any other) is UNSUPPORTED_VERSION for that partition. v6 is the
first flexible version; v10's ``timeout_ms`` bounds a wait on remote storage (KIP-1075),
which a broker without tiering never has, so it is answered at once.
Only the partition's leader answers (NOT_LEADER_OR_FOLLOWER elsewhere); DESCRIBE on the
topic is required (TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.responses import per_partition
from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode, KafkaError
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey, IsolationLevel

if TYPE_CHECKING:
    from kio.schema.list_offsets.v11.request import ListOffsetsRequest

    from sparklog.broker.replication.partition import Partition


LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -4, -5, -6
FIRST_VERSION = {LATEST: 0, EARLIEST: 0, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8,
                 LATEST_TIERED: 9, EARLIEST_PENDING_UPLOAD: 11}
"""The first version of each special timestamp (Kafka's ``timestampMinSupportedVersion``)."""


@handles(ApiKey.LIST_OFFSETS, versions=(0, 11))
async def list_offsets(broker: Broker, header: RequestHeader,
                       request: ListOffsetsRequest) -> Any:
    build = Build(header)
    committed = getattr(request, "isolation_level", 0) == IsolationLevel.READ_COMMITTED
    return build.response(topics=per_partition(
        build, request.topics, "ListOffsetsTopicResponse",
        lambda topic, p: _lookup(build, broker, topic, p, committed)))


def _lookup(build: Build, broker: Broker, topic: str, p: Any, committed: bool) -> Any:
    def answer(code: ErrorCode, found: tuple[int, int, int] = (-1, -1, -1)) -> Any:
        offset, timestamp, epoch = found
        return build("ListOffsetsPartitionResponse", partition_index=p.partition_index,
                     error_code=code, timestamp=timestamp, offset=offset, leader_epoch=epoch,
                     old_style_offsets=(offset,) if offset >= 0 else ())

    if p.timestamp < 0 and FIRST_VERSION.get(p.timestamp, build.version + 1) > build.version:
        return answer(ErrorCode.UNSUPPORTED_VERSION)
    try:
        broker.security.require(Operation.DESCRIBE, ResourceType.TOPIC, topic)
        partition = broker.leader_partition(topic, p.partition_index)
    except KafkaError as exc:
        return answer(exc.code)
    return answer(ErrorCode.NONE, _offset(partition, p.timestamp, committed))


def _offset(partition: Partition, timestamp: int, committed: bool) -> tuple[int, int, int]:
    """(offset, timestamp, leader epoch) answering ``timestamp`` (module docstring)."""
    log, high = partition.log, partition.high_watermark
    fetchable = min(log.last_stable_offset, high) if committed else high
    if timestamp == LATEST:
        return fetchable, -1, partition.leader_epoch
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        start = log.log_start_offset
        return start, -1, partition.epochs.epoch_for_offset(start)
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1, -1
    if timestamp == MAX_TIMESTAMP:
        found = log.max_timestamp_record()
    else:
        record = log.offset_for_timestamp(timestamp)
        found = None if record is None else (*record, partition.leader_epoch)
    return (-1, -1, -1) if found is None or found[0] >= fetchable else found
