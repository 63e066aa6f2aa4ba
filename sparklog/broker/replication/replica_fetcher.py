"""A follower's fetcher: one task per followed partition, fetching from its leader.

Invariants:
- Fetch requests carry this broker's id as ``replica_id`` and the leader epoch the follower
  knows as ``current_leader_epoch``, so the leader counts them towards the ISR and refuses
  them (FENCED / UNKNOWN_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER) when either side is stale.
- Before its first fetch from a leader the follower truncates its divergent tail (KIP-279):
  it asks OffsetForLeaderEpoch for the end of its latest epoch and truncates to the
  smaller of that and its own log end; a leader without the epoch (-1) makes it truncate to
  its high watermark, the conservative pre-KIP-101 rule.
- Only whole batches are appended (a response may end inside one), with the offsets and
  leader epochs the leader gave them; the epoch cache learns each new epoch from them.
  The follower's high watermark is min(leader's, own log end).
- It connects to the leader's endpoint of the inter-broker listener, logged in as that
  listener asks (``inter_broker``); a leader without that endpoint is waited for.
- Connection failures, refused logins, records that do not frame (a misbehaving leader),
  a local disk that is full (KAFKA_STORAGE_ERROR: the follower fetches the same records again
  once space returns) and errors back off and retry; each new failure is
  logged once (a refused login or Fetch, e.g. without CLUSTER_ACTION, a failed TLS
  handshake, a leader without the listener, as warnings), not every retry. The task ends
  only when cancelled (the partition's state changed), so it never outlives its role.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from datetime import timedelta
from typing import Protocol

from sparklog.broker.replication.inter_broker import (
    InterBrokerError,
    InterBrokerSecurity,
    LeaderConnection,
)
from sparklog.broker.replication.partition import Partition
from sparklog.cluster.layout import BrokerInfo
from sparklog.errors import CorruptRecordError, ErrorCode, KafkaStorageError, error_name
from sparklog.protocol.versions import ApiKey
from sparklog.record.batch import complete_batches, end_of

log = logging.getLogger(__name__)


class ReplicaManager(Protocol):
    """What a fetcher uses of the replica manager that started it."""

    broker_id: int
    live: dict[int, BrokerInfo]
    inter_broker: InterBrokerSecurity | None
    fetch_max_bytes: int
    fetch_wait_ms: int

    def now_ms(self) -> int: ...


FETCH_VERSION = 11
EPOCH_VERSION = 3
BACKOFF_S = 0.2
_REFUSED = (ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
_WHY = {code: " (this broker's principal needs CLUSTER_ACTION on the cluster, or to be in "
              "super.users)" for code in _REFUSED}


async def follow(manager: ReplicaManager, replica: Partition) -> None:
    """Fetch ``replica``'s partition from its leader until cancelled."""
    state = replica.state
    assert state is not None
    security = manager.inter_broker
    assert security is not None  # a follower is a cluster broker's
    connection: LeaderConnection | None = None
    truncated = False
    trouble = ""  # the last failure logged: each new one is logged once, not every retry
    try:
        while True:
            try:
                if connection is None:
                    leader = manager.live.get(state.leader)
                    endpoint = None if leader is None else leader.endpoint(security.listener)
                    if endpoint is None:
                        if leader is not None and trouble != security.listener:
                            trouble = security.listener
                            log.warning("%s: broker %d has no listener %s (the inter-broker "
                                        "listener) to fetch from", replica.name, state.leader,
                                        security.listener)
                        await asyncio.sleep(BACKOFF_S)
                        continue
                    connection = await LeaderConnection.open(
                        endpoint.host, endpoint.port, f"sparklog-replica-{manager.broker_id}",
                        security)
                if not truncated:
                    await _truncate(manager, replica, connection)
                    truncated = True
                code = await _fetch(manager, replica, connection)
                if code == ErrorCode.NONE:
                    trouble = ""
                    continue
                if error_name(code) != trouble:
                    trouble = error_name(code)
                    log.log(logging.WARNING if code in _REFUSED else logging.INFO,
                            "%s: broker %d answered %s to this follower's Fetch%s",
                            replica.name, state.leader, trouble,
                            _WHY.get(code, ""))
                await asyncio.sleep(BACKOFF_S)
            except (OSError, EOFError, asyncio.IncompleteReadError, CorruptRecordError,
                    KafkaStorageError) as exc:
                if str(exc) != trouble:
                    trouble = str(exc)
                    log.log(logging.WARNING if isinstance(exc, (InterBrokerError, ssl.SSLError,
                                                                KafkaStorageError))
                            else logging.INFO, "%s: fetch from broker %d failed (%s); retrying",
                            replica.name, state.leader, exc)
                if connection is not None:
                    connection.close()
                connection = None
                await asyncio.sleep(BACKOFF_S)
    finally:
        if connection is not None:
            connection.close()


async def _truncate(manager: ReplicaManager, replica: Partition,
                    connection: LeaderConnection) -> None:
    partition_log = replica.log
    epoch = replica.epochs.latest_epoch
    if epoch < 0:
        end = replica.high_watermark if partition_log.log_end_offset else 0
    else:
        answer = await connection.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION, {
            "replica_id": manager.broker_id, "topics": [{"topic": replica.topic, "partitions": [{
                "partition": replica.partition, "current_leader_epoch": replica.leader_epoch,
                "leader_epoch": epoch}]}]})
        result = answer.topics[0].partitions[0]
        if result.error_code != ErrorCode.NONE:
            raise OSError(f"OffsetForLeaderEpoch answered {error_name(result.error_code)}"
                          f"{_WHY.get(result.error_code, '')}")
        end = result.end_offset if result.end_offset >= 0 else replica.high_watermark
    if end < partition_log.log_end_offset:
        partition_log.truncate_to(end)
        replica.epochs.truncate_from_end(partition_log.log_end_offset)


async def _fetch(manager: ReplicaManager, replica: Partition, connection: LeaderConnection
                 ) -> ErrorCode:
    """One Fetch; an error other than NONE when the leader refused it (back off)."""
    partition_log = replica.log
    offset = partition_log.log_end_offset
    max_bytes = manager.fetch_max_bytes
    answer = await connection.request(ApiKey.FETCH, FETCH_VERSION, {
        "replica_id": manager.broker_id, "max_wait": timedelta(milliseconds=manager.fetch_wait_ms),
        "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 0, "session_id": 0,
        "session_epoch": -1, "topics": [{"topic": replica.topic, "partitions": [{
            "partition": replica.partition, "current_leader_epoch": replica.leader_epoch,
            "fetch_offset": offset, "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    result = answer.responses[0].partitions[0]
    if result.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and result.high_watermark >= 0 \
            and offset > result.high_watermark:
        partition_log.truncate_to(result.high_watermark)
        replica.epochs.truncate_from_end(partition_log.log_end_offset)
        return ErrorCode.NONE
    if result.error_code != ErrorCode.NONE:
        return ErrorCode(result.error_code)
    records = result.records or b""
    header = None
    for header in complete_batches(records):  # a partial batch at the end waits (not copied)
        replica.epochs.assign(header.leader_epoch, header.base_offset)
    if header is not None:
        whole = records if end_of(header) == len(records) else memoryview(records)[:end_of(header)]
        partition_log.append_as_follower(whole, now_ms=manager.now_ms())
    replica.follower_high_watermark(result.high_watermark)
    return ErrorCode.NONE
