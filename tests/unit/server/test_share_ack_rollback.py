"""Acknowledgements whose state writes fail are undone newest first (``durable.StateWriter``), and a RENEW is never
written nor undone, as Kafka's SharePartition persists nothing for it (a persister batch is added for the other
types only, and only those are rolled back).

A RENEW and then an ACCEPT of the same held records, the ACCEPT's write failing: the RENEW is answered at once,
nothing written for it; the ACCEPT is undone to the records as it found them, held under the renewed lock (Kafka's
rollback state carries the renewed lock's timer task). Two ACCEPTs, the second applied while the first's write is
under way: both undone and answered with the failure, the second never written as if kept.

Driven through the handler's ``_apply`` and ``_written`` (as two requests of one member) against a real
``SharePartition`` and ``StateWriter``, with a share service reduced to what acknowledging uses and a coordinator
whose writes are held and then refused."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Awaitable, Callable, cast

from pybroker.common.clock import ManualClock
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ShareFetchRequest
from pybroker.replication.share.durable import DurableBatch, StateWriter, Undo
from pybroker.replication.share.partition import AckType, Acquired, BatchBounds, RecordState, SharePartition
from pybroker.server.context import RequestContext
from pybroker.server.handlers.share_fetch import _apply, _Partition, _write_all, _written

GROUP, TOPIC, MEMBER = "g", "t", "m1"
LOCK_MS = 30_000
KEY = (uuid.uuid4(), 0)


class Coordinator:
    """Holds each write until ``release`` is set, then answers it with the next of ``answers`` (the last one once
    they run out); counts the writes it was sent."""

    def __init__(self, *answers: ErrorCode) -> None:
        self.answers = list(answers)
        self.release = asyncio.Event()
        self.writes = 0
        self.stored: list[DurableBatch] | None = None

    async def write(self, _start_offset: int, batches: list[DurableBatch]) -> ErrorCode:
        self.writes += 1
        await self.release.wait()
        error = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if error is ErrorCode.NONE:
            self.stored = batches
        return error


class Share:
    """What ``_apply`` uses of ``ShareService``, around one share-partition and its writer."""

    def __init__(self, share: SharePartition, writer: StateWriter, clock: ManualClock) -> None:
        self.partitions = {(GROUP, TOPIC, 0): share}
        self.configs = SimpleNamespace(lock_duration_ms=lambda _group: LOCK_MS)
        self._writer = writer
        self._clock = clock

    def now_ms(self) -> int:
        return self._clock.wall_ms()

    def is_loading(self, *_key: object) -> bool:
        return False

    def expire(self, group_id: str, topic: str, index: int, now_ms: int) -> int:
        return self.partitions[(group_id, topic, index)].expire(now_ms)

    def changed(self, _group_id: str, _topic: str, _index: int,
                undo: Undo | None = None) -> Callable[[], Awaitable[ErrorCode]]:
        change = self._writer.changed(undo)
        return lambda: self._writer.persist(change)


def _context(share: Share) -> RequestContext:
    """A v2 request's context, with ``share`` as its share service."""
    return cast(RequestContext, SimpleNamespace(api_version=2, services=SimpleNamespace(share=share)))


async def _until(ready: Callable[[], bool], *running: asyncio.Future[ErrorCode]) -> None:
    """Let the tasks run until ``ready()``; none of them may end meanwhile."""
    while not ready():
        assert not any(task.done() for task in running)
        await asyncio.sleep(0)


def _lock_of(share: SharePartition, offset: int) -> int:
    """When the lock of a held offset runs out."""
    return share.held_copy(offset, offset)[0].deadline_ms


def _accepted(share: SharePartition) -> bool:
    found = share.state_of(0)
    return found is not None and found[0] is RecordState.ACKNOWLEDGED


def _batch(ack: AckType, first: int = 0, last: int = 4) -> list[ShareFetchRequest.AcknowledgementBatch]:
    return [ShareFetchRequest.AcknowledgementBatch(first_offset=first, last_offset=last, acknowledge_types=[int(ack)])]


