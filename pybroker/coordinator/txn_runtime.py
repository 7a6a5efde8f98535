"""Runs the pure ``TransactionCoordinator`` on the event loop (the group runtime's timers and futures).

An outcome is applied in three steps, as Kafka's coordinator does: its ``__transaction_state``
records are appended and the runtime waits until the in-sync replicas hold them; then its
markers are written (to this broker's partitions and, through WriteTxnMarkers, to other
leaders; each fully written marker set completes its transaction, whose Complete record is
persisted the same way); then, after the first attempt at the markers, the answers are
delivered (a producer hears of its commit once the decision is on the ISR and its markers were
sent; a leader that stays unreachable delays no answer, its markers are retried meanwhile).

A change of a transaction's partitions stands only once its record is on the ISR: the runtime tells
the coordinator (``persisted``), which otherwise puts the metadata back as the log holds it.

Two rules keep a marker from ever reaching a log it does not belong in:

1. No marker of a transaction is written while a Prepare record of it waits for the ISR (the
   abort check's resend skips it; the outcome that wrote the record writes its markers). If that
   wait fails, the answers fail with
   ``CoordinatorStorageError`` (the producer retries and gets CONCURRENT_TRANSACTIONS) and the
   runtime keeps waiting until the record is replicated or the partition is unloaded, so a
   Prepare that a failover may forget never gets markers.
2. Just before each write the marker is checked against the coordinator's current state
   (same producer id, epoch, Prepare state and coordinator epoch): a marker made stale by a
   completed transaction, a fenced producer or a moved partition is dropped, so it can never
   close the producer's next transaction.

A marker that fails is retried with a backoff while it stays current (the producer gets
CONCURRENT_TRANSACTIONS for its next transaction until they are written); after a failover the new
coordinator's abort check resends the markers of transactions it loads in a Prepare state.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import Counter
from typing import Awaitable, Callable

from pybroker.coordinator.records import Record
from pybroker.common.clock import Clock
from pybroker.coordinator.runtime import CoordinatorRuntime, Persist, Replicated, deliver, fail
from pybroker.coordinator.txn_coordinator import MarkerRequest, TransactionCoordinator, TxnOutcome
from pybroker.coordinator.txn_records import TxnState

log = logging.getLogger("pybroker.coordinator")

WriteMarkers = Callable[[MarkerRequest], Awaitable[bool]]
"""Write one marker to every partition of a transaction; True when all were written."""

RETRY_BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0)
"""Waits between attempts at the markers of one transaction; the last one repeats."""


class TxnRuntime(CoordinatorRuntime):
    def __init__(self, coordinator: TransactionCoordinator, persist: Persist, write_markers: WriteMarkers,
                 clock: Clock, replicated: Replicated | None = None) -> None:
        super().__init__(coordinator, persist, clock, replicated)  # type: ignore[arg-type]  # same timer protocol
        self.txn = coordinator
        self._write_markers = write_markers
        self._marking: set[MarkerRequest] = set()
        """Markers being written now, so the abort check's resend does not send them twice at once."""
        self._awaiting_isr: Counter[str] = Counter()
        """Transactional ids with a Prepare record not yet held by the ISR (rule 1)."""

    def apply(self, outcome: TxnOutcome) -> None:  # type: ignore[override]
        try:
            ends = self._persist_records(outcome.records)
        except Exception as exc:
            self.txn.persisted(outcome, ok=False)
            fail(outcome.replies, exc)
            return
        finally:
            self._wake.set()
        if not outcome.markers and (self._replicated is None or not ends):
            self.txn.persisted(outcome, ok=True)
            deliver(outcome.replies)
            return
        prepared = [m.transactional_id for m in outcome.markers] if ends and self._replicated else []
        self._awaiting_isr.update(prepared)
        self._spawn(self._finish(ends, outcome, prepared))

    async def _finish(self, ends: dict[int, int], outcome: TxnOutcome, prepared: list[str]) -> None:
        try:
            if prepared:
                replicated = await self._wait_for_isr(ends, outcome)
                if not replicated:
                    return
            elif self._replicated is not None and ends:
                try:
                    await asyncio.gather(*(self._replicated(p, end) for p, end in ends.items()))
                except Exception as exc:
                    self.txn.persisted(outcome, ok=False)
                    fail(outcome.replies, exc)
                    return
            self.txn.persisted(outcome, ok=True)
        finally:
            self._awaiting_isr.subtract(prepared)
            self._awaiting_isr += Counter()  # drop ids whose count reached zero
        attempts = [asyncio.Event() for _ in outcome.markers]
        writes = [asyncio.ensure_future(self._write(m, attempted)) for m, attempted in zip(outcome.markers, attempts)]
        await asyncio.gather(*(attempted.wait() for attempted in attempts))
        deliver(outcome.replies)  # after the first attempt: a leader that stays away delays no answer
        await asyncio.gather(*writes)

    async def _wait_for_isr(self, ends: dict[int, int], outcome: TxnOutcome) -> bool:
        """Wait until the ISR holds the outcome's records; on a failure answer the requests with it
        but go on waiting (rule 1). False when the partition was unloaded meanwhile."""
        assert self._replicated is not None
        epochs = {p: self.txn.coordinator_epochs.get(p) for p in ends}
        failed = False
        while True:
            try:
                await asyncio.gather(*(self._replicated(p, end) for p, end in ends.items()))
                return True
            except Exception as exc:
                if not failed:
                    fail(outcome.replies, exc)
                    failed = True
            if any(self.txn.coordinator_epochs.get(p) != epoch for p, epoch in epochs.items()):
                return False  # unloaded: the partition's next leader finishes these transactions
            await self._clock.sleep(RETRY_BACKOFF_S[-1])

    async def _write(self, marker: MarkerRequest, attempted: asyncio.Event) -> None:
        """Write ``marker`` until it is written or no longer current, setting ``attempted`` after
        the first try. Skipped while a Prepare record of the transaction still waits for the ISR:
        the task waiting for it writes the markers."""
        if marker in self._marking or self._awaiting_isr[marker.transactional_id]:
            attempted.set()
            return
        self._marking.add(marker)
        try:
            for attempt in itertools.count():
                if not self._is_current(marker):
                    return
                try:
                    written = await self._write_markers(marker)
                except Exception:
                    log.exception("Writing the markers of transaction %s failed", marker.transactional_id)
                    written = False
                finally:
                    attempted.set()
                if written:
                    break
                await self._clock.sleep(RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)])
        finally:
            self._marking.discard(marker)
            attempted.set()
        self.apply(self.txn.markers_written(marker, self._clock.wall_ms()))

    def _is_current(self, marker: MarkerRequest) -> bool:
        """The transaction still waits for exactly these markers (rule 2)."""
        meta = self.txn.transactions.get(marker.transactional_id)
        expected = TxnState.PREPARE_COMMIT if marker.commit else TxnState.PREPARE_ABORT
        partition = self.txn.partition_of(marker.transactional_id)
        return meta is not None and meta.state is expected and meta.producer_id == marker.producer_id \
            and meta.producer_epoch == marker.producer_epoch \
            and self.txn.coordinator_epochs.get(partition, 0) == marker.coordinator_epoch

    def _persist_records(self, records: list[tuple[int, Record]]) -> dict[int, int]:
        """Append the records per partition; the offset just past each partition's append."""
        by_partition: dict[int, list[Record]] = {}
        for partition, record in records:
            by_partition.setdefault(partition, []).append(record)
        return {partition: self._persist(partition, batch) for partition, batch in by_partition.items()}
