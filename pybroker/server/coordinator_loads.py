"""The coordinators' partition loads in flight: one task per partition of an internal topic.

A broker elected leader of a ``__consumer_offsets`` or ``__transaction_state`` partition replays it
before answering for its groups or transactional ids (Kafka's loading state, answered
COORDINATOR_LOAD_IN_PROGRESS). The replay reads the log on the I/O executor, so it is a task: the
next leadership change of the same partition cancels it before acting, which keeps the changes in
the order the replica manager made them (a load never completes after its partition was resigned).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Coroutine

log = logging.getLogger("pybroker.coordinator")


class PartitionLoads:
    """Running loads by partition; ``in`` tells whether one is loading."""

    def __init__(self, topic: str) -> None:
        self._topic = topic
        self._tasks: dict[int, asyncio.Task[None]] = {}

    def __contains__(self, partition: object) -> bool:
        return partition in self._tasks

    def start(self, partition: int, load: Coroutine[None, None, None]) -> None:
        """Run ``load`` for ``partition`` (after ``cancel``: one load per partition)."""
        task = asyncio.get_running_loop().create_task(load, name=f"load-{self._topic}-{partition}")
        self._tasks[partition] = task
        task.add_done_callback(lambda done: self._finished(partition, done))

    def cancel(self, partition: int) -> None:
        """Stop the partition's load, if any: its results are never applied."""
        task = self._tasks.pop(partition, None)
        if task is not None:
            task.cancel()

    def cancel_all(self) -> None:
        for partition in list(self._tasks):
            self.cancel(partition)

    async def wait(self) -> None:
        """Until every load started so far has finished (tests, shutdown)."""
        while self._tasks:
            await asyncio.wait(list(self._tasks.values()))

    def _finished(self, partition: int, task: asyncio.Task[None]) -> None:
        if self._tasks.get(partition) is task:
            del self._tasks[partition]
        if not task.cancelled() and task.exception() is not None:
            log.error("Loading %s-%d failed; it stays unloaded until the next leadership change", self._topic,
                      partition, exc_info=task.exception())
