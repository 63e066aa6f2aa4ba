"""Fetch (key 1), v0-v18.

Behaviour:
- Each partition returns the bytes from the segment file starting at the batch that holds
  ``fetch_offset`` (clients skip the records before it), at least that whole batch, else at
  most ``partition_max_bytes`` and the response's remaining ``max_bytes`` (the last batch
  may be cut short, as with Kafka). Record data goes out with sendfile, each region keeping
  its segment file open until sent; when the broker already holds as many such files as
  its open-file cache (a Fetch of thousands of partitions), a partition's bytes are read
  into the answer instead, so a Fetch never runs the broker out of descriptors.
- Long poll: while fewer than ``min_bytes`` are available the request waits, up to
  ``max_wait``, for an append to one of its partitions.
- Only the partition's leader answers (NOT_LEADER_OR_FOLLOWER elsewhere); a follower's Fetch
  (``replica_id`` >= 0) is recorded towards the ISR and high watermark and reads to the log
  end, a consumer's reads below the high watermark (the log end once the leader is the
  whole ISR). The last stable offset (v4+) is the first offset of the oldest open
  transaction, else the high watermark. ``isolation_level`` read_committed (v4+) returns
  nothing at or past the last stable offset and lists, in ``aborted_transactions``, the
  transactions aborted in the range returned, so the client drops their records;
  read_uncommitted reads to the high watermark and gets an empty list (clients need it
  present). ``log_start_offset`` from v5.
- With an authorizer, a consumer's Fetch needs READ on the topic, a follower's
  (``replica_id`` >= 0) CLUSTER_ACTION on the CLUSTER (it needs no topic ACL), as in Kafka;
  either refused is TOPIC_AUTHORIZATION_FAILED per partition, with nothing about the topic.
- Client quotas: a consumer's Fetch (never a follower's) with a ``consumer_byte_rate``
  quota (``broker/quotas.py``) reads at most what the quota allows over its window
  (Kafka's ``getMaxValueInQuotaWindow``), and the record bytes it would answer count
  towards the quota; one that takes the rate over it is answered with no partitions and
  the throttle time (what it read is not counted), and its connection reads nothing more
  for that long, as Kafka answers a throttled consumer.
- No fetch sessions: ``session_id`` is 0 and every requested partition is answered each time.
- An offset outside [log start, log end] is OFFSET_OUT_OF_RANGE; a current leader epoch
  above ours is UNKNOWN_LEADER_EPOCH, below it FENCED_LEADER_EPOCH.
- v12+ are flexible (the zero-copy encoder writes them too). v13+ name topics by id: an id
  no topic has is UNKNOWN_TOPIC_ID for each of its partitions (a deleted topic's id, also
  one re-created since under the same name: ids are never reused, so a log never holds
  another topic's id here and INCONSISTENT_TOPIC_ID does not arise). v15+ carry a
  follower's id in ``replica_state``. v16+ (KIP-951): a partition answered
  NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names the leader and epoch this broker
  knows, and the response carries those leaders' endpoints on the request's listener, so
  the consumer moves without a Metadata round. v17's directory id and v18's follower high
  watermark are for KRaft's JBOD and fetch-from-follower: read and ignored.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.request_context import listener_name
from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.broker.security.client_quotas import CONSUMER_BYTE_RATE
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode, KafkaError
from sparklog.protocol.fetch_response import (
    FIRST_NODE_ENDPOINTS,
    FetchPartition,
    FetchResponse,
    FetchTopic,
    FileRegion,
    NodeEndpoint,
)
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey, IsolationLevel

if TYPE_CHECKING:
    from kio.schema.fetch.v18.request import FetchRequest

MOVED = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)
"""The answers that name the partition's leader (KIP-951)."""


@handles(ApiKey.FETCH, versions=(0, 18))
async def fetch(broker: Broker, header: RequestHeader,
                request: FetchRequest) -> FetchResponse:
    deadline = time.monotonic() + request.max_wait.total_seconds()
    named = [(_topic_name(broker, t), t) for t in request.topics]
    wanted = [(name, p.partition) for name, t in named if name is not None
              for p in t.partitions]
    committed = getattr(request, "isolation_level", 0) == IsolationLevel.READ_COMMITTED
    replica_state = getattr(request, "replica_state", None)
    replica_id = replica_state.replica_id if replica_state is not None \
        else getattr(request, "replica_id", -1)
    quotas = broker.quotas
    quota = replica_id < 0 and quotas.enabled(CONSUMER_BYTE_RATE)
    quota_bytes = quotas.window_bytes(CONSUMER_BYTE_RATE, header.client_id, request.max_bytes) \
        if quota else None
    while True:
        topics, total, errors = _read(broker, request, named, committed, replica_id, quota_bytes)
        remaining = deadline - time.monotonic()
        if total >= request.min_bytes or errors or remaining <= 0 or not wanted:
            break
        await broker.replicas.wait_for_append(wanted, remaining)
    if quota:
        throttle = quotas.record(CONSUMER_BYTE_RATE, header.client_id, total)
        if throttle:
            quotas.unrecord(CONSUMER_BYTE_RATE, header.client_id, total)
            return FetchResponse([], throttle_ms=throttle)
    if header.api_version < FIRST_NODE_ENDPOINTS or not errors or not any(
            p.error_code in MOVED for t in topics for p in t.partitions):
        return FetchResponse(topics)  # nothing to name: the common answer, as it was read
    return _with_leaders(broker, topics)


