"""InitProducerId (key 22), v0-v1.

Behaviour: a non-transactional producer gets a fresh producer id with epoch 0 from
``Broker.producer_ids`` (ids persist in blocks, so they are never reused after a restart). A
transactional producer (a ``transactional_id``) is served by the transaction coordinator:
its id's producer id and a bumped epoch, which fences older producers of the id (see
``sparklog.coordinator.txn_coordinator``); CONCURRENT_TRANSACTIONS asks it to retry while
an open transaction of the id is aborted.

With an authorizer, as Kafka's: a transactional id needs WRITE on its TRANSACTIONAL_ID
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent producer IDEMPOTENT_WRITE on the
CLUSTER or WRITE on some TOPIC (CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.broker.state import Broker
from sparklog.errors import ErrorCode
from sparklog.protocol.entities import Build
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey

if TYPE_CHECKING:
    from kio.schema.init_producer_id.v1.request import InitProducerIdRequest


@handles(ApiKey.INIT_PRODUCER_ID, versions=(0, 1))
async def init_producer_id(broker: Broker, header: RequestHeader,
                           request: InitProducerIdRequest) -> Any:
    build = Build(header)
    security = broker.security
    if request.transactional_id is None:
        if not (security.allows_cluster(Operation.IDEMPOTENT_WRITE)
                or security.any_allowed(Operation.WRITE, ResourceType.TOPIC)):
            return build.response(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                  producer_id=-1, producer_epoch=-1)
        return build.response(error_code=ErrorCode.NONE,
                              producer_id=await broker.producer_ids.next_id(),
                              producer_epoch=0)
    if not security.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                              request.transactional_id):
        return build.response(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                              producer_id=-1, producer_epoch=-1)
    timeout_ms = round(request.transaction_timeout.total_seconds() * 1000)
    result = await broker.txn_coordinator.init_producer_id(request.transactional_id,
                                                           timeout_ms)
    return build.response(error_code=result.error, producer_id=result.producer_id,
                          producer_epoch=result.producer_epoch)
