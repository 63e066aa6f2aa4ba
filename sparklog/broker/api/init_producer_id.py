"""InitProducerId (key 22), v0-v6.

Behaviour: a non-transactional producer gets a fresh producer id with epoch 0 from
``Broker.producer_ids`` (ids persist in blocks, so they are never reused after a restart),
whatever producer id and epoch it names (Kafka's: an idempotent producer that recovers gets
a new id). A transactional producer (a ``transactional_id``) is served by the transaction
coordinator: its id's producer id and a bumped epoch, which fences older producers of the
id (see ``sparklog.coordinator.txn_coordinator``); CONCURRENT_TRANSACTIONS asks it to retry
while an open transaction of the id is aborted.

Per version (Kafka's InitProducerId JSON):
- v2 is the first flexible version.
- v3 (KIP-360) carries the producer's current ``producer_id`` and ``producer_epoch``: a
  transactional producer naming its current ones resumes under the next epoch (a new
  producer id once the epochs run out) instead of being a new producer; its retry is
  answered the same again; any other epoch is fenced. Naming only one of them (the other
  -1) is INVALID_REQUEST.
- Before v4 PRODUCER_FENCED is answered INVALID_PRODUCER_EPOCH (the code those clients know).
- v5 lets the answer be TRANSACTION_ABORTABLE (KIP-890); Kafka's coordinator has no case
  that answers it to InitProducerId, and neither does this one.
- v6 (KIP-939) adds ``enable2Pc`` and ``keepPreparedTxn``: this broker has no two-phase
  commit (Kafka's ``transaction.two.phase.commit.enable`` is false), so a producer asking
  for it is answered TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka answers it then, and
  one asking to keep a prepared transaction without it INVALID_REQUEST (nothing changes for
  either); the answer's ``ongoingTxnProducerId``/``Epoch`` are -1 (no prepared
  transaction is ever kept).

With an authorizer, as Kafka's: a transactional id needs WRITE on its TRANSACTIONAL_ID
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer IDEMPOTENT_WRITE on the
CLUSTER or WRITE on some TOPIC (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparklog.broker.api.transactions import fenced_as
from sparklog.broker.registry import handles
from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.init_producer_id.v6.request import InitProducerIdRequest

NO_PRODUCER = (-1, -1)
PRODUCER_FENCED_SINCE = 4


@handles(ApiKey.INIT_PRODUCER_ID, versions=(0, 6))
async def init_producer_id(broker: Broker, header: RequestHeader,
                           request: InitProducerIdRequest) -> Any:
    build = Build(header)

    def failed(error: ErrorCode) -> Any:
        return build.response(error_code=error, producer_id=-1, producer_epoch=-1)

    security = broker.security
    if request.transactional_id is None:
        if not (security.allows_cluster(Operation.IDEMPOTENT_WRITE)
                or security.any_allowed(Operation.WRITE, ResourceType.TOPIC)):
            return failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    elif not security.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                request.transactional_id):
        return failed(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if getattr(request, "enable2_pc", False):
        return failed(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)  # no 2PC here
    if getattr(request, "keep_prepared_txn", False):
        return failed(ErrorCode.INVALID_REQUEST)
    named = (getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1))
    if named != NO_PRODUCER and -1 in named:
        return failed(ErrorCode.INVALID_REQUEST)
    if request.transactional_id is None:
        return build.response(error_code=ErrorCode.NONE,
                              producer_id=await broker.producer_ids.next_id(),
                              producer_epoch=0)
    timeout_ms = round(request.transaction_timeout.total_seconds() * 1000)
    result = await broker.txn_coordinator.init_producer_id(
        request.transactional_id, timeout_ms, None if named == NO_PRODUCER else named)
    return build.response(error_code=fenced_as(header, result.error, PRODUCER_FENCED_SINCE),
                          producer_id=result.producer_id,
                          producer_epoch=result.producer_epoch)
