"""Fetch (1): resolve and authorize the partitions, read them through the replica manager, answer.

The reads, the choice of the bound (high watermark, LSO for isolation_level=1 read_committed, log
end for followers), the aborted transactions, the long poll until min_bytes or max_wait, the
page-cache warm-up and the follower's fetch state are the replica manager's
(`pybroker.replication.fetch_messages`); control batches are returned as they are and clients
skip them, as with Kafka.

Fetch sessions (KIP-227) live in `pybroker.server.fetch_sessions`: it says which partitions a
request reads (an incremental request reads its session's partitions) and which partitions the
response carries; this handler only reads them. Followers are privileged in the session cache.

A fetch with a replica id reads as a follower (to the log end, outside the consumer byte-rate
quota) only from a replica of the partition other than the leader; any other id is answered
NOT_LEADER_OR_FOLLOWER, and with an authorizer it needs ClusterAction, as in Kafka.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Coroutine

from pybroker.common.ids import BrokerId
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.hot_codecs import shared_default
from pybroker.protocol.messages import FetchRequest, FetchResponse
from pybroker.protocol.primitives import ZERO_UUID
from pybroker.replication.fetch_messages import FetchParams, FetchPartition, FetchResult, PartitionRead, \
    fetch_messages
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server import leader_hints
from pybroker.server.authorization import allowed_names, authorize_cluster
from pybroker.server.context import RequestContext
from pybroker.server.error_mapping import error_code_for
from pybroker.server.fetch_sessions import INVALID_SESSION_ID, FetchContext, PartitionKey, Requested
from pybroker.server.quota import enforcement as quota
from pybroker.server.registry import api
from pybroker.server.request_channel import leave_request_queue

PartitionData = FetchResponse.PartitionData
FetchableTopicResponse = FetchResponse.FetchableTopicResponse
# A partition's answer starts with these tagged fields at their defaults: shared, not built per partition (three
# objects fewer per answer). Nothing changes them in place: KIP-951's leader hint replaces current_leader whole.
# The answers of every request are built with positional arguments, in the generated classes' field order
# (tests/unit/server/test_answer_layouts.py pins it): on Python 3.11 a keyword call to a class builds and
# unpacks a dict per call, which cost a one-partition Fetch more than its answer's own encoding.
# (The hot codecs own these instances: an answer that carries them is written without reading their fields.)
_NO_DIVERGING_EPOCH = shared_default(FetchResponse.EpochEndOffset)
_NO_LEADER = shared_default(FetchResponse.LeaderIdAndEpoch)
_NO_SNAPSHOT = shared_default(FetchResponse.SnapshotId)
# Enum members read once, here: on Python 3.11 every attribute read on an Enum class goes through the slot
# EnumType.__getattr__ installs (about 850 instructions against 100 for a global).
_NONE = ErrorCode.NONE
_UNKNOWN_TOPIC_ID = ErrorCode.UNKNOWN_TOPIC_ID
_UNKNOWN_TOPIC_OR_PARTITION = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
FIRST_TOPIC_ID_VERSION = 13
READ_COMMITTED = 1
FIRST_REPLICA_STATE_VERSION = 15


@dataclass(slots=True)
class _Wanted(FetchPartition):
    """One requested partition, resolved to a topic name (or the error that prevents it): the read the replica
    manager is asked for, under the topic's name, and what the answer needs besides. One object per partition
    rather than two (the read and its request's place): each costs a call of an interpreted ``__init__``."""

    topic_id: uuid.UUID = ZERO_UUID
    key: PartitionKey = ("", -1)
    error: ErrorCode = ErrorCode.NONE


def answer(ctx: RequestContext, request: FetchRequest) -> FetchResponse | Coroutine[Any, Any, FetchResponse]:
    """The fetch's answer when it needs no wait (a consumer's fetch with data, or with no wait asked for), else a
    coroutine that waits and then answers: the dispatcher calls this in the connection's read callback, and a fetch
    answered at once costs no coroutine (`handle` is the same for the quota path)."""
    # The small helpers are inlined where a request would call them every time: a call is a frame on Python 3.11.
    services = ctx.services
    sessions = services.fetch_sessions
    # the fetching follower's broker id, or -1 for a consumer (v15+ moved it into ReplicaState)
    replica_id = BrokerId(request.replica_id if ctx.api_version < FIRST_REPLICA_STATE_VERSION
                          else request.replica_state.replica_id)
    follower = replica_id >= 0
    by_id = ctx.api_version >= FIRST_TOPIC_ID_VERSION
    # The request's partitions keyed as its version names topics: by id from v13, by name before.
    requested: Requested = []
    for topic in request.topics:
        name = topic.topic_id if by_id else topic.topic
        for partition in topic.partitions:
            requested.append(((name, partition.partition), partition))
    # now, session id, epoch, privileged, uses topic ids, requested, forgotten
    context = sessions.new_context(ctx.now_ms, request.session_id, request.session_epoch, follower, by_id, requested,
                                   _forgotten(request, by_id) if request.forgotten_topics_data else [])
    if context.error is not _NONE:
        return FetchResponse(throttle_time_ms=0, error_code=context.error, session_id=0, responses=[])
    wanted = _resolve(ctx, by_id, context.partitions)
    if services.authorizer is not None:
        _authorize(ctx, follower, wanted)
    # loops rather than comprehensions: each comprehension is a call of its own on Python 3.11
    readable: list[FetchPartition] = []
    for item in wanted:
        if item.error is _NONE:
            readable.append(item)
    request_limit = request.max_bytes if ctx.api_version >= 3 else 2**31 - 1
    limit = min(request_limit, services.config["fetch.max.bytes"])
    quota_state = quota.REQUEST_QUOTA.get()
    params = FetchParams(replica_id, request.isolation_level == READ_COMMITTED, request.min_bytes,
                         request.max_wait_ms,
                         limit if quota_state is None else (lambda: int(min(limit, quota.fetch_max_bytes(follower)))))
    outcome = fetch_messages(services.replica_manager, services.io, params, readable,
                             answered_with_error=len(readable) < len(wanted), on_wait=leave_request_queue)
    if isinstance(outcome, FetchResult):
        return _respond(ctx, context, wanted, follower, quota_state is not None, outcome)
    return _respond_later(ctx, context, wanted, follower, quota_state is not None, outcome)


# v18 (KIP-1166) adds the follower's known high watermark, which only lets a leader end a follower's long poll early
# when its high watermark moved; this leader does not use it (the follower learns it on the next answer, as before).
@api(ApiKey.FETCH, 4, 18, immediate=answer)
async def handle(ctx: RequestContext, request: FetchRequest) -> FetchResponse:
    outcome = answer(ctx, request)
    return outcome if isinstance(outcome, FetchResponse) else await outcome


async def _respond_later(ctx: RequestContext, context: FetchContext, wanted: list[_Wanted], follower: bool,
                         quota_applies: bool, outcome: Coroutine[Any, Any, FetchResult]) -> FetchResponse:
    return _respond(ctx, context, wanted, follower, quota_applies, await outcome)


def _respond(ctx: RequestContext, context: FetchContext, wanted: list[_Wanted], follower: bool, quota_applies: bool,
             result: FetchResult) -> FetchResponse:
    """The answer from the reads: each partition's data, the session's part (which partitions it carries), and a
    throttled consumer's empty answer. ``quota_applies``: a client quota applies to this request."""
    reads = iter(result.reads)
    answers = []
    failed = False  # some partition answers an error: KIP-951 may name its leader
    for item in wanted:
        if item.error is not _NONE:
            data = _error_data(item)
        elif (read := next(reads)).error is None and read.aborted is None and read.diverging is None:
            # _answer's usual case, inlined
            # partition_index, error_code, high_watermark, last_stable_offset, log_start_offset, diverging_epoch,
            # current_leader, snapshot_id, aborted_transactions, preferred_read_replica, records
            data = PartitionData(item.index, 0, read.high_watermark, read.last_stable_offset,
                                 read.log_start_offset, _NO_DIVERGING_EPOCH, _NO_LEADER, _NO_SNAPSHOT, None, -1,
                                 read.records)
        else:
            data = _answer(item, read)
        answers.append(data)
        if data.error_code:
            failed = True
    # consumer_byte_rate: a throttled consumer gets an empty answer and the session is left as it was
    if quota_applies and quota.record_fetch(follower, result.bytes):
        return FetchResponse(throttle_time_ms=0, error_code=0, responses=[],
                             session_id=context.session.id if context.session is not None else 0)
    session_id = INVALID_SESSION_ID
    if context.keeps_session:
        sessions = ctx.services.fetch_sessions
        session_id, included = sessions.complete(
            context, ctx.now_ms, [(item.key, data, _records_size(data)) for item, data in zip(wanted, answers)])
        if not all(included):
            wanted = [item for item, keep in zip(wanted, included) if keep]
            answers = [data for data, keep in zip(answers, included) if keep]
    if len(wanted) == 1:  # _group of one partition, inlined
        item = wanted[0]
        topics = [FetchableTopicResponse(item.topic, item.topic_id, answers)]
    else:
        topics = _group(wanted, answers)
    response = FetchResponse(0, 0, session_id, topics)  # throttle time, error code, responses
    if failed and ctx.api_version >= leader_hints.FIRST_FETCH_VERSION:
        response.node_endpoints = _point_to_leaders(ctx, wanted, answers)
    return response


def _point_to_leaders(ctx: RequestContext, wanted: list[_Wanted], answers: list[PartitionData]
                      ) -> list[FetchResponse.NodeEndpoint]:
    """KIP-951: a partition answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names its leader; the
    endpoints of those leaders, for the answer."""
    endpoints: dict[int, FetchResponse.NodeEndpoint] = {}
    for item, data in zip(wanted, answers):
        if data.error_code not in leader_hints.FETCH_ERRORS or not item.topic:
            continue
        hint = leader_hints.leader_hint(ctx.services.metadata, ctx.listener, item.topic, data.partition_index)
        data.current_leader = FetchResponse.LeaderIdAndEpoch(leader_id=hint.leader_id, leader_epoch=hint.leader_epoch)
        if hint.endpoint is not None:
            endpoints[hint.endpoint.node_id] = FetchResponse.NodeEndpoint(
                node_id=hint.endpoint.node_id, host=hint.endpoint.host, port=hint.endpoint.port,
                rack=hint.endpoint.rack)
    return list(endpoints.values())


def _answer(item: _Wanted, read: PartitionRead) -> PartitionData:
    if read.error is not None:  # Kafka answers any failed read with unknown offsets (-1)
        return _error_data(item, error_code_for(read.error))
    if read.diverging is not None:
        # KIP-320: where the fetcher's log left the leader's, no records (high watermark and log start as usual)
        return PartitionData(item.index, 0, read.high_watermark, read.last_stable_offset,
                             read.log_start_offset, FetchResponse.EpochEndOffset(*read.diverging), _NO_LEADER,
                             _NO_SNAPSHOT, None, -1, b"")
    aborted = None if read.aborted is None else [
        FetchResponse.AbortedTransaction(producer_id=producer_id, first_offset=first_offset)
        for producer_id, first_offset in read.aborted]
    # partition_index, error_code, high_watermark, last_stable_offset, log_start_offset, diverging_epoch,
    # current_leader, snapshot_id, aborted_transactions, preferred_read_replica, records
    return PartitionData(item.index, 0, read.high_watermark, read.last_stable_offset,
                         read.log_start_offset, _NO_DIVERGING_EPOCH, _NO_LEADER, _NO_SNAPSHOT, aborted, -1,
                         read.records)


def _error_data(item: _Wanted, error: ErrorCode | None = None) -> PartitionData:
    return PartitionData(item.index, item.error if error is None else error, -1, -1, -1,
                         _NO_DIVERGING_EPOCH, _NO_LEADER, _NO_SNAPSHOT, [], -1, b"")


def _authorize(ctx: RequestContext, follower: bool, wanted: list[_Wanted]) -> None:
    """Kafka's checks (with an authorizer): a follower needs ClusterAction, a consumer Read on each topic;
    refused partitions answer TOPIC_AUTHORIZATION_FAILED."""
    named = {w.topic for w in wanted if w.error is ErrorCode.NONE}
    if follower:
        allowed = named if authorize_cluster(ctx, AclOperation.CLUSTER_ACTION) else set()
    else:
        allowed = allowed_names(ctx, AclOperation.READ, ResourceType.TOPIC, named)
    for item in wanted:
        if item.error is ErrorCode.NONE and item.topic not in allowed:
            item.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _forgotten(request: FetchRequest, by_id: bool) -> list[PartitionKey]:
    return [(topic.topic_id if by_id else topic.topic, partition)
            for topic in request.forgotten_topics_data for partition in topic.partitions]


def _resolve(ctx: RequestContext, by_id: bool, partitions: Requested) -> list[_Wanted]:
    """Name each partition's topic; v13+ requests name topics by id only."""
    metadata = ctx.services.metadata
    error = _UNKNOWN_TOPIC_ID if by_id else _UNKNOWN_TOPIC_OR_PARTITION
    wanted = []
    last_topic: str | uuid.UUID | None = None
    info = None
    for key, partition in partitions:
        topic = key[0]
        # grouped by topic: one lookup per topic (a UUID compares in Python: the usual same object first)
        if last_topic is None or (topic is not last_topic and topic != last_topic):
            last_topic = topic
            info = metadata.topic_by_id(topic) if isinstance(topic, uuid.UUID) else metadata.topic(topic)
        if info is not None:
            name, topic_id = info.name, info.topic_id
        elif isinstance(topic, uuid.UUID):
            name, topic_id = "", topic
        else:
            name, topic_id = topic, ZERO_UUID
        wanted.append(_Wanted(name, partition.partition, partition.fetch_offset, partition.partition_max_bytes,
                              partition.current_leader_epoch, partition.log_start_offset,
                              partition.last_fetched_epoch, topic_id, key, _NONE if info else error))
    return wanted


def _records_size(data: PartitionData) -> int:
    records = data.records  # bytes or a FileSlice, as _partition_data builds it
    if records is None:
        return 0
    return len(records) if isinstance(records, (bytes, bytearray, memoryview)) else records.size


def _group(wanted: list[_Wanted], answers: list[PartitionData]) -> list[FetchableTopicResponse]:
    """Group partition answers back into topics, keeping the request's order."""
    topics: list[FetchableTopicResponse] = []
    for item, data in zip(wanted, answers):
        if not topics or topics[-1].topic != item.topic or topics[-1].topic_id != item.topic_id:
            topics.append(FetchableTopicResponse(item.topic, item.topic_id, []))
        topics[-1].partitions.append(data)
    return topics
