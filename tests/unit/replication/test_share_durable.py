"""A share-partition's durable state and its writes (``durable.py``): a record made available again is acquired
again only once the share coordinator took the write of its delivery count, so a leader that fails before that
write cannot leave the next leader an older count (chaos seed 17: records delivered with counts 1, 2, 3 and then,
after a leader move, 1 again, because the writes of the lock timeouts never reached the coordinator).

The coordinator is a dict here (the state as it would read it back); the real one is in the cluster tests."""

from __future__ import annotations

import asyncio

from pybroker.common.clock import ManualClock
from pybroker.protocol.error_codes import ErrorCode
from pybroker.replication.share.durable import DurableBatch, StateWriter, restored
from pybroker.replication.share.partition import AckType, Acquired, BatchBounds, RecordState, SharePartition

LOCK_MS = 3_000
LIMIT = 3
BATCH = [BatchBounds(0, 8)]


class Coordinator:
    """What ``__share_group_state`` holds of one share-partition; ``error`` is the answer of the next writes."""

    def __init__(self) -> None:
        self.start_offset = 0
        self.batches: list[DurableBatch] = []
        self.error = ErrorCode.NONE

    async def write(self, start_offset: int, batches: list[DurableBatch]) -> ErrorCode:
        if self.error is ErrorCode.NONE:
            self.start_offset, self.batches = start_offset, list(batches)
        return self.error

    def new_leader(self) -> SharePartition:
        """The share-partition as the next leader reads it."""
        return restored(self.start_offset, self.batches, delivery_count_limit=LIMIT, max_record_locks=100)


def _acquire(share: SharePartition, member: str, clock: ManualClock) -> list[Acquired]:
    return share.acquire(member, BATCH, max_records=100, lock_ms=LOCK_MS, now_ms=clock.wall_ms())


def test_records_whose_lock_ran_out_are_not_delivered_again_until_their_count_is_written() -> None:
    async def scenario() -> None:
        clock, coordinator = ManualClock(), Coordinator()
        share = SharePartition(0, delivery_count_limit=LIMIT, max_record_locks=100)
        writer = StateWriter(share, coordinator.write)
        assert _acquire(share, "m1", clock) == [Acquired(0, 8, 1)]
        clock.advance(LOCK_MS / 1000)
        assert share.expire(clock.wall_ms()) == 1
        coordinator.error = ErrorCode.COORDINATOR_NOT_AVAILABLE  # the coordinator's ISR cannot take the write
        assert await writer.persist() is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert _acquire(share, "m2", clock) == [] and writer.needs_write()
        assert coordinator.new_leader().state_of(0) is None  # a new leader would deliver it as never delivered
        coordinator.error = ErrorCode.NONE
        assert await writer.persist() is ErrorCode.NONE and not writer.needs_write()
        assert _acquire(share, "m2", clock) == [Acquired(0, 8, 2)]
        # The leader fails now: the next one delivers count 2 again (the acquisition is not durable, as in Kafka),
        # never count 1.
        assert _acquire(coordinator.new_leader(), "m3", clock) == [Acquired(0, 8, 2)]

    asyncio.run(scenario())


def test_the_delivery_count_limit_holds_across_a_leader_move_whatever_writes_failed() -> None:
    """Every delivery's count, across leaders, while writes fail at random points: never above the limit, and the
    counts of a record never go back (a count may repeat once after a move: the acquisition was not written)."""
    async def scenario() -> None:
        clock, coordinator = ManualClock(), Coordinator()
        share = SharePartition(0, delivery_count_limit=LIMIT, max_record_locks=100)
        writer = StateWriter(share, coordinator.write)
        counts: list[int] = []
        for step in range(12):
            coordinator.error = ErrorCode.NONE if step % 4 == 3 else ErrorCode.REQUEST_TIMED_OUT
            counts += [a.delivery_count for a in _acquire(share, f"m{step}", clock)]
            clock.advance(LOCK_MS / 1000)
            share.expire(clock.wall_ms())
            await writer.persist()
            if step % 3 == 1:  # the leader moves
                share = coordinator.new_leader()
                writer = StateWriter(share, coordinator.write)
        assert counts == [1, 1, 2, 2, 3, 3]
        assert share.state_of(0) is None and share.start_offset == 9  # archived at the limit

    asyncio.run(scenario())


def test_a_released_record_waits_for_the_write_and_goes_back_to_its_holder_when_it_fails() -> None:
    async def scenario() -> None:
        clock, coordinator = ManualClock(), Coordinator()
        share = SharePartition(0, delivery_count_limit=LIMIT, max_record_locks=100)
        writer = StateWriter(share, coordinator.write)
        _acquire(share, "m1", clock)
        before = share.held_copy(0, 8)
        assert share.acknowledge("m1", 0, 8, [AckType.RELEASE], clock.wall_ms()) is ErrorCode.NONE
        assert _acquire(share, "m2", clock) == []  # Kafka: an ongoing state transition is not acquirable
        coordinator.error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert await writer.persist() is ErrorCode.COORDINATOR_NOT_AVAILABLE
        share.rollback(before)
        assert share.acquired_by("m1") == 9 and not share.unwritten()
        assert share.acknowledge("m1", 0, 8, [AckType.RELEASE], clock.wall_ms()) is ErrorCode.NONE
        coordinator.error = ErrorCode.NONE
        assert await writer.persist() is ErrorCode.NONE
        assert _acquire(share, "m2", clock) == [Acquired(0, 8, 2)]

    asyncio.run(scenario())


