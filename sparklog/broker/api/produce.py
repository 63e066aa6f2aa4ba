"""Produce (key 0), v0-v8.

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

from sparklog.broker.registry import handles
from sparklog.broker.request_context import release
from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode, KafkaError
from sparklog.protocol.entities import Build, timestamp_ms
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.produce.v8.request import ProduceRequest

    from sparklog.storage.log import AppendInfo


VALID_ACKS = (-1, 0, 1)


@handles(ApiKey.PRODUCE, versions=(0, 8))
async def produce(broker: Broker, header: RequestHeader,
                  request: ProduceRequest) -> Any:
    build = Build(header)
    now = broker.now_ms()
    security = broker.security
    transactional_id = getattr(request, "transactional_id", None)
    refused = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED if transactional_id is not None \
        and not security.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                   transactional_id) else None
    appends = []
    for topic in request.topic_data:
        denied = refused or (None if security.authorize(Operation.WRITE, ResourceType.TOPIC,
                                                        topic.name)
                             else ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        appends.extend(_append(build, broker, topic.name, data, request.acks, now,
                               request.timeout, denied) for data in topic.partition_data)
    release()  # every partition is appended: the connection's next request may start
    waiting = [i for i, a in enumerate(appends) if isawaitable(a)]
    if waiting:
        for i, answer in zip(waiting, await asyncio.gather(*(appends[i] for i in waiting)),
                             strict=True):
            appends[i] = answer
    answers = iter(appends)
    if request.acks == 0:
        return None
    return build.response(responses=tuple(
        build("TopicProduceResponse", name=topic.name,
              partition_responses=tuple(next(answers) for _ in topic.partition_data))
        for topic in request.topic_data))


def _append(build: Build, broker: Broker, topic: str, data: Any, acks: int, now: int,
            timeout: timedelta, denied: ErrorCode | None) -> Any:
    """Append the partition's records now; its answer, or an awaitable of it while acks=all
    waits for the ISR."""
    def answer(code: ErrorCode, base_offset: int = -1, append_time: int = -1,
               log_start: int = -1, message: str | None = None,
               record_errors: tuple[Any, ...] = ()) -> Any:
        return build("PartitionProduceResponse", index=data.index, error_code=code,
                     base_offset=base_offset, log_append_time=timestamp_ms(append_time),
                     log_start_offset=log_start, record_errors=record_errors,
                     error_message=message)

    def refused(exc: KafkaError) -> Any:
        return answer(exc.code, message=str(exc), record_errors=_record_errors(build, exc))

    def appended(info: AppendInfo) -> Any:
        return answer(ErrorCode.NONE, info.base_offset, info.log_append_time,
                      info.log_start_offset)

    if acks not in VALID_ACKS:
        return answer(ErrorCode.INVALID_REQUIRED_ACKS, message=f"acks={acks} is not -1, 0 or 1")
    if denied is not None:
        return answer(denied)
    try:
        acknowledged = broker.leader_partition(topic, data.index).append_records_to_leader(
            data.records or b"", acks, now, int(timeout.total_seconds() * 1000))
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
