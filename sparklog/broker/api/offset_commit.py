"""OffsetCommit (key 8, v0-v7) and OffsetFetch (key 9, v0-v5).

Behaviour (the checks themselves are ``GroupCoordinator.commit`` and ``fetch_offsets``):
- OffsetCommit v0 has no generation and member: it is a "simple" commit (generation -1,
  empty member id), allowed while the group is Empty, as are v1+ commits that send those
  values. v1's per-partition commit timestamp and v2-v4's ``retention_time`` are ignored:
  offsets are stamped with the broker's time and expire by ``offsets.retention.minutes``.
  v6 adds the committed leader epoch, v7 ``group.instance.id`` (FENCED_INSTANCE_ID for a
  zombie instance). Every partition of a request is answered; those that pass the checks
  are appended in one batch, so they are stored together or not at all. The
  answer waits until the partition's ISR has the batch (REQUEST_TIMED_OUT after
  ``COMMIT_REPLICATION_TIMEOUT_S``, NOT_COORDINATOR if leadership moved meanwhile,
  COORDINATOR_NOT_AVAILABLE if the ISR is below ``min.insync.replicas``, as Kafka's acks=all
  append of a commit answers); TxnOffsetCommit waits the same way.
- OffsetFetch returns offset -1 and empty metadata for a partition without a committed
  offset (also for unknown groups and topics). From v2 ``topics`` null means every partition
  the group committed, and errors that concern the whole request are top-level (with no
  partitions); before v2 they are repeated in each requested partition.
- With an authorizer, as Kafka's: OffsetCommit needs READ on the GROUP (else every
  partition is GROUP_AUTHORIZATION_FAILED) and on each TOPIC (TOPIC_AUTHORIZATION_FAILED
  for its partitions; the others are committed); OffsetFetch needs DESCRIBE on the GROUP
  and lists only describable topics (a named one it may not describe is
  TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.broker.state import Broker
from sparklog.coordinator.group_coordinator import NO_GENERATION, OffsetCommit
from sparklog.coordinator.group_records import OffsetAndMetadata, TopicPartition
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.offset_commit.v7.request import OffsetCommitRequest
    from kio.schema.offset_fetch.v5.request import OffsetFetchRequest


NO_OFFSET = -1
NO_LEADER_EPOCH = -1
COMMIT_REPLICATION_TIMEOUT_S = 5.0  # Kafka's offsets.commit.timeout.ms


@handles(ApiKey.OFFSET_COMMIT, versions=(0, 7))
async def offset_commit(broker: Broker, header: RequestHeader,
                        request: OffsetCommitRequest) -> Any:
    generation = request.generation_id_or_member_epoch if header.api_version >= 1 \
        else NO_GENERATION
    offsets, refused = authorized_offsets(broker, request.group_id,
                                          requested_offsets(request.topics))
    errors = broker.coordinator.commit(request.group_id, request.member_id,
                                       getattr(request, "group_instance_id", None), generation,
                                       offsets) if offsets else {}
    errors = await replicated(broker, request.group_id, errors)
    return commit_response(Build(header), request.topics, {**errors, **refused}, "OffsetCommit")


async def replicated(broker: Broker, group_id: str, errors: dict[TopicPartition, ErrorCode]
                     ) -> dict[TopicPartition, ErrorCode]:
    """``errors`` of a commit once the ISR has what it stored (the partitions stored then
    answer the replication's error instead of NONE)."""
    if ErrorCode.NONE not in errors.values():
        return errors
    code = await broker.replicas.offsets_replicated(group_id, COMMIT_REPLICATION_TIMEOUT_S)
    return {tp: code if e == ErrorCode.NONE else e for tp, e in errors.items()}


def authorized_offsets(broker: Broker, group_id: str,
                       offsets: dict[TopicPartition, OffsetCommit]
                       ) -> tuple[dict[TopicPartition, OffsetCommit],
                                  dict[TopicPartition, ErrorCode]]:
    """The offsets the principal may commit (READ on the GROUP and on each TOPIC), and the
    errors of the others."""
    security = broker.security
    if not security.authorize(Operation.READ, ResourceType.GROUP, group_id):
        return {}, dict.fromkeys(offsets, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    readable = {topic for topic, _ in offsets
                if security.authorize(Operation.READ, ResourceType.TOPIC, topic)}
    return ({tp: o for tp, o in offsets.items() if tp[0] in readable},
            {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED for tp in offsets
             if tp[0] not in readable})


def requested_offsets(topics: Any) -> dict[TopicPartition, OffsetCommit]:
    """The offsets an OffsetCommit or TxnOffsetCommit request carries."""
    return {(topic.name, p.partition_index): OffsetCommit(
                p.committed_offset, getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH),
                p.committed_metadata)
            for topic in topics for p in topic.partitions}


def commit_response(build: Build, topics: Any, errors: dict[TopicPartition, ErrorCode],
                    api: str) -> Any:
    """An OffsetCommit or TxnOffsetCommit (``api``) response: each requested partition with
    its error."""
    return build.response(topics=tuple(
        build(f"{api}ResponseTopic", name=topic.name, partitions=tuple(
            build(f"{api}ResponsePartition", partition_index=p.partition_index,
                  error_code=errors[(topic.name, p.partition_index)])
            for p in topic.partitions))
        for topic in topics))


@handles(ApiKey.OFFSET_FETCH, versions=(0, 5))
async def offset_fetch(broker: Broker, header: RequestHeader,
                       request: OffsetFetchRequest) -> Any:
    build = Build(header)
    wanted = None if request.topics is None else [
        (topic.name, partition) for topic in request.topics
        for partition in topic.partition_indexes]
    security = broker.security
    if security.authorize(Operation.DESCRIBE, ResourceType.GROUP, request.group_id):
        error, committed = broker.coordinator.fetch_offsets(request.group_id, wanted)
    else:
        error, committed = ErrorCode.GROUP_AUTHORIZATION_FAILED, {}
    if error and header.api_version >= 2:
        return build.response(error_code=error, topics=())
    rows: list[tuple[TopicPartition, OffsetAndMetadata | None]] = (
        [(tp, None) for tp in wanted or ()] if error else list(committed.items()))
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), found in rows:
        refused = not security.authorize(Operation.DESCRIBE, ResourceType.TOPIC, topic)
        if refused and wanted is None:
            continue  # all offsets asked for: those of undescribable topics are left out
        found = None if refused else found
        by_topic.setdefault(topic, []).append(build(
            "OffsetFetchResponsePartition", partition_index=partition,
            committed_offset=NO_OFFSET if found is None else found.offset,
            committed_leader_epoch=NO_LEADER_EPOCH if found is None else found.leader_epoch,
            metadata="" if found is None else found.metadata,
            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED if refused and not error
            else error))
    return build.response(error_code=ErrorCode.NONE, topics=tuple(
        build("OffsetFetchResponseTopic", name=topic, partitions=tuple(partitions))
        for topic, partitions in by_topic.items()))
