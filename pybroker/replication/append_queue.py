"""Per partition, the produce appends still waiting for a big batch to be checked off the event loop.

A Produce request's batch is checked and appended in the handler's first step, so the appends to a
partition happen in the order its requests arrived: the order a producer pipelining several requests
on one connection (max.in.flight.requests.per.connection) relies on, and the order an idempotent
producer's sequence numbers are checked in. A batch too big to check on the loop is checked on an I/O
thread, and every later append to its partition, big or small, then waits its turn behind it here:
the appends keep their arrival order, and the producer state sees the sequences in that order.

`Turns` is the same line for any key: the Produce handler keeps a transactional producer's requests
in arrival order with it while the transaction coordinator admits their partitions (KIP-890).
"""

from __future__ import annotations

import asyncio
from typing import Generic, Hashable, TypeVar

__all__ = ["AppendQueue", "Turns"]

K = TypeVar("K", bound=Hashable)


class Turns(Generic[K]):
    """Per key, the last of the turns taken and not yet ended: a key not here is free at once. A turn ends
    only after the one before it, so what joins later never goes before what joined earlier."""

    def __init__(self) -> None:
        self._last: dict[K, asyncio.Future[None]] = {}

    def take(self, key: K) -> tuple[asyncio.Future[None] | None, asyncio.Future[None]]:
        """The next turn of ``key``: (the turn to wait for, or None; this turn, which the caller passes to
        `end` once done or given up)."""
        previous = self._last.get(key)
        turn = asyncio.get_running_loop().create_future()
        self._last[key] = turn
        return previous, turn

    def end(self, key: K, previous: asyncio.Future[None] | None, turn: asyncio.Future[None]) -> None:
        """End a turn; one that gave up early (cancelled) ends only once the turn before it has ended, so
        the turns after it still come after that one."""
        if previous is not None and not previous.done():
            previous.add_done_callback(lambda _: self.end(key, None, turn))
            return
        turn.set_result(None)
        if self._last.get(key) is turn:
            del self._last[key]


class AppendQueue(Turns[tuple[str, int]]):
    """The appends waiting for each partition that has one waiting; a partition not here appends at once."""

    def busy(self, topic: str, index: int) -> bool:
        """Whether an append to the partition is still waiting: a new one has to queue behind it."""
        return bool(self._last) and (topic, index) in self._last

    def join(self, topic: str, index: int) -> tuple[asyncio.Future[None] | None, asyncio.Future[None]]:
        """Take the next turn of the partition (`Turns.take`)."""
        return self.take((topic, index))

    def leave(self, topic: str, index: int, previous: asyncio.Future[None] | None, turn: asyncio.Future[None]) -> None:
        """End this append's turn (`Turns.end`)."""
        self.end((topic, index), previous, turn)