def _topic_name(broker: Broker, topic: Any) -> str | None:
    """The topic's name: given (v0-v12), or the one of its id (v13+; None: no such id)."""
    topic_id = getattr(topic, "topic_id", None)
    return topic.topic if topic_id is None else broker.topic_named(topic_id)


def _read(broker: Broker, request: Any, named: list[tuple[str | None, Any]], committed: bool,
          replica_id: int, quota_bytes: int | None) -> tuple[list[FetchTopic], int, bool]:
    """Every partition's answer, the bytes they carry and whether one failed; ``quota_bytes``
    bounds the whole answer, the first partition's too (which is otherwise bounded only by
    its ``partition_max_bytes``), though never below one batch."""
    budget = request.max_bytes if quota_bytes is None else min(request.max_bytes, quota_bytes)
    total, errors = 0, False
    topics = []
    for name, topic in named:
        partitions = []
        for p in topic.partitions:
            result = FetchPartition(p.partition, ErrorCode.UNKNOWN_TOPIC_ID) if name is None \
                else _read_partition(broker, name, p, budget if total or quota_bytes is not None
                                     else None, committed, replica_id)
            partitions.append(result)
            if result.error_code:
                errors = True
            elif isinstance(result.records, FileRegion):
                total += result.records.length
                budget -= result.records.length
        topics.append(FetchTopic(name or "", partitions, getattr(topic, "topic_id", None)))
    return topics, total, errors


def _with_leaders(broker: Broker, topics: list[FetchTopic]) -> FetchResponse:
    """KIP-951: partitions this broker does not lead name their leader, and the response
    its endpoint (on the request's listener)."""
    answered, leaders = [], set()
    for topic in topics:
        partitions = []
        for p in topic.partitions:
            current = broker.current_leader(topic.topic, p.partition_index) \
                if p.error_code in MOVED else None
            if current is not None:
                leaders.add(current[0])
                p = replace(p, current_leader=current)
            partitions.append(p)
        answered.append(replace(topic, partitions=partitions))
    endpoints = broker.listed_endpoints(listener_name())
    return FetchResponse(answered, node_endpoints=[
        NodeEndpoint(node, endpoint.host, endpoint.port, rack)
        for node, (endpoint, rack) in sorted(endpoints.items()) if node in leaders])


def _read_partition(broker: Broker, topic: str, p: Any, budget: int | None,
                    committed: bool, replica_id: int = -1) -> FetchPartition:
    """One partition; ``budget`` is what the response may still carry (None: first data);
    ``committed`` (read_committed) stops at the last stable offset and lists the aborted
    transactions of what is returned; ``replica_id`` >= 0 is a follower's fetch."""
    try:
        if replica_id < 0:
            broker.security.require(Operation.READ, ResourceType.TOPIC, topic)
        elif not broker.security.allows_cluster(Operation.CLUSTER_ACTION):
            raise KafkaError(f"replica {replica_id} may not CLUSTER_ACTION the cluster",
                             ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        partition = broker.leader_partition(topic, p.partition)
        if replica_id >= 0:
            broker.replicas.follower_fetched(partition, replica_id, p.fetch_offset)
        epoch = getattr(p, "current_leader_epoch", -1)
        if epoch > partition.leader_epoch:
            return FetchPartition(p.partition, ErrorCode.UNKNOWN_LEADER_EPOCH)
        if 0 <= epoch < partition.leader_epoch:
            return FetchPartition(p.partition, ErrorCode.FENCED_LEADER_EPOCH)
        log = partition.log
        start, high = log.log_start_offset, partition.high_watermark
        stable = min(log.last_stable_offset, high)  # clients see the log up to the HW
        records, aborted = None, ()
        if budget is None or budget > 0:
            limit = p.partition_max_bytes if budget is None else min(p.partition_max_bytes, budget)
            found = log.read(p.fetch_offset, limit, stable if committed else
                             None if replica_id >= 0 else high)
            if found is not None:
                records = FileRegion(found.fd, found.position, found.length, found.handle) \
                    if found.may_pin() else found.read()  # descriptors are short: copy
                if committed:
                    aborted = tuple((t.producer_id, t.first_offset)
                                    for t in log.aborted_transactions(p.fetch_offset, stable))
        return FetchPartition(p.partition, ErrorCode.NONE, high, stable, start, records, aborted)
    except KafkaError as exc:
        if exc.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:  # nothing about the topic
            return FetchPartition(p.partition, exc.code)
        found = broker.logs.logs.get((topic, p.partition))
        end, start = (-1, -1) if found is None else (found.log_end_offset,
                                                     found.log_start_offset)
        return FetchPartition(p.partition, exc.code, end, -1, start)
