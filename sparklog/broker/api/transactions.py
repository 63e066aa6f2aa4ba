"""The transaction APIs (KIP-98, KIP-890): AddPartitionsToTxn (24, v0-v5), AddOffsetsToTxn (25,
v0-v4), EndTxn (26, v0-v5), WriteTxnMarkers (27, v1), TxnOffsetCommit (28, v0-v5),
DescribeTransactions (65, v0), ListTransactions (66, v0-v2).

Behaviour (the state machine itself is ``sparklog.coordinator.txn_coordinator``; this module
translates):
- A fenced producer (an older epoch) is answered PRODUCER_FENCED, except by the versions
  that predate that error (AddPartitionsToTxn, AddOffsetsToTxn and EndTxn before v2), which
  get INVALID_PRODUCER_EPOCH, as Kafka answers them (KIP-588).
- transaction.version 2 is finalized (KIP-890 part 2). v3 of AddPartitionsToTxn,
  AddOffsetsToTxn, EndTxn and TxnOffsetCommit is the first flexible one. EndTxn v5+ comes
  from a version 2 client: its end bumps the producer epoch (a new producer id at epoch 0
  once the epochs ran out), the markers carry the bumped epoch, and the answer names the
  producer id and epoch to go on with, so a late write of the ended transaction is fenced;
  its retry (naming the epoch before) is answered the same, any other stale epoch
  PRODUCER_FENCED. Before v5 an end keeps the epoch (transaction.version 1).
- TxnOffsetCommit: the group's ``__consumer_offsets`` partition is verified to be in the
  producer's transaction first, as a leader verifies a Produce (KIP-890 part 1; v5+, a
  version 2 client that sends no AddOffsetsToTxn: added to it implicitly); a refusal
  answers every partition (INVALID_TXN_STATE before v4, TRANSACTION_ABORTABLE from v4;
  the coordinator's retriable errors as COORDINATOR_NOT_AVAILABLE).
- AddPartitionsToTxn before v4 is a client's (one transaction, authorized by WRITE on the
  id and its topics); v4+ is a partition leader's (KIP-890 part 1): CLUSTER_ACTION on the
  CLUSTER (else the top-level CLUSTER_AUTHORIZATION_FAILED), a batch of transactions
  answered each, and ``verify_only`` asks whether each partition is already in the
  transaction without adding it (NONE, or TRANSACTION_ABORTABLE; v4, which predates that
  code, gets INVALID_TXN_STATE as Kafka 3.6's coordinator answered); without
  ``verify_only`` it is a leader's implicit add for a version 2 client, which the id's
  transaction records (ClientTransactionVersion 2).
- TxnOffsetCommit stores the offsets in the producer's transaction on the group's
  ``__consumer_offsets`` partition (answered once the ISR has them, as OffsetCommit); they
  count once the COMMIT marker lands there. From v3 (KIP-447) a request naming a member
  (generation, member id, group instance id) is checked as OffsetCommit checks it
  (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID), so a zombie stream task
  cannot commit in a generation it lost.
- WriteTxnMarkers (what a coordinator sends a partition leader) appends each marker and
  answers per partition (only for partitions this broker leads, once the high watermark
  passed the marker: ``ReplicaManager.write_marker``; ``fault_point("txn_markers_received",
  "leader")`` precedes the writing, so a crash test can kill a leader there);
  DescribeTransactions answers per
  id (TRANSACTIONAL_ID_NOT_FOUND for an unknown one); ListTransactions filters by state
  names (unknown ones are echoed in ``unknown_state_filters``), producer ids, (v1) the
  minimum time open and (v2, KIP-1152) a regular expression the whole transactional id
  matches (INVALID_REGULAR_EXPRESSION when it does not compile).
- With an authorizer, as Kafka's: WRITE on the TRANSACTIONAL_ID for AddPartitionsToTxn
  (before v4), AddOffsetsToTxn, EndTxn and TxnOffsetCommit
  (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), plus WRITE on each TOPIC added, READ on the GROUP
  of added or committed offsets and READ on their topics; CLUSTER_ACTION on the CLUSTER for
  WriteTxnMarkers and AddPartitionsToTxn v4+; DESCRIBE on the TRANSACTIONAL_ID to describe or
  list a transaction (ListTransactions leaves the others out).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sparklog.broker.api.offset_commit import (
    authorized_offsets,
    commit_response,
    replicated,
    requested_offsets,
)
from sparklog.broker.api.produce import transactions_v2, verified
from sparklog.broker.registry import handles
from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.broker.state import Broker
from sparklog.coordinator.txn_coordinator import ProducerIdAndEpoch
from sparklog.coordinator.txn_metadata import TransactionState
from sparklog.coordinator.txn_records import TV_2
from sparklog.errors import ErrorCode
from sparklog.faults import fault_point
from sparklog.protocol.entities import Build, instant_ms
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.add_offsets_to_txn.v4.request import AddOffsetsToTxnRequest
    from kio.schema.add_partitions_to_txn.v5.request import AddPartitionsToTxnRequest
    from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
    from kio.schema.end_txn.v5.request import EndTxnRequest
    from kio.schema.list_transactions.v2.request import ListTransactionsRequest
    from kio.schema.txn_offset_commit.v5.request import TxnOffsetCommitRequest
    from kio.schema.write_txn_markers.v1.request import WriteTxnMarkersRequest

_STATE_NAMES = frozenset(s.display for s in TransactionState)
BATCHED_SINCE = 4  # AddPartitionsToTxn: a broker's batch of transactions, verify_only
ABORTABLE_SINCE = 5  # AddPartitionsToTxn: TRANSACTION_ABORTABLE
TV2_END_TXN_SINCE = 5  # EndTxn: a transaction.version 2 client, whose ends bump the epoch
TV2_TXN_OFFSET_COMMIT_SINCE = 5  # TxnOffsetCommit: implicit add of the offsets partition
TXN_OFFSET_COMMIT_ABORTABLE_SINCE = 4  # TxnOffsetCommit: TRANSACTION_ABORTABLE


def fenced_as(header: RequestHeader, error: ErrorCode, since: int = 2) -> ErrorCode:
    """PRODUCER_FENCED as the request's version knows it (INVALID_PRODUCER_EPOCH before
    version ``since``, where the API learnt PRODUCER_FENCED)."""
    if error == ErrorCode.PRODUCER_FENCED and header.api_version < since:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error


def _may_write(broker: Broker, transactional_id: str) -> bool:
    return broker.security.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                     transactional_id)


def _refused_writes(broker: Broker, transactional_id: str,
                    wanted: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
    """AddPartitionsToTxn's refusals (WRITE on the TRANSACTIONAL_ID and on every TOPIC, as
    Kafka's: one refusal fails the whole request, the rest answered OPERATION_NOT_ATTEMPTED);
    empty when everything is allowed."""
    if not _may_write(broker, transactional_id):
        return dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    denied = {t for t, _ in wanted
              if not broker.security.authorize(Operation.WRITE, ResourceType.TOPIC, t)}
    if not denied:
        return {}
    return {(t, p): ErrorCode.TOPIC_AUTHORIZATION_FAILED if t in denied
            else ErrorCode.OPERATION_NOT_ATTEMPTED for t, p in wanted}


@handles(ApiKey.ADD_PARTITIONS_TO_TXN, versions=(0, 5))
async def add_partitions_to_txn(broker: Broker, header: RequestHeader,
                                request: AddPartitionsToTxnRequest) -> Any:
    build = Build(header)
    if header.api_version < BATCHED_SINCE:
        topics = request.v3_and_below_topics
        return build.response(results_by_topic_v3_and_below=_topic_results(
            build, header, topics, await _added(
                broker, header, request.v3_and_below_transactional_id,
                request.v3_and_below_producer_id, request.v3_and_below_producer_epoch, topics)))
    if not broker.security.allows_cluster(Operation.CLUSTER_ACTION):
        return build.response(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                              results_by_transaction=())
    answers = await asyncio.gather(*(
        _added(broker, header, t.transactional_id, t.producer_id, t.producer_epoch, t.topics,
               verify_only=t.verify_only)
        for t in request.transactions))
    return build.response(error_code=ErrorCode.NONE, results_by_transaction=tuple(
        build("AddPartitionsToTxnResult", transactional_id=t.transactional_id,
              topic_results=_topic_results(build, header, t.topics, errors))
        for t, errors in zip(request.transactions, answers, strict=True)))


async def _added(broker: Broker, header: RequestHeader, transactional_id: str,
                 producer_id: int, producer_epoch: int, topics: Any, *,
                 verify_only: bool = False) -> dict[tuple[str, int], ErrorCode]:
    """One transaction's partitions added (or, ``verify_only``, checked), each answered.
    A client's request (before v4) is authorized here; a broker's is by CLUSTER_ACTION."""
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    if header.api_version < BATCHED_SINCE:
        refused = _refused_writes(broker, transactional_id, wanted)
        if refused:
            return refused
    coordinator = broker.txn_coordinator
    if verify_only:
        errors = coordinator.verify_partitions(transactional_id, producer_id, producer_epoch,
                                               wanted)
    else:  # v4+ without verify_only: a leader's implicit add for a version 2 client
        errors = await coordinator.add_partitions(
            transactional_id, producer_id, producer_epoch, wanted,
            TV_2 if header.api_version >= BATCHED_SINCE else 0)
    return {tp: _abortable_as(header, fenced_as(header, e)) for tp, e in errors.items()}


def _abortable_as(header: RequestHeader, error: ErrorCode) -> ErrorCode:
    """TRANSACTION_ABORTABLE as AddPartitionsToTxn's version knows it (v5 added it; a v4
    verification that fails is INVALID_TXN_STATE, as Kafka 3.6's coordinator answered)."""
    if error == ErrorCode.TRANSACTION_ABORTABLE and header.api_version < ABORTABLE_SINCE:
        return ErrorCode.INVALID_TXN_STATE
    return error


