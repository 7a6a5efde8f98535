"""Moving a replica between this broker's log dirs while it keeps serving (Kafka's
ReplicaAlterLogDirsManager and ReplicaAlterLogDirsThread, KIP-113).

``move`` asks the LogManager for a ``<topic>-<partition>.<uuid>-future`` log in the destination dir
and starts one task for the partition. The task copies the current log's batches into the future log
as a follower copies its leader's (offsets, epochs and producer state kept, the log start followed),
reading the files on the I/O executor, at most replica.alter.log.dirs.io.max.bytes.per.second. When
the future log's end reaches the current one's it swaps them at once: the check and the swap run on
the loop with no await between, which is Kafka's partition lock here, so no append can slip in. The
partition then serves from the new log, and its leader-epoch checkpoint is written there in the background
(`ReplicaManager.write_epochs_later`): until it lands the new dir has none, which start-up rebuilds from the
batches, and a later write of the file is ordered after it (`epoch_writes.EpochFile`). Not when a write ahead of
the epoch cache is pending (a role change's new epoch, a follower's fetched one: `Partition.epochs_unwritten`):
that went to the file swapped out, and the role change or the fetcher then writes the whole cache to the new one.

A truncation of the current log while it is copied (a follower's, after a leader change) restarts the
copy from the log start: the copied tail could differ from the new one. A segment deleted or
replaced under a read (retention, the cleaner) is read again. A move to the dir the replica already
lives in cancels a move in progress. A move interrupted by a restart resumes from what its future log
holds when the partition is served again (the LogManager loads ``-future`` logs at startup).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from pybroker.common.io_executor import IoExecutor
from pybroker.common.topic import TopicPartition
from pybroker.log.errors import LogError, SliceUnavailableError
from pybroker.log.log import PartitionLog
from pybroker.log.manager import LogManager
from pybroker.replication.errors import UnknownPartitionError
from pybroker.replication.manager import ReplicaManager

logger = logging.getLogger("pybroker.replication")

COPY_CHUNK_BYTES = 1 << 20


class LogDirMover:
    """One copy task per replica moving to another log dir."""

    def __init__(self, replicas: ReplicaManager, io: IoExecutor, max_bytes_per_s: Callable[[], int]) -> None:
        self._replicas = replicas
        self._logs: LogManager = replicas.log_manager
        self._io = io
        self._max_bytes_per_s = max_bytes_per_s
        self._tasks: dict[TopicPartition, asyncio.Task[None]] = {}
        replicas.hosted_listeners.append(self._resume)

    def move(self, topic: str, index: int, path: str) -> None:
        """Start (or keep) moving the replica to log dir ``path``; UnknownPartitionError if not hosted here."""
        if self._replicas.hosted(topic, index) is None:
            raise UnknownPartitionError(f"This server does not host a replica of {topic}-{index}")
        key = TopicPartition(topic, index)
        if self._logs.create_future_log(topic, index, path) is None:
            task = self._tasks.pop(key, None)
            if task is not None:
                task.cancel()
            return
        self._start(key)

    def _resume(self, topic: str, index: int) -> None:
        """A replica is served again: resume its move if a future log was found at startup."""
        if self._logs.future_log(topic, index) is not None:
            self._start(TopicPartition(topic, index))

    def _start(self, key: TopicPartition) -> None:
        task = self._tasks.get(key)
        if task is None or task.done():
            self._tasks[key] = asyncio.get_running_loop().create_task(self._copy(key), name=f"move-{key[0]}-{key[1]}")

    async def shutdown(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()

    async def _copy(self, key: TopicPartition) -> None:
        topic, index = key
        try:
            await self._copy_until_swapped(topic, index)
        except asyncio.CancelledError:
            raise
        except LogError as exc:
            logger.error("Moving %s-%d to another log dir failed; the move is abandoned: %s", topic, index, exc)
            self._logs.drop_future_log(topic, index)
        finally:
            if self._tasks.get(key) is asyncio.current_task():
                del self._tasks[key]

    async def _copy_until_swapped(self, topic: str, index: int) -> None:
        truncations: int | None = None
        copied, started = 0, self._replicas.clock.monotonic()
        while True:
            current, future = self._logs.get_log(topic, index), self._logs.future_log(topic, index)
            partition = self._replicas.hosted(topic, index)
            if current is None or future is None or partition is None:
                return  # deleted, stopped or abandoned meanwhile
            if truncations != current.truncations or future.log_end_offset > current.log_end_offset \
                    or future.log_end_offset < current.log_start_offset:
                truncations = current.truncations
                future.truncate_fully_and_start_at(current.log_start_offset)
            future.set_high_watermark(min(current.high_watermark, future.log_end_offset))
            future.increment_log_start_offset(min(current.log_start_offset, future.high_watermark))
            if future.log_end_offset == current.log_end_offset:
                partition.log = self._logs.replace_current_with_future(topic, index)
                if not partition.epochs_unwritten:  # else a write ahead of the cache is pending: the next one is whole
                    entries = dict(partition.epoch_cache.entries)
                    self._replicas.write_epochs_later(partition, partition.epoch_write(entries))
                return
            copied += await self._copy_chunk(current, future)
            await self._throttle(copied, started)

    async def _copy_chunk(self, current: PartitionLog, future: PartitionLog) -> int:
        """Append the batches after the future log's end (read off the loop); the bytes copied."""
        offset, truncations = future.log_end_offset, current.truncations
        found = current.read(offset, COPY_CHUNK_BYTES).slices
        if found is None:  # no batch from here to the end (a gap the cleaner left): it cannot catch up
            raise LogError(f"{current.topic}-{current.partition} holds no batch in [{offset}, "
                           f"{current.log_end_offset})")
        try:
            data = await self._io.run(found.detached_read())
        except SliceUnavailableError:
            return 0  # retention or the cleaner replaced the segment meanwhile: read again
        if current.closed or future.closed or current.truncations != truncations or future.log_end_offset != offset:
            return 0  # changed while the range was read: look again
        future.append_as_follower(data)
        return len(data)

    async def _throttle(self, copied: int, started: float) -> None:
        """Sleep as long as the copy runs ahead of replica.alter.log.dirs.io.max.bytes.per.second."""
        ahead = copied / self._max_bytes_per_s() - (self._replicas.clock.monotonic() - started)
        await self._replicas.clock.sleep(max(ahead, 0.0))
