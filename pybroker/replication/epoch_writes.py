"""The `leader-epoch-checkpoint` writes of one request or fetch answer, made durable together on the I/O executor.

A replica that leads at a new epoch first makes that epoch durable (Kafka's LeaderEpochFileCache.assign
flushes the file before Partition.makeLeader lets the partition act as leader), and so does a follower before
it appends the batches that bring one: two fsyncs per partition. On the event loop a controller moving a
thousand leaders to this broker, or one fetch answer after such a move, held every client up for seconds, so
the partitions are collected here and written on the broker's I/O executor, shared out over at most half its
threads as new logs are (flushes and cold reads still find the others free); each replica waits for its own file.

One partition's file may be written by the loop and by several I/O threads at once (a follower's truncation
still being written when a LeaderAndIsr makes it lead): `EpochFile` makes those writes one at a time and lets
none land over a newer one, as Kafka writes the file under its cache's lock.

A write no step waits for (the log start moved: retention, DeleteRecords, a log dir move) goes to
`BackgroundEpochWrites`, as Kafka's truncateFromStartAsyncFlush schedules its flush: the cache is right at once,
and a file that lags at a crash is cut to the log start again at start-up (`partition.epoch_cache_of`).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from dataclasses import dataclass
from typing import Callable

from pybroker.common.io_executor import IoExecutor
from pybroker.log.checkpoint import LeaderEpochCheckpointFile

__all__ = ["BackgroundEpochWrites", "EpochFile", "EpochWrite", "EpochWrites"]


class EpochFile:
    """The order of one partition's `leader-epoch-checkpoint` writes: each is numbered when its entries are taken
    (on the loop, so in the order the cache changed) and one older than what the file already holds is skipped."""

    __slots__ = ("_lock", "_taken", "_written")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken = 0
        self._written = 0

    def take(self, checkpoint: LeaderEpochCheckpointFile, entries: dict[int, int]) -> EpochWrite:
        """A write of ``entries``, newer than every write taken before."""
        self._taken += 1
        return EpochWrite(self, self._taken, checkpoint, entries)

    def write_now(self, checkpoint: LeaderEpochCheckpointFile, entries: dict[int, int]) -> None:
        """Write ``entries`` on the calling thread (after any write of the file in progress on an I/O thread)."""
        self.take(checkpoint, entries).run()

    def _run(self, write: EpochWrite) -> None:
        with self._lock:
            if write.number <= self._written:  # a newer one is durable already: it stands for this one
                return
            write.checkpoint.write(write.entries)
            self._written = write.number


@dataclass(frozen=True, slots=True)
class EpochWrite:
    file: EpochFile
    number: int
    checkpoint: LeaderEpochCheckpointFile
    entries: dict[int, int]

    def run(self) -> None:
        """Write, unless a newer write of the file is durable already; OSError when the write fails."""
        self.file._run(self)


class EpochWrites:
    def __init__(self, io: IoExecutor | None) -> None:
        """``io``: None writes on the calling thread (no loop to keep free: tools, tests without a broker)."""
        self.io = io
        self._files: list[_Queued] = []

    def add(self, write: EpochWrite) -> asyncio.Future[None]:
        """Queue a write; the future ends when it is durable, with its OSError, or cancelled when the write
        could not be made at all (the broker stops)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._files.append((write, done))
        return done

    async def write(self) -> None:
        """Write every queued file (call once, after the last `add`); a failure ends the waiters, not this."""
        files, self._files = self._files, []
        if not files:
            return
        if self.io is None:
            _settle(files, _write_all(files))
            return
        threads = max(1, self.io.threads // 2)  # as many as make new logs at once (`LogManager.create_log`)
        shares = [files[first::threads] for first in range(min(threads, len(files)))]
        try:
            outcomes = await asyncio.gather(*(self.io.run(functools.partial(_write_all, share)) for share in shares))
        except BaseException as exc:  # the executor was shut down, the broker stops: the waiters end unwritten
            for _, done in files:
                done.cancel()
            if not isinstance(exc, Exception):
                raise
            return
        for share, share_outcomes in zip(shares, outcomes):
            _settle(share, share_outcomes)


class BackgroundEpochWrites:
    """The writes nothing waits for, made on the I/O executor by one task at a time: the writes queued while
    one batch is written go together in the next, the latest of each file only (it stands for the older)."""

    def __init__(self, io: IoExecutor) -> None:
        self.io = io
        self._queued: dict[EpochFile, tuple[EpochWrite, Callable[[OSError], None]]] = {}
        self._task: asyncio.Task[None] | None = None

    def add(self, write: EpochWrite, failed: Callable[[OSError], None]) -> None:
        """Queue ``write`` (taken on the loop, so ordered after every write of its file taken before);
        ``failed`` is called on the loop with the error when it cannot be made (the owner fails the log dir)."""
        self._queued[write.file] = write, failed
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._drain(), name="leader-epoch-cache-flush")

    async def drained(self) -> None:
        """Return once every write queued so far was made or failed."""
        while self._task is not None:
            await asyncio.wait((self._task,))

    async def _drain(self) -> None:
        try:
            while self._queued:
                queued, self._queued = list(self._queued.values()), {}
                writes = EpochWrites(self.io)
                waiting = [(writes.add(write), failed) for write, failed in queued]
                await writes.write()
                for done, failed in waiting:
                    error = None if done.cancelled() else done.exception()
                    if isinstance(error, OSError):
                        failed(error)
        finally:
            self._task = None


_Queued = tuple[EpochWrite, "asyncio.Future[None]"]


def _write_all(files: list[_Queued]) -> list[OSError | None]:
    return [_write(write) for write, _ in files]


def _settle(files: list[_Queued], outcomes: list[OSError | None]) -> None:
    for (_, done), outcome in zip(files, outcomes):
        if done.done():
            continue
        if outcome is None:
            done.set_result(None)
        else:
            done.set_exception(outcome)


def _write(write: EpochWrite) -> OSError | None:
    try:
        write.run()
    except OSError as exc:
        return exc
    return None
