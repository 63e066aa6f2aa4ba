"""CreateTopics (key 19, v0-v7), DeleteTopics (20, v0-v6), CreatePartitions (37, v0-v3).

Behaviour:
- CreateTopics writes the topic's replica assignment to the replica manager's store
  (ZooKeeper's, or a single node's): ``replication_factor`` replicas, round robin and
  rack-aware over the live brokers, -1 meaning ``default.replication.factor`` (more than
  the live brokers is INVALID_REPLICATION_FACTOR), or the request's manual assignment,
  checked as Kafka checks it (unknown brokers are INVALID_REPLICA_ASSIGNMENT);
  ``num_partitions`` -1 means ``num.partitions``. Every replica then creates its log and
  the controller elects leaders, which the answer waits for (up to the request's
  ``timeout_ms``; a single node's are led at once). Configs are validated with Kafka's
  names (INVALID_CONFIG names the key and the allowed values; Confluent's schema
  validation configs need ``schema.registry.listeners``: ``broker.schema_validation``).
  ``validate_only`` checks everything and changes nothing. Errors are per topic, with a
  message (v1+).
- DeleteTopics and CreatePartitions go through the store too
  (``replication/cluster_topics.py``): the controller deletes a topic, or elects the
  leaders of added partitions, and the answer waits for it up to the request's timeout.
- DeleteTopics: removes the topic's logs and metadata; TOPIC_DELETION_DISABLED when
  ``delete.topic.enable`` is false.
- CreatePartitions: only grows a topic (INVALID_PARTITIONS otherwise); ``validate_only``
  honoured. New partitions start empty at offset 0.
- Internal topics (``__consumer_offsets``, and any the broker marks internal) are neither
  deleted nor given partitions: INVALID_REQUEST naming the topic, as in Kafka, since the
  coordinators place their keys by the partition count and read nothing elsewhere.
- A CreateTopics or CreatePartitions request adding more than 10,000 partitions in all is
  refused whole with POLICY_VIOLATION, as Kafka's controller does; so is one that would take
  this broker past its partition budget (``max.broker.partitions``) or find too few file
  descriptors left to open the new partitions' files (``LogManager.check_partition_budget``:
  the message says which, and the counts). Nothing is created: the check runs before the
  first topic. On a cluster the replicas landing here are estimated as the new replicas
  spread evenly over the live brokers.
- Flexible from CreateTopics v5, DeleteTopics v4, CreatePartitions v2 (v3 is v2 again).
  CreateTopics v5+ (KIP-525) answers what was created (or, with ``validate_only``, would
  be): partition count, replication factor and every topic config with its value and
  source, as DescribeConfigs would; without DESCRIBE_CONFIGS on the topic the configs are
  left out and ``topic_config_error_code`` says TOPIC_AUTHORIZATION_FAILED. v7 answers the
  topic id (the zero id for a ``validate_only`` or failed creation).
- DeleteTopics v5+ carry error messages; v6 names each topic by name or by id (both, or
  neither, is INVALID_REQUEST; an id no topic has is UNKNOWN_TOPIC_ID; a topic named by
  id that the principal may not delete is TOPIC_AUTHORIZATION_FAILED without its name) and
  answers each with its name and id.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.replication import cluster_topics
from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode, KafkaError
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import TOPIC_CONFIG_SOURCES, ApiKey
from sparklog.storage.config import CONFIG_KEYS, render
from sparklog.storage.log_manager import TopicMetadata

if TYPE_CHECKING:
    from kio.schema.create_partitions.v3.request import CreatePartitionsRequest
    from kio.schema.create_topics.v7.request import CreateTopicsRequest
    from kio.schema.delete_topics.v6.request import DeleteTopicsRequest


# Kafka's controller refuses requests adding more partitions than this (MAX_PARTITIONS_PER_BATCH)
# with POLICY_VIOLATION; here each partition also holds open files, so one request must not
# be able to exhaust the descriptors.
MAX_PARTITIONS_PER_REQUEST = 10_000
_TOO_MANY = KafkaError("Excessively large number of partitions per request "
                       f"(at most {MAX_PARTITIONS_PER_REQUEST})", ErrorCode.POLICY_VIOLATION)


def _requested_partitions(broker: Broker, topic: Any) -> int:
    if topic.assignments:
        return len(topic.assignments)
    if topic.num_partitions == -1:
        return broker.config.get_int("num.partitions")
    return max(topic.num_partitions, 0)


def _added_partitions(broker: Broker, topic: Any) -> int:
    current = broker.logs.topics.get(topic.name)
    return max(topic.count - current.partitions, 0) if current is not None else 0


def _replicas_here(broker: Broker, replicas: int) -> int:
    """Of ``replicas`` new replicas spread over the live brokers, how many land on this one
    (all of them on a single node; round robin spreads them evenly on a cluster)."""
    return -(-replicas // max(len(broker.replicas.live), 1))


def _factor(broker: Broker, topic: Any) -> int:
    if topic.assignments:
        return max((len(a.broker_ids) for a in topic.assignments), default=1)
    if topic.replication_factor == -1:
        return broker.config.get_int("default.replication.factor")
    return max(topic.replication_factor, 1)


async def _each(items: Any, action: Callable[[Any], Awaitable[None]], added_partitions: int,
                added_here: int, broker: Broker) -> list[tuple[Any, ErrorCode, str | None]]:
    """Apply ``action`` to every item: (item, error code, message) each; errors are per
    topic, and a request adding too many partitions in all, or more than this broker's
    partition and descriptor budget holds (``added_here`` replicas here), is refused whole
    before anything is created."""
    try:
        if added_partitions > MAX_PARTITIONS_PER_REQUEST:
            raise _TOO_MANY
        broker.logs.check_partition_budget(added_here)
    except KafkaError as exc:
        return [(item, exc.code, str(exc)) for item in items]
    results: list[tuple[Any, ErrorCode, str | None]] = []
    for item in items:
        try:
            await action(item)
        except KafkaError as exc:
            results.append((item, exc.code, str(exc)))
        else:
            results.append((item, ErrorCode.NONE, None))
    return results


@handles(ApiKey.CREATE_TOPICS, versions=(0, 7))
async def create_topics(broker: Broker, header: RequestHeader,
                        request: CreateTopicsRequest) -> Any:
    build = Build(header)
    validate_only = request.validate_only if header.api_version else False
    added = sum(_requested_partitions(broker, t) for t in request.topics)
    here = _replicas_here(broker, sum(_requested_partitions(broker, t) * _factor(broker, t)
                                      for t in request.topics))
    created: dict[str, tuple[TopicMetadata, int]] = {}

    async def create(topic: Any) -> None:
        """Validate the topic locally (name, configs), then write its assignment."""
        if not broker.security.allows_cluster(Operation.CREATE):
            broker.security.require(Operation.CREATE, ResourceType.TOPIC, topic.name)
        partitions = _requested_partitions(broker, topic)
        configs = {c.name: c.value for c in topic.configs if c.value is not None}
        metadata = broker.logs.create_topic(topic.name, partitions, configs,
                                            validate_only=True)
        broker.schema_validation.check_config(metadata.config)
        factor = topic.replication_factor if topic.replication_factor != -1 else \
            broker.config.get_int("default.replication.factor")
        manual = _manual(topic)
        await broker.replicas.create_topic(topic.name, partitions, factor, configs,
                                           request.timeout.total_seconds(), manual,
                                           validate_only)
        created[topic.name] = (metadata, len(next(iter(manual.values()))) if manual
                               else factor)

    results = await _each(request.topics, create, added, here, broker)
    return build.response(topics=tuple(
        _created(build, broker, topic.name, code, message, created.get(topic.name),
                 validate_only) for topic, code, message in results))


FIRST_DESCRIBED = 5
"""CreateTopics answers the created topic's partitions, replicas and configs from v5."""


