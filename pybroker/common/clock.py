"""The broker's one source of time, as Kafka's `org.apache.kafka.common.utils.Time`.

Timers and deadlines (session timeouts, transaction expiry, quota windows, retention, token lifetimes) read the
clock they were given instead of the `time` module, so a test can hold time still with `ManualClock` and move it
by exactly the amount the behaviour under test needs, instead of sleeping for it.

- `wall_ms()` is the wall clock in milliseconds since the epoch: what lands in records, files and on the wire.
- `monotonic()` is seconds on a clock that never goes back: what elapsed time and deadlines are measured on.
- `sleep()` waits on that monotonic clock.
- `wait_for()` waits for an awaitable at most so long on that clock (Kafka's `Time.waitForFuture`): the long
  polls, acks=all waits and coordinator timers, which end at whichever comes first.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Awaitable, Protocol, TypeVar

T = TypeVar("T")


class Clock(Protocol):
    def wall_ms(self) -> int: ...

    def monotonic(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...

    async def wait_for(self, awaitable: Awaitable[T], seconds: float) -> T:
        """``awaitable``'s result, or TimeoutError (and ``awaitable`` cancelled) once ``seconds`` passed."""
        ...


class SystemClock:
    """The real clocks of the machine."""

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def wait_for(self, awaitable: Awaitable[T], seconds: float) -> T:
        return await asyncio.wait_for(awaitable, seconds)


SYSTEM_CLOCK = SystemClock()


class ManualClock:
    """A clock that moves only when `advance` is called; its sleepers wake, in deadline order, once it passes
    their deadline. Both readings move together, as Kafka's MockTime."""

    def __init__(self, wall_ms: int = 1_700_000_000_000, monotonic: float = 0.0) -> None:
        self._wall_ms = wall_ms
        self._monotonic = monotonic
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def wall_ms(self) -> int:
        return self._wall_ms

    def monotonic(self) -> float:
        return self._monotonic

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        await self._timer(seconds)

    def _timer(self, seconds: float) -> asyncio.Future[None]:
        """A future done once the clock has moved ``seconds`` on, registered at once (not when awaited)."""
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._monotonic + seconds, next(self._order), woken))
        return woken

    async def wait_for(self, awaitable: Awaitable[T], seconds: float) -> T:
        waited = asyncio.ensure_future(awaitable)
        timer = self._timer(max(seconds, 0.0))
        if seconds <= 0:
            timer.set_result(None)
        try:
            await asyncio.wait((waited, timer), return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            if not waited.done():
                waited.cancel()
        if waited.done() and not waited.cancelled():
            return waited.result()
        raise TimeoutError(f"not done within {seconds} s")

    def advance(self, seconds: float) -> None:
        """Move both readings forward and wake every sleeper whose deadline has now passed."""
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self._monotonic += seconds
        self._wall_ms += round(seconds * 1000)
        while self._sleepers and self._sleepers[0][0] <= self._monotonic:
            _, _, woken = heapq.heappop(self._sleepers)
            if not woken.done():
                woken.set_result(None)
