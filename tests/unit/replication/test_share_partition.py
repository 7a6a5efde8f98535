"""The share-partition state machine (KIP-932): acquisition, acknowledgement, lock expiry and the delivery count
limit, with a manual clock so lock timeouts are reached by moving time, never by waiting."""

from __future__ import annotations

from pybroker.common.clock import ManualClock
from pybroker.protocol.error_codes import ErrorCode
from pybroker.replication.share.partition import (
    AckType,
    Acquired,
    BatchBounds,
    RecordState,
    SharePartition,
)

LOCK_MS = 30_000
ACCEPT, RELEASE, REJECT, GAP = AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.GAP


def _partition(start: int = 0, *, limit: int = 3, locks: int = 2000) -> SharePartition:
    return SharePartition(start, delivery_count_limit=limit, max_record_locks=locks)


def _batches(*ranges: tuple[int, int]) -> list[BatchBounds]:
    return [BatchBounds(first, last) for first, last in ranges]


def _acquire(share: SharePartition, member: str, clock: ManualClock, *ranges: tuple[int, int],
             max_records: int = 10_000) -> list[Acquired]:
    return share.acquire(member, _batches(*ranges), max_records=max_records, lock_ms=LOCK_MS, now_ms=clock.wall_ms())


def _written(share: SharePartition) -> None:
    """The state write that carries every release so far was taken by the share coordinator."""
    share.written(share.changes)


def test_whole_batches_are_acquired_once_then_accepted_and_the_start_offset_moves() -> None:
    clock = ManualClock()
    share = _partition()
    assert _acquire(share, "a", clock, (0, 4), (5, 9)) == [Acquired(0, 9, 1)]
    assert _acquire(share, "b", clock, (0, 4), (5, 9)) == []  # held by a: nothing for b
    assert share.acknowledge("a", 0, 4, [ACCEPT], clock.wall_ms()) is ErrorCode.NONE
    assert share.start_offset == 0  # until a write carries the acknowledgement
    _written(share)
    assert share.start_offset == 5 and share.next_offset == 10
    assert share.acknowledge("a", 5, 9, [ACCEPT], clock.wall_ms()) is ErrorCode.NONE
    _written(share)
    assert share.start_offset == 10 and share.spans == []


def test_released_records_are_redelivered_first_in_offset_order_with_a_higher_delivery_count() -> None:
    clock = ManualClock()
    share = _partition()
    _acquire(share, "a", clock, (0, 9))
    assert share.acknowledge("a", 0, 9, [ACCEPT, RELEASE, ACCEPT, RELEASE] + [ACCEPT] * 6, clock.wall_ms()) \
        is ErrorCode.NONE
    _written(share)
    assert share.start_offset == 1 and share.fetch_offset() == 1
    assert _acquire(share, "b", clock, (0, 9), (10, 14)) == [Acquired(1, 1, 2), Acquired(3, 3, 2),
                                                              Acquired(10, 14, 1)]
    assert share.state_of(1) == (RecordState.ACQUIRED, 2)


def test_an_expired_lock_makes_records_available_to_another_member() -> None:
    clock = ManualClock()
    share = _partition()
    _acquire(share, "a", clock, (0, 4))
    clock.advance(LOCK_MS / 1000 - 0.001)
    assert _acquire(share, "b", clock, (0, 4)) == []
    clock.advance(0.001)
    assert _acquire(share, "b", clock, (0, 4)) == []  # expired, but its new count is not written yet
    _written(share)
    assert _acquire(share, "b", clock, (0, 4)) == [Acquired(0, 4, 2)]
    assert share.acknowledge("a", 0, 4, [ACCEPT], clock.wall_ms()) is ErrorCode.INVALID_RECORD_STATE
    assert share.acknowledge("b", 0, 4, [ACCEPT], clock.wall_ms()) is ErrorCode.NONE


def test_an_acknowledgement_after_the_lock_expired_is_refused() -> None:
    clock = ManualClock()
    share = _partition()
    _acquire(share, "a", clock, (0, 0))
    clock.advance(LOCK_MS / 1000)
    assert share.acknowledge("a", 0, 0, [ACCEPT], clock.wall_ms()) is ErrorCode.INVALID_RECORD_STATE
    assert share.state_of(0) == (RecordState.AVAILABLE, 1)


