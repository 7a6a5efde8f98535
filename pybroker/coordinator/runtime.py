"""Runs the pure ``GroupCoordinator`` on the event loop: futures for answers, persistence, timers.

Each request gets a future as its waiter. The coordinator's ``Outcome`` is applied in one step:
first its records are persisted (an append to ``__consumer_offsets`` that the caller supplies),
then, once the in-sync replicas hold them (acks=-1, as Kafka appends coordinator records), the
answers are delivered. So no member learns of a generation, an assignment or a commit that a
restart or a failover could forget. If persisting or replicating fails, every answer of that
outcome fails with ``CoordinatorStorageError`` and the handlers turn it into COORDINATOR_NOT_AVAILABLE.
Committed offsets follow the same rule: the coordinator stages them and they become visible to
OffsetFetch only once their records are replicated; a failed write leaves the previous value.
An outcome's tasks (regex refreshes) run off the loop through ``resolve``; their results come back
to the coordinator as another outcome.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Coroutine

from pybroker.common.clock import Clock
from pybroker.coordinator.consumer_regex import RegexRefresh
from pybroker.coordinator.coordinator import GroupCoordinator, Outcome
from pybroker.coordinator.records import Record

log = logging.getLogger("pybroker.coordinator")

MAX_TIMER_SLEEP_S = 1.0

Persist = Callable[[int, list[Record]], int]
"""Append records to a partition of the internal topic; returns the offset just past them."""
Replicated = Callable[[int, int], Awaitable[None]]
"""Wait until the in-sync replicas of a partition hold everything before an offset."""
Resolve = Callable[[frozenset[str], list[str]], Awaitable[dict[str, list[str]]]]
"""Match regexes against topic names off the loop (``topic_regex.RegexEngine.resolve``)."""


class CoordinatorStorageError(Exception):
    """Records of a coordinator outcome could not be appended to the internal topic."""


class NotCoordinatorError(Exception):
    """The group's partition of the internal topic moved to another broker while the request waited."""


class CoordinatorRuntime:
    def __init__(self, coordinator: GroupCoordinator, persist: Persist, clock: Clock,
                 replicated: Replicated | None = None, resolve: Resolve | None = None) -> None:
        self.coordinator = coordinator
        self._persist = persist
        self._replicated = replicated
        self._resolve = resolve
        self._replicating: set[asyncio.Task[None]] = set()  # referenced so they are not collected early
        self._clock = clock
        self._wake = asyncio.Event()

    async def call(self, operation: Callable[[asyncio.Future[Any], int], Outcome]) -> Any:
        """Run ``operation(waiter, now_ms)`` and wait for the answer it (or a later event) gives."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.apply(operation(future, self._clock.wall_ms()))
        return await future

    def apply(self, outcome: Outcome) -> None:
        for task in outcome.tasks:
            self._spawn(self._refresh(task))
        by_partition: dict[int, list[Record]] = {}
        for partition, record in outcome.records:
            by_partition.setdefault(partition, []).append(record)
        ends: dict[int, int] = {}
        try:
            for partition, records in by_partition.items():
                ends[partition] = self._persist(partition, records)
        except Exception as exc:
            self.coordinator.offsets_failed(outcome.staged)
            fail(outcome.replies, exc)
            return
        finally:
            self._wake.set()
        if self._replicated is None or not ends:
            self.coordinator.offsets_written(outcome.staged, ends)
            deliver(outcome.replies)
        else:
            self._spawn(self._deliver_when_replicated(ends, outcome))

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._replicating.add(task)
        task.add_done_callback(self._replicating.discard)

    async def _refresh(self, refresh: RegexRefresh) -> None:
        """Resolve a group's regexes off the loop; a failure leaves them to the next refresh."""
        matches: dict[str, list[str]] | None = None
        try:
            if self._resolve is None:
                raise RuntimeError("no regex resolver")
            matches = await self._resolve(refresh.patterns, list(refresh.image.topics))
        except Exception as exc:
            log.error("Could not resolve the regular expressions of group %s: %s", refresh.group_id, exc)
        self.apply(self.coordinator.regexes_resolved(refresh, matches))

    async def _deliver_when_replicated(self, ends: dict[int, int], outcome: Outcome) -> None:
        assert self._replicated is not None
        try:
            await asyncio.gather(*(self._replicated(partition, end) for partition, end in ends.items()))
        except Exception as exc:
            self.coordinator.offsets_failed(outcome.staged)
            fail(outcome.replies, exc)
            return
        self.coordinator.offsets_written(outcome.staged, ends)
        deliver(outcome.replies)

    def unload(self, partition: int) -> None:
        """Drop ``partition``'s groups; their pending joins and syncs fail with NotCoordinatorError."""
        for waiter in self.coordinator.unload(partition):
            if isinstance(waiter, asyncio.Future) and not waiter.done():
                waiter.set_exception(NotCoordinatorError(f"partition {partition} moved to another coordinator"))
        self.wake()

    def wake(self) -> None:
        """Re-plan the timers now (new state was loaded or dropped)."""
        self._wake.set()

    async def run_timers(self) -> None:
        """Call ``tick`` whenever a deadline passes; requests wake the loop to re-plan."""
        while True:
            deadline = self.coordinator.next_deadline_ms()
            sleep_s = MAX_TIMER_SLEEP_S
            if deadline is not None:
                sleep_s = min(max((deadline - self._clock.wall_ms()) / 1000, 0.0), MAX_TIMER_SLEEP_S)
            self._wake.clear()
            try:
                await self._clock.wait_for(self._wake.wait(), sleep_s)
            except asyncio.TimeoutError:
                pass
            try:
                self.apply(self.coordinator.tick(self._clock.wall_ms()))
            except Exception:
                log.exception("Group coordinator timer failed")


def deliver(replies: list[tuple[Any, Any]]) -> None:
    for waiter, response in replies:
        if not waiter.done():
            waiter.set_result(response)


def fail(replies: list[tuple[Any, Any]], exc: Exception) -> None:
    log.error("Could not persist or replicate coordinator records: %s", exc)
    for waiter, _ in replies:
        if not waiter.done():
            waiter.set_exception(CoordinatorStorageError(str(exc)))
