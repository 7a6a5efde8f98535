"""What of a share-partition is durable, and how it is written: Kafka's SharePartition and its persister's view.

Only the start offset and the in-flight window's delivery states and counts are stored (``__share_group_state``
through the share coordinator); acquisitions are not. A record acquired when the state is written is stored as
available with the delivery count it had before that acquisition, so after a restart or a leadership move it is
delivered again, and the count it had reached last time it was released or timed out is kept.

``StateWriter`` orders a share-partition's writes: one at a time, each carrying the whole window as it is when
the write starts, so any number of acknowledgements waiting together are made durable by one write, and none
is answered before a write that includes it has been acknowledged by the coordinator. Records released or timed
out become acquirable again only then too (``SharePartition.written``): a write that fails for want of a
coordinator (``RETRIED``: it may not be stored, or only later) leaves them pending, for the next write (the share
service retries while any are). Records archived by a lock timeout (the only changes done without an undo: a
member's release is undone, see below) leave the window when such a write ends all the same, as Kafka's lock-timeout
handler moves its start offset whatever its write's outcome; the state is written again until a write is taken
(``needs_write``), where Kafka waits for the next acknowledgement's.
A write the coordinator refused outright (its state was deleted, or the request is fenced) frees them as Kafka does
on any failure: no later write would carry them.

A change made with an ``undo`` (an acknowledgement, or the release of what a leaving or closing member held) is
undone when the write carrying it fails, as Kafka's rollbackOrProcessStateUpdates rolls back both (the released
records are held by the member again, until their locks run out). Undoing restores the state before the change, so
every change not yet written is undone with it, newest first: one made after it, on the same records, would
otherwise be overwritten by the older undoing and still be written as if kept, or would put back the state the older
change made. A RENEW is no such change: it is never written (Kafka persists nothing for it), so it has no undo and
no failed write takes it back. Those later changes are answered with the failure too, as their state went with it.
Each change is answered with the outcome of the write that carried or undid it, kept until then (``persist``), even
when a later write ended before its caller's turn: Kafka completes each acknowledgement's future with its own
write's outcome (SharePartition.rollbackOrProcessStateUpdates).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Awaitable, Callable

from pybroker.protocol.error_codes import ErrorCode
from pybroker.replication.share.partition import RecordState, SharePartition, Span

__all__ = ["RETRIED", "DurableBatch", "StateWriter", "durable_batches", "restored"]

RETRIED = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NETWORK_EXCEPTION,
                     ErrorCode.REQUEST_TIMED_OUT})
"""Answers of a write that no coordinator took yet (Kafka's PersisterStateManager retries them too)."""


@dataclass(frozen=True, slots=True)
class DurableBatch:
    """A state batch as ``__share_group_state`` stores it: offsets, delivery state (0, 2 or 4) and count."""

    first: int
    last: int
    state: int
    delivery_count: int


def durable_batches(share: SharePartition) -> list[DurableBatch]:
    """The window's spans as state batches: an acquired span as available with its count before acquisition."""
    out: list[DurableBatch] = []
    for span in share.spans:
        if span.state is RecordState.ACQUIRED:
            out.append(DurableBatch(span.first, span.last, RecordState.AVAILABLE, max(span.delivery_count - 1, 0)))
        else:
            out.append(DurableBatch(span.first, span.last, int(span.state), span.delivery_count))
    return out


def restored(start_offset: int, batches: list[DurableBatch], *, delivery_count_limit: int,
             max_record_locks: int) -> SharePartition:
    """A share-partition from its stored state: the window runs from the start offset to the last batch; offsets
    in it no batch covers were never delivered (available, count 0), and an acquired state (never written by
    pybroker) is read as available."""
    share = SharePartition(start_offset, delivery_count_limit=delivery_count_limit, max_record_locks=max_record_locks)
    position = start_offset
    for batch in sorted(batches, key=lambda b: b.first):
        if batch.last < position:
            continue
        first = max(batch.first, position)
        if first > position:
            share.spans.append(Span(position, first - 1, RecordState.AVAILABLE, 0))
        state = RecordState(batch.state) if batch.state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED) \
            else RecordState.AVAILABLE
        share.spans.append(Span(first, batch.last, state, batch.delivery_count))
        position = batch.last + 1
    share.next_offset = position
    share.settle()
    return share