def test_the_delivery_count_limit_archives_a_record_released_or_timed_out_for_the_last_time() -> None:
    clock = ManualClock()
    share = _partition(limit=3)
    _acquire(share, "a", clock, (0, 1))
    share.acknowledge("a", 0, 1, [RELEASE], clock.wall_ms())
    _written(share)
    _acquire(share, "a", clock, (0, 1))
    clock.advance(LOCK_MS / 1000)  # second delivery times out
    share.expire(clock.wall_ms())
    _written(share)
    assert _acquire(share, "a", clock, (0, 1)) == [Acquired(0, 1, 3)]
    assert share.acknowledge("a", 0, 0, [ACCEPT], clock.wall_ms()) is ErrorCode.NONE
    assert share.acknowledge("a", 1, 1, [RELEASE], clock.wall_ms()) is ErrorCode.NONE
    _written(share)
    assert share.start_offset == 2 and not share.has_available()  # offset 1 archived, not redelivered
    assert _acquire(share, "a", clock, (0, 1)) == []


def test_records_not_held_by_the_member_cannot_be_acknowledged_and_nothing_changes() -> None:
    clock = ManualClock()
    share = _partition()
    _acquire(share, "a", clock, (0, 4))
    _acquire(share, "b", clock, (5, 9))
    for first, last in ((3, 6), (8, 12), (10, 10), (-1, 0)):
        assert share.acknowledge("a", first, last, [ACCEPT], clock.wall_ms()) is ErrorCode.INVALID_RECORD_STATE
    assert share.state_of(3) == (RecordState.ACQUIRED, 1) and share.state_of(5) == (RecordState.ACQUIRED, 1)
    assert share.acknowledge("a", 0, 4, [ACCEPT, ACCEPT], clock.wall_ms()) is ErrorCode.INVALID_REQUEST
    assert share.acknowledge("a", 0, 4, [7], clock.wall_ms()) is ErrorCode.INVALID_REQUEST
    assert share.acknowledge("a", 4, 0, [ACCEPT], clock.wall_ms()) is ErrorCode.INVALID_REQUEST
    assert share.acknowledge("a", 0, 4, [ACCEPT], clock.wall_ms()) is ErrorCode.NONE
    assert share.acknowledge("a", 0, 4, [ACCEPT], clock.wall_ms()) is ErrorCode.INVALID_RECORD_STATE


def test_reject_and_gap_archive() -> None:
    clock = ManualClock()
    share = _partition()
    _acquire(share, "a", clock, (0, 2))
    share.acknowledge("a", 0, 2, [REJECT, GAP, ACCEPT], clock.wall_ms())
    _written(share)
    assert share.start_offset == 3 and share.spans == []


def test_the_record_lock_cap_stops_new_batches_but_not_redelivery() -> None:
    clock = ManualClock()
    share = _partition(locks=100)
    assert _acquire(share, "a", clock, (0, 59), (60, 119), (120, 179)) == [Acquired(0, 119, 1)]
    assert share.in_flight() == 120 and not share.can_acquire_new()
    assert _acquire(share, "b", clock, (120, 179)) == []
    share.acknowledge("a", 0, 9, [RELEASE], clock.wall_ms())
    _written(share)
    assert _acquire(share, "b", clock, (0, 59), (60, 119), (120, 179)) == [Acquired(0, 9, 2)]
    share.acknowledge("a", 10, 119, [ACCEPT], clock.wall_ms())
    assert share.start_offset == 0 and share.in_flight() == 120  # 0-9 still held by b
    share.acknowledge("b", 0, 9, [ACCEPT], clock.wall_ms())
    assert share.start_offset == 0 and _acquire(share, "b", clock, (120, 179)) == []  # their write not taken yet
    _written(share)
    assert share.start_offset == 120 and _acquire(share, "b", clock, (120, 179)) == [Acquired(120, 179, 1)]


def test_max_records_stops_after_the_batch_that_reaches_it() -> None:
    clock = ManualClock()
    share = _partition()
    assert _acquire(share, "a", clock, (0, 4), (5, 9), (10, 14), max_records=7) == [Acquired(0, 9, 1)]
    assert share.next_offset == 10


def test_a_leaving_member_releases_what_it_holds() -> None:
    clock = ManualClock()
    share = _partition()
    _acquire(share, "a", clock, (0, 4))
    _acquire(share, "b", clock, (5, 9))
    assert [(s.first, s.last, s.member_id, s.delivery_count) for s in share.release_member("a")] == [(0, 4, "a", 1)]
    assert share.acquired_by("a") == 0 and share.acquired_by("b") == 5
    _written(share)
    assert _acquire(share, "c", clock, (0, 4), (5, 9)) == [Acquired(0, 4, 2)]


