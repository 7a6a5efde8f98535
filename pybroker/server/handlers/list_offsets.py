"""ListOffsets (2): earliest, latest, max-timestamp and by-timestamp offset lookups.

LATEST is the high watermark for read_uncommitted and the last stable offset for read_committed
(isolation_level=1); lookups by timestamp, MAX_TIMESTAMP among them, never answer an offset at or past
that bound (taken once the lookup, which scans and decodes batches on the I/O executor, has returned). A follower
(replica_id >= 0) is answered from the whole log, LATEST being the log end, as Kafka does. LATEST for
the debugging replica id (-2) is answered by any replica with its log end and latest leader epoch.
"""

from __future__ import annotations

from pybroker.log import PartitionLog
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.messages import ListOffsetsRequest, ListOffsetsResponse
from pybroker.protocol.error_codes import ErrorCode
from pybroker.replication.errors import NotLeaderError, UnknownPartitionError
from pybroker.replication.partition import latest_epoch_on_disk
from pybroker.server.context import RequestContext
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server.authorization import allowed_names
from pybroker.server.error_mapping import error_code_for
from pybroker.server.registry import api

PartitionResponse = ListOffsetsResponse.ListOffsetsPartitionResponse

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6  # v11 (KIP-1023): without tiered storage, no offset (-1) as Kafka answers
READ_COMMITTED = 1
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2


async def _replica_log_end(ctx: RequestContext, topic: str, index: int) -> tuple[int, int]:
    """(latest leader epoch, log end offset) of this broker's replica, whatever its role, as Kafka
    answers the debugging replica id. A log this broker has not served since it started (no
    LeaderAndIsr yet) is answered from disk: the controller asks every ISR member this before it
    elects the longest log among replicas that may each have lost an unflushed tail."""
    partition = ctx.services.replica_manager.hosted(topic, index)
    if partition is not None:
        return partition.epoch_cache.latest_epoch, partition.log.log_end_offset
    log = ctx.services.replica_manager.log_manager.get_log(topic, index)
    if log is None:
        raise UnknownPartitionError(f"This server has no replica of {topic}-{index}")
    epoch = await ctx.services.io.run(lambda: latest_epoch_on_disk(log))
    return epoch, log.log_end_offset


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
        if request.replica_id == DEBUGGING_REPLICA_ID and requested.timestamp == LATEST_TIMESTAMP:
            response.leader_epoch, response.offset = await _replica_log_end(ctx, topic, requested.partition_index)
            return response
        partition = ctx.services.replica_manager.leader_partition(topic, requested.partition_index)
        partition.check_leader_epoch(requested.current_leader_epoch)
        log = partition.log
        target = requested.timestamp
        if target == LATEST_TIMESTAMP:
            response.offset = _visible(log, request)
        elif target in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP):
            response.offset = log.log_start_offset
        elif target == EARLIEST_PENDING_UPLOAD_TIMESTAMP:
            return response  # nothing is pending upload to remote storage: there is none
        elif target == MAX_TIMESTAMP:
            found: tuple[int, int] | None = log.latest_timestamp_offset()
            if found is not None and found[0] < _visible(log, request):
                response.offset, response.timestamp = found
        else:
            epoch = partition.leader_epoch
            found = await log.fetch_offset_by_timestamp_off_loop(ctx.services.io, target)
            if ctx.services.replica_manager.leader_partition(topic, requested.partition_index) is not partition \
                    or partition.leader_epoch != epoch:
                raise NotLeaderError(f"leadership of {topic}-{requested.partition_index} changed during the lookup")
            if found is not None and found[0] < _visible(log, request):
                response.offset, response.timestamp = found
        if response.offset >= 0:
            response.leader_epoch = partition.leader_epoch
    except Exception as exc:
        response.error_code = error_code_for(exc)
    return response


def _visible(log: PartitionLog, request: ListOffsetsRequest) -> int:
    """The bound of answers: the last stable offset or high watermark, the log end for a follower."""
    if request.replica_id != CONSUMER_REPLICA_ID:
        return log.log_end_offset
    return log.last_stable_offset if request.isolation_level == READ_COMMITTED else log.high_watermark