def test_a_write_carries_only_the_releases_made_before_it_started() -> None:
    async def scenario() -> None:
        clock, coordinator = ManualClock(), Coordinator()
        share = SharePartition(0, delivery_count_limit=LIMIT, max_record_locks=100)
        gate = asyncio.Event()

        async def slow_write(start_offset: int, batches: list[DurableBatch]) -> ErrorCode:
            await gate.wait()
            return await coordinator.write(start_offset, batches)
        writer = StateWriter(share, slow_write)
        share.acquire("m1", [BatchBounds(0, 4), BatchBounds(5, 8)], max_records=100, lock_ms=LOCK_MS,
                      now_ms=clock.wall_ms())
        share.acknowledge("m1", 0, 4, [AckType.RELEASE], clock.wall_ms())
        first = asyncio.create_task(writer.persist())
        await asyncio.sleep(0)  # the write of 0-4's release is under way
        share.acknowledge("m1", 5, 8, [AckType.RELEASE], clock.wall_ms())
        gate.set()
        assert await first is ErrorCode.NONE
        assert _acquire(share, "m2", clock) == [Acquired(0, 4, 2)]  # 5-8 were released after it started
        assert writer.needs_write()
        assert await writer.persist() is ErrorCode.NONE
        assert share.acquire("m2", [BatchBounds(5, 8)], max_records=100, lock_ms=LOCK_MS,
                             now_ms=clock.wall_ms()) == [Acquired(5, 8, 2)]

    asyncio.run(scenario())


def test_a_write_the_coordinator_refuses_outright_frees_the_released_records() -> None:
    """The share-partition's state was deleted under the leader: no write will ever carry the lock timeout, so the
    records are not held back for one (Kafka goes ahead on any failed write); a coordinator out of reach is waited
    for."""
    async def scenario() -> None:
        clock, coordinator = ManualClock(), Coordinator()
        share = SharePartition(0, delivery_count_limit=LIMIT, max_record_locks=100)
        writer = StateWriter(share, coordinator.write)
        _acquire(share, "m1", clock)
        clock.advance(LOCK_MS / 1000)
        assert share.expire(clock.wall_ms()) == 1
        coordinator.error = ErrorCode.NETWORK_EXCEPTION
        await writer.persist()
        assert _acquire(share, "m2", clock) == []
        coordinator.error = ErrorCode.INVALID_REQUEST
        assert await writer.persist() is ErrorCode.INVALID_REQUEST
        assert _acquire(share, "m2", clock) == [Acquired(0, 8, 2)]

    asyncio.run(scenario())


def test_the_start_offset_moves_past_accepted_records_once_their_write_is_taken() -> None:
    """As Kafka's SharePartition moves its start offset once the write of an acknowledgement succeeds: until then the
    accepted records count against the record-lock cap (nothing new may be acquired), a failed write undoes the
    acknowledgement, and the write taken stores the start offset past them (where the leader's moves once it is
    taken; Kafka stores its start offset before them and them as acknowledged, which reads back the same). Before,
    the start offset moved when the records were accepted, and a concurrent fetch could acquire past the cap."""
    async def scenario() -> None:
        clock, coordinator = ManualClock(), Coordinator()
        share = SharePartition(0, delivery_count_limit=LIMIT, max_record_locks=9)
        freed: list[int] = []
        writer = StateWriter(share, coordinator.write, lambda: freed.append(share.start_offset))
        assert _acquire(share, "m1", clock) == [Acquired(0, 8, 1)]
        before = share.held_copy(0, 8)

        def undo() -> None:
            share.rollback(before)
        assert share.acknowledge("m1", 0, 8, [AckType.ACCEPT], clock.wall_ms()) is ErrorCode.NONE
        assert share.start_offset == 0 and not share.can_acquire_new()
        coordinator.error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert await writer.persist(writer.changed(undo)) is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert share.acquired_by("m1") == 9 and not share.can_acquire_new() and freed == []
        assert share.acknowledge("m1", 0, 8, [AckType.ACCEPT], clock.wall_ms()) is ErrorCode.NONE
        coordinator.error = ErrorCode.NONE
        assert await writer.persist(writer.changed(undo)) is ErrorCode.NONE
        assert (coordinator.start_offset, coordinator.batches) == (9, [])
        assert share.start_offset == 9 and share.can_acquire_new() and freed == [9]
    asyncio.run(scenario())


