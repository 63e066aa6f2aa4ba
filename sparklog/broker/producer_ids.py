"""InitProducerId (key 22), v0-v1.

Behaviour: a non-transactional producer gets a fresh producer id with epoch 0 from
``Broker.producer_ids`` (ids persist in blocks, so they are never reused after a restart).
Transactions are not served yet: a request with a transactional id is answered
COORDINATOR_NOT_AVAILABLE, so a transactional producer fails at start-up with a clear error
instead of appending batches no coordinator could ever commit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparklog.broker.registry import handles
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
    if request.transactional_id is not None:
        return build.response(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, producer_id=-1,
                              producer_epoch=-1)
    return build.response(error_code=ErrorCode.NONE, producer_id=broker.producer_ids.next_id(),
                          producer_epoch=0)
