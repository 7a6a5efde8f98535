"""Share consumers' partition APIs (KIP-932): ShareFetch (78) and ShareAcknowledge (79), v1-v2 as Kafka 4.2.

Served by each partition's leader, where its share-partitions live (``replication/share/partition.py``). A request
runs in a share session (``share_sessions.py``); its acknowledgements are applied first, then written to the share
coordinator, all partitions at once, and answered once written (as Kafka answers after its persister's writes; a
write runs to its end even if the client goes away). A ShareFetch fetches meanwhile, without waiting for those
writes, as Kafka's handleShareFetchRequest combines the two: each partition of the session acquires records for the
member (``replication/share/reader.py``), long-polling up to max_wait_ms until something is acquired, and the answer
goes once both are done. Closing the session (epoch -1) releases what the member still holds here.

v2 adds the record-limit acquisition mode (KIP-1206: exactly max_records, splitting a batch) and RENEW
acknowledgements (KIP-1222: the lock of held records starts again); a ShareFetch with IsRenewAck only acknowledges
(its byte, record and wait limits must be 0, else INVALID_REQUEST), and RENEW in a v1 request, or without
IsRenewAck, makes its partition INVALID_REQUEST.
A group with ``share.isolation.level=read_committed`` reads up to the last stable offset, aborted records archived.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Iterable

from pybroker.common.topic import TopicPartition
from pybroker.common.uncancellable import run_to_end
from pybroker.log.file_slice import FileSlice
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
)
from pybroker.replication.share.partition import AckType, Acquired, SharePartition, Span
from pybroker.replication.share.reader import acquire_from_log
from pybroker.security.acl import AclOperation, ResourceType
from pybroker.server.authorization import allowed_names, authorize
from pybroker.server.context import RequestContext
from pybroker.server.error_mapping import error_code_for
from pybroker.server.features import share_groups_enabled
from pybroker.server.request_channel import leave_request_queue
from pybroker.server.registry import api
from pybroker.server.share_service import ClosedSession, Load, ShareStateUnavailable
from pybroker.server.share_sessions import INITIAL_EPOCH, SessionContext

FetchData = ShareFetchResponse.PartitionData
RENEW_VERSION = 2
RECORD_LIMIT = 1
"""ShareFetch v2's share_acquire_mode for KIP-1206's record-limit acquisition (0 is batch-optimized)."""
RENEW_TYPE = 4
"""KIP-1222's RENEW acknowledge type, valid only in a v2 request with IsRenewAck (v1's types go up to REJECT, 3)."""
Key = tuple[uuid.UUID, int]
AckBatch = ShareFetchRequest.AcknowledgementBatch | ShareAcknowledgeRequest.AcknowledgementBatch
AckBatches = list[ShareFetchRequest.AcknowledgementBatch] | list[ShareAcknowledgeRequest.AcknowledgementBatch]
Write = Callable[[], Awaitable[ErrorCode]]
"""A partition's applied acknowledgements being written: its answer once done."""


@dataclass(slots=True)
class _Partition:
    """One share-partition's answer being built."""

    key: Key
    topic: str | None
    error: ErrorCode = ErrorCode.NONE
    ack_error: ErrorCode | None = None
    leader: tuple[int, int] = (-1, -1)
    records: FileSlice | bytes = b""
    acquired: list[Acquired] = field(default_factory=list)


