"""OffsetForLeaderEpoch (23): where a leader epoch ends in the leader's log, for consumers validating
positions after a leader change (KIP-320) and followers finding where to truncate (KIP-101/279).

The answer is the largest epoch at or below the requested one and the start offset of the epoch
after it (the log end offset for the current epoch); an epoch older than every one the log knows
ends where the first known epoch starts, and an undefined or newer epoch is (-1, -1) (see
replication/epoch_cache.py).

Kafka's check: ClusterAction on the cluster (followers) answers every topic; otherwise Describe on each
topic (consumers), its partitions TOPIC_AUTHORIZATION_FAILED without it.
"""

from __future__ import annotations

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
from pybroker.replication.log_requests import last_offset_for_leader_epoch
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server.authorization import allowed_names, authorize_cluster
from pybroker.server.context import RequestContext
from pybroker.server.error_mapping import error_code_for
from pybroker.server.registry import api

EpochEndOffset = OffsetForLeaderEpochResponse.EpochEndOffset


@api(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4)
async def handle(ctx: RequestContext, request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    topics = []
    names = [topic.topic for topic in request.topics]
    described = set(names) if authorize_cluster(ctx, AclOperation.CLUSTER_ACTION) else \
        allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    for topic in request.topics:
        partitions = []
        for requested in topic.partitions:
            result = EpochEndOffset(error_code=0, partition=requested.partition, leader_epoch=-1, end_offset=-1)
            if topic.topic not in described:
                result.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                partitions.append(result)
                continue
            try:
                result.leader_epoch, result.end_offset = last_offset_for_leader_epoch(
                    ctx.services.replica_manager, topic.topic, requested.partition, requested.leader_epoch,
                    requested.current_leader_epoch)
            except Exception as exc:
                result.error_code = error_code_for(exc)
            partitions.append(result)
        topics.append(OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(topic=topic.topic, partitions=partitions))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
