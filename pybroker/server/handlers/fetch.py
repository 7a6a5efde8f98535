"""Fetch (1): read whole batches up to the high watermark, long-polling until min_bytes or max_wait.

isolation_level=1 (read_committed) reads only up to the last stable offset and lists the aborted
transactions between the fetch offset and the LSO, so the client drops their records (entries
past the returned batches are harmless: clients apply an entry only when they reach its first
offset); control batches are returned as they are and clients skip them, as with Kafka.

Fetch sessions (KIP-227) live in `pybroker.server.fetch_sessions`: it says which partitions a
request reads (an incremental request reads its session's partitions) and which partitions the
response carries; this handler only reads them. Followers are privileged in the session cache.

A fetch with a replica id reads as a follower (to the log end, outside the consumer byte-rate
quota) only from a replica of the partition other than the leader; any other id is answered
NOT_LEADER_OR_FOLLOWER, and with an authorizer it needs ClusterAction, as in Kafka.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from pybroker.log.errors import ColdReadError
from pybroker.log.file_slice import FileSlice
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import FetchRequest, FetchResponse
from pybroker.protocol.primitives import ZERO_UUID
from pybroker.replication.errors import ReplicationError
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server.authorization import allowed_names, authorize_cluster
from pybroker.server.context import RequestContext
from pybroker.server.error_mapping import error_code_for
from pybroker.server.fetch_sessions import PartitionKey, Requested
from pybroker.server.network import leave_request_queue
from pybroker.server.quota import enforcement as quota
from pybroker.server.registry import api

PartitionData = FetchResponse.PartitionData
FIRST_TOPIC_ID_VERSION = 13
READ_COMMITTED = 1
FIRST_REPLICA_STATE_VERSION = 15
MAX_WARM_UPS = 8


@dataclass(slots=True)
class _Wanted:
    """One requested partition, resolved to a topic name (or the error that prevents it)."""

    topic: str
    topic_id: uuid.UUID
    key: PartitionKey
    request: FetchRequest.FetchPartition
    error: ErrorCode = ErrorCode.NONE


@dataclass(slots=True)
class _Result:
    """Each partition read, with its records' size, in request order."""

    partitions: list[tuple[_Wanted, PartitionData, int]] = field(default_factory=list)
    bytes: int = 0
    has_error: bool = False


# v18 (KIP-1166) adds the follower's known high watermark, which only lets a leader end a follower's long poll early
# when its high watermark moved; this leader does not use it (the follower learns it on the next answer, as before).
@api(ApiKey.FETCH, 4, 18)
async def handle(ctx: RequestContext, request: FetchRequest) -> FetchResponse:
    sessions = ctx.broker.fetch_sessions
    follower = _replica_id(ctx, request) >= 0
    context = sessions.new_context(
        ctx.now_ms, session_id=request.session_id, epoch=request.session_epoch,
        privileged=follower, uses_topic_ids=_uses_topic_ids(ctx),
        requested=_requested(ctx, request), forgotten=_forgotten(ctx, request))
    if context.error is not ErrorCode.NONE:
        return FetchResponse(throttle_time_ms=0, error_code=context.error, session_id=0, responses=[])
    wanted = _resolve(ctx, context.partitions)
    _authorize(ctx, request, wanted)
    try:  # usually all in the page cache: read at once, without a coroutine of its own
        result = _read_all(ctx, request, wanted, cached_only=True)
    except ColdReadError as cold:
        result = await _read_all_from_cache(ctx, request, wanted, cold)
    if follower:
        _record_follower_fetch(ctx, request, result)
    if result.bytes < request.min_bytes and not result.has_error and request.max_wait_ms > 0:
        result = await _long_poll(ctx, request, wanted, result)
    # consumer_byte_rate: a throttled consumer gets an empty answer and the session is left as it was
    if quota.record_fetch(follower, result.bytes):
        return FetchResponse(throttle_time_ms=0, error_code=0, responses=[],
                             session_id=context.session.id if context.session is not None else 0)
    session_id, included = sessions.complete(
        context, ctx.now_ms, [(item.key, data, size) for item, data, size in result.partitions])
    if not all(included):
        result.partitions = [part for part, keep in zip(result.partitions, included) if keep]
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=session_id, responses=_group(ctx, result))


