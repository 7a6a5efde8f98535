"""``FlushScheduler``: when the broker's logs are fsynced, and who waits for it (Kafka's flush-log task
and the synchronous flush of flush.messages).

Once ``attach_executor`` is called (by the broker, on its loop) every flush fsyncs on the I/O executor
(``pybroker.common.io_executor``): what to sync is opened on the loop (``PartitionLog.begin_flush``), the
fsyncs run on a ``pybroker-io`` thread, the recovery point moves on the loop afterwards. A log reaching
flush.messages asks for a flush (``PartitionLog.flush_requester``); one flush per log runs at a time,
and ``wait_flushed`` lets a produce answer wait for the offsets it appended, as Kafka's synchronous flush
in the request thread does. The periodic pass flushes the logs idle longer than flush.ms and the
segments rolled since the last flush; it only looks at the logs ``watch`` put on its lists.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Iterable, Mapping

from pybroker.common.io_executor import IoExecutor

from pybroker.common.topic import TopicPartition
from pybroker.log.config import LONG_MAX
from pybroker.log.errors import LogError
from pybroker.log.log import PartitionLog
from pybroker.log.log_dirs import live_logs

__all__ = ["FlushScheduler", "MAX_CONCURRENT_FLUSHES"]

logger = logging.getLogger("pybroker.log")

MAX_CONCURRENT_FLUSHES = 32

_Due = list[tuple[PartitionLog, "int | None"]]


class FlushScheduler:
    """Flushes of the logs in ``logs`` (the manager's registry, read only here)."""

    def __init__(self, logs: Mapping[TopicPartition, PartitionLog]) -> None:
        self._logs = logs
        self.io: IoExecutor | None = None
        self._locks: dict[TopicPartition, asyncio.Lock] = {}  # one flush per log at a time
        # Each flush holds descriptors of its own (a few per segment) until its fsyncs are done: with every
        # log due at once (a broker-wide flush.ms), a bounded number of them run at a time.
        self._slots = asyncio.Semaphore(MAX_CONCURRENT_FLUSHES)
        self._tasks: dict[TopicPartition, asyncio.Task[None]] = {}  # flush.messages flushes
        self._waiters: dict[TopicPartition, list[tuple[int, asyncio.Future[bool]]]] = {}
        self._timed: set[TopicPartition] = set()  # flush.ms is finite
        self._rolled: set[TopicPartition] = set()  # a segment below the recovery point's awaits its flush

    def watch(self, tp: TopicPartition, log: PartitionLog) -> None:
        """Whether the periodic pass has to look at ``log`` (after a roll, a config change, or when it is
        adopted); a rolled log leaves the list only once a pass flushed it."""
        if log.config.flush_ms < LONG_MAX:
            self._timed.add(tp)
        else:
            self._timed.discard(tp)
        if log.recovery_point < log.active_segment.base_offset:
            self._rolled.add(tp)

    def forget(self, tp: TopicPartition) -> None:
        """The log was deleted."""
        self._locks.pop(tp, None)

    async def flush_log(self, log: PartitionLog, up_to: int | None = None, *, now_ms: int | None = None) -> None:
        """Flush ``log`` to ``up_to`` (default LEO) with the fsyncs on the I/O executor."""
        tp = TopicPartition(log.topic, log.partition)
        async with self._locks.setdefault(tp, asyncio.Lock()), self._slots:
            if log.closed:
                return
            job = log.begin_flush(up_to, now_ms=now_ms)
            if job.fds:
                if self.io is None:
                    job.run()
                else:
                    await self.io.run(job.run)
            try:
                log.finish_flush(job)
            finally:
                self._wake_waiters(tp, log, job.error is None)

    def request_flush(self, log: PartitionLog) -> None:
        """flush.messages reached: make sure a flush task for ``log`` runs (coalesced)."""
        tp = TopicPartition(log.topic, log.partition)
        task = self._tasks.get(tp)
        if task is None or task.done():
            self._tasks[tp] = asyncio.get_running_loop().create_task(
                self._flush_while_due(tp, log), name=f"flush-{tp[0]}-{tp[1]}")

    async def _flush_while_due(self, tp: TopicPartition, log: PartitionLog) -> None:
        try:
            while not log.closed and (log.unflushed_messages >= log.config.flush_messages or self._waiters.get(tp)):
                await self.flush_log(log)
        except LogError as exc:
            logger.error("Flush of %s-%d failed: %s", tp[0], tp[1], exc)
        finally:
            self._wake_waiters(tp, log, False, every=True)
            if self._tasks.get(tp) is asyncio.current_task():
                del self._tasks[tp]

    def _wake_waiters(self, tp: TopicPartition, log: PartitionLog, ok: bool, *, every: bool = False) -> None:
        waiters = self._waiters.get(tp)
        if not waiters:
            return
        left = []
        for target, future in waiters:
            if log.recovery_point >= target and not future.done():
                future.set_result(True)
            elif (every or not ok) and not future.done():
                future.set_result(False)
            elif not future.done():
                left.append((target, future))
        if left:
            self._waiters[tp] = left
        else:
            del self._waiters[tp]

    @property
    def flushing(self) -> bool:
        """Whether a flush.messages flush is running: only then may a Produce answer have to wait for one."""
        return bool(self._tasks)

    async def wait_flushed(self, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Wait until the flush.messages flushes running for ``partitions`` cover their current LEO;
        returns those whose flush failed (the caller answers KAFKA_STORAGE_ERROR for them)."""
        pending: list[tuple[TopicPartition, asyncio.Future[bool]]] = []
        for tp in set(partitions):
            log = self._logs.get(tp)
            task = self._tasks.get(tp)
            if log is None or task is None or task.done() or log.recovery_point >= log.log_end_offset:
                continue
            future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            self._waiters.setdefault(tp, []).append((log.log_end_offset, future))
            pending.append((tp, future))
        failed = set()
        for tp, future in pending:
            if not await future:
                failed.add(tp)
        return failed

    # -- the periodic pass ----------------------------------------------------------------------

    def _due(self, now_ms: int) -> _Due:
        """Logs idle longer than flush.ms (to their end), and segments rolled since the last flush."""
        due: dict[TopicPartition, tuple[PartitionLog, int | None]] = {}
        for tp, log in live_logs(self._timed, self._logs):
            if now_ms - log.last_flush_ms >= log.config.flush_ms:
                due[tp] = (log, None)
        for tp, log in live_logs(self._rolled, self._logs):
            self._rolled.discard(tp)  # back in once its flush is found to have fallen short
            if tp not in due and log.recovery_point < log.active_segment.base_offset:
                due[tp] = (log, log.active_segment.base_offset)
        return list(due.values())

    def _rewatch(self, flushed: _Due) -> None:
        """A rolled segment whose flush failed or was voided (a truncation meanwhile) is due again."""
        for log, _ in flushed:
            if not log.closed and self._logs.get(TopicPartition(log.topic, log.partition)) is log:
                self.watch(TopicPartition(log.topic, log.partition), log)

    def flush_dirty(self, now_ms: int) -> int:
        """fsync logs idle longer than flush.ms, and segments rolled since the last flush."""
        due = self._due(now_ms)
        try:
            for log, up_to in due:
                log.flush(up_to, now_ms=now_ms)
        finally:
            self._rewatch(due)
        return len(due)

    async def flush_dirty_async(self, now_ms: int) -> int:
        """``flush_dirty`` with the fsyncs on the I/O executor; a failing log is logged and skipped."""
        due = self._due(now_ms)
        outcomes = await asyncio.gather(*(self.flush_log(log, up_to, now_ms=now_ms) for log, up_to in due),
                                        return_exceptions=True)
        self._rewatch(due)
        for (log, _), outcome in zip(due, outcomes):
            if isinstance(outcome, Exception):
                logger.error("Flush of %s-%d failed: %s", log.topic, log.partition, outcome)
        return len(due)
