"""ListOffsets (2): earliest, latest, max-timestamp and by-timestamp offset lookups.

LATEST is the high watermark for read_uncommitted and the last stable offset for read_committed
(isolation_level=1); lookups by timestamp, MAX_TIMESTAMP among them, never answer an offset at or past
that bound (taken once the lookup, which scans and decodes batches on the I/O executor, has returned). A follower
(replica_id >= 0) is answered from the whole log, LATEST being the log end, as Kafka does. LATEST for
the debugging replica id (-2) is answered by any replica with its log end and latest leader epoch.
The lookups are the replica manager's (`replication/log_requests.py`).
"""

from __future__ import annotations

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.messages import ListOffsetsRequest, ListOffsetsResponse
from pybroker.protocol.error_codes import ErrorCode
from pybroker.replication.log_requests import fetch_offset_for_timestamp
from pybroker.server.context import RequestContext
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server.authorization import allowed_names
from pybroker.server.error_mapping import error_code_for
from pybroker.server.registry import api

PartitionResponse = ListOffsetsResponse.ListOffsetsPartitionResponse

READ_COMMITTED = 1


@api(ApiKey.LIST_OFFSETS, 1, 11)
async def handle(ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    topics = []
    allowed = allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in request.topics))
    for topic in request.topics:
        if topic.name not in allowed:  # Kafka's check: Describe on each topic
            partitions = [PartitionResponse(partition_index=p.partition_index, timestamp=-1, offset=-1,
                                            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in topic.partitions]
            topics.append(ListOffsetsResponse.ListOffsetsTopicResponse(name=topic.name, partitions=partitions))
            continue
        partitions = [await _list_partition(ctx, request, topic.name, p) for p in topic.partitions]
        topics.append(ListOffsetsResponse.ListOffsetsTopicResponse(name=topic.name, partitions=partitions))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


async def _list_partition(ctx: RequestContext, request: ListOffsetsRequest, topic: str,
                          requested: ListOffsetsRequest.ListOffsetsPartition) -> PartitionResponse:
    response = PartitionResponse(partition_index=requested.partition_index, error_code=0, timestamp=-1, offset=-1)
    try:
        found = await fetch_offset_for_timestamp(
            ctx.services.replica_manager, ctx.services.io, topic, requested.partition_index, requested.timestamp,
            replica_id=request.replica_id, read_committed=request.isolation_level == READ_COMMITTED,
            current_leader_epoch=requested.current_leader_epoch)
    except Exception as exc:
        response.error_code = error_code_for(exc)
        return response
    response.offset, response.timestamp, response.leader_epoch = found.offset, found.timestamp, found.leader_epoch
    return response
