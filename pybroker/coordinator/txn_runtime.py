"""Runs the pure ``TransactionCoordinator`` on the event loop (the group runtime's timers and futures).

An outcome is applied in three steps, as Kafka's coordinator does: its ``__transaction_state``
records are appended and the runtime waits until the in-sync replicas hold them; then its
markers are written (to this broker's partitions and, through WriteTxnMarkers, to other
leaders; each fully written marker set completes its transaction, whose Complete record is
persisted the same way); then the answers are delivered. So no producer hears that a commit
succeeded before the commit is recorded on the ISR and its markers were sent. If persisting or
replicating fails, the outcome's answers fail with ``CoordinatorStorageError`` and no marker is
written; markers that fail are retried by the coordinator's next abort check.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from pybroker.coordinator.records import Record
from pybroker.coordinator.runtime import Clock, CoordinatorRuntime, Persist, Replicated, deliver, fail
from pybroker.coordinator.txn_coordinator import MarkerRequest, TransactionCoordinator, TxnOutcome

log = logging.getLogger("pybroker.coordinator")

WriteMarkers = Callable[[MarkerRequest], Awaitable[bool]]
"""Write one marker to every partition of a transaction; True when all were written."""


class TxnRuntime(CoordinatorRuntime):
    def __init__(self, coordinator: TransactionCoordinator, persist: Persist, write_markers: WriteMarkers,
                 clock: Clock, replicated: Replicated | None = None) -> None:
        super().__init__(coordinator, persist, clock, replicated)  # type: ignore[arg-type]  # same timer protocol
        self.txn = coordinator
        self._write_markers = write_markers
        self._marking: set[MarkerRequest] = set()
        """Markers being written now, so the abort check's resend does not send them twice at once."""

    def apply(self, outcome: TxnOutcome) -> None:  # type: ignore[override]
        try:
            ends = self._persist_records(outcome.records)
        except Exception as exc:
            fail(outcome.replies, exc)
            return
        finally:
            self._wake.set()
        if not outcome.markers and (self._replicated is None or not ends):
            deliver(outcome.replies)
            return
        task = asyncio.get_running_loop().create_task(self._finish(ends, outcome))
        self._replicating.add(task)
        task.add_done_callback(self._replicating.discard)

    async def _finish(self, ends: dict[int, int], outcome: TxnOutcome) -> None:
        if self._replicated is not None and ends:
            try:
                await asyncio.gather(*(self._replicated(partition, end) for partition, end in ends.items()))
            except Exception as exc:
                fail(outcome.replies, exc)
                return
        await asyncio.gather(*(self._write(marker) for marker in outcome.markers))
        deliver(outcome.replies)

    async def _write(self, marker: MarkerRequest) -> None:
        if marker in self._marking:
            return
        self._marking.add(marker)
        try:
            written = await self._write_markers(marker)
        except Exception:
            log.exception("Writing the markers of transaction %s failed", marker.transactional_id)
            written = False
        finally:
            self._marking.discard(marker)
        if written:
            self.apply(self.txn.markers_written(marker, self._clock()))

    def _persist_records(self, records: list[tuple[int, Record]]) -> dict[int, int]:
        """Append the records per partition; the offset just past each partition's append."""
        by_partition: dict[int, list[Record]] = {}
        for partition, record in records:
            by_partition.setdefault(partition, []).append(record)
        return {partition: self._persist(partition, batch) for partition, batch in by_partition.items()}