def test_releasing_what_a_member_held_leaves_what_it_acquired_since() -> None:
    """A closed share session's release (``held_by`` when the close came, ``release_held`` once its acknowledgements
    are written): records accepted meanwhile are done, records acquired since by the member (new ones, or one of the
    held ones released and acquired again, at a higher count) stay its own."""
    clock = ManualClock()
    share = _partition()
    _acquire(share, "a", clock, (0, 3), (4, 5))
    held = share.held_by("a")
    assert held == [Acquired(0, 3, 1), Acquired(4, 5, 1)]
    assert share.acknowledge("a", 0, 1, [ACCEPT], clock.wall_ms()) is ErrorCode.NONE
    assert share.acknowledge("a", 5, 5, [RELEASE], clock.wall_ms()) is ErrorCode.NONE
    _written(share)
    assert _acquire(share, "a", clock, (5, 5), (6, 7)) == [Acquired(5, 5, 2), Acquired(6, 7, 1)]
    assert [(s.first, s.last) for s in share.release_held("a", held)] == [(2, 3), (4, 4)]
    assert [share.state_of(o) for o in range(2, 8)] == [(RecordState.AVAILABLE, 1)] * 3 + [
        (RecordState.ACQUIRED, 2)] + [(RecordState.ACQUIRED, 1)] * 2
    assert share.acquired_by("a") == 3 and share.start_offset == 2


def test_control_batches_and_gaps_in_the_log_are_never_delivered() -> None:
    clock = ManualClock()
    share = _partition()
    batches = [BatchBounds(0, 1), BatchBounds(2, 2, control=True), BatchBounds(5, 6)]
    assert share.acquire("a", batches, max_records=100, lock_ms=LOCK_MS, now_ms=clock.wall_ms()) == \
        [Acquired(0, 1, 1), Acquired(5, 6, 1)]
    share.acknowledge("a", 0, 1, [ACCEPT], clock.wall_ms())
    _written(share)
    assert share.start_offset == 5
    assert share.acknowledge("a", 3, 3, [ACCEPT], clock.wall_ms()) is ErrorCode.INVALID_RECORD_STATE


def test_spans_stay_few_when_batches_are_accepted_in_turn() -> None:
    clock = ManualClock()
    share = _partition()
    for first in range(0, 1000, 10):
        _acquire(share, "a", clock, (first, first + 9))
        share.acknowledge("a", first, first + 9, [ACCEPT], clock.wall_ms())
        _written(share)
    assert share.start_offset == 1000 and share.spans == []


def test_offsets_the_log_no_longer_holds_are_archived_unless_held() -> None:
    clock = ManualClock()
    share = _partition()
    _acquire(share, "a", clock, (0, 4), (5, 9))
    share.acknowledge("a", 0, 4, [RELEASE], clock.wall_ms())
    share.skip_to(7)  # retention removed offsets 0-6: 0-4 were waiting for redelivery, 5-6 are held by a
    assert share.state_of(0) is None and share.start_offset == 5 and share.fetch_offset() == 10
    share.acknowledge("a", 5, 9, [RELEASE], clock.wall_ms())
    share.skip_to(7)
    assert share.fetch_offset() == 10  # 7-9 wait for the write of their release
    _written(share)
    assert share.start_offset == 7 and share.fetch_offset() == 7
    share.skip_to(20)  # past everything ever delivered
    assert share.start_offset == share.next_offset == 20 and share.spans == []


def test_record_limit_mode_splits_batches_at_max_records() -> None:
    clock = ManualClock()
    share = _partition()
    assert share.acquire("a", _batches((0, 4), (5, 9)), max_records=7, lock_ms=LOCK_MS, now_ms=clock.wall_ms(),
                         record_limit=True) == [Acquired(0, 6, 1)]
    assert share.next_offset == 7
    assert share.acquire("b", _batches((5, 9)), max_records=2, lock_ms=LOCK_MS, now_ms=clock.wall_ms(),
                         record_limit=True) == [Acquired(7, 8, 1)]
    share.acknowledge("a", 0, 6, [RELEASE], clock.wall_ms())
    _written(share)
    assert share.acquire("b", _batches((0, 4), (5, 9)), max_records=3, lock_ms=LOCK_MS, now_ms=clock.wall_ms(),
                         record_limit=True) == [Acquired(0, 2, 2)]
    assert share.state_of(3) == (RecordState.AVAILABLE, 1)


def test_renew_restarts_the_lock_and_is_refused_before_v2() -> None:
    clock = ManualClock()
    share = _partition()
    _acquire(share, "a", clock, (0, 4))
    clock.advance(20)
    assert share.acknowledge("a", 0, 4, [AckType.RENEW], clock.wall_ms()) is ErrorCode.INVALID_REQUEST
    assert share.acknowledge("a", 0, 4, [AckType.RENEW], clock.wall_ms(), renew_lock_ms=LOCK_MS) is ErrorCode.NONE
    clock.advance(20)  # 40 s after the acquisition, 20 s after the renewal
    assert _acquire(share, "b", clock, (0, 4)) == []
    assert share.acknowledge("a", 0, 4, [ACCEPT], clock.wall_ms()) is ErrorCode.NONE
