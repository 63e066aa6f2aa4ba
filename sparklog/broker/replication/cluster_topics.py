"""Deleting topics and adding partitions, through the replica manager's store (the broker's side).

Invariants:
- DeleteTopics writes ``/admin/delete_topics/<t>`` for each topic (``ClusterSession``); the
  controller removes the topic from ZooKeeper (``cluster/topic_deletion.py``) and every
  replica deletes its logs when it sees the assignment go (a single node's store drops the
  topic at once). The answer waits, up to the
  request's timeout, until this broker saw every topic go (REQUEST_TIMED_OUT after it, the
  deletion still going on, as in Kafka).
- CreatePartitions adds partitions to a topic's assignment by compare-and-set, so a
  concurrent change of the topic is never overwritten: the new partitions get the topic's
  replication factor, round robin and rack-aware from the partition after the last
  (``assign_replicas``), or the request's manual assignment, checked as Kafka checks it.
  The controller elects their leaders; the answer waits for them up to the timeout.
  ``validate_only`` checks the same and writes nothing. A topic being reassigned is
  refused (REASSIGNMENT_IN_PROGRESS), as in Kafka.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from sparklog.cluster.assignment import assign_replicas, check_assignment
from sparklog.cluster.layout import TopicAssignment
from sparklog.errors import (
    ErrorCode,
    InvalidPartitionsError,
    KafkaError,
    UnknownTopicOrPartitionError,
)

if TYPE_CHECKING:
    from sparklog.broker.replication.replica_manager import ReplicaManager


def _known(cluster: ReplicaManager, name: str) -> None:
    if name not in cluster.assignments:
        raise UnknownTopicOrPartitionError(f"unknown topic {name}")


async def request_deletion(cluster: ReplicaManager, name: str) -> None:
    """Ask the controller to delete ``name`` (it must exist)."""
    _known(cluster, name)
    assert cluster.store is not None
    await cluster.call(cluster.store.delete_topic, name)


async def wait_deleted(cluster: ReplicaManager, names: Sequence[str], timeout_s: float
                       ) -> set[str]:
    """Wait until every topic of ``names`` is gone; the ones still there after the timeout."""
    await cluster.wait_for(lambda: not set(names) & cluster.assignments.keys(), timeout_s)
    return set(names) & cluster.assignments.keys()


async def add_partitions(cluster: ReplicaManager, name: str, count: int,
                         manual: Sequence[Sequence[int]] | None, validate_only: bool,
                         timeout_s: float) -> None:
    """Grow ``name`` to ``count`` partitions (module invariants)."""
    _known(cluster, name)
    racks = {b: info.rack for b, info in cluster.live.items()}

    def grow(current: TopicAssignment) -> TopicAssignment | None:
        old = len(current.partitions)
        if count <= old:
            raise InvalidPartitionsError(f"topic {name} has {old} partitions; the new count "
                                         f"{count} must be larger")
        if current.adding or current.removing:
            raise KafkaError(f"topic {name} has a partition reassignment in progress",
                             ErrorCode.REASSIGNMENT_IN_PROGRESS)
        factor = len(current.partitions[0])
        if manual:
            if len(manual) != count - old:
                raise KafkaError(f"adding {count - old} partitions but {len(manual)} "
                                 "assignments given", ErrorCode.INVALID_REPLICA_ASSIGNMENT)
            added = check_assignment(racks, dict(enumerate(manual, old)), factor)
        else:
            added = assign_replicas(racks, count - old, factor, first_partition=old)
        return None if validate_only else replace(
            current, partitions={**current.partitions, **added})

    await cluster.update_topic(name, grow)
    if not validate_only:
        await cluster.wait_for(lambda: cluster.led(name, range(count)), timeout_s)
