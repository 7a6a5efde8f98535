"""The share coordinator's APIs (KIP-932), keys 83-87 as Kafka 4.2: InitializeShareGroupState,
ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState and ReadShareGroupStateSummary.

Brokers send them to each other (a partition leader's persister, the group coordinator): like Kafka, they need
ClusterAction on the cluster, else every share-partition is answered CLUSTER_AUTHORIZATION_FAILED. The work is
the share coordinator's (``share_state_service.py``).
"""

from __future__ import annotations

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
from pybroker.security.acl import AclOperation
from pybroker.server.authorization import authorize_cluster
from pybroker.server.context import RequestContext
from pybroker.server.registry import api

DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


@api(ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, 0)
async def initialize_share_group_state(ctx: RequestContext, request: InitializeShareGroupStateRequest
                                       ) -> InitializeShareGroupStateResponse:
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        R = InitializeShareGroupStateResponse
        return R(results=[R.InitializeStateResult(topic_id=t.topic_id, partitions=[
            R.PartitionResult(partition=p.partition, error_code=DENIED, error_message=DENIED.message)
            for p in t.partitions]) for t in request.topics])
    return await ctx.services.share_state.initialize(request)


@api(ApiKey.READ_SHARE_GROUP_STATE, 0, 0)
async def read_share_group_state(ctx: RequestContext, request: ReadShareGroupStateRequest
                                 ) -> ReadShareGroupStateResponse:
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        R = ReadShareGroupStateResponse
        return R(results=[R.ReadStateResult(topic_id=t.topic_id, partitions=[
            R.PartitionResult(partition=p.partition, error_code=DENIED, error_message=DENIED.message)
            for p in t.partitions]) for t in request.topics])
    return await ctx.services.share_state.read(request)


@api(ApiKey.WRITE_SHARE_GROUP_STATE, 0, 1)
async def write_share_group_state(ctx: RequestContext, request: WriteShareGroupStateRequest
                                  ) -> WriteShareGroupStateResponse:
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        R = WriteShareGroupStateResponse
        return R(results=[R.WriteStateResult(topic_id=t.topic_id, partitions=[
            R.PartitionResult(partition=p.partition, error_code=DENIED, error_message=DENIED.message)
            for p in t.partitions]) for t in request.topics])
    return await ctx.services.share_state.write(request)


@api(ApiKey.DELETE_SHARE_GROUP_STATE, 0, 0)
async def delete_share_group_state(ctx: RequestContext, request: DeleteShareGroupStateRequest
                                   ) -> DeleteShareGroupStateResponse:
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        R = DeleteShareGroupStateResponse
        return R(results=[R.DeleteStateResult(topic_id=t.topic_id, partitions=[
            R.PartitionResult(partition=p.partition, error_code=DENIED, error_message=DENIED.message)
            for p in t.partitions]) for t in request.topics])
    return await ctx.services.share_state.delete(request)


@api(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 0, 1)
async def read_share_group_state_summary(ctx: RequestContext, request: ReadShareGroupStateSummaryRequest
                                         ) -> ReadShareGroupStateSummaryResponse:
    if not authorize_cluster(ctx, AclOperation.CLUSTER_ACTION):
        R = ReadShareGroupStateSummaryResponse
        return R(results=[R.ReadStateSummaryResult(topic_id=t.topic_id, partitions=[
            R.PartitionResult(partition=p.partition, error_code=DENIED, error_message=DENIED.message)
            for p in t.partitions]) for t in request.topics])
    return await ctx.services.share_state.summary(request)