def test_records_archived_by_a_lock_timeout_leave_the_window_when_their_write_gets_no_answer() -> None:
    """Records 0-8 are archived at the delivery count limit when their lock runs out; the write of that gets no
    answer from a coordinator. They leave the window all the same (start offset 9, room under the record-lock cap),
    as Kafka's lock-timeout handler moves its start offset once its write ends whatever its outcome; the state is
    written again until a write is taken, which stores the start offset past them. Before, they held the start
    offset until a write was taken."""
    async def scenario() -> None:
        clock, coordinator = ManualClock(), Coordinator()
        share = SharePartition(0, delivery_count_limit=1, max_record_locks=9)
        freed: list[int] = []
        writer = StateWriter(share, coordinator.write, lambda: freed.append(share.start_offset))
        assert _acquire(share, "m1", clock) == [Acquired(0, 8, 1)]
        clock.advance(LOCK_MS / 1000)
        assert share.expire(clock.wall_ms()) == 1 and share.start_offset == 0 and not share.can_acquire_new()
        coordinator.error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert await writer.persist() is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert share.start_offset == 9 and share.can_acquire_new() and freed == [9]
        assert writer.needs_write() and writer.writing() and coordinator.start_offset == 0
        coordinator.error = ErrorCode.NONE
        assert await writer.persist() is ErrorCode.NONE
        assert not writer.needs_write() and not writer.writing()
        assert (coordinator.start_offset, coordinator.batches) == (9, [])
    asyncio.run(scenario())


def test_an_acknowledgement_undone_by_a_failed_write_is_answered_with_that_failure_not_a_later_writes_answer() -> None:
    """A write is under way when an ACCEPT of 0-4 is applied and counted; the write fails and undoes the ACCEPT (the
    records are held again). Before the ACCEPT's own ``persist`` gets the writer, another caller (a lock timeout's
    or a release's write) takes it and writes, and that write is taken. The ACCEPT is answered with the failure of
    the write that undid it, as Kafka fails an acknowledgement whose write failed and rolls it back; before, it
    was answered with the latest write's NONE, its records held again (seen so before the fix)."""
    async def scenario() -> None:
        clock = ManualClock()
        share = SharePartition(0, delivery_count_limit=LIMIT, max_record_locks=100)
        answers: list[asyncio.Future[ErrorCode]] = []

        async def write(_start: int, _batches: list[DurableBatch]) -> ErrorCode:
            return await answers.pop(0)
        writer = StateWriter(share, write)
        _acquire(share, "m1", clock)
        first, second = asyncio.get_running_loop().create_future(), asyncio.get_running_loop().create_future()
        answers.extend([first, second])
        under_way = asyncio.create_task(writer.persist())
        await asyncio.sleep(0)
        before = share.held_copy(0, 4)
        assert share.acknowledge("m1", 0, 4, [AckType.ACCEPT], clock.wall_ms()) is ErrorCode.NONE
        accept = writer.changed(lambda: share.rollback(before))
        first.set_result(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        assert await under_way is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert share.state_of(0) == (RecordState.ACQUIRED, 1)  # undone
        second.set_result(ErrorCode.NONE)
        assert await writer.persist() is ErrorCode.NONE
        assert await writer.persist(accept) is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert share.state_of(0) == (RecordState.ACQUIRED, 1)
        assert not writer._outcomes  # nothing waits: the answers kept are let go
    asyncio.run(scenario())


def test_a_leaving_member_s_release_whose_write_fails_is_rolled_back_to_the_member() -> None:
    """Records 0-8 are held by m1 at the delivery count limit when it leaves: released as a RELEASE releases them,
    archived, and written with the release's undo (as the share service writes it). The write fails: the records
    are held by m1 again, count and lock as before, as Kafka's rollbackOrProcessStateUpdates rolls the release back
    to the acquisition (before, the archiving stood: the start offset moved past them once the write ended); when
    the lock runs out, the lock timeout archives them, and that is written."""
    async def scenario() -> None:
        clock, coordinator = ManualClock(), Coordinator()
        share = SharePartition(0, delivery_count_limit=1, max_record_locks=100)
        writer = StateWriter(share, coordinator.write)
        assert _acquire(share, "m1", clock) == [Acquired(0, 8, 1)]
        lock = share.held_copy(0, 0)[0].deadline_ms
        before = share.release_member("m1")
        assert share.state_of(0) == (RecordState.ARCHIVED, 1) and _acquire(share, "m2", clock) == []
        release = writer.changed(lambda: share.rollback(before))
        coordinator.error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert await writer.persist(release) is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert share.state_of(0) == (RecordState.ACQUIRED, 1) and share.acquired_by("m1") == 9
        assert share.held_copy(0, 8)[0].deadline_ms == lock and not writer.needs_write()
        clock.advance(LOCK_MS / 1000)
        assert share.expire(clock.wall_ms()) == 1 and share.counters.archived == 9
        coordinator.error = ErrorCode.NONE
        assert await writer.persist() is ErrorCode.NONE
        assert (share.start_offset, coordinator.start_offset) == (9, 9)
    asyncio.run(scenario())