async def _scenario(*, held_before: bool) -> tuple[SharePartition, list[ErrorCode], Coordinator, int]:
    """A RENEW then an ACCEPT of offsets 0-4 (v2), the ACCEPT's write refused; with ``held_before`` it waits behind a
    write already under way (which is taken). The lock's deadline after the renewal is returned."""
    answers = (ErrorCode.NONE, ErrorCode.UNKNOWN_SERVER_ERROR) if held_before else (ErrorCode.UNKNOWN_SERVER_ERROR,)
    clock, coordinator = ManualClock(), Coordinator(*answers)
    share = SharePartition(0, delivery_count_limit=5, max_record_locks=100)
    writer = StateWriter(share, coordinator.write)
    assert share.acquire(MEMBER, [BatchBounds(0, 9)], max_records=100, lock_ms=LOCK_MS,
                         now_ms=clock.wall_ms()) == [Acquired(0, 9, 1)]
    clock.advance(10)  # a renewal now moves the lock 10 s on
    ctx = _context(Share(share, writer, clock))
    earlier = asyncio.ensure_future(writer.persist()) if held_before else None
    if earlier is not None:
        await _until(lambda: coordinator.writes == 1, earlier)  # under way before either acknowledgement
    renewed = _apply(ctx, _Partition(KEY, TOPIC), GROUP, MEMBER, _batch(AckType.RENEW), True)
    assert renewed is ErrorCode.NONE  # answered at once: nothing to write
    deadline = _lock_of(share, 0)
    assert deadline == clock.wall_ms() + LOCK_MS
    accept = asyncio.ensure_future(_written(_apply(ctx, _Partition(KEY, TOPIC), GROUP, MEMBER,
                                                   _batch(AckType.ACCEPT), False)))
    await _until(lambda: _accepted(share), accept)
    coordinator.release.set()
    codes = [renewed, await accept]
    if earlier is not None:
        await earlier
    return share, codes, coordinator, deadline


def test_a_failed_accept_after_a_renewal_keeps_the_renewed_lock() -> None:
    share, codes, coordinator, deadline = asyncio.run(_scenario(held_before=False))
    assert codes == [ErrorCode.NONE, ErrorCode.UNKNOWN_SERVER_ERROR]
    assert coordinator.writes == 1  # the ACCEPT's only
    assert share.state_of(0) == (RecordState.ACQUIRED, 1) and share.state_of(4) == (RecordState.ACQUIRED, 1)
    assert _lock_of(share, 0) == _lock_of(share, 4) == deadline  # the renewed lock, not the one before it
    assert share.start_offset == 0 and share.acquired_by(MEMBER) == 10


def test_a_renewal_waits_for_no_write_under_way() -> None:
    share, codes, coordinator, deadline = asyncio.run(_scenario(held_before=True))
    assert codes == [ErrorCode.NONE, ErrorCode.UNKNOWN_SERVER_ERROR]
    assert coordinator.writes == 2  # the one under way, then the ACCEPT's
    assert share.state_of(0) == (RecordState.ACQUIRED, 1)
    assert _lock_of(share, 0) == _lock_of(share, 4) == deadline
    assert share.acquired_by(MEMBER) == 10


def _held_ten() -> tuple[Coordinator, SharePartition, RequestContext]:
    """Offsets 0-9 held by the member; the coordinator fails the first write and takes the next."""
    clock, coordinator = ManualClock(), Coordinator(ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.NONE)
    share = SharePartition(0, delivery_count_limit=5, max_record_locks=100)
    writer = StateWriter(share, coordinator.write)
    share.acquire(MEMBER, [BatchBounds(0, 9)], max_records=100, lock_ms=LOCK_MS, now_ms=clock.wall_ms())
    return coordinator, share, _context(Share(share, writer, clock))


def test_an_acknowledgement_applied_over_a_failing_one_is_not_answered_as_written() -> None:
    """The second ACCEPT came while the first's write was under way; that write fails, and the first is undone: the
    second is undone too and answered with the failure, never written as if it had been kept."""
    async def scenario() -> tuple[list[ErrorCode], SharePartition, Coordinator]:
        coordinator, share, ctx = _held_ten()
        first = asyncio.ensure_future(_written(_apply(ctx, _Partition(KEY, TOPIC), GROUP, MEMBER,
                                                      _batch(AckType.ACCEPT), False)))
        await _until(lambda: coordinator.writes == 1, first)
        second = asyncio.ensure_future(_written(_apply(ctx, _Partition(KEY, TOPIC), GROUP, MEMBER,
                                                       _batch(AckType.ACCEPT, 5, 9), False)))
        await _until(lambda: share.state_of(9) == (RecordState.ACKNOWLEDGED, 1), first, second)
        coordinator.release.set()
        return list(await asyncio.gather(first, second)), share, coordinator
    codes, share, coordinator = asyncio.run(scenario())
    assert codes == [ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.UNKNOWN_SERVER_ERROR]
    assert share.state_of(0) == (RecordState.ACQUIRED, 1) and share.acquired_by(MEMBER) == 10
    assert coordinator.writes == 1 and coordinator.stored is None  # a second write would have been taken


