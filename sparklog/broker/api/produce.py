"""Produce (key 0), v0-v13.

Behaviour:
- Each partition's records blob is validated whole (framing, CRC-32C, record counts,
  ``max.message.bytes``, timestamps, producer sequence and epoch) and appended, or rejected
  with Kafka's error code (CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE,
  OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, ...); other partitions of the same
  request are unaffected.
- Batches are stored exactly as received, compressed or not; only baseOffset and the leader
  epoch are rewritten (and attributes, maxTimestamp and the CRC on LogAppendTime topics,
  whose append time is returned).
- A retried idempotent batch (same producer, epoch and sequence range as one of its last
  five) is answered with its original base offset and not appended again.
- An error about single records (a null key on a compacted topic, a timestamp out of range)
  answers KIP-467's ``record_errors`` (each record's batch index and reason) with the error
  message, so a client can tell which records were refused; the append path builds none.
- With an authorizer: WRITE on the TRANSACTIONAL_ID of a transactional request
  (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition) and on each TOPIC
  (TOPIC_AUTHORIZATION_FAILED for its partitions); nothing refused is appended.
- acks 0 gets no response; acks 1 is answered after the append, acks -1 once the ISR has
  it (``replication.partition.Partition``: at once when the leader is the whole ISR).
  Produce does not auto-create topics (Metadata does).
- v9+ are flexible. v10+ (KIP-951): a partition answered NOT_LEADER_OR_FOLLOWER names
  the leader and epoch this broker knows (``current_leader``), and the response those
  leaders' endpoints on the request's listener, so the producer moves at once instead of
  after a Metadata round. v13 names topics by id (an id no topic has is UNKNOWN_TOPIC_ID
  for each of its partitions, nothing appended).
- KIP-890, for every version: before a transactional batch is appended to a partition
  where its producer has no ongoing transaction at its epoch, the transaction coordinator
  is asked (``replication.txn_verification``: directly when it is this broker, else
  AddPartitionsToTxn v5 ``verify_only``) whether the partition is in the producer's
  transaction; the append shows the answer's guard, and the log refuses a transactional
  batch with neither (``storage.producer_state``), so an unverified batch is never
  appended. Refusals: INVALID_TXN_STATE (not in the transaction; TRANSACTION_ABORTABLE from
  v11, which knows it), INVALID_PRODUCER_EPOCH (a fenced epoch), NOT_ENOUGH_REPLICAS while
  the coordinator cannot answer (the producer retries). v12+ comes from a
  transaction.version 2 client (finalized here): the partition is added to the
  transaction instead, no AddPartitionsToTxn needed. One question per partition and
  transaction: later batches find the transaction ongoing.
- Schema validation (Confluent Server's ``confluent.key.schema.validation`` /
  ``confluent.value.schema.validation`` topic configs, ``broker.schema_validation``): a
  batch of such a topic is checked whole before any append of the request; one record
  without a schema id registered under its subject refuses the batch, INVALID_RECORD with
  ``record_errors`` (v8+) and the reason, nothing appended; while the registry cannot
  answer, REQUEST_TIMED_OUT (retriable). A topic without validation pays one lookup.
- Client quotas: with a ``producer_byte_rate`` quota for the client (``broker/quotas.py``),
  the request's record bytes count towards it once appended; a request taking the rate
  over it is answered (acks 1 and -1) with the throttle time, and its connection reads
  nothing more for that long (acks 0 too).
- Every partition of a request is appended, in request order, before any waits for its
  acks; then the request ``release``s its connection (``request_context``), so the
  connection's
  next request starts while this one waits for the ISR. Answers ready at once are taken
  as they are; the partitions still waiting for their ISR wait together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from datetime import timedelta
from inspect import isawaitable
from typing import TYPE_CHECKING, Any

from sparklog.broker.features import FINALIZED
from sparklog.broker.quotas import with_throttle
from sparklog.broker.registry import handles
from sparklog.broker.replication.txn_verification import client_error
from sparklog.broker.request_context import listener_name, release
from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.broker.security.client_quotas import PRODUCER_BYTE_RATE
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode, KafkaError
from sparklog.protocol.entities import Build, timestamp_ms
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey
from sparklog.record.batch import HEADER_SIZE, parse_header

if TYPE_CHECKING:
    from kio.schema.produce.v13.request import ProduceRequest

    from sparklog.storage.log import AppendInfo
    from sparklog.storage.producer_state import VerificationStateEntry


VALID_ACKS = (-1, 0, 1)
ABORTABLE_SINCE = 11  # TRANSACTION_ABORTABLE (KIP-890); before it INVALID_TXN_STATE
IMPLICIT_ADD_SINCE = 12  # a transaction.version 2 client's implicit add (KIP-890 part 2)


@handles(ApiKey.PRODUCE, versions=(0, 13))
async def produce(broker: Broker, header: RequestHeader,
                  request: ProduceRequest) -> Any:
    build = Build(header)
    security = broker.security
    transactional_id = getattr(request, "transactional_id", None)
    refused = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if transactional_id is not None \
        and not security.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                   transactional_id) else None
    names = [_topic_name(broker, topic) for topic in request.topic_data]
    denials = [refused or (ErrorCode.UNKNOWN_TOPIC_ID if name is None else None) or (
        None if security.authorize(Operation.WRITE, ResourceType.TOPIC, name)
        else ErrorCode.TOPIC_AUTHORIZATION_FAILED) for name in names]
    refusals = await _schema_refusals(broker, names, request.topic_data, denials)
    guards: dict[tuple[str, int], VerificationStateEntry | ErrorCode] = {}
    if transactional_id is not None:
        batches = {(name, data.index): batch
                   for name, topic, denied in zip(names, request.topic_data, denials,
                                                  strict=True)
                   if name is not None and denied is None for data in topic.partition_data
                   if (name, data.index) not in refusals
                   and (batch := parse_transactional(data.records)) is not None}
        guards = await verified(
            broker, transactional_id, batches,
            add=transactions_v2(header.api_version, IMPLICIT_ADD_SINCE),
            abortable_known=header.api_version >= ABORTABLE_SINCE) if batches else {}
    now = broker.now_ms()  # after the verification's wait
    appends = []
    for name, topic, denied in zip(names, request.topic_data, denials, strict=True):
        for data in topic.partition_data:
            guard = guards.get((name or "", data.index))
            appends.append(_append(
                build, broker, name or "", data, request.acks, now, request.timeout,
                denied or refusals.get((name or "", data.index))
                or (guard if isinstance(guard, ErrorCode) else None),
                None if isinstance(guard, ErrorCode) else guard))
    throttle = broker.quotas.record(PRODUCER_BYTE_RATE, header.client_id, sum(
        len(data.records or b"") for topic in request.topic_data for data in topic.partition_data
    )) if broker.quotas.enabled(PRODUCER_BYTE_RATE) else 0
    release()  # every partition is appended: the connection's next request may start
    waiting = [i for i, a in enumerate(appends) if isawaitable(a)]
    if waiting:
        for i, answer in zip(waiting, await asyncio.gather(*(appends[i] for i in waiting)),
                             strict=True):
            appends[i] = answer
    if request.acks == 0:
        return None
    answers = iter(appends)
    topics = tuple(
        build("TopicProduceResponse", name=name, topic_id=getattr(topic, "topic_id", None),
              partition_responses=tuple(next(answers) for _ in topic.partition_data))
        for name, topic in zip(names, request.topic_data, strict=True))
    leaders = {p.current_leader.leader_id for t in topics for p in t.partition_responses
               if p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
               and getattr(p, "current_leader", None) is not None
               and p.current_leader.leader_id >= 0}
    response = build.response(responses=topics, node_endpoints=tuple(
        build("NodeEndpoint", node_id=node, host=endpoint.host, port=endpoint.port, rack=rack)
        for node, (endpoint, rack) in sorted(broker.listed_endpoints(listener_name()).items())
        if node in leaders) if leaders else ())  # the brokers are listed only when named
    return with_throttle(response, throttle) if throttle else response


async def _schema_refusals(broker: Broker, names: list[str | None], topic_data: Any,
                           denials: list[ErrorCode | None]
                           ) -> dict[tuple[str, int], KafkaError]:
    """The batches of topics with schema validation that it refuses (``schema_validation``;
    topics without it cost one lookup each), checked only where this broker leads the
    partition and the request may write."""
    batches = {}
    for name, topic, denied in zip(names, topic_data, denials, strict=True):
        metadata = None if name is None or denied is not None else broker.logs.topics.get(name)
        if metadata is None or not metadata.config.schema_validation:
            continue
        for data in topic.partition_data:
            try:
                broker.leader_partition(name, data.index)
            except KafkaError:
                continue  # not led here: its append answers that
            batches[(name, data.index)] = (metadata.config, data.records)
    return await broker.schema_validation.refusals(batches) if batches else {}


def _topic_name(broker: Broker, topic: Any) -> str | None:
    """The topic's name: given (v0-v12), or the one of its id (v13+; None: no such id)."""
    topic_id = getattr(topic, "topic_id", None)
    return topic.name if topic_id is None else broker.topic_named(topic_id)