def _created(build: Build, broker: Broker, name: str, code: ErrorCode, message: str | None,
             created: tuple[TopicMetadata, int] | None, validate_only: bool) -> Any:
    """One CreateTopics answer; from v5 what the topic is (module docstring)."""
    if created is None:
        return build("CreatableTopicResult", name=name, error_code=code,
                     error_message=message, topic_id=None, configs=())
    metadata, factor = created
    config = metadata.config
    described = build.version >= FIRST_DESCRIBED and broker.security.authorize(
        Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, name)
    return build(
        "CreatableTopicResult", name=name, error_code=code, error_message=message,
        topic_id=None if validate_only else broker.topic_id(name),
        num_partitions=metadata.partitions, replication_factor=factor,
        topic_config_error_code=ErrorCode.NONE if described
        else ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        configs=tuple(
            build("CreatableTopicConfigs", name=key, value=render(config.get(key)),
                  read_only=False, config_source=TOPIC_CONFIG_SOURCES[config.source_of(key)],
                  is_sensitive=False)
            for key in CONFIG_KEYS) if described else ())


def _manual(topic: Any) -> dict[int, tuple[int, ...]] | None:
    """A CreateTopics topic's manual assignment (partitions 0..n-1; a count or factor
    besides must be -1 or agree with it); None without one."""
    if not topic.assignments:
        return None
    assignment = {a.partition_index: tuple(a.broker_ids) for a in topic.assignments}
    if topic.num_partitions not in (-1, len(assignment)) or topic.replication_factor not in (
            -1, *{len(r) for r in assignment.values()}):
        raise KafkaError("give either a replica assignment or a partition count and "
                         "replication factor, not both", ErrorCode.INVALID_REQUEST)
    if sorted(assignment) != list(range(len(assignment))):
        raise KafkaError("the assignment's partitions must be 0 to n-1",
                         ErrorCode.INVALID_REPLICA_ASSIGNMENT)
    return assignment


