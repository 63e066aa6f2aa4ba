"""OffsetCommit (key 8, v0-v10) and OffsetFetch (key 9, v0-v10).

Behaviour (the checks themselves are ``GroupCoordinator.commit`` and ``fetch_offsets``):
- OffsetCommit v0 has no generation and member: it is a "simple" commit (generation -1,
  empty member id), allowed while the group is Empty, as are v1+ commits that send those
  values. v1's per-partition commit timestamp and v2-v4's ``retention_time`` are ignored:
  offsets are stamped with the broker's time and expire by ``offsets.retention.minutes``.
  v6 adds the committed leader epoch, v7 ``group.instance.id`` (FENCED_INSTANCE_ID for a
  zombie instance), v8 is flexible. v9 is KIP-848's version: for a consumer group
  ``generation_id_or_member_epoch`` is the member's epoch (UNKNOWN_MEMBER_ID for a member
  the group lacks, STALE_MEMBER_EPOCH for another epoch; epoch -1 commits only while the
  group is empty; a consumer group's member committing below v9 is UNSUPPORTED_VERSION),
  for a classic group the generation; a member's commit (generation >= 0) to a group
  that does not exist is GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before (as Kafka).
  v10 names topics by ``topic_id`` (UNKNOWN_TOPIC_ID for an id no topic has; the answer
  carries the ids). Every partition of a request is answered; those that
  pass the checks are appended in one batch, so they are stored together or not at all.
  The answer waits until the partition's ISR has the batch (REQUEST_TIMED_OUT after
  ``COMMIT_REPLICATION_TIMEOUT_S``, NOT_COORDINATOR if leadership moved meanwhile,
  COORDINATOR_NOT_AVAILABLE if the ISR is below ``min.insync.replicas``, as Kafka's acks=all
  append of a commit answers); TxnOffsetCommit waits the same way.
- OffsetFetch returns offset -1 and empty metadata for a partition without a committed
  offset (also for unknown groups and topics). From v2 ``topics`` null means every partition
  the group committed, and errors that concern the whole request are top-level (with no
  partitions); before v2 they are repeated in each requested partition. v6 is flexible.
  v7's ``require_stable`` (KIP-447) answers UNSTABLE_OFFSET_COMMIT (offset -1) for a
  partition of the group with a transactional commit still open, until its marker. v8
  batches ``groups``, each answered on its own (its error, its topics). v9 adds
  ``member_id`` and ``member_epoch``, which Kafka only checks for KIP-848 consumer groups
  (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH; a request naming no member, epoch -1, is an
  admin's and not checked); a classic group's are not checked. v10 names topics by ``topic_id``
  in the request and the answer (UNKNOWN_TOPIC_ID for an unknown id; with ``topics`` null,
  the topics that have an id).
- With an authorizer, as Kafka's: OffsetCommit needs READ on the GROUP (else every
  partition is GROUP_AUTHORIZATION_FAILED) and on each TOPIC (TOPIC_AUTHORIZATION_FAILED
  for its partitions; the others are committed); OffsetFetch needs DESCRIBE on each GROUP
  and lists only describable topics (a named one it may not describe is
  TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.broker.state import Broker
from sparklog.coordinator.group_coordinator import NO_GENERATION, OffsetCommit
from sparklog.coordinator.group_records import TopicPartition
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.offset_commit.v10.request import OffsetCommitRequest
    from kio.schema.offset_fetch.v10.request import OffsetFetchRequest


NO_OFFSET = -1
NO_LEADER_EPOCH = -1
COMMIT_REPLICATION_TIMEOUT_S = 5.0  # Kafka's offsets.commit.timeout.ms
UNKNOWN_TOPIC = ""
"""The name of a topic named by an id no topic has (no topic is named "")."""
_COMMIT_GROUP_ID_NOT_FOUND = 9  # OffsetCommit v9+: an unknown group is GROUP_ID_NOT_FOUND
_FETCH_TOP_LEVEL_ERROR = 2  # OffsetFetch v2+: a group's error is top-level
_FETCH_BATCHED = 8  # OffsetFetch v8+: groups
_FETCH_TOPIC_IDS = 10  # OffsetFetch v10+: topics by id


@handles(ApiKey.OFFSET_COMMIT, versions=(0, 10))
async def offset_commit(broker: Broker, header: RequestHeader,
                        request: OffsetCommitRequest) -> Any:
    version = header.api_version
    generation = request.generation_id_or_member_epoch if version >= 1 else NO_GENERATION
    names = topic_names(broker, request.topics)
    requested = requested_offsets(request.topics, names)
    # as Kafka: a group the principal may not read refuses every partition, even one of an
    # unknown topic id
    unknown = {tp: ErrorCode.UNKNOWN_TOPIC_ID for tp in requested if tp[0] == UNKNOWN_TOPIC
               } if broker.security.authorize(Operation.READ, ResourceType.GROUP,
                                              request.group_id) else {}
    offsets, refused = authorized_offsets(
        broker, request.group_id, {tp: o for tp, o in requested.items() if tp not in unknown})
    errors = broker.coordinator.commit(
        request.group_id, request.member_id, getattr(request, "group_instance_id", None),
        generation, offsets, unknown_group_not_found=version >= _COMMIT_GROUP_ID_NOT_FOUND
    ) if offsets else {}
    errors = await replicated(broker, request.group_id, errors)
    return commit_response(Build(header), request.topics, {**errors, **refused, **unknown},
                           "OffsetCommit", names)


def topic_names(broker: Broker, topics: Sequence[Any]) -> list[str]:
    """Each requested topic's name: its own, or (OffsetCommit and OffsetFetch v10+, which
    name topics by id) its id's; ``UNKNOWN_TOPIC`` for an id no topic has."""
    return [topic.name if hasattr(topic, "name")
            else broker.topic_named(topic.topic_id) or UNKNOWN_TOPIC for topic in topics]


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


