"""InitProducerId (22) for idempotent producers: a fresh producer id, epoch 0, on every call.

This is Kafka's rule when no transactional id is given. Transactional ids need the transaction
coordinator, which this broker does not have yet: such requests get COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import InitProducerIdRequest, InitProducerIdResponse
from pybroker.server.context import RequestContext
from pybroker.server.registry import api


@api(ApiKey.INIT_PRODUCER_ID, 0, 5)
async def handle(ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse:
    if request.transactional_id is not None:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                      producer_id=-1, producer_epoch=-1)
    producer_id = await ctx.broker.metadata.allocate_producer_id()
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)