async def verified(broker: Broker, transactional_id: str,
                   batches: dict[tuple[str, int], tuple[int, int]], *, add: bool,
                   abortable_known: bool,
                   retriable_as: ErrorCode = ErrorCode.NOT_ENOUGH_REPLICAS
                   ) -> dict[tuple[str, int], VerificationStateEntry | ErrorCode]:
    """KIP-890: the transaction coordinator asked, before any append, about each partition
    whose transactional batch (``batches``: partition -> producer id and epoch) has no
    ongoing transaction here (``add``: a transaction.version 2 client's, added to the
    transaction; else verified). Per partition asked, the guard its append shows, or the
    error it is answered with (``txn_verification.client_error``); partitions not led here
    are left to their append."""
    asked: dict[tuple[int, int], dict[tuple[str, int], VerificationStateEntry]] = {}
    for (topic, index), batch in batches.items():
        try:
            guard = broker.leader_partition(topic, index).start_verification(*batch)
        except KafkaError:
            continue  # not led here: its append answers that
        if guard is not None:
            asked.setdefault(batch, {})[(topic, index)] = guard
    answers = await asyncio.gather(*(
        broker.replicas.txn_verification.verify(transactional_id, pid, epoch, list(tps),
                                                add=add)
        for (pid, epoch), tps in asked.items()))
    found: dict[tuple[str, int], VerificationStateEntry | ErrorCode] = {}
    for tps, answer in zip(asked.values(), answers, strict=True):
        for tp, guard in tps.items():
            error = answer[tp]
            found[tp] = guard if error == ErrorCode.NONE else client_error(
                error, abortable_known=abortable_known, retriable_as=retriable_as)
    return found


