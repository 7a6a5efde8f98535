"""InitProducerId (22): producer ids for idempotent and transactional producers.

Without a transactional id every call gets a fresh producer id at epoch 0 (Kafka's rule). With
one, the transaction coordinator keeps the id and bumps its epoch on every call, fencing older
instances of the producer and aborting their open transaction.
"""

from __future__ import annotations

from pybroker.coordinator.txn_coordinator import InitResult
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.messages import InitProducerIdRequest, InitProducerIdResponse
from pybroker.server.context import RequestContext
from pybroker.server.handlers.txn import fenced_code, txn_call
from pybroker.server.registry import api

FIRST_PRODUCER_FENCED_VERSION = 4


@api(ApiKey.INIT_PRODUCER_ID, 0, 5)
async def handle(ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse:
    transactional_id = request.transactional_id
    if transactional_id is None:
        producer_id = await ctx.broker.metadata.allocate_producer_id()
        return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)
    coordinator = ctx.broker.txns.coordinator
    fresh = await ctx.broker.metadata.allocate_producer_id() if coordinator.needs_producer_id(transactional_id) \
        else None
    result = await txn_call(ctx, transactional_id, lambda waiter, now: coordinator.init_producer_id(
        waiter, transactional_id, request.transaction_timeout_ms, request.producer_id, request.producer_epoch,
        fresh, now))
    if not isinstance(result, InitResult):
        result = InitResult(result)
    return InitProducerIdResponse(throttle_time_ms=0,
                                  error_code=fenced_code(result.error, ctx.api_version, FIRST_PRODUCER_FENCED_VERSION),
                                  producer_id=result.producer_id, producer_epoch=result.producer_epoch)