async def _long_poll(ctx: RequestContext, request: FetchRequest, wanted: list[_Wanted], result: _Result) -> _Result:
    """Read again after each append to the partitions asked for, until min_bytes are there, a read
    fails or max_wait_ms has passed; the last read is the answer."""
    deadline = time.monotonic() + request.max_wait_ms / 1000
    keys = [(w.topic, w.request.partition) for w in wanted if w.topic is not None]
    while result.bytes < request.min_bytes and not result.has_error and keys:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        leave_request_queue()
        await ctx.broker.replica_manager.wait_for_append(keys, remaining)
        result = await _read_all_from_cache(ctx, request, wanted)
    return result


def _authorize(ctx: RequestContext, request: FetchRequest, wanted: list[_Wanted]) -> None:
    """Kafka's checks: a follower needs ClusterAction, a consumer Read on each topic; refused
    partitions answer TOPIC_AUTHORIZATION_FAILED."""
    if ctx.broker.authorizer is None:
        return
    named = {w.topic for w in wanted if w.error is ErrorCode.NONE}
    if _replica_id(ctx, request) >= 0:
        allowed = named if authorize_cluster(ctx, AclOperation.CLUSTER_ACTION) else set()
    else:
        allowed = allowed_names(ctx, AclOperation.READ, ResourceType.TOPIC, named)
    for item in wanted:
        if item.error is ErrorCode.NONE and item.topic not in allowed:
            item.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _uses_topic_ids(ctx: RequestContext) -> bool:
    return ctx.api_version >= FIRST_TOPIC_ID_VERSION


def _requested(ctx: RequestContext, request: FetchRequest) -> Requested:
    """The request's partitions keyed as its version names topics: by id from v13, by name before."""
    by_id = _uses_topic_ids(ctx)
    return [((topic.topic_id if by_id else topic.topic, partition.partition), partition)
            for topic in request.topics for partition in topic.partitions]


def _forgotten(ctx: RequestContext, request: FetchRequest) -> list[PartitionKey]:
    by_id = _uses_topic_ids(ctx)
    return [(topic.topic_id if by_id else topic.topic, partition)
            for topic in request.forgotten_topics_data for partition in topic.partitions]


def _resolve(ctx: RequestContext, partitions: Requested) -> list[_Wanted]:
    """Name each partition's topic; v13+ requests name topics by id only."""
    metadata = ctx.broker.metadata
    error = ErrorCode.UNKNOWN_TOPIC_ID if _uses_topic_ids(ctx) else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    wanted = []
    last_topic: str | uuid.UUID | None = None
    info = None
    for key, partition in partitions:
        topic = key[0]
        if topic != last_topic:  # partitions come grouped by topic: one lookup per topic
            last_topic = topic
            info = metadata.topic_by_id(topic) if isinstance(topic, uuid.UUID) else metadata.topic(topic)
        if info is not None:
            name, topic_id = info.name, info.topic_id
        elif isinstance(topic, uuid.UUID):
            name, topic_id = "", topic
        else:
            name, topic_id = topic, ZERO_UUID
        wanted.append(_Wanted(name, topic_id, key, partition, ErrorCode.NONE if info else error))
    return wanted


async def _read_all_from_cache(ctx: RequestContext, request: FetchRequest, wanted: list[_Wanted],
                               cold: ColdReadError | None = None) -> _Result:
    """``_read_all`` with the page cache only, so that a cold log never stalls the event loop: where
    a header walk meets a page out of the cache, that range is read into the cache on an I/O thread
    and the reads start over (the same range is then also warm for the sendfile of the answer).
    After ``MAX_WARM_UPS`` (the cache evicting as fast as we warm) the reads may block, to progress.
    ``cold``: the miss of a read the caller already tried, warmed first instead of read again."""
    io = ctx.broker.io
    for _ in range(MAX_WARM_UPS):
        if cold is None:
            try:
                return _read_all(ctx, request, wanted, cached_only=True)
            except ColdReadError as miss:
                cold = miss
        io.cold_reads["fetch"] += 1
        await io.run(cold.warm)
        cold = None
    return _read_all(ctx, request, wanted, cached_only=False)


