"""InitProducerId (22): producer ids for idempotent and transactional producers; AllocateProducerIds
(67): the controller's producer-id blocks for brokers (KIP-730).

Without a transactional id every call gets a fresh producer id at epoch 0 (Kafka's rule). With
one, the transaction coordinator keeps the id and bumps its epoch on every call, fencing older
instances of the producer and aborting their open transaction.
"""

from __future__ import annotations

import contextlib

from pybroker.common.ids import ProducerEpoch, ProducerId
from pybroker.controller.embedded import EmbeddedMetadata
from pybroker.coordinator.txn_coordinator import InitResult
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from pybroker.server.error_mapping import error_code_for
from pybroker.server.context import RequestContext
from pybroker.server.handlers.txn import fenced_code, txn_call
from pybroker.server.registry import api
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server.authorization import authorize, authorize_by_resource_type, authorize_cluster

FIRST_PRODUCER_FENCED_VERSION = 4


@api(ApiKey.INIT_PRODUCER_ID, 0, 5)
async def handle(ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse:
    transactional_id = request.transactional_id
    # Kafka's checks: Write on the transactional id; an idempotent producer needs IdempotentWrite on
    # the cluster or Write on some topic.
    if transactional_id is not None and not authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                      transactional_id):
        return InitProducerIdResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1,
                                      producer_epoch=-1)
    if transactional_id is None and not (authorize_cluster(ctx, AclOperation.IDEMPOTENT_WRITE) or
                                         authorize_by_resource_type(ctx, AclOperation.WRITE, ResourceType.TOPIC)):
        return InitProducerIdResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1,
                                      producer_epoch=-1)
    txns = ctx.services.txns
    coordinator = txns.coordinator
    if transactional_id is not None:
        with contextlib.suppress(Exception):  # txn_call tries again and answers the failure
            await txns.topic.ensure()
    # Only for an id this broker coordinates, as Kafka's handleInitProducerId looks the id up first (NOT_COORDINATOR
    # otherwise, from txn_call): allocating first held the request of a broker that does not coordinate the id
    # (its internal topic just created, no leader elected) for the controller's producer-id block.
    wanted = transactional_id is None or (
        txns.owns(transactional_id) and coordinator.needs_producer_id(transactional_id))
    try:  # COORDINATOR_LOAD_IN_PROGRESS while no producer-id block came from the controller: clients retry
        fresh = await ctx.services.metadata.allocate_producer_id() if wanted else None
    except Exception as exc:  # noqa: BLE001 - mapped in one place; unexpected ones are logged there
        return InitProducerIdResponse(error_code=error_code_for(exc), producer_id=-1, producer_epoch=-1)
    if transactional_id is None:
        assert fresh is not None  # allocated above for every producer without a transactional id
        return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=fresh, producer_epoch=0)
    result = await txn_call(ctx, transactional_id, lambda waiter, now: coordinator.init_producer_id(
        waiter, transactional_id, request.transaction_timeout_ms, ProducerId(request.producer_id),
        ProducerEpoch(request.producer_epoch), fresh, now))
    if not isinstance(result, InitResult):
        result = InitResult(result)
    return InitProducerIdResponse(throttle_time_ms=0,
                                  error_code=fenced_code(result.error, ctx.api_version, FIRST_PRODUCER_FENCED_VERSION),
                                  producer_id=result.producer_id, producer_epoch=result.producer_epoch)


@api(ApiKey.ALLOCATE_PRODUCER_IDS, 0, 0)
async def allocate_producer_ids(ctx: RequestContext, request: AllocateProducerIdsRequest) -> AllocateProducerIdsResponse:
    """Answered by the active controller in a cluster, by the broker itself on a single node."""
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return AllocateProducerIdsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    zk_mode = ctx.services.zk_mode
    try:
        metadata = ctx.services.metadata
        if zk_mode is None and isinstance(metadata, EmbeddedMetadata):
            block = await metadata.reserve_producer_id_block(request.broker_id)
        elif zk_mode is None or zk_mode.controller is None or not zk_mode.controller.active:
            return AllocateProducerIdsResponse(error_code=ErrorCode.NOT_CONTROLLER)
        else:
            block = await zk_mode.controller.allocate_producer_ids(request.broker_id, request.broker_epoch)
    except Exception as exc:  # noqa: BLE001 - mapped in one place; unexpected ones are logged there
        return AllocateProducerIdsResponse(error_code=error_code_for(exc))
    return AllocateProducerIdsResponse(error_code=0, producer_id_start=block.start,
                                       producer_id_len=block.end - block.start + 1)