def test_an_acknowledgement_counted_when_applied_is_undone_by_a_write_failing_before_its_own_starts() -> None:
    """As the handlers run them (``_write_all``, run to its end): the second ACCEPT's write task has not started when
    the coordinator's failure of the first's write comes, in the same turn of the loop. The second, counted with the
    writer when it was applied, is undone with the first and answered with the failure; counted only when its write
    started, it would be written with the first's undoing and answered NONE, though its records are held again."""
    async def scenario() -> tuple[list[ErrorCode], SharePartition, Coordinator]:
        coordinator, share, ctx = _held_ten()
        first = _write_all(ctx, [_apply(ctx, _Partition(KEY, TOPIC), GROUP, MEMBER, _batch(AckType.ACCEPT), False)],
                           None)
        await _until(lambda: coordinator.writes == 1)
        second = _write_all(ctx, [_apply(ctx, _Partition(KEY, TOPIC), GROUP, MEMBER, _batch(AckType.ACCEPT, 5, 9),
                                         False)], None)
        coordinator.release.set()
        return [*(await first), *(await second)], share, coordinator
    codes, share, coordinator = asyncio.run(scenario())
    assert codes == [ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.UNKNOWN_SERVER_ERROR]
    assert share.state_of(0) == (RecordState.ACQUIRED, 1) and share.acquired_by(MEMBER) == 10
    assert coordinator.stored is None  # nothing written as if the second ACCEPT had been kept


def test_a_renewal_stays_when_a_later_batch_of_its_request_is_refused() -> None:
    """A RENEW of 0-4 then an ACCEPT of 20 (never delivered) in one request: the ACCEPT is refused and the request's
    batches are undone, but the renewal stays, as Kafka's SharePartition.acknowledge rolls back only the persister
    batches of the call and a RENEW adds none. Nothing is written."""
    clock, coordinator = ManualClock(), Coordinator(ErrorCode.NONE)
    share = SharePartition(0, delivery_count_limit=5, max_record_locks=100)
    ctx = _context(Share(share, StateWriter(share, coordinator.write), clock))
    share.acquire(MEMBER, [BatchBounds(0, 9)], max_records=100, lock_ms=LOCK_MS, now_ms=clock.wall_ms())
    acquired_lock = _lock_of(share, 0)
    clock.advance(10)
    batches = [*_batch(AckType.RENEW), *_batch(AckType.ACCEPT, 20, 20)]
    assert _apply(ctx, _Partition(KEY, TOPIC), GROUP, MEMBER, batches, True) is ErrorCode.INVALID_RECORD_STATE
    assert _lock_of(share, 0) == _lock_of(share, 4) == clock.wall_ms() + LOCK_MS
    assert _lock_of(share, 5) == acquired_lock  # not renewed: the lock it was acquired with
    assert coordinator.writes == 0


def test_records_archived_by_an_acknowledgement_are_counted_once_its_write_is_taken() -> None:
    """A REJECT of 0 whose write fails is undone, and counts nothing; the same REJECT again, its write taken, counts
    1 archived. A RELEASE of 1 at the delivery count limit (1 here) archives it, counted once written too. Before,
    the share-partition counted an archiving when it was applied and a rollback never took it back: 2, then 3
    (seen so before the fix)."""
    async def scenario() -> SharePartition:
        clock, coordinator = ManualClock(), Coordinator(ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.NONE)
        coordinator.release.set()
        share = SharePartition(0, delivery_count_limit=1, max_record_locks=100)
        ctx = _context(Share(share, StateWriter(share, coordinator.write), clock))
        share.acquire(MEMBER, [BatchBounds(0, 9)], max_records=100, lock_ms=LOCK_MS, now_ms=clock.wall_ms())
        reject = _batch(AckType.REJECT, 0, 0)
        assert await _written(_apply(ctx, _Partition(KEY, TOPIC), GROUP, MEMBER, reject, False)) \
            is ErrorCode.UNKNOWN_SERVER_ERROR
        assert share.state_of(0) == (RecordState.ACQUIRED, 1) and share.counters.archived == 0
        assert await _written(_apply(ctx, _Partition(KEY, TOPIC), GROUP, MEMBER, reject, False)) is ErrorCode.NONE
        assert share.counters.archived == 1
        assert await _written(_apply(ctx, _Partition(KEY, TOPIC), GROUP, MEMBER, _batch(AckType.RELEASE, 1, 1),
                                     False)) is ErrorCode.NONE
        assert share.start_offset == 2  # archived at the limit
        return share
    share = asyncio.run(scenario())
    assert share.counters.archived == 2
    assert share.counters.acknowledged["Reject"] == share.counters.acknowledged["Release"] == 1