def requested_offsets(topics: Sequence[Any], names: Sequence[str] | None = None
                      ) -> dict[TopicPartition, OffsetCommit]:
    """The offsets an OffsetCommit or TxnOffsetCommit request carries (under ``names``, one
    per topic, where the topics are named by id)."""
    names = names or [topic.name for topic in topics]
    return {(name, p.partition_index): OffsetCommit(
                p.committed_offset, getattr(p, "committed_leader_epoch", NO_LEADER_EPOCH),
                p.committed_metadata)
            for topic, name in zip(topics, names, strict=True) for p in topic.partitions}


def commit_response(build: Build, topics: Sequence[Any],
                    errors: dict[TopicPartition, ErrorCode], api: str,
                    names: Sequence[str] | None = None) -> Any:
    """An OffsetCommit or TxnOffsetCommit (``api``) response: each requested partition with
    its error, its topic named as the request named it (name or id)."""
    names = names or [topic.name for topic in topics]
    return build.response(topics=tuple(
        build(f"{api}ResponseTopic", name=name, topic_id=getattr(topic, "topic_id", None),
              partitions=tuple(
                  build(f"{api}ResponsePartition", partition_index=p.partition_index,
                        error_code=errors[(name, p.partition_index)])
                  for p in topic.partitions))
        for topic, name in zip(topics, names, strict=True)))


@handles(ApiKey.OFFSET_FETCH, versions=(0, 10))
async def offset_fetch(broker: Broker, header: RequestHeader,
                       request: OffsetFetchRequest) -> Any:
    build = Build(header)
    version = header.api_version
    require_stable = getattr(request, "require_stable", False)
    if version < _FETCH_BATCHED:
        error, topics = _fetch_group(broker, request.group_id, request.topics, require_stable,
                                     version)
        return build.response(error_code=error, topics=topics)
    groups = []
    for group in request.groups:
        error, topics = _fetch_group(broker, group.group_id, group.topics, require_stable,
                                     version, getattr(group, "member_id", None),
                                     getattr(group, "member_epoch", -1))
        groups.append({"group_id": group.group_id, "error_code": error, "topics": topics})
    return build.response(groups=groups)


def _fetch_group(broker: Broker, group_id: str, topics: Sequence[Any] | None,
                 require_stable: bool, version: int, member_id: str | None = None,
                 member_epoch: int = -1) -> tuple[ErrorCode, list[dict[str, Any]]]:
    """One group's OffsetFetch answer: its top-level error and its topics (as dicts the
    response's entities are built from, whichever version's names they have); the member
    (v9+) is checked for a consumer group."""
    names = None if topics is None else topic_names(broker, topics)
    wanted = None if topics is None or names is None else [
        (name, partition) for topic, name in zip(topics, names, strict=True)
        for partition in topic.partition_indexes if name != UNKNOWN_TOPIC]
    security = broker.security
    if security.authorize(Operation.DESCRIBE, ResourceType.GROUP, group_id):
        error, committed = broker.coordinator.fetch_offsets(group_id, wanted, member_id,
                                                            member_epoch)
    else:
        error, committed = ErrorCode.GROUP_AUTHORIZATION_FAILED, {}
    if error and version >= _FETCH_TOP_LEVEL_ERROR:
        return error, []
    unstable = broker.coordinator.unstable_offsets(group_id) if require_stable else set()

    def describable(topic: str) -> bool:
        return security.authorize(Operation.DESCRIBE, ResourceType.TOPIC, topic)

    def partition(topic: str, index: int) -> dict[str, Any]:
        if topic == UNKNOWN_TOPIC:
            code = ErrorCode.UNKNOWN_TOPIC_ID
        elif not describable(topic):
            code = error or ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif (topic, index) in unstable:
            code = ErrorCode.UNSTABLE_OFFSET_COMMIT
        else:
            code = error
        found = committed.get((topic, index)) if code == ErrorCode.NONE else None
        return {"partition_index": index,
                "committed_offset": NO_OFFSET if found is None else found.offset,
                "committed_leader_epoch": NO_LEADER_EPOCH if found is None else found.leader_epoch,
                "metadata": "" if found is None else found.metadata,
                "error_code": code}

    if topics is not None and names is not None:
        return ErrorCode.NONE, [
            {"name": name, "topic_id": getattr(topic, "topic_id", None),
             "partitions": [partition(name, index) for index in topic.partition_indexes]}
            for topic, name in zip(topics, names, strict=True)]
    by_topic: dict[str, list[int]] = {}
    for topic, index in committed:
        by_topic.setdefault(topic, []).append(index)
    ids = {topic: broker.topic_id(topic) for topic in by_topic}
    return ErrorCode.NONE, [  # all offsets: those of undescribable topics are left out
        {"name": topic, "topic_id": ids[topic],
         "partitions": [partition(topic, index) for index in indexes]}
        for topic, indexes in by_topic.items()
        if describable(topic) and (version < _FETCH_TOPIC_IDS or ids[topic] is not None)]