def _current_factor(broker: Broker, name: str) -> int:
    """The replication factor of an existing topic (its first partition's replicas, when
    known here; else 1)."""
    partition = broker.replicas.partitions.get((name, 0))
    return max(len(partition.replicas), 1) if partition is not None else 1


def _refuse_internal(broker: Broker, name: str, change: str) -> None:
    topic = broker.logs.topics.get(name)
    if topic is not None and topic.internal:
        raise KafkaError(f"topic {name} is an internal topic: it cannot be {change}",
                         ErrorCode.INVALID_REQUEST)


@handles(ApiKey.DELETE_TOPICS, versions=(0, 6))
async def delete_topics(broker: Broker, header: RequestHeader,
                        request: DeleteTopicsRequest) -> Any:
    build = Build(header)
    replicas = broker.replicas
    named = getattr(request, "topics", None)
    wanted = [(t.name, t.topic_id) for t in named] if named is not None \
        else [(name, None) for name in request.topic_names]
    results: list[tuple[str | None, uuid.UUID | None, ErrorCode, str | None]] = []
    for name, topic_id in wanted:
        try:
            name = _deletable(broker, name, topic_id)
            await cluster_topics.request_deletion(replicas, name)
        except KafkaError as exc:
            if topic_id is not None and exc.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
                name, exc = None, KafkaError(f"not authorized to delete the topic {topic_id}",
                                             exc.code)  # nor to learn its name
            results.append((name, topic_id, exc.code, str(exc)))
        else:
            results.append((name, topic_id or broker.topic_id(name), ErrorCode.NONE, None))
    requested = [name for name, _, code, _ in results if code == ErrorCode.NONE and name]
    late = await cluster_topics.wait_deleted(replicas, requested,
                                             request.timeout.total_seconds())
    return build.response(responses=tuple(
        build("DeletableTopicResult", name=name, topic_id=topic_id,
              error_code=ErrorCode.REQUEST_TIMED_OUT if name in late else code,
              error_message=f"topic {name} not deleted within the request's timeout"
              if name in late else message)
        for name, topic_id, code, message in results))


def _deletable(broker: Broker, name: str | None, topic_id: uuid.UUID | None) -> str:
    """The name of the topic a DeleteTopics entry names, once it may be deleted; else
    ``KafkaError`` with Kafka's code."""
    if (name is None) == (topic_id is None or topic_id.int == 0):
        raise KafkaError("name a topic by its name or by its id, not both",
                         ErrorCode.INVALID_REQUEST)
    if name is None:
        assert topic_id is not None
        name = broker.topic_named(topic_id)
        if name is None:
            raise KafkaError(f"no topic has the id {topic_id}", ErrorCode.UNKNOWN_TOPIC_ID)
    broker.security.require(Operation.DELETE, ResourceType.TOPIC, name)
    if not broker.config.get_bool("delete.topic.enable"):
        raise KafkaError("topic deletion is disabled", ErrorCode.TOPIC_DELETION_DISABLED)
    _refuse_internal(broker, name, "deleted")
    return name


@handles(ApiKey.CREATE_PARTITIONS, versions=(0, 3))
async def create_partitions(broker: Broker, header: RequestHeader,
                            request: CreatePartitionsRequest) -> Any:
    build = Build(header)
    added = sum(_added_partitions(broker, t) for t in request.topics)
    here = _replicas_here(broker, sum(
        _added_partitions(broker, t) * _current_factor(broker, t.name) for t in request.topics))

    async def grow(topic: Any) -> None:
        broker.security.require(Operation.ALTER, ResourceType.TOPIC, topic.name)
        _refuse_internal(broker, topic.name, "given more partitions")
        await cluster_topics.add_partitions(
            broker.replicas, topic.name, topic.count,
            [a.broker_ids for a in topic.assignments or ()], request.validate_only,
            request.timeout.total_seconds())

    results = await _each(request.topics, grow, added, here, broker)
    return build.response(results=tuple(
        build("CreatePartitionsTopicResult", name=topic.name, error_code=code,
              error_message=message)
        for topic, code, message in results
    ))
