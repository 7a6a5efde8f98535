"""The share coordinator's APIs (KIP-932), keys 83-87 as Kafka 4.2: InitializeShareGroupState,
ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState and ReadShareGroupStateSummary.

Brokers send them to each other (a partition leader's persister, the group coordinator): like Kafka, they need
ClusterAction on the cluster, else every share-partition is answered CLUSTER_AUTHORIZATION_FAILED. The work is
the share coordinator's (``share_state_service.py``).
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    DeleteShareGroupStateRequest,
    DeleteShareGroupStateResponse,
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse,
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)
from pybroker.protocol.schema import Message
from pybroker.security.acl import AclOperation
from pybroker.server.authorization import authorize_cluster
from pybroker.server.context import RequestContext
from pybroker.server.registry import api

DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
StateRequest = (InitializeShareGroupStateRequest | ReadShareGroupStateRequest | WriteShareGroupStateRequest
                | DeleteShareGroupStateRequest | ReadShareGroupStateSummaryRequest)
M = TypeVar("M", bound=Message)


def _denied(request: StateRequest, response: Callable[..., M], result: Callable[..., Any]) -> M:
    """Every share-partition of ``request`` answered CLUSTER_AUTHORIZATION_FAILED (``result``: the response's
    per-topic struct; each response names its per-partition struct PartitionResult)."""
    partition_result: Any = getattr(response, "PartitionResult")
    return response(results=[result(topic_id=t.topic_id, partitions=[
        partition_result(partition=p.partition, error_code=DENIED, error_message=DENIED.message)
        for p in t.partitions]) for t in request.topics])


@api(ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, 0)
async def initialize_share_group_state(ctx: RequestContext, request: InitializeShareGroupStateRequest
                                       ) -> InitializeShareGroupStateResponse:
    R = InitializeShareGroupStateResponse
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return _denied(request, R, R.InitializeStateResult)
    return await ctx.services.share_state.initialize(request)


@api(ApiKey.READ_SHARE_GROUP_STATE, 0, 0)
async def read_share_group_state(ctx: RequestContext, request: ReadShareGroupStateRequest
                                 ) -> ReadShareGroupStateResponse:
    R = ReadShareGroupStateResponse
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return _denied(request, R, R.ReadStateResult)
    return await ctx.services.share_state.read(request)


@api(ApiKey.WRITE_SHARE_GROUP_STATE, 0, 1)
async def write_share_group_state(ctx: RequestContext, request: WriteShareGroupStateRequest
                                  ) -> WriteShareGroupStateResponse:
    R = WriteShareGroupStateResponse
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return _denied(request, R, R.WriteStateResult)
    return await ctx.services.share_state.write(request)


@api(ApiKey.DELETE_SHARE_GROUP_STATE, 0, 0)
async def delete_share_group_state(ctx: RequestContext, request: DeleteShareGroupStateRequest
                                   ) -> DeleteShareGroupStateResponse:
    R = DeleteShareGroupStateResponse
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return _denied(request, R, R.DeleteStateResult)
    return await ctx.services.share_state.delete(request)


@api(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 0, 1)
async def read_share_group_state_summary(ctx: RequestContext, request: ReadShareGroupStateSummaryRequest
                                         ) -> ReadShareGroupStateSummaryResponse:
    R = ReadShareGroupStateSummaryResponse
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        return _denied(request, R, R.ReadStateSummaryResult)
    return await ctx.services.share_state.summary(request)