def _read_all(ctx: RequestContext, request: FetchRequest, wanted: list[_Wanted], *, cached_only: bool) -> _Result:
    """Read each partition in request order within max_bytes; the first non-empty one may exceed it.

    As in Kafka's ReplicaManager, the limit left shrinks by each partition's size but never below 0,
    so only a negative request max_bytes reaches the first partition's read (which rejects it).
    """
    result = _Result()
    follower = _replica_id(ctx, request) >= 0
    limit = request.max_bytes if ctx.api_version >= 3 else 2**31 - 1
    limit = int(min(limit, ctx.broker.config["fetch.max.bytes"], quota.fetch_max_bytes(follower)))
    for item in wanted:
        if item.error is ErrorCode.NONE:
            try:
                data = _read_partition(ctx, request, item, limit, follower, min_one_batch=result.bytes == 0,
                                       cached_only=cached_only)
            except ColdReadError:
                raise
            except Exception as exc:  # Kafka answers any failed read with unknown offsets (-1)
                data = _error_data(item.request.partition, error_code_for(exc))
        else:
            data = _error_data(item.request.partition, item.error)
        size = _records_size(data)
        limit = max(limit - size, 0)
        if data.error_code:
            result.has_error = True
        result.bytes += size
        result.partitions.append((item, data, size))
    return result


def _error_data(partition: int, error: ErrorCode) -> PartitionData:
    return PartitionData(partition_index=partition, error_code=error, high_watermark=-1, last_stable_offset=-1,
                         log_start_offset=-1, records=b"")


def _read_partition(ctx: RequestContext, request: FetchRequest, item: _Wanted, budget: int, follower: bool, *,
                    min_one_batch: bool, cached_only: bool) -> PartitionData:
    wanted = item.request
    partition = ctx.broker.replica_manager.leader_partition(item.topic, wanted.partition)
    partition.check_leader_epoch(wanted.current_leader_epoch)
    if follower:
        partition.check_follower(_replica_id(ctx, request))
    log = partition.log
    read_committed = request.isolation_level == READ_COMMITTED
    last_stable = log.last_stable_offset
    # Followers read up to the log end; consumers up to the high watermark or, read_committed, the LSO.
    max_offset = None if follower else last_stable if read_committed else log.high_watermark
    info = log.read(wanted.fetch_offset, min(wanted.partition_max_bytes, budget), max_offset=max_offset,
                    min_one_batch=min_one_batch, cached_only=cached_only)
    aborted: list[FetchResponse.AbortedTransaction] | None = [] if read_committed else None
    records: bytes | FileSlice = b""
    if info.slices is not None:
        records = info.slices  # the network layer splices the file range into the response
        if read_committed:
            aborted = [FetchResponse.AbortedTransaction(producer_id=txn.producer_id, first_offset=txn.first_offset)
                       for txn in log.collect_aborted(wanted.fetch_offset, last_stable)]
    return PartitionData(partition_index=wanted.partition, error_code=0, high_watermark=info.high_watermark,
                         last_stable_offset=last_stable, log_start_offset=info.log_start_offset,
                         aborted_transactions=aborted, records=records)


def _records_size(data: PartitionData) -> int:
    records = data.records
    return records.size if isinstance(records, FileSlice) else len(records)


def _replica_id(ctx: RequestContext, request: FetchRequest) -> int:
    """The fetching follower's broker id, or -1 for a consumer (v15+ moved it into ReplicaState)."""
    return request.replica_id if ctx.api_version < FIRST_REPLICA_STATE_VERSION else request.replica_state.replica_id


def _record_follower_fetch(ctx: RequestContext, request: FetchRequest, result: _Result) -> None:
    """A follower's fetch offsets are its log end offsets: the leader's ISR and watermark use them.

    Only offsets the leader could read from count (Kafka's updateFollowerFetchState runs on the read
    result): an out-of-range or refused fetch says nothing about what the follower holds."""
    replica_id = _replica_id(ctx, request)
    for item, data, _ in result.partitions:
        if data.error_code == ErrorCode.NONE:
            try:
                ctx.broker.replica_manager.record_follower_fetch(
                    item.topic, item.request.partition, replica_id, item.request.fetch_offset,
                    current_leader_epoch=item.request.current_leader_epoch,
                    log_start_offset=item.request.log_start_offset)
            except ReplicationError:  # not the leader (any more), or another epoch: the read reports it
                continue


def _group(ctx: RequestContext, result: _Result) -> list[FetchResponse.FetchableTopicResponse]:
    """Group partition results back into topics, keeping the request's order."""
    topics: list[FetchResponse.FetchableTopicResponse] = []
    for item, data, _ in result.partitions:
        if not topics or topics[-1].topic != item.topic or topics[-1].topic_id != item.topic_id:
            topics.append(FetchResponse.FetchableTopicResponse(topic=item.topic, topic_id=item.topic_id,
                                                                partitions=[]))
        topics[-1].partitions.append(data)
    return topics
