"""A broker's log directories over the Kafka protocol (DescribeLogDirs), as Kafka's admin
client's ``describeLogDirs`` and ``kafka-log-dirs.sh`` read them (confluent-kafka has no
such call).

Invariants:
- DescribeLogDirs is answered by each broker for itself: ``describe_log_dirs`` asks every
  broker named (all live brokers by default) for all of its partitions, and names a broker
  that is not in the cluster with ``KafkaClientError`` before asking anyone.
- A top-level error (CLUSTER_AUTHORIZATION_FAILED without DESCRIBE on the CLUSTER) raises
  ``KafkaClientError`` naming the broker and the error; a directory's own error is kept in
  its ``LogDirDescription``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sparklog.client.cluster import TopicPartition
from sparklog.client.errors import KafkaClientError
from sparklog.client.kafka import KafkaClient
from sparklog.errors import ErrorCode, error_name
from sparklog.protocol.versions import ApiKey


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    path: str
    error: int
    replicas: dict[TopicPartition, ReplicaInfo]


def describe_log_dirs(client: KafkaClient, brokers: Iterable[int] | None = None,
                      ) -> dict[int, list[LogDirDescription]]:
    """Each broker's log directories with every replica they hold (module invariants)."""
    live = client.metadata([]).brokers
    asked = sorted(live) if brokers is None else list(brokers)
    missing = [b for b in asked if b not in live]
    if missing:
        raise KafkaClientError(
            "The given brokers do not exist: "
            f"{','.join(map(str, missing))}. Current existent brokers: "
            f"{','.join(map(str, sorted(live)))}")
    found = {}
    for broker in asked:
        answer = client.broker_request(live[broker], ApiKey.DESCRIBE_LOG_DIRS,
                                       {"topics": None})
        code = getattr(answer, "error_code", ErrorCode.NONE)
        if code != ErrorCode.NONE:
            raise KafkaClientError(f"DescribeLogDirs to broker {broker}: {error_name(code)}")
        found[broker] = [LogDirDescription(result.log_dir, result.error_code, {
            TopicPartition(topic.name, p.partition_index): ReplicaInfo(
                p.partition_size, p.offset_lag, p.is_future_key)
            for topic in result.topics for p in topic.partitions}) for result in answer.results]
    return found
