"""DescribeLogDirs (key 35, v1-v5) and AlterReplicaLogDirs (key 34, v1-v2): the broker's log
directory, the replicas it holds, and moves between directories.

Behaviour, as Kafka's broker answers it:
- DescribeLogDirs is about the broker asked, alone: its one data directory (absolute path),
  with every partition log it holds (null ``topics``) or those of the named partitions it
  holds (others are left out, as Kafka leaves them), each with its size in bytes (the sum of
  its segment files), ``offset_lag`` 0 and ``is_future_key`` false: a lag is Kafka's only for
  a future replica (a move between directories), which a single data directory never has.
  v4+ give the volume's total and usable bytes; v5's directory is never cordoned.
- AlterReplicaLogDirs moves replicas this broker holds into another of its directories. With
  one directory, every move is a move to where the replica is already: NONE and nothing
  changes (Kafka's answer to a move to the current directory); a path that is not the data
  directory (compared as absolute, resolved paths) is LOG_DIR_NOT_FOUND; a partition this
  broker holds no replica of is REPLICA_NOT_AVAILABLE (Kafka keeps that code here for
  compatibility). v0 (Kafka 4 removed it) is not served.
- The partitions held are those whose replica assignment names this broker (a cluster
  broker may keep an empty log of another partition; it is no replica and not listed).
- DescribeLogDirs needs DESCRIBE on the CLUSTER: without it the answer is
  CLUSTER_AUTHORIZATION_FAILED (top level) and no directory (Kafka's answer to v1-v2, which
  lack the top-level code, is the same empty list). AlterReplicaLogDirs needs ALTER on the
  CLUSTER: without it every partition is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.security.acls import Operation
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey
from sparklog.storage.log import PartitionLog

if TYPE_CHECKING:
    from kio.schema.alter_replica_log_dirs.v2.request import AlterReplicaLogDirsRequest
    from kio.schema.describe_log_dirs.v5.request import DescribeLogDirsRequest

TopicPartition = tuple[str, int]


@handles(ApiKey.DESCRIBE_LOG_DIRS, versions=(1, 5))
async def describe_log_dirs(broker: Broker, header: RequestHeader,
                            request: DescribeLogDirsRequest) -> Any:
    build = Build(header)
    if not broker.security.allows_cluster(Operation.DESCRIBE):
        return build.response(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, results=())
    wanted = None if request.topics is None else {
        (t.topic, p) for t in request.topics for p in t.partitions}
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for (topic, partition), log in sorted(held_logs(broker).items()):
        if wanted is None or (topic, partition) in wanted:
            by_topic[topic].append(build("DescribeLogDirsPartition", partition_index=partition,
                                         partition_size=log.size, offset_lag=0,
                                         is_future_key=False))
    usage = shutil.disk_usage(broker.data_dir)
    result = build("DescribeLogDirsResult", error_code=ErrorCode.NONE,
                   log_dir=str(broker.data_dir.resolve()), total_bytes=usage.total,
                   usable_bytes=usage.free, topics=tuple(
                       build("DescribeLogDirsTopic", name=topic, partitions=tuple(partitions))
                       for topic, partitions in by_topic.items()))
    return build.response(error_code=ErrorCode.NONE, results=(result,))


@handles(ApiKey.ALTER_REPLICA_LOG_DIRS, versions=(1, 2))
async def alter_replica_log_dirs(broker: Broker, header: RequestHeader,
                                 request: AlterReplicaLogDirsRequest) -> Any:
    build = Build(header)
    allowed = broker.security.allows_cluster(Operation.ALTER)
    held = held_logs(broker)
    data_dir = broker.data_dir.resolve()
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for move in request.dirs:
        known = Path(move.path).resolve() == data_dir if Path(move.path).is_absolute() else False
        for topic in move.topics:
            for partition in topic.partitions:
                error = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED if not allowed
                         else ErrorCode.LOG_DIR_NOT_FOUND if not known
                         else ErrorCode.NONE if (topic.name, partition) in held
                         else ErrorCode.REPLICA_NOT_AVAILABLE)
                by_topic[topic.name].append(build("AlterReplicaLogDirPartitionResult",
                                                  partition_index=partition, error_code=error))
    return build.response(results=tuple(
        build("AlterReplicaLogDirTopicResult", topic_name=name, partitions=tuple(partitions))
        for name, partitions in by_topic.items()))


def held_logs(broker: Broker) -> dict[TopicPartition, PartitionLog]:
    """The partition logs this broker holds a replica of (every one on a single node)."""
    cluster = broker.replicas
    return {(t, p): log for (t, p), log in broker.logs.logs.items()
            if broker.node_id in cluster.assignments.get(t, {}).get(p, ())}
