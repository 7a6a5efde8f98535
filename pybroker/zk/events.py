"""The one event queue (Kafka's ControllerEventManager): ZooKeeper watches, session changes and requests
to the controller all become items of ONE asyncio queue drained by ONE task, so every change of the
controller's (and the broker's ZooKeeper) state happens on the loop, one event at a time, in order.

kazoo fires watches on its own threads: those only `post` an event (thread-safe); a handler re-reads
what the watch covers, which re-arms the one-shot watch and sees any change that raced with it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, TypeVar

log = logging.getLogger("pybroker.zookeeper")

T = TypeVar("T")

# Event kinds: each names the znode(s) its handler re-reads.
CONTROLLER_CHANGED = "controller-changed"  # /controller
BROKERS_CHANGED = "brokers-changed"  # /brokers/ids children
TOPICS_CHANGED = "topics-changed"  # /brokers/topics children
TOPIC_CHANGED = "topic-changed"  # /brokers/topics/T (added partitions)
DELETE_TOPICS = "delete-topics"  # /admin/delete_topics children
REASSIGN_PARTITIONS = "reassign-partitions"  # /admin/reassign_partitions
PREFERRED_REPLICA_ELECTION = "preferred-replica-election"  # /admin/preferred_replica_election
SESSION_RECONNECTED = "session-reconnected"
SESSION_LOST = "session-lost"


@dataclass(frozen=True, slots=True)
class ZkEvent:
    """A watch that fired (`kind` names what to re-read) or a session state change."""

    kind: str
    path: str = ""


EventHandler = Callable[[ZkEvent], Awaitable[None]]
Work = Callable[[], Awaitable[None]]


class EventQueue:
    def __init__(self) -> None:
        self._queue: asyncio.Queue[ZkEvent | Work] = asyncio.Queue()
        self._handlers: dict[str, EventHandler] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop that `post` hands events to from other threads."""
        self._loop = loop

    def on(self, kind: str, handler: EventHandler) -> None:
        self._handlers[kind] = handler

    async def run(self) -> None:
        """The one consumer of events and submitted work; a failure is logged and the next runs."""
        while True:
            event = await self._queue.get()
            try:
                if isinstance(event, ZkEvent):
                    handler = self._handlers.get(event.kind)
                    if handler is not None:
                        await handler(event)
                else:
                    await event()
            except Exception:
                log.exception("Handling ZooKeeper event %s failed", event)

    def submit(self, work: Work) -> None:
        """Run `work` in the queue, after the events already queued (requests to the controller)."""
        self._queue.put_nowait(work)

    def post(self, event: ZkEvent) -> None:
        """Queue an event from any thread."""
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._queue.put_nowait, event)

    async def call(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run `work` in the queue and await its result (a request that changes controller state)."""
        result: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        async def run() -> None:
            try:
                result.set_result(await work())
            except Exception as exc:
                result.set_exception(exc)

        self.submit(run)
        return await result