Write = Callable[[int, list[DurableBatch]], Awaitable[ErrorCode]]
"""Store (start offset, state batches); the coordinator's answer."""
Undo = Callable[[], None]
"""Take a change to the share-partition back (its write failed)."""


class StateWriter:
    """One share-partition's writes, in order and coalesced (see the module doc)."""

    def __init__(self, share: SharePartition, write: Write, on_freed: Callable[[], None] = lambda: None) -> None:
        self._share = share
        self._write = write
        self._on_freed = on_freed
        """Called when a write made released records acquirable: fetches waiting on the partition acquire them."""
        self._lock = asyncio.Lock()
        self._changes = 0
        self._written = 0
        self._outcomes: list[tuple[int, ErrorCode]] = []
        """The answers of the writes ended, oldest first, each with the number of the last change it covered (or
        undid); kept while a change that one covered waits to be answered (`persist`)."""
        self._waiting: set[int] = set()
        """The changes counted and not answered yet: each is persisted once, by whoever counted it."""
        self._again = False
        """The last write got no answer and let archived records go unwritten: write again (``needs_write``)."""
        self._undo: list[tuple[int, Undo]] = []
        """The changes not yet written that can be undone, oldest first, each with its number."""

    def changed(self, undo: Undo | None = None) -> int:
        """Count a change the caller just made to the share-partition, with ``undo`` to take it back should its write
        fail; the number `persist` waits for. Counted in the same step as the change, before anything is awaited: a
        failing write that ends in between then undoes this change too, newest first, and answers it with the
        failure (counted later, the older undo would restore the state before it over this change, which would be
        written and answered as kept)."""
        self._changes += 1
        if undo is not None:
            self._undo.append((self._changes, undo))
        self._waiting.add(self._changes)
        return self._changes

    async def persist(self, change: int | None = None) -> ErrorCode:
        """Make the share-partition's state durable up to ``change`` (from `changed`; by default, as it is now);
        the coordinator's answer of the write that carried it, or undid it (see the module doc). That write may
        have ended before this call gets its turn, and a later write since: its answer is the one kept for it,
        never the latest (an acknowledgement undone by a failed write, answered with a later write's NONE, would
        be told kept)."""
        wanted = self.changed() if change is None else change
        try:
            async with self._lock:
                if self._written < wanted:
                    await self._write_now()
                return next(error for through, error in self._outcomes if through >= wanted)
        finally:
            self._answered(wanted)

    async def _write_now(self) -> None:
        """One write of the whole window, its answer kept with the last change it covered or undid."""
        taken, carried = self._changes, self._share.changes
        start = self._share.start_once_written()
        error = await self._write(start, [b for b in durable_batches(self._share) if b.last >= start])
        if error is ErrorCode.NONE:
            self._undo = [(change, step) for change, step in self._undo if change > taken]
        else:
            for _change, step in reversed(self._undo):
                step()
            self._undo.clear()
            taken = self._changes
        self._written = taken
        self._outcomes.append((taken, error))
        freed = self._share.written(carried, done_only=error in RETRIED)
        self._again = error in RETRIED and (freed or self._again)
        if freed:
            self._on_freed()

    def _answered(self, change: int) -> None:
        """``change`` was answered: forget the outcomes no change still waiting can need (those before the first
        write that covered the oldest of them)."""
        self._waiting.discard(change)
        oldest = min(self._waiting, default=self._changes + 1)
        needed = next((i for i, (through, _error) in enumerate(self._outcomes) if through >= oldest),
                      len(self._outcomes))
        del self._outcomes[:needed]

    def writing(self) -> bool:
        """Whether a write is under way, a change is counted for one (its request is still to write it), or the
        last one got no answer and is to be made again."""
        return self._lock.locked() or self._changes > self._written or self._again

    def needs_write(self) -> bool:
        """Whether released records wait for a write, or archived ones were let go unwritten, and no write is under
        way (to retry one that failed)."""
        return (self._share.unwritten() or self._again) and not self._lock.locked()
