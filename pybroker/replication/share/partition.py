"""One share-partition's delivery state on the partition leader (KIP-932's SharePartition), as a pure state machine.

A share group reads a partition from its *start offset*: every offset below it is done (acknowledged or
archived). Offsets from the start up to ``next_offset`` are *in flight*; each is in one of Kafka's record states:
available (to be delivered, again), acquired (by one member, under a lock that expires), acknowledged or
archived (done). Offsets from ``next_offset`` on were never delivered. The in-flight window is held as spans,
runs of offsets sharing a state, delivery count, holder and lock deadline: a span is born as one fetched batch
(Kafka's in-flight batch) and is split only where an acknowledgement or a lock treats its offsets differently,
so a queue read and accepted batch by batch keeps a handful of spans whatever the record count.

Nothing here reads a clock or the log: the caller passes ``now_ms`` and the batch boundaries it read, so tests
move time by hand. Redelivery is in offset order: the lowest available offset is always acquired first.

A record made available again (released, or its lock ran out) is acquired again only once a state write that
carries its delivery count has been taken by the share coordinator (``written``): until then it is *pending*,
Kafka's ongoing state transition. Otherwise a leader that failed before such a write would leave a new leader the
older count, and the record could be delivered more than ``group.share.delivery.count.limit`` times, with counts
going back (chaos seed 17). Kafka holds released records so; for an expired lock it does not wait, and we do.
Likewise records made done (accepted, rejected, archived) stay in the window, pending, until such a write: the start
offset moves past them only then, as Kafka's SharePartition moves its start offset once the write of the state
transition succeeds (maybeUpdateCachedStateAndOffsets; until then its canMoveStartOffset finds the transition
ongoing), so they count against ``max_record_locks`` meanwhile, and a fetch cannot acquire past the cap by records
whose acknowledgement may yet be undone. Records archived by a lock timeout at the delivery count limit, which no
failed write undoes, leave once their write ends, even unanswered (``written``'s ``done_only``), as Kafka's
lock-timeout handler moves the start offset whatever its write's outcome. A leaving or closing member's records,
released as a RELEASE releases them (archived at the limit), are held by it again should the write fail, as Kafka
rolls its releaseAcquiredRecords back.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Iterable, Sequence

from pybroker.protocol.error_codes import ErrorCode
from pybroker.replication.share.counters import ShareCounters

__all__ = ["AckType", "Acquired", "BatchBounds", "RecordState", "SharePartition", "Span"]


class RecordState(IntEnum):
    """Kafka's RecordState ids (they are also what ``__share_group_state`` stores)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AckType(IntEnum):
    """AcknowledgementBatch type codes of ShareFetch/ShareAcknowledge."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4
    """v2 (KIP-1222): keep the records, with their lock renewed for another lock duration."""


@dataclass(slots=True)
class Span:
    """Offsets ``first..last`` (inclusive) in one state; ``member_id`` and ``deadline_ms`` only while acquired;
    ``pending`` while the state is not yet written (the number of the change that made it: available, it may not
    be acquired; done, the start offset stays below it)."""

    first: int
    last: int
    state: RecordState
    delivery_count: int
    member_id: str | None = None
    deadline_ms: int = 0
    pending: int = 0

    def split(self, at: int) -> Span:
        """Cut this span before ``at``; the returned span holds ``at..last``."""
        tail = Span(at, self.last, self.state, self.delivery_count, self.member_id, self.deadline_ms, self.pending)
        self.last = at - 1
        return tail


@dataclass(frozen=True, slots=True)
class BatchBounds:
    """A fetched batch's offsets, and whether it is a control batch (a transaction marker, never delivered)."""

    first: int
    last: int
    control: bool = False


@dataclass(frozen=True, slots=True)
class Acquired:
    """A range handed to a member in a ShareFetch answer (AcquiredRecords)."""

    first: int
    last: int
    delivery_count: int


_DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
_ACK_TYPES = frozenset(int(t) for t in AckType)


