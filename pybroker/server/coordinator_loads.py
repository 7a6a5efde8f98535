"""The partitions of a coordinator's internal topic this broker serves, and their loads in flight.

A broker elected leader of a ``__consumer_offsets`` or ``__transaction_state`` partition replays it
before answering for its groups or transactional ids (Kafka's loading state, answered
COORDINATOR_LOAD_IN_PROGRESS); when it stops leading, the partition's keys are dropped and answered
NOT_COORDINATOR (Kafka's CoordinatorRuntime scheduleLoadOperation/scheduleUnloadOperation, shared
by both coordinators). The replay reads the log on the I/O executor, so it is a task: the next
leadership change of the same partition cancels it before acting, which keeps the changes in the
order the replica manager made them (a load never completes after its partition was resigned).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Callable, Coroutine, Generic, Iterable, Protocol, TypeVar

from pybroker.common.io_executor import IoExecutor
from pybroker.log import PartitionLog
from pybroker.protocol.error_codes import ErrorCode

log = logging.getLogger("pybroker.coordinator")

Entry = TypeVar("Entry")


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


class LogSource(Protocol):
    """Where a load finds the partition's log (the log manager)."""

    def get_log(self, topic: str, partition: int) -> PartitionLog | None: ...


@dataclass(frozen=True, slots=True)
class LoadSteps(Generic[Entry]):
    """What differs between the coordinators: how a partition's records decode, how the decoded
    entries apply (returning how many keys the partition now holds), and how a partition unloads."""

    replay: Callable[[list[bytes]], Iterable[Entry]]
    """Decodes the partition's records: runs on an I/O thread."""
    apply: Callable[[int, int, list[Entry]], int]
    """``(partition, leader_epoch, entries)``, on the loop."""
    unload: Callable[[int], None]
    keys: str
    """What the logs call the coordinator's keys: "group(s)", "transactional id(s)"."""
    epoch: str
    """What the logs call the leader epoch of the load: "leader epoch", "coordinator epoch"."""


class CoordinatorPartitions(Generic[Entry]):
    """The partitions of ``topic`` whose keys this broker coordinates (``loaded``) or is loading."""

    def __init__(self, topic: str, logs: LogSource, io: IoExecutor, steps: LoadSteps[Entry]) -> None:
        self.topic = topic
        self._logs = logs
        self._io = io
        self._steps = steps
        self.loaded: set[int] = set()
        self.loading = PartitionLoads(topic)
        """Partitions being replayed: their keys are answered COORDINATOR_LOAD_IN_PROGRESS."""

    def not_owned_error(self, partition: int) -> ErrorCode:
        """What a request for a key of ``partition`` gets when this broker does not serve it: it may be loading it."""
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if partition in self.loading else ErrorCode.NOT_COORDINATOR

    def on_leadership_change(self, topic: str, partition: int, leader_epoch: int, is_leader: bool) -> None:
        """The replica manager's listener: load or unload a partition of the internal topic.

        Becoming leader starts the replay (its file reads on the I/O executor, the records applied
        here on the loop); any later change of this partition cancels a replay still running."""
        if topic != self.topic:
            return
        self.loading.cancel(partition)
        self.loaded.discard(partition)
        self._steps.unload(partition)  # on election: a stale copy from an earlier term
        if not is_leader:
            log.info("Unloaded the %s of %s-%d", self._steps.keys.replace("(s)", "s"), self.topic, partition)
            return
        partition_log = self._logs.get_log(self.topic, partition)
        self.loading.start(partition, self._load(partition, leader_epoch, partition_log))

    async def _load(self, partition: int, leader_epoch: int, partition_log: PartitionLog | None) -> None:
        chunks = [] if partition_log is None else \
            [chunk async for chunk in partition_log.read_from_start_off_loop(self._io)]
        # Decoding every record is the long part of a load: an I/O thread does it, the loop applies.
        replay = self._steps.replay
        entries = await self._io.run(lambda: list(replay(chunks)))
        count = self._steps.apply(partition, leader_epoch, entries)
        self.loaded.add(partition)
        log.log(logging.INFO if count else logging.DEBUG, "Loaded %d %s from %s-%d at %s %d", count,
                self._steps.keys, self.topic, partition, self._steps.epoch, leader_epoch)
