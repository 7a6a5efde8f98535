"""Runs the pure ``TransactionCoordinator`` on the event loop (the group runtime's timers and futures).

An outcome is applied in three steps: its ``__transaction_state`` records are persisted, then
its markers are written (each fully written marker set completes its transaction, whose
Complete record is persisted the same way), then the answers are delivered. So no producer
hears that a commit succeeded before the commit is recorded and its markers are in the logs.
If persisting fails, the outcome's answers fail with ``CoordinatorStorageError``; markers that
fail are retried by the coordinator's next abort check.
"""

from __future__ import annotations

import logging
from typing import Callable

from pybroker.coordinator.records import Record
from pybroker.coordinator.runtime import Clock, CoordinatorRuntime, CoordinatorStorageError, Persist
from pybroker.coordinator.txn_coordinator import MarkerRequest, TransactionCoordinator, TxnOutcome

log = logging.getLogger("pybroker.coordinator")

WriteMarkers = Callable[[MarkerRequest], bool]
"""Write one marker to every partition of a transaction; True when all were written."""


class TxnRuntime(CoordinatorRuntime):
    def __init__(self, coordinator: TransactionCoordinator, persist: Persist, write_markers: WriteMarkers,
                 clock: Clock) -> None:
        super().__init__(coordinator, persist, clock)  # type: ignore[arg-type]  # same timer protocol
        self.txn = coordinator
        self._write_markers = write_markers

    def apply(self, outcome: TxnOutcome) -> None:  # type: ignore[override]
        try:
            self._persist_records(outcome.records)
        except Exception as exc:
            log.error("Could not persist transaction coordinator records: %s", exc)
            for waiter, _ in outcome.replies:
                if not waiter.done():
                    waiter.set_exception(CoordinatorStorageError(str(exc)))
            return
        finally:
            self._wake.set()
        for marker in outcome.markers:
            try:
                written = self._write_markers(marker)
            except Exception:
                log.exception("Writing the markers of transaction %s failed", marker.transactional_id)
                written = False
            if written:
                self.apply(self.txn.markers_written(marker, self._clock()))
        for waiter, response in outcome.replies:
            if not waiter.done():
                waiter.set_result(response)

    def _persist_records(self, records: list[tuple[int, Record]]) -> None:
        by_partition: dict[int, list[Record]] = {}
        for partition, record in records:
            by_partition.setdefault(partition, []).append(record)
        for partition, batch in by_partition.items():
            self._persist(partition, batch)
