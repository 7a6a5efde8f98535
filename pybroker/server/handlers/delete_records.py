"""DeleteRecords (21): move partitions' log start offsets forward (Kafka's ReplicaManager.deleteRecords).

Each partition's leader raises its log start to the offset asked for (-1: the high watermark; past
the high watermark or negative is OFFSET_OUT_OF_RANGE); the segments wholly below it go in the next
retention pass. Followers take the leader's log start from their fetch answers and report theirs in
their next fetch, so the answer waits, as Kafka's DelayedDeleteRecords, until the low watermark (the
smallest log start among the leader and the replicas on live brokers) reaches the offset, or the
request's timeout passes: then REQUEST_TIMED_OUT with the low watermark seen at first.

Refused at once, with low watermark -1: unknown topics and partitions (UNKNOWN_TOPIC_OR_PARTITION),
internal topics (INVALID_TOPIC_EXCEPTION), partitions led elsewhere (NOT_LEADER_OR_FOLLOWER) and
logs whose cleanup.policy lacks delete (POLICY_VIOLATION).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pybroker.common.topic import INTERNAL_TOPICS
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import DeleteRecordsRequest, DeleteRecordsResponse
from pybroker.replication.log_requests import delete_records_on_leader
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server.authorization import allowed_names
from pybroker.server.context import RequestContext
from pybroker.server.error_mapping import error_code_for
from pybroker.server.request_channel import leave_request_queue
from pybroker.server.registry import api

PartitionResult = DeleteRecordsResponse.DeleteRecordsPartitionResult
INVALID_LOW_WATERMARK = -1


@dataclass(slots=True)
class _Pending:
    """A partition whose log start moved on the leader; its answer waits for the replicas."""

    topic: str
    result: PartitionResult
    offset: int


@api(ApiKey.DELETE_RECORDS, 0, 2)
async def handle(ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    topics: list[DeleteRecordsResponse.DeleteRecordsTopicResult] = []
    pending: list[_Pending] = []
    deletable = allowed_names(ctx, AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in request.topics))
    for topic in request.topics:
        results = []
        for requested in topic.partitions:
            result = PartitionResult(partition_index=requested.partition_index, low_watermark=INVALID_LOW_WATERMARK,
                                     error_code=ErrorCode.NONE)
            if topic.name not in deletable:  # Kafka's check: Delete on the topic, before it looks the topic up
                result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                results.append(result)
                continue
            waiting = _delete_on_leader(ctx, topic.name, requested, result)
            if waiting is not None:
                pending.append(waiting)
            results.append(result)
        topics.append(DeleteRecordsResponse.DeleteRecordsTopicResult(name=topic.name, partitions=results))
    timeout_s = max(request.timeout_ms, 0) / 1000
    if pending:
        leave_request_queue()
    await asyncio.gather(*(_await_replicas(ctx, item, timeout_s) for item in pending))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)


def _delete_on_leader(ctx: RequestContext, topic: str, requested: DeleteRecordsRequest.DeleteRecordsPartition,
                      result: PartitionResult) -> _Pending | None:
    """Apply one partition's deletion on this leader; what to wait for, or None when answered."""
    info = ctx.services.metadata.topic(topic)
    if info is None or requested.partition_index not in info.partitions:
        result.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return None
    if topic in INTERNAL_TOPICS:
        result.error_code = ErrorCode.INVALID_TOPIC_EXCEPTION
        return None
    try:
        deleted = delete_records_on_leader(ctx.services.replica_manager, topic, requested.partition_index,
                                           requested.offset, _alive_brokers(ctx))
    except Exception as exc:
        result.error_code = error_code_for(exc)
        return None
    result.low_watermark = deleted.low_watermark
    return _Pending(topic, result, deleted.offset) if deleted.replicas_behind else None


async def _await_replicas(ctx: RequestContext, item: _Pending, timeout_s: float) -> None:
    try:
        item.result.low_watermark = await ctx.services.replica_manager.wait_for_low_watermark(
            item.topic, item.result.partition_index, item.offset, timeout_s, lambda: _alive_brokers(ctx))
    except Exception as exc:
        item.result.error_code = error_code_for(exc)
        if item.result.error_code != ErrorCode.REQUEST_TIMED_OUT:
            item.result.low_watermark = INVALID_LOW_WATERMARK


def _alive_brokers(ctx: RequestContext) -> set[int]:
    return {broker.broker_id for broker in ctx.services.metadata.brokers()}
