"""Replica assignment for new topics and partitions (Kafka's round robin, rack-aware).

Invariants:
- A partition's replicas are ``replication_factor`` distinct brokers; the first is its
  preferred leader, and preferred leaders go round the brokers, so leadership spreads evenly.
- With racks (``broker.rack``), brokers are first ordered so consecutive ones sit on different
  racks (Kafka's rack-alternated list), and each further replica is the next broker on a
  rack the partition does not use yet while there is one: each partition's replicas span
  min(replication factor, racks) racks.
- A replication factor above the live brokers is refused (INVALID_REPLICATION_FACTOR), as
  Kafka refuses it, rather than under-replicating from birth.
- A manual assignment (``check_assignment``) names distinct, existing brokers per partition,
  the same number for every partition (INVALID_REPLICA_ASSIGNMENT otherwise).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from sparklog.errors import ErrorCode, KafkaError


def rack_alternated(brokers: Mapping[int, str | None]) -> list[int]:
    """Broker ids ordered so that consecutive brokers are on different racks when possible."""
    by_rack: dict[str | None, list[int]] = {}
    for broker_id in sorted(brokers):
        by_rack.setdefault(brokers[broker_id], []).append(broker_id)
    if len(by_rack) <= 1:
        return sorted(brokers)
    racks = sorted(by_rack, key=lambda r: (r is None, r or ""))
    ordered: list[int] = []
    for i in range(max(len(ids) for ids in by_rack.values())):
        ordered += [by_rack[r][i] for r in racks if i < len(by_rack[r])]
    return ordered


def assign_replicas(brokers: Mapping[int, str | None], partitions: int,
                    replication_factor: int, first_partition: int = 0,
                    ) -> dict[int, tuple[int, ...]]:
    """``partition -> replicas`` for partitions [first_partition, first_partition + partitions)
    over ``brokers`` (id -> rack or None)."""
    if replication_factor < 1 or replication_factor > len(brokers):
        raise KafkaError(
            f"replication factor {replication_factor} is larger than the {len(brokers)} "
            "available broker(s)" if replication_factor > 0 else
            f"replication factor {replication_factor} must be at least 1",
            ErrorCode.INVALID_REPLICATION_FACTOR)
    ordered = rack_alternated(brokers)
    n, racks = len(ordered), len(set(brokers.values()))
    assignment = {}
    for p in range(first_partition, first_partition + partitions):
        replicas = [ordered[p % n]]
        for k in range(1, n):
            if len(replicas) == replication_factor:
                break
            candidate = ordered[(p + k) % n]
            used = {brokers[r] for r in replicas}
            if brokers[candidate] not in used or len(used) == racks:
                replicas.append(candidate)
        for k in range(1, n):  # racks ran out before the factor: any broker not yet used
            candidate = ordered[(p + k) % n]
            if len(replicas) < replication_factor and candidate not in replicas:
                replicas.append(candidate)
        assignment[p] = tuple(replicas)
    return assignment


def check_assignment(brokers: Collection[int], assignment: Mapping[int, Sequence[int]],
                     replication_factor: int | None = None) -> dict[int, tuple[int, ...]]:
    """A manual assignment (CreatePartitions, CreateTopics, reassignments) as Kafka checks
    it: each partition's replicas are distinct brokers that exist, and every partition has
    the same number of them (``replication_factor`` when given)."""
    checked = {}
    for partition, replicas in sorted(assignment.items()):
        if not replicas or len(set(replicas)) != len(replicas):
            raise KafkaError(f"partition {partition}: replicas {list(replicas)} must be "
                             "distinct brokers, at least one", ErrorCode.INVALID_REPLICA_ASSIGNMENT)
        unknown = sorted(set(replicas) - set(brokers))
        if unknown:
            raise KafkaError(f"partition {partition}: unknown broker(s) {unknown}",
                             ErrorCode.INVALID_REPLICA_ASSIGNMENT)
        if replication_factor is not None and len(replicas) != replication_factor:
            raise KafkaError(f"partition {partition}: {len(replicas)} replicas, the topic has "
                             f"{replication_factor}", ErrorCode.INVALID_REPLICA_ASSIGNMENT)
        checked[partition] = tuple(replicas)
    return checked