def transactions_v2(version: int, since: int) -> bool:
    """Whether a request of ``version`` comes from a transaction.version 2 client (the
    API's first version for one is ``since``; a broker with the feature finalized below 2
    gets none)."""
    return version >= since and FINALIZED.get("transaction.version", 0) >= 2


def parse_transactional(records: bytes | None) -> tuple[int, int] | None:
    """(producer id, epoch) of a transactional batch, None for anything else (whose append
    says what is wrong with it)."""
    if records is None or len(records) < HEADER_SIZE:
        return None
    header = parse_header(records)
    if header.magic != 2 or not header.is_transactional or header.is_control:
        return None
    return header.producer_id, header.producer_epoch


def _append(build: Build, broker: Broker, topic: str, data: Any, acks: int, now: int,
            timeout: timedelta, denied: ErrorCode | KafkaError | None,
            guard: VerificationStateEntry | None) -> Any:
    """Append the partition's records now; its answer, or an awaitable of it while acks=all
    waits for the ISR."""
    def answer(code: ErrorCode, base_offset: int = -1, append_time: int = -1,
               log_start: int = -1, message: str | None = None,
               record_errors: tuple[Any, ...] = (), current_leader: Any = None) -> Any:
        moved = {} if current_leader is None else {"current_leader": current_leader}
        return build("PartitionProduceResponse", index=data.index, error_code=code,
                     base_offset=base_offset, log_append_time=timestamp_ms(append_time),
                     log_start_offset=log_start, record_errors=record_errors,
                     error_message=message, **moved)

    def refused(exc: KafkaError) -> Any:
        moved = broker.current_leader(topic, data.index) \
            if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER \
            and build.has("PartitionProduceResponse", "current_leader") else None  # v10+
        return answer(exc.code, message=str(exc), record_errors=_record_errors(build, exc),
                      current_leader=None if moved is None else build(
                          "LeaderIdAndEpoch", leader_id=moved[0], leader_epoch=moved[1]))

    def appended(info: AppendInfo) -> Any:
        return answer(ErrorCode.NONE, info.base_offset, info.log_append_time,
                      info.log_start_offset)

    if acks not in VALID_ACKS:
        return answer(ErrorCode.INVALID_REQUIRED_ACKS, message=f"acks={acks} is not -1, 0 or 1")
    if isinstance(denied, KafkaError):
        return refused(denied)
    if denied is not None:
        return answer(denied)
    try:
        acknowledged = broker.leader_partition(topic, data.index).append_records_to_leader(
            data.records or b"", acks, now, int(timeout.total_seconds() * 1000), guard)
    except KafkaError as exc:
        return refused(exc)
    if not isawaitable(acknowledged):
        return appended(acknowledged)

    async def when_acknowledged(acknowledged: Awaitable[AppendInfo]) -> Any:
        try:
            return appended(await acknowledged)
        except KafkaError as exc:
            return refused(exc)
    return when_acknowledged(acknowledged)


def _record_errors(build: Build, error: KafkaError) -> tuple[Any, ...]:
    """KIP-467's ``record_errors`` for Produce v8+ (older versions have no such field)."""
    if not error.record_errors or not build.has("PartitionProduceResponse", "record_errors"):
        return ()
    return tuple(build("BatchIndexAndErrorMessage", batch_index=index,
                       batch_index_error_message=reason)
                 for index, reason in error.record_errors)
