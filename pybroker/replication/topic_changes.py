"""Each topic's role changes, applied one after another in the order the metadata made them.

On a single node the embedded metadata tells the broker of a topic's creation, change and deletion
through a synchronous listener, while a new partition's log needs fsyncs that must not run on the
event loop (`RoleChanges.become_leader_async`). A change that has to wait for them continues as a
task, and every later change of the same topic waits for that task: a deletion never overtakes the
creation it follows, and a topic deleted and created again gets its new logs after the old ones are
gone. A change with nothing to wait for, on a topic with nothing pending, applies at once, as before
(a config change, the topics loaded at start-up). CreateTopics awaits `settled` before it answers, so
its answer still comes after the partitions' files are durable.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Awaitable, Callable

__all__ = ["TopicChange", "TopicChanges"]

TopicChange = Callable[[], "Awaitable[None] | None"]
"""Applies a change: what it cannot apply at once it returns as an awaitable that finishes it."""


class TopicChanges:
    def __init__(self) -> None:
        self._tails: dict[str, asyncio.Future[None]] = {}  # per topic, the last change still running

    def apply(self, topic: str, change: TopicChange) -> None:
        """Apply ``change`` now if ``topic`` has no change pending, else once the pending ones ended. An
        error of a change applied at once is raised here; that of a later part is raised by `settled`."""
        tail = self._tails.get(topic)
        if tail is None:
            rest = change()
            if rest is None:
                return
            task = asyncio.ensure_future(rest)
        else:
            task = asyncio.ensure_future(_after(tail, change))
        self._tails[topic] = task
        task.add_done_callback(functools.partial(self._ended, topic))

    def pending(self, topic: str) -> bool:
        """Whether a change of ``topic`` is still being applied (its replicas are not all served yet)."""
        return topic in self._tails

    async def settled(self, topic: str) -> None:
        """Wait until every change of ``topic`` made so far is applied; raises the last one's error."""
        tail = self._tails.get(topic)
        if tail is not None:
            await asyncio.shield(tail)

    def cancel_all(self) -> None:
        """At shutdown: stop waiting for the changes still running."""
        for task in self._tails.values():
            task.cancel()

    def _ended(self, topic: str, task: asyncio.Future[None]) -> None:
        if self._tails.get(topic) is task:
            del self._tails[topic]
        if not task.cancelled():
            task.exception()  # reported by the change itself (and to whoever awaits `settled`)


async def _after(tail: asyncio.Future[None], change: TopicChange) -> None:
    await asyncio.wait((tail,))  # an earlier change's failure was reported already: this one applies anyway
    rest = change()
    if rest is not None:
        await rest
