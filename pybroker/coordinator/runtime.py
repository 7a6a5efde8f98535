"""Runs the pure ``GroupCoordinator`` on the event loop: futures for answers, persistence, timers.

Each request gets a future as its waiter. The coordinator's ``Outcome`` is applied in one step:
first its records are persisted (an append to ``__consumer_offsets`` that the caller supplies),
then the answers are delivered. So no member learns of a generation, an assignment or a commit
that a restart could forget. If persisting fails, every answer of that outcome fails with
``CoordinatorStorageError`` and the handlers turn it into COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from pybroker.coordinator.coordinator import GroupCoordinator, Outcome
from pybroker.coordinator.records import Record

log = logging.getLogger("pybroker.coordinator")

MAX_TIMER_SLEEP_S = 1.0

Persist = Callable[[int, list[Record]], None]
Clock = Callable[[], int]


class CoordinatorStorageError(Exception):
    """Records of a coordinator outcome could not be appended to the internal topic."""


class CoordinatorRuntime:
    def __init__(self, coordinator: GroupCoordinator, persist: Persist, clock: Clock) -> None:
        self.coordinator = coordinator
        self._persist = persist
        self._clock = clock
        self._wake = asyncio.Event()

    async def call(self, operation: Callable[[asyncio.Future[Any], int], Outcome]) -> Any:
        """Run ``operation(waiter, now_ms)`` and wait for the answer it (or a later event) gives."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.apply(operation(future, self._clock()))
        return await future

    def apply(self, outcome: Outcome) -> None:
        by_partition: dict[int, list[Record]] = {}
        for partition, record in outcome.records:
            by_partition.setdefault(partition, []).append(record)
        try:
            for partition, records in by_partition.items():
                self._persist(partition, records)
        except Exception as exc:
            log.error("Could not persist group coordinator records: %s", exc)
            for waiter, _ in outcome.replies:
                if not waiter.done():
                    waiter.set_exception(CoordinatorStorageError(str(exc)))
            return
        finally:
            self._wake.set()
        for waiter, response in outcome.replies:
            if not waiter.done():
                waiter.set_result(response)

    async def run_timers(self) -> None:
        """Call ``tick`` whenever a deadline passes; requests wake the loop to re-plan."""
        while True:
            deadline = self.coordinator.next_deadline_ms()
            sleep_s = MAX_TIMER_SLEEP_S
            if deadline is not None:
                sleep_s = min(max((deadline - self._clock()) / 1000, 0.0), MAX_TIMER_SLEEP_S)
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), sleep_s)
            except asyncio.TimeoutError:
                pass
            try:
                self.apply(self.coordinator.tick(self._clock()))
            except Exception:
                log.exception("Group coordinator timer failed")