class SharePartition:
    """The in-flight window of one (share group, topic partition); see the module doc."""

    def __init__(self, start_offset: int, *, delivery_count_limit: int, max_record_locks: int) -> None:
        self.start_offset = start_offset
        self.next_offset = start_offset
        self.delivery_count_limit = delivery_count_limit
        self.max_record_locks = max_record_locks
        self.spans: list[Span] = []
        self.counters = ShareCounters()
        self.changes = 0
        """How many changes made offsets pending (available again, or done): a write taken when it is ``n`` carries
        them all."""

    # ------------------------------------------------------------------ queries

    def in_flight(self) -> int:
        return self.next_offset - self.start_offset

    def fetch_offset(self) -> int:
        """Where the next read of the log starts: the lowest acquirable offset, else the first never delivered."""
        for span in self.spans:
            if _acquirable(span):
                return span.first
        return self.next_offset

    def has_available(self) -> bool:
        return any(_acquirable(span) for span in self.spans)

    def start_once_written(self) -> int:
        """The start offset once every change so far is written: past the done offsets at the front of the window,
        pending or not (what a write taken now stores, the start offset ``written`` then moves to)."""
        for span in self.spans:
            if span.state not in _DONE:
                return span.first
        return self.next_offset

    def unwritten(self) -> bool:
        """Whether offsets made available again (or done) wait for a state write to take effect."""
        return any(span.pending for span in self.spans)

    def can_acquire_new(self) -> bool:
        """Whether records never delivered may be acquired (``group.share.partition.max.record.locks``)."""
        return self.in_flight() < self.max_record_locks

    def next_deadline_ms(self) -> int | None:
        deadlines = [span.deadline_ms for span in self.spans if span.state is RecordState.ACQUIRED]
        return min(deadlines, default=None)

    def state_of(self, offset: int) -> tuple[RecordState, int] | None:
        """(state, delivery count) of an in-flight offset; None outside the window."""
        span = self._span_at(offset)
        return None if span is None else (span.state, span.delivery_count)

    def acquired_by(self, member_id: str) -> int:
        return sum(span.last - span.first + 1 for span in self.spans
                   if span.state is RecordState.ACQUIRED and span.member_id == member_id)

    # ------------------------------------------------------------------ transitions

    def acquire(self, member_id: str, batches: Iterable[BatchBounds], *, max_records: int, lock_ms: int,
                now_ms: int, record_limit: bool = False) -> list[Acquired]:
        """Acquire for ``member_id`` what it may take of ``batches`` (whole batches read from ``fetch_offset()``):
        available offsets inside the window, then batches past it while the record-lock cap allows (the first such
        batch always, if nothing else was acquired). Stops after the batch that reaches ``max_records``; with
        ``record_limit`` (ShareFetch v2's record-limit mode) at exactly ``max_records``, splitting a batch."""
        self.expire(now_ms)
        deadline = now_ms + lock_ms
        taken: list[Acquired] = []
        count = 0
        for batch in batches:
            if count >= max_records:
                break
            if batch.last < self.start_offset:
                continue
            room = max_records - count if record_limit else None
            if batch.first < self.next_offset:
                count += self._reacquire(member_id, max(batch.first, self.start_offset),
                                         min(batch.last, self.next_offset - 1), deadline, taken, room)
            if batch.last >= self.next_offset and count < max_records:
                if not self.can_acquire_new() and (count or self.in_flight()):
                    break
                if record_limit:
                    last = min(batch.last, max(batch.first, self.next_offset) + max_records - count - 1)
                    batch = BatchBounds(batch.first, last, batch.control)
                count += self._acquire_new(member_id, batch, deadline, taken)
        self._advance()
        self.counters.acquired += count
        return _merged(taken)

    def acknowledge(self, member_id: str, first: int, last: int, types: Sequence[int], now_ms: int, *,
                    renew_lock_ms: int | None = None) -> ErrorCode:
        """Apply one AcknowledgementBatch: one type for the whole range, or one per offset. Every offset must be
        acquired by ``member_id`` under a lock still held, else nothing changes and INVALID_RECORD_STATE. RENEW is
        valid only with ``renew_lock_ms`` (the lock duration; v2 requests). Not counted in ``counters`` here: the
        caller counts it once it took effect (its write taken)."""
        allowed = _ACK_TYPES if renew_lock_ms is not None else _ACK_TYPES - {AckType.RENEW}
        if last < first or len(types) not in (1, last - first + 1) or any(t not in allowed for t in types):
            return ErrorCode.INVALID_REQUEST
        self.expire(now_ms)
        if not self._held(member_id, first, last):
            return ErrorCode.INVALID_RECORD_STATE
        deadline = now_ms + (renew_lock_ms or 0)
        if len(types) == 1:
            self._settle(first, last, AckType(types[0]), deadline)
        else:
            run_start = first
            for offset in range(first + 1, last + 2):
                if offset > last or types[offset - first] != types[run_start - first]:
                    self._settle(run_start, offset - 1, AckType(types[run_start - first]), deadline)
                    run_start = offset
        self._advance()
        return ErrorCode.NONE

    def expire(self, now_ms: int) -> int:
        """Release every acquisition whose lock has run out (archived at the delivery count limit); the count."""
        expired = [span for span in self.spans if span.state is RecordState.ACQUIRED and span.deadline_ms <= now_ms]
        self.counters.lock_timeouts += sum(span.last - span.first + 1 for span in expired)
        for span in expired:
            self._release(span)
        # Counted here: no failed write undoes a lock timeout (acknowledgements are counted once written).
        self.counters.archived += sum(span.last - span.first + 1 for span in expired
                                      if span.state is RecordState.ARCHIVED)
        if expired:
            self._coalesce()
            self._advance()
        return len(expired)

    def skip_to(self, log_start_offset: int) -> None:
        """The log no longer holds offsets below ``log_start_offset`` (retention, DeleteRecords): archive what of them
        is waiting for delivery or was never delivered, so the window moves on. Acquired ones stay with their holder
        until acknowledged or released (then archived on the next call)."""
        if log_start_offset <= self.start_offset:
            return
        if self.next_offset < log_start_offset:
            self.spans.append(Span(self.next_offset, log_start_offset - 1, RecordState.ARCHIVED, 0))
            self.next_offset = log_start_offset
        for index in self._cut(self.start_offset, log_start_offset - 1):
            span = self.spans[index]
            if span.state is RecordState.AVAILABLE:
                span.state, span.pending = RecordState.ARCHIVED, 0
        self._coalesce()
        self._advance()

    def release_member(self, member_id: str) -> list[Span]:
        """Release what a member holds (it left, or its share session closed), as Kafka's releaseAcquiredRecords
        does since KAFKA-19972 (apache/kafka PR #21092, which put back the count KAFKA-17541 had decreased): as a
        RELEASE, the delivery count kept, archived at the delivery count limit. The spans as they were, for
        ``rollback`` should the write of the release fail (Kafka's rollbackOrProcessStateUpdates rolls a release
        back: the records are held again until their locks run out)."""
        held = [span for span in self.spans if span.state is RecordState.ACQUIRED and span.member_id == member_id]
        before = [replace(span) for span in held]
        for span in held:
            self._release(span)
        if held:
            self._coalesce()
            self._advance()
        return before

    def held_by(self, member_id: str) -> list[Acquired]:
        """What ``member_id`` holds now, with each range's delivery count (for ``release_held``)."""
        return [Acquired(span.first, span.last, span.delivery_count) for span in self.spans
                if span.state is RecordState.ACQUIRED and span.member_id == member_id]

    def release_held(self, member_id: str, held: Iterable[Acquired]) -> list[Span]:
        """Release what of ``held`` (``held_by`` earlier) the member still holds at that delivery count, not what it
        acquired since (an offset acquired again has a higher count), as ``release_member`` releases; the spans
        released, as they were (for ``rollback``)."""
        before: list[Span] = []
        for item in held:
            first = max(item.first, self.start_offset)  # below it: done since
            if first > item.last:
                continue
            for index in self._cut(first, item.last):
                span = self.spans[index]
                if span.state is RecordState.ACQUIRED and (span.member_id, span.delivery_count) == \
                        (member_id, item.delivery_count):
                    before.append(replace(span))
                    self._release(span)
        self._coalesce()
        if before:
            self._advance()
        return before

    def held_copy(self, first: int, last: int) -> list[Span]:
        """Copies of the spans of ``first..last`` as they are now (cut to the range), for ``rollback``."""
        out: list[Span] = []
        index = max(self._index_at(first), 0)
        while index < len(self.spans) and self.spans[index].first <= last:
            span = self.spans[index]
            if span.last >= first:
                out.append(Span(max(span.first, first), min(span.last, last), span.state, span.delivery_count,
                                span.member_id, span.deadline_ms, span.pending))
            index += 1
        return out

    def rollback(self, before: list[Span]) -> None:
        """Undo an acknowledgement whose state write failed, as Kafka's SharePartition rolls its state transitions
        back: its offsets are held again as ``before`` holds them (a lock that ran out meanwhile expires on the next
        call), except offsets acquired again since (a released offset another member took stays with it)."""
        if not before:
            return
        low = min(span.first for span in before)
        if low < self.start_offset:  # the window moved past them: take them back in (as done, then as before)
            self.spans.insert(0, Span(low, self.start_offset - 1, RecordState.ACKNOWLEDGED, 0))
            self.start_offset = low
        for saved in before:
            for index in self._cut(saved.first, saved.last):
                span = self.spans[index]
                if span.state is RecordState.ACQUIRED and (span.member_id, span.delivery_count) != \
                        (saved.member_id, saved.delivery_count):
                    continue
                span.state, span.delivery_count = saved.state, saved.delivery_count
                span.member_id, span.deadline_ms, span.pending = saved.member_id, saved.deadline_ms, saved.pending
        self._coalesce()
        self._advance()

    def settle(self) -> None:
        """Merge like neighbouring spans and move the start offset past the done ones (spans set from stored state)."""
        self._coalesce()
        self._advance()

    def written(self, changes: int, *, done_only: bool = False) -> bool:
        """A state write taken when ``self.changes`` was ``changes`` was acknowledged by the share coordinator: the
        offsets it carried as available may be acquired again, and the start offset moves past those it carried as
        done. With ``done_only`` (a write no coordinator answered, which may or may not be stored) only the done ones
        are let go: the start offset moves past the records a lock timeout archived (a failed write has undone the
        acknowledged and the released ones), as Kafka's lock-timeout handler moves it once its write ends,
        answered or not, while records made available again wait for a write that is taken. Whether any changed so
        (a waiting fetch may acquire)."""
        freed = False
        for span in self.spans:
            if 0 < span.pending <= changes and (not done_only or span.state in _DONE):
                span.pending = 0
                freed = True
        if freed:
            self._coalesce()
            self._advance()
        return freed

    # ------------------------------------------------------------------ internals

    def _release(self, span: Span) -> None:
        """A lock timeout's, a RELEASE's or a member's release: available with its delivery count, archived at the
        limit (Kafka's DeliveryCountOps.NO_OP)."""
        span.state = RecordState.ARCHIVED if span.delivery_count >= self.delivery_count_limit \
            else RecordState.AVAILABLE
        span.pending = self._change()
        span.member_id = None
        span.deadline_ms = 0

    def _change(self) -> int:
        """The number of a change that waits for a state write (``written``)."""
        self.changes += 1
        return self.changes

    def _reacquire(self, member_id: str, first: int, last: int, deadline: int, taken: list[Acquired],
                   room: int | None) -> int:
        """Acquire the available offsets of ``first..last``, at most ``room`` of them if given."""
        if first > last:
            return 0
        count = 0
        for index in self._cut(first, last):
            span = self.spans[index]
            if room is not None and _acquirable(span) and span.last - span.first + 1 > room - count:
                if room - count <= 0:
                    break
                self.spans.insert(index + 1, span.split(span.first + room - count))
            if _acquirable(span):
                span.state = RecordState.ACQUIRED
                span.delivery_count += 1
                span.member_id = member_id
                span.deadline_ms = deadline
                taken.append(Acquired(span.first, span.last, span.delivery_count))
                count += span.last - span.first + 1
        return count

    def _acquire_new(self, member_id: str, batch: BatchBounds, deadline: int, taken: list[Acquired]) -> int:
        first = max(batch.first, self.next_offset)
        if first > self.next_offset:  # offsets the log no longer holds (compaction): nothing to deliver
            self.spans.append(Span(self.next_offset, first - 1, RecordState.ARCHIVED, 0))
        self.next_offset = batch.last + 1
        if batch.control:
            self.spans.append(Span(first, batch.last, RecordState.ARCHIVED, 0))
            return 0
        self.spans.append(Span(first, batch.last, RecordState.ACQUIRED, 1, member_id, deadline))
        taken.append(Acquired(first, batch.last, 1))
        return batch.last - first + 1

    def _held(self, member_id: str, first: int, last: int) -> bool:
        if first < self.start_offset or last >= self.next_offset:
            return False
        index = self._index_at(first)
        while index < len(self.spans) and self.spans[index].first <= last:
            span = self.spans[index]
            if span.state is not RecordState.ACQUIRED or span.member_id != member_id:
                return False
            index += 1
        return True

    def _settle(self, first: int, last: int, ack: AckType, renewed_deadline: int) -> None:
        for index in self._cut(first, last):
            span = self.spans[index]
            if ack is AckType.RENEW:
                span.deadline_ms = renewed_deadline
            elif ack is AckType.ACCEPT:
                span.state, span.member_id, span.deadline_ms = RecordState.ACKNOWLEDGED, None, 0
                span.pending = self._change()
            elif ack is AckType.RELEASE:
                self._release(span)
            else:  # REJECT, and GAP (offsets with no record)
                span.state, span.member_id, span.deadline_ms = RecordState.ARCHIVED, None, 0
                span.pending = self._change()
        self._coalesce()

    def _cut(self, first: int, last: int) -> range:
        """Split spans so that ``first..last`` is exactly a run of whole spans; their indexes."""
        self._boundary(first)
        self._boundary(last + 1)
        return range(self._index_at(first), self._index_at(last) + 1)

    def _boundary(self, at: int) -> None:
        index = self._index_at(at)
        if 0 <= index < len(self.spans):
            span = self.spans[index]
            if span.first < at <= span.last:
                self.spans.insert(index + 1, span.split(at))

    def _index_at(self, offset: int) -> int:
        return bisect.bisect_right(self.spans, offset, key=lambda span: span.first) - 1

    def _span_at(self, offset: int) -> Span | None:
        index = self._index_at(offset)
        if 0 <= index < len(self.spans) and self.spans[index].last >= offset:
            return self.spans[index]
        return None

    def _coalesce(self) -> None:
        merged: list[Span] = []
        for span in self.spans:
            if merged and _mergeable(merged[-1], span):
                merged[-1].last = span.last
            else:
                merged.append(span)
        self.spans = merged

    def _advance(self) -> None:
        """Move the start offset past the done offsets at the front of the window whose state is written."""
        done = 0
        while done < len(self.spans) and self.spans[done].state in _DONE and not self.spans[done].pending:
            done += 1
        if done:
            del self.spans[:done]
        self.start_offset = self.spans[0].first if self.spans else self.next_offset


def _acquirable(span: Span) -> bool:
    return span.state is RecordState.AVAILABLE and not span.pending


def _mergeable(left: Span, right: Span) -> bool:
    if left.state in _DONE and right.state is left.state:
        return left.pending == right.pending
    return (left.state is right.state and left.delivery_count == right.delivery_count
            and left.member_id == right.member_id and left.deadline_ms == right.deadline_ms
            and left.pending == right.pending)


def _merged(taken: list[Acquired]) -> list[Acquired]:
    """Adjacent acquired ranges with one delivery count as one AcquiredRecords entry."""
    out: list[Acquired] = []
    for item in taken:
        if out and out[-1].last + 1 == item.first and out[-1].delivery_count == item.delivery_count:
            out[-1] = Acquired(out[-1].first, item.last, item.delivery_count)
        else:
            out.append(item)
    return out