@api(ApiKey.SHARE_FETCH, 1, 2)
async def share_fetch(ctx: RequestContext, request: ShareFetchRequest) -> ShareFetchResponse:
    share = ctx.services.share
    group_id, member_id = request.group_id or "", request.member_id or ""
    refused = _refused(ctx, group_id, member_id, request.share_session_epoch == INITIAL_EPOCH)
    if refused is None and request.is_renew_ack and (request.max_bytes or request.min_bytes or request.max_records
                                                     or request.max_wait_ms):
        refused = ErrorCode.INVALID_REQUEST, "MaxBytes, MinBytes, MaxRecords and MaxWaitMs must be 0 with IsRenewAck."
    if refused is not None:
        return ShareFetchResponse(error_code=refused[0], error_message=refused[1])
    requested = [((t.topic_id, p.partition_index), p.acknowledgement_batches)
                 for t in request.topics for p in t.partitions]
    forgotten = [(t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions]
    context = share.sessions.fetch_context(group_id, member_id, request.share_session_epoch,
                                           [key for key, _ in requested], forgotten, share.now_ms())
    if context.error is not ErrorCode.NONE:
        return ShareFetchResponse(error_code=context.error)
    assert context.session is not None
    answers: dict[Key, _Partition] = {}
    closing = share.closing(context.session) if context.closing else None
    acknowledging = [(answers.setdefault(key, _resolve(ctx, key)), batches)
                     for key, batches in _last_named(requested).items() if batches]
    applied = [_apply(ctx, answer, group_id, member_id, batches, request.is_renew_ack)
               for answer, batches in acknowledging]
    # Applied now, written meanwhile: the fetch does not wait for the writes, the answer does (Kafka's
    # handleShareFetchRequest combines the acknowledgements' future with the fetch's).
    written = _write_all(ctx, applied, closing) if applied or closing else None
    if context.closing or request.is_renew_ack:
        for (answer, _batches), code in zip(acknowledging, await written if written is not None else []):
            answer.ack_error = code
        return _fetch_response(ctx, group_id, answers.values())
    fetching = [_resolve(ctx, key) for key in context.session.partitions]
    clock = share.clock
    deadline = clock.monotonic() + request.max_wait_ms / 1000
    loads = _start_loads(ctx, group_id, fetching)
    if loads:  # one turn of the loop for them: a load that needs no wait (the state at hand) serves even a 0 wait
        await asyncio.wait({load.task for load in loads.values()}, timeout=0)
    read_failed = await _acquire(ctx, request, fetching, loads)
    # As Kafka's SharePartitionManager.processShareFetch and DelayedShareFetch.tryComplete: answered at once only
    # when every partition has an error from the start; otherwise the fetch waits for records (or a failed read of
    # a log), a failed load being its partition's error in the answer, not the end of the wait.
    waiting = not all(p.error for p in fetching)
    while request.max_wait_ms > 0 and waiting and not read_failed and not any(p.acquired for p in fetching):
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            break
        lock_deadlines = [d for d in (_next_lock_deadline(ctx, group_id, p) for p in fetching) if d is not None]
        if lock_deadlines:
            remaining = min(remaining, max(0.0, (min(lock_deadlines) - share.now_ms()) / 1000) + 0.001)
        leave_request_queue()
        await _wait(ctx, fetching, loads, remaining)
        read_failed = await _acquire(ctx, request, fetching, loads)
    for (answer, _batches), code in zip(acknowledging, await written if written is not None else []):
        answer.ack_error = code
    for answer in fetching:
        previous = answers.get(answer.key)
        if previous is not None:
            answer.ack_error = previous.ack_error
        if context.full or answer.acquired or answer.error or answer.ack_error is not None:
            answers[answer.key] = answer
    return _fetch_response(ctx, group_id, answers.values())


@api(ApiKey.SHARE_ACKNOWLEDGE, 1, 2)
async def share_acknowledge(ctx: RequestContext, request: ShareAcknowledgeRequest) -> ShareAcknowledgeResponse:
    share = ctx.services.share
    group_id, member_id = request.group_id or "", request.member_id or ""
    refused = _refused(ctx, group_id, member_id, False)
    if refused is not None:
        return ShareAcknowledgeResponse(error_code=refused[0], error_message=refused[1])
    context: SessionContext = share.sessions.acknowledge_context(group_id, member_id, request.share_session_epoch,
                                                                 share.now_ms())
    if context.error is not ErrorCode.NONE:
        return ShareAcknowledgeResponse(error_code=context.error)
    closing = share.closing(context.session) if context.closing and context.session is not None else None
    named = _last_named(((topic.topic_id, partition.partition_index), partition.acknowledgement_batches)
                        for topic in request.topics for partition in topic.partitions)
    answers = [_resolve(ctx, key) for key in named]
    applied = [_apply(ctx, answer, group_id, member_id, batches, request.is_renew_ack)
               for answer, batches in zip(answers, named.values())]
    codes = await _write_all(ctx, applied, closing)
    topics: dict[uuid.UUID, ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse] = {}
    for answer, code in zip(answers, codes):
        entry = topics.setdefault(answer.key[0], ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse(
            topic_id=answer.key[0], partitions=[]))
        entry.partitions.append(ShareAcknowledgeResponse.PartitionData(
            partition_index=answer.key[1], error_code=code,
            current_leader=ShareAcknowledgeResponse.LeaderIdAndEpoch(*answer.leader)))
    return ShareAcknowledgeResponse(responses=list(topics.values()),
                                    acquisition_lock_timeout_ms=share.configs.lock_duration_ms(group_id))


def _last_named(named: Iterable[tuple[Key, AckBatches]]) -> dict[Key, AckBatches]:
    """Each partition's acknowledgement batches, a partition named twice taking its last batches, as Kafka's
    KafkaApis collects them into a map by partition: each is acknowledged once (not twice at once) and answered once."""
    return dict(named)


def _write_all(ctx: RequestContext, applied: list[ErrorCode | Write],
               closing: ClosedSession | None) -> asyncio.Future[list[ErrorCode]]:
    """The writes of the request's applied acknowledgements (`_apply`), all at once, each partition's answer; then,
    when the request closes the share session (already gone from the cache), the release of what the member held
    here when the request came (``ShareService.closed``; taken before the acknowledgements were applied, so those
    whose write failed, held again, are released too). Run to its end (`run_to_end`) whatever becomes of the request, as Kafka completes a
    request whose client went away: cancelled while a write was under way, an acknowledgement would stay applied
    unwritten, and the member's other records acquired until their locks run out, its session closed."""
    share = ctx.services.share

    async def write_all() -> list[ErrorCode]:
        try:
            codes = await asyncio.gather(*(_written(outcome) for outcome in applied))
        finally:
            if closing is not None:
                share.closed(closing)
        return list(codes)
    return run_to_end(write_all())


async def _written(outcome: ErrorCode | Write) -> ErrorCode:
    return outcome if isinstance(outcome, ErrorCode) else await outcome()


def _refused(ctx: RequestContext, group_id: str, member_id: str, opening: bool) -> tuple[ErrorCode, str] | None:
    """The top-level error of a request refused as a whole: share groups off (share.version 0), no group or member
    id, not a share group, or (to open a share session) not a member. A session, once open, is the member's standing:
    the member leaving the group closes it, and later requests in it are answered SHARE_SESSION_NOT_FOUND."""
    if not share_groups_enabled(ctx.services.features.current):
        return ErrorCode.UNSUPPORTED_VERSION, "Share groups are not enabled (share.version is 0)."
    if not group_id:
        return ErrorCode.INVALID_REQUEST, "GroupId can't be empty."
    if not member_id:
        return ErrorCode.INVALID_REQUEST, "MemberId can't be empty."
    if not authorize(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, f"Not authorized to access group {group_id}."
    share = ctx.services.share
    if ctx.services.groups.owns(group_id):  # the group's coordinator is here: its membership is known
        if share.is_other_group(group_id):
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group."
        if opening and not share.groups.is_member(group_id, member_id):
            return ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of share group {group_id}."
    return None


def _resolve(ctx: RequestContext, key: Key) -> _Partition:
    metadata = ctx.services.metadata
    assert metadata is not None  # set at the broker's start, before it takes requests
    info = metadata.topic_by_id(key[0])
    if info is None:
        return _Partition(key, None, ErrorCode.UNKNOWN_TOPIC_ID)
    answer = _Partition(key, info.name)
    if not allowed_names(ctx, AclOperation.READ, ResourceType.TOPIC, [info.name]):
        answer.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        return answer
    try:
        partition = ctx.services.replica_manager.leader_partition(info.name, key[1])
    except Exception as exc:
        answer.error = error_code_for(exc)
        return answer
    answer.leader = (ctx.services.broker_id, partition.leader_epoch)
    return answer


def _valid_batches(batches: AckBatches, renew_allowed: bool) -> bool:
    """Whether a partition's acknowledgement batches may be applied, as Kafka's KafkaApis.validateAcknowledgementBatches
    decides before applying any of them (else the partition is INVALID_REQUEST, none of its batches applied): each
    batch's last offset not below its first, its first not below the previous batch's last offset, at least one
    acknowledge type and, when more than one, one per offset, each type known (RENEW only with ``renew_allowed``).
    A batch may start at the previous batch's last offset: Kafka refuses ``batch.firstOffset < prevEndOffset`` only."""
    highest = RENEW_TYPE if renew_allowed else RENEW_TYPE - 1
    previous_last = -1
    for batch in batches:
        types = batch.acknowledge_types
        if batch.last_offset < batch.first_offset or batch.first_offset < previous_last or not types:
            return False
        if len(types) > 1 and len(types) != batch.last_offset - batch.first_offset + 1:
            return False
        if any(t < 0 or t > highest for t in types):
            return False
        previous_last = batch.last_offset
    return True


def _apply(ctx: RequestContext, answer: _Partition, group_id: str, member_id: str, batches: AckBatches,
           is_renew_ack: bool) -> ErrorCode | Write:
    """Apply a partition's acknowledgement batches in order, once all are found valid (`_valid_batches`); the first
    one refused (e.g. naming records the member does not hold: INVALID_RECORD_STATE) is the partition's answer and
    undoes those applied before it, later ones not tried, as Kafka's SharePartition.acknowledge stops at the first
    failure and rolls the whole call back (renewals excepted: see `_written_ranges`). The partition's answer, or,
    when a record's state changed, the write of the change to the share coordinator that gives it (a failed write is
    the answer, and undoes the batches); renewals alone are answered at once, nothing written. Lock expiries found
    meanwhile are written apart (``persist_later``), as Kafka writes them from its timer, unless the
    acknowledgements' write carries them. The acknowledgements count in the metrics once they took effect (`_count`).
    Applied at once, before the request does anything else (a ShareFetch's fetch sees them), as Kafka's
    SharePartition changes its in-memory state before it writes. A share-partition not loaded here is
    answered at once, without waiting for or starting a load, as Kafka's SharePartitionManager.acknowledge answers:
    one it does not hold is UNKNOWN_TOPIC_OR_PARTITION, one still initializing INVALID_RECORD_STATE
    (SharePartition.acknowledge finds no batch in its empty cache). The member holds none of its records here
    either way: a load makes the records acquired before it available again, so the acknowledgement could only have
    been refused after it."""
    if answer.error is ErrorCode.UNKNOWN_TOPIC_ID:
        return answer.error
    if not _valid_batches(batches, ctx.api_version >= RENEW_VERSION and is_renew_ack):
        return ErrorCode.INVALID_REQUEST
    if answer.error is not ErrorCode.NONE or answer.topic is None:
        return answer.error
    share = ctx.services.share
    state = share.partitions.get((group_id, answer.topic, answer.key[1]))
    if state is None:
        return ErrorCode.INVALID_RECORD_STATE if share.is_loading(group_id, answer.topic, answer.key[1]) \
            else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    result = ErrorCode.NONE
    now = share.now_ms()
    expired = share.expire(group_id, answer.topic, answer.key[1], now)
    renew_lock_ms = share.configs.lock_duration_ms(group_id) if ctx.api_version >= RENEW_VERSION else None
    undo: list[list[Span]] = []
    archiving = 0
    for batch in batches:
        before = [span for first, last in _written_ranges(batch) for span in state.held_copy(first, last)]
        result = state.acknowledge(member_id, batch.first_offset, batch.last_offset, batch.acknowledge_types, now,
                                   renew_lock_ms=renew_lock_ms)
        if result is not ErrorCode.NONE:
            _rollback(state, undo)()
            undo.clear()
            break
        if before:
            undo.append(before)
            archiving += _archiving(batch, before, state.delivery_count_limit)
    if result is not ErrorCode.NONE or not undo:
        if expired:
            share.persist_later(group_id, answer.topic, answer.key[1])
        if result is ErrorCode.NONE:  # only renewals: nothing to write, as Kafka writes nothing for a RENEW
            _count(state, batches, 0)
        return result
    # Counted with the writer now, not when the write starts: a failing write that ends in between undoes it too.
    pending = share.changed(group_id, answer.topic, answer.key[1], _rollback(state, undo))

    async def write() -> ErrorCode:
        leave_request_queue()
        written = await pending()
        if written is ErrorCode.NONE:
            _count(state, batches, archiving)
        return written
    return write


def _written_ranges(batch: AckBatch) -> list[tuple[int, int]]:
    """The runs of a batch's offsets whose acknowledgement changes their state, to be written and undone should that
    write fail: all but RENEW's, which only restarts a lock. Kafka's SharePartition adds no persister batch for a
    RENEW (acknowledgeCompleteBatch: "Nothing to persist"), so a failed write, or a later batch of the call refused,
    leaves the renewal in place."""
    types = batch.acknowledge_types
    first, last = batch.first_offset, batch.last_offset
    if len(types) == 1:
        return [] if types[0] == RENEW_TYPE else [(first, last)]
    runs: list[tuple[int, int]] = []
    for offset, ack_type in zip(range(first, last + 1), types):
        if ack_type == RENEW_TYPE:
            continue
        if runs and runs[-1][1] == offset - 1:
            runs[-1] = (runs[-1][0], offset)
        else:
            runs.append((offset, offset))
    return runs


def _count(state: SharePartition, batches: AckBatches, archived: int) -> None:
    """Count a partition's acknowledgements in the metrics once they took effect (written, or renewals), with the
    ``archived`` records they archived (`_archiving`): Kafka's SharePartitionManager.acknowledge records
    RecordAcknowledgementsPerSec only when the share-partition's acknowledge future completes without an exception,
    so a refused or rolled-back acknowledgement counts nothing (and an archiving undone, then done again, once)."""
    for batch in batches:
        state.counters.on_acknowledge(batch.first_offset, batch.last_offset, batch.acknowledge_types)
    state.counters.archived += archived


def _archiving(batch: AckBatch, before: list[Span], limit: int) -> int:
    """How many records an applied batch archived, from its written offsets as they were held (``before``): those
    it REJECTs, and those it RELEASEs at the delivery count limit (Kafka's RELEASE makes a record available, archived
    once its count reached the limit: InFlightState.tryUpdateState with DeliveryCountOps.NO_OP)."""
    types = batch.acknowledge_types
    archived = 0
    for span in before:
        archives = (AckType.REJECT, AckType.RELEASE) if span.delivery_count >= limit else (AckType.REJECT,)
        if len(types) == 1:
            archived += span.last - span.first + 1 if types[0] in archives else 0
        else:
            archived += sum(1 for offset in range(span.first, span.last + 1)
                            if types[offset - batch.first_offset] in archives)
    return archived


def _rollback(state: SharePartition, undo: list[list[Span]]) -> Callable[[], None]:
    """Undo a partition's applied acknowledgement batches, last first, should their write fail (as Kafka's
    SharePartition rolls back its state transitions); the writer calls it, in order with other requests' undoing."""
    def rollback() -> None:
        for before in reversed(undo):
            state.rollback(before)
    return rollback


def _start_loads(ctx: RequestContext, group_id: str, fetching: Iterable[_Partition]) -> dict[Key, Load]:
    """The loads the fetch waits for: of each of its share-partitions not loaded here yet, the one under way or one
    started now, all at once, as Kafka's SharePartitionManager initializes every share-partition of a fetch before
    it waits (a fetch starts loads at its start only, not again at each retry)."""
    share = ctx.services.share
    loads: dict[Key, Load] = {}
    for answer in fetching:
        if answer.error is not ErrorCode.NONE or answer.topic is None:
            continue
        try:
            partition = ctx.services.replica_manager.leader_partition(answer.topic, answer.key[1])
        except Exception:  # noqa: BLE001 - _acquire answers the partition's error
            continue
        found = share.load(group_id, answer.topic, answer.key[1], partition.log, partition.leader_epoch)
        if isinstance(found, Load):
            loads[answer.key] = found
    return loads


async def _wait(ctx: RequestContext, fetching: Iterable[_Partition], loads: dict[Key, Load], timeout_s: float) -> None:
    """Until an append to one of the fetch's partitions, the end of one of the loads it waits for, or ``timeout_s``."""
    appended = ctx.services.replica_manager.wait_for_append(
        [TopicPartition(p.topic, p.key[1]) for p in fetching if p.topic], timeout_s)
    pending = {load.task for load in loads.values() if not load.task.done()}
    if not pending:
        await appended
        return
    waiter = asyncio.ensure_future(appended)
    try:
        await asyncio.wait({waiter, *pending}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()


async def _acquire(ctx: RequestContext, request: ShareFetchRequest, fetching: Iterable[_Partition],
                   loads: dict[Key, Load]) -> bool:
    """Acquire records on each partition without an error, within the request's byte and record limits; whether
    a partition's log could not be read (its leadership gone, a read error), which ends the fetch's wait as a log
    read error completes Kafka's DelayedShareFetch. A share-partition still loading is answered with nothing, as
    Kafka answers one still initializing: a failed load is the partition's error only in the fetch that started
    it, if it failed within that fetch's wait (Java's 4.2 share consumer throws IllegalStateException from poll()
    for COORDINATOR_NOT_AVAILABLE: a load outlasting the fetch must not show it where Kafka would not), and it does
    not end the wait (Kafka's handleInitializationException only adds the partition to the fetch's erroneous ones).
    A load that ended leaves ``loads``."""
    read_failed = False
    share = ctx.services.share
    group_id = request.group_id
    assert group_id is not None and request.member_id is not None
    max_bytes = min(request.max_bytes, ctx.services.config["fetch.max.bytes"])
    max_records = request.max_records if request.max_records > 0 else share.limits.partition_max_record_locks
    lock_ms = share.configs.lock_duration_ms(group_id)
    for answer in fetching:
        if answer.error is not ErrorCode.NONE or answer.topic is None or max_records <= 0:
            continue
        try:
            partition = ctx.services.replica_manager.leader_partition(answer.topic, answer.key[1])
            load = loads.get(answer.key)
            if load is not None and load.task.done():
                del loads[answer.key]
            state = share.partitions.get((group_id, answer.topic, answer.key[1])) if load is None \
                else load.outcome()
            if state is None:
                continue
            now = share.now_ms()
            if share.expire(group_id, answer.topic, answer.key[1], now):
                share.persist_later(group_id, answer.topic, answer.key[1])
            read = await acquire_from_log(partition.log, ctx.services.io, state, request.member_id,
                                          max_bytes=max(max_bytes, 1), max_records=max_records, lock_ms=lock_ms,
                                          now_ms=now, record_limit=request.share_acquire_mode == RECORD_LIMIT,
                                          read_committed=share.configs.read_committed(group_id))
        except ShareStateUnavailable as exc:  # its load failed within the wait: the error; the next fetch reads again
            answer.error = exc.code
            continue
        except Exception as exc:
            answer.error = error_code_for(exc)
            read_failed = True
            continue
        if read.acquired:
            answer.records, answer.acquired = read.records, read.acquired
            max_records -= sum(a.last - a.first + 1 for a in read.acquired)
            size = read.records.size if isinstance(read.records, FileSlice) else len(read.records)
            max_bytes -= size
    return read_failed


def _next_lock_deadline(ctx: RequestContext, group_id: str, answer: _Partition) -> int | None:
    state = ctx.services.share.partitions.get((group_id, answer.topic or "", answer.key[1]))
    return None if state is None else state.next_deadline_ms()


def _fetch_response(ctx: RequestContext, group_id: str, answers: Iterable[_Partition]) -> ShareFetchResponse:
    topics: dict[uuid.UUID, ShareFetchResponse.ShareFetchableTopicResponse] = {}
    for answer in answers:
        entry = topics.setdefault(answer.key[0], ShareFetchResponse.ShareFetchableTopicResponse(
            topic_id=answer.key[0], partitions=[]))
        entry.partitions.append(FetchData(
            partition_index=answer.key[1], error_code=answer.error,
            acknowledge_error_code=answer.ack_error or ErrorCode.NONE,
            current_leader=ShareFetchResponse.LeaderIdAndEpoch(*answer.leader),
            records=answer.records,
            acquired_records=[ShareFetchResponse.AcquiredRecords(first_offset=a.first, last_offset=a.last,
                                                                 delivery_count=a.delivery_count)
                              for a in answer.acquired]))
    return ShareFetchResponse(responses=list(topics.values()),
                              acquisition_lock_timeout_ms=ctx.services.share.configs.lock_duration_ms(group_id))
