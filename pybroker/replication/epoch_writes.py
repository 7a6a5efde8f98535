"""The `leader-epoch-checkpoint` writes of one LeaderAndIsr, made durable together on the I/O executor.

A replica that leads at a new epoch first makes that epoch durable (Kafka's LeaderEpochFileCache.assign
flushes the file before Partition.makeLeader lets the partition act as leader), two fsyncs per
partition. On the event loop a controller moving a thousand leaders to this broker held every client
up for seconds, so the request's partitions are collected here and written on the broker's I/O executor,
shared out over at most half its threads as new logs are (flushes and cold reads still find the others
free); each replica waits for its own file.
"""

from __future__ import annotations

import asyncio
import functools

from pybroker.common.io_executor import IoExecutor
from pybroker.log.checkpoint import LeaderEpochCheckpointFile

__all__ = ["EpochWrites"]


class EpochWrites:
    def __init__(self, io: IoExecutor | None) -> None:
        """``io``: None writes on the calling thread (no loop to keep free: tools, tests without a broker)."""
        self.io = io
        self._files: list[_Queued] = []

    def add(self, checkpoint: LeaderEpochCheckpointFile, entries: dict[int, int]) -> asyncio.Future[None]:
        """Queue a write; the future ends when it is durable, with its OSError, or cancelled when the write
        could not be made at all (the broker stops)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._files.append((checkpoint, entries, done))
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
            for _, _, done in files:
                done.cancel()
            if not isinstance(exc, Exception):
                raise
            return
        for share, share_outcomes in zip(shares, outcomes):
            _settle(share, share_outcomes)


_Queued = tuple[LeaderEpochCheckpointFile, dict[int, int], "asyncio.Future[None]"]


def _write_all(files: list[_Queued]) -> list[OSError | None]:
    return [_write(checkpoint, entries) for checkpoint, entries, _ in files]


def _settle(files: list[_Queued], outcomes: list[OSError | None]) -> None:
    for (_, _, done), outcome in zip(files, outcomes):
        if done.done():
            continue
        if outcome is None:
            done.set_result(None)
        else:
            done.set_exception(outcome)


def _write(checkpoint: LeaderEpochCheckpointFile, entries: dict[int, int]) -> OSError | None:
    try:
        checkpoint.write(entries)
    except OSError as exc:
        return exc
    return None