def _topic_results(build: Build, header: RequestHeader, topics: Any,
                   errors: dict[tuple[str, int], ErrorCode]) -> tuple[Any, ...]:
    return tuple(
        build("AddPartitionsToTxnTopicResult", name=t.name, results_by_partition=tuple(
            build("AddPartitionsToTxnPartitionResult", partition_index=p,
                  partition_error_code=errors[(t.name, p)])
            for p in t.partitions))
        for t in topics)


@handles(ApiKey.ADD_OFFSETS_TO_TXN, versions=(0, 4))
async def add_offsets_to_txn(broker: Broker, header: RequestHeader,
                             request: AddOffsetsToTxnRequest) -> Any:
    security = broker.security
    if not _may_write(broker, request.transactional_id):
        return Build(header).response(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not security.authorize(Operation.READ, ResourceType.GROUP, request.group_id):
        return Build(header).response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    error = await broker.txn_coordinator.add_offsets(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group_id)
    return Build(header).response(error_code=fenced_as(header, error))


@handles(ApiKey.END_TXN, versions=(0, 5))
async def end_txn(broker: Broker, header: RequestHeader, request: EndTxnRequest) -> Any:
    if not _may_write(broker, request.transactional_id):
        result = ProducerIdAndEpoch(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    else:
        result = await broker.txn_coordinator.end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch,
            request.committed, TV_2 if header.api_version >= TV2_END_TXN_SINCE else 0)
    # v5: the producer's id and epoch from now on (bumped: transaction.version 2)
    return Build(header).response(error_code=fenced_as(header, result.error),
                                  producer_id=result.producer_id,
                                  producer_epoch=result.producer_epoch)


@handles(ApiKey.TXN_OFFSET_COMMIT, versions=(0, 5))
async def txn_offset_commit(broker: Broker, header: RequestHeader,
                            request: TxnOffsetCommitRequest) -> Any:
    requested = requested_offsets(request.topics)
    if not _may_write(broker, request.transactional_id):
        offsets, refused = {}, dict.fromkeys(requested,
                                             ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    else:
        offsets, refused = authorized_offsets(broker, request.group_id, requested)
    if offsets:
        refusal = await _offsets_verified(broker, header, request)
        if refusal is not None:
            offsets, refused = {}, dict.fromkeys(requested, refusal)
    errors = broker.coordinator.txn_commit(
        request.group_id, request.producer_id, request.producer_epoch, offsets,
        member_id=getattr(request, "member_id", ""),
        instance_id=getattr(request, "group_instance_id", None),
        generation=getattr(request, "generation_id", -1)) if offsets else {}
    errors = {**await replicated(broker, request.group_id, errors), **refused}
    return commit_response(Build(header), request.topics, errors, "TxnOffsetCommit")


async def _offsets_verified(broker: Broker, header: RequestHeader,
                            request: TxnOffsetCommitRequest) -> ErrorCode | None:
    """KIP-890: the group's ``__consumer_offsets`` partition verified to be in the
    producer's transaction (v5+ from a transaction.version 2 client: added to it), as the
    leader of that partition does before it appends; the error to answer, None when it is
    (or the producer's transaction is ongoing there already)."""
    tp = broker.txn_coordinator.offsets_partition(request.group_id)
    found = await verified(
        broker, request.transactional_id, {tp: (request.producer_id, request.producer_epoch)},
        add=transactions_v2(header.api_version, TV2_TXN_OFFSET_COMMIT_SINCE),
        abortable_known=header.api_version >= TXN_OFFSET_COMMIT_ABORTABLE_SINCE,
        retriable_as=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    error = found.get(tp)
    return error if isinstance(error, ErrorCode) else None


@handles(ApiKey.WRITE_TXN_MARKERS, versions=(1, 1))
async def write_txn_markers(broker: Broker, header: RequestHeader,
                            request: WriteTxnMarkersRequest) -> Any:
    build = Build(header)
    allowed = broker.security.allows_cluster(Operation.CLUSTER_ACTION)
    fault_point("txn_markers_received", "leader")

    async def written(marker: Any, topic: str, partition: int) -> ErrorCode:
        if not allowed:
            return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return await broker.replicas.write_marker(
            (topic, partition), marker.producer_id, marker.producer_epoch,
            marker.transaction_result, marker.coordinator_epoch)

    wanted = [(m, t.name, p) for m in request.markers for t in m.topics
              for p in t.partition_indexes]
    codes = dict(zip(((id(m), t, p) for m, t, p in wanted),
                     await asyncio.gather(*(written(*w) for w in wanted)), strict=True))
    return build.response(markers=tuple(
        build("WritableTxnMarkerResult", producer_id=marker.producer_id, topics=tuple(
            build("WritableTxnMarkerTopicResult", name=t.name, partitions=tuple(
                build("WritableTxnMarkerPartitionResult", partition_index=p,
                      error_code=codes[(id(marker), t.name, p)])
                for p in t.partition_indexes))
            for t in marker.topics))
        for marker in request.markers))


@handles(ApiKey.DESCRIBE_TRANSACTIONS, versions=(0, 0))
async def describe_transactions(broker: Broker, header: RequestHeader,
                                request: DescribeTransactionsRequest) -> Any:
    build = Build(header)
    described = []
    for tid in request.transactional_ids:
        error, meta = broker.txn_coordinator.describe(tid) if broker.security.authorize(
            Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid) \
            else (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, None)
        topics: dict[str, list[int]] = {}
        for topic, partition in sorted(meta.partitions if meta else ()):
            topics.setdefault(topic, []).append(partition)
        described.append(build(
            "TransactionState", error_code=error, transactional_id=tid,
            transaction_state=meta.state.display if meta else "",
            transaction_timeout=timedelta(milliseconds=meta.timeout_ms if meta else 0),
            transaction_start_time=instant_ms(meta.start_ms if meta else -1),
            producer_id=meta.producer_id if meta else -1,
            producer_epoch=meta.producer_epoch if meta else -1,
            topics=tuple(build("TopicData", topic=t, partitions=tuple(ps))
                         for t, ps in topics.items())))
    return build.response(transaction_states=tuple(described))


@handles(ApiKey.LIST_TRANSACTIONS, versions=(0, 2))
async def list_transactions(broker: Broker, header: RequestHeader,
                            request: ListTransactionsRequest) -> Any:
    build = Build(header)
    states = set(request.state_filters)
    known, unknown = states & _STATE_NAMES, sorted(states - _STATE_NAMES)
    error, found = broker.txn_coordinator.list(
        known, request.producer_id_filters, getattr(request, "duration_filter", -1),
        getattr(request, "transactional_id_pattern", None))
    if states and not known:
        found = []  # only unknown states asked for: none matches
    return build.response(error_code=error, unknown_state_filters=tuple(unknown),
                          transaction_states=tuple(
                              build("TransactionState", transactional_id=m.transactional_id,
                                    producer_id=m.producer_id,
                                    transaction_state=m.state.display)
                              for m in found if broker.security.authorize(
                                  Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                  m.transactional_id)))
