"""Per partition, the produce appends still waiting for a big batch to be checked off the event loop.

A Produce request's batch is checked and appended in the handler's first step, so the appends to a
partition happen in the order its requests arrived: the order a producer pipelining several requests
on one connection (max.in.flight.requests.per.connection) relies on, and the order an idempotent
producer's sequence numbers are checked in. A batch too big to check on the loop is checked on an I/O
thread, and every later append to its partition, big or small, then waits its turn behind it here:
the appends keep their arrival order, and the producer state sees the sequences in that order.
"""

from __future__ import annotations

import asyncio

__all__ = ["AppendQueue"]


class AppendQueue:
    """The last append in line for each partition that has one waiting; a partition not here appends at once."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, int], asyncio.Future[None]] = {}
        self._checks: asyncio.Semaphore | None = None

    def busy(self, topic: str, index: int) -> bool:
        """Whether an append to the partition is still waiting: a new one has to queue behind it."""
        return bool(self._last) and (topic, index) in self._last

    def join(self, topic: str, index: int) -> tuple[asyncio.Future[None] | None, asyncio.Future[None]]:
        """Take the next turn of the partition: (the turn to wait for, or None; this append's turn, which the
        caller passes to `leave` once it has appended or given up)."""
        key = (topic, index)
        previous = self._last.get(key)
        turn = asyncio.get_running_loop().create_future()
        self._last[key] = turn
        return previous, turn

    def leave(self, topic: str, index: int, previous: asyncio.Future[None] | None, turn: asyncio.Future[None]) -> None:
        """End this append's turn; one that gave up early (cancelled) ends it only once the turn before it has
        ended, so the appends after it still come after that one."""
        if previous is not None and not previous.done():
            previous.add_done_callback(lambda _: self.leave(topic, index, None, turn))
            return
        turn.set_result(None)
        if self._last.get((topic, index)) is turn:
            del self._last[(topic, index)]

    def checks(self, threads: int) -> asyncio.Semaphore:
        """Big batches checked at once: half the I/O threads at most, so flushes and cold reads still find one."""
        if self._checks is None:
            self._checks = asyncio.Semaphore(max(1, threads // 2))
        return self._checks
