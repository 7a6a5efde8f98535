"""The per-log-dir checkpoint files of the ``LogManager`` and how they are written (their format is
``checkpoint.py``'s)::

    recovery-point-offset-checkpoint   topic partition offset (flushed up to here)
    log-start-offset-checkpoint        topic partition offset (only logs whose start moved)
    replication-offset-checkpoint      topic partition high-watermark
    cleaner-offset-checkpoint          topic partition first-dirty-offset (compacted logs, cleaner_manager.py)
    .kafka_cleanshutdown               present only between a clean shutdown and the next start

The offsets are read on the loop and the files written (with their fsyncs) on the I/O executor, one pass
at a time: a recovery point is only ever advanced after its fsync, so the file never names unsynced data.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Callable, Collection, Mapping

from pybroker.common.io_executor import IoExecutor
from pybroker.common.topic import TopicPartition

from pybroker.log.checkpoint import OffsetCheckpointFile
from pybroker.log.errors import CorruptLogError
from pybroker.log.log import PartitionLog

__all__ = ["CHECKPOINT_FILES", "CLEANER_OFFSET_CHECKPOINT", "CLEAN_SHUTDOWN_FILE", "CheckpointPasses",
           "HIGH_WATERMARK_CHECKPOINT", "LOG_START_OFFSET_CHECKPOINT", "RECOVERY_POINT_CHECKPOINT",
           "checkpoint_contents", "read_checkpoint", "write_checkpoints"]

logger = logging.getLogger("pybroker.log")

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
CHECKPOINT_FILES = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT)
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"

Contents = list[tuple[str, dict[TopicPartition, int]]]


def read_checkpoint(path: str) -> dict[TopicPartition, int]:
    """A checkpoint, or {} when it is corrupt (then recovery starts from offset 0, as Kafka)."""
    try:
        return OffsetCheckpointFile(path).read()
    except CorruptLogError as exc:
        logger.warning("Ignoring corrupt checkpoint %s: %s", path, exc)
        return {}


def checkpoint_contents(roots: list[str], logs: Mapping[TopicPartition, PartitionLog],
                        root_of: Mapping[TopicPartition, str], files: Collection[str]) -> Contents:
    """The named checkpoints (of ``CHECKPOINT_FILES``) of each of ``roots``, as (path, entries) read now."""
    contents = []
    for root in roots:
        in_root = {tp: log for tp, log in logs.items() if root_of.get(tp) == root}
        entries = {
            RECOVERY_POINT_CHECKPOINT: lambda: {tp: log.recovery_point for tp, log in in_root.items()},
            LOG_START_OFFSET_CHECKPOINT: lambda: {tp: log.log_start_offset for tp, log in in_root.items()
                                                  if log.log_start_offset > log.segments[0].base_offset},
            HIGH_WATERMARK_CHECKPOINT: lambda: {tp: log.high_watermark for tp, log in in_root.items()},
        }
        contents += [(os.path.join(root, name), entries[name]()) for name in CHECKPOINT_FILES if name in files]
    return contents


def write_checkpoints(contents: Contents) -> list[tuple[str, OSError]]:
    """Write each checkpoint; the (path, error) of those whose write failed (their log dir goes offline)."""
    failures = []
    for path, entries in contents:
        try:
            OffsetCheckpointFile(path).write(entries)
        except OSError as exc:
            failures.append((path, exc))
    return failures


class CheckpointPasses:
    """Checkpoint writes off the loop, one pass at a time, so an older snapshot never overwrites a newer one."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._passes: dict[str, int] = {}  # per file, the checkpoint passes begun so far

    async def write(self, files: Collection[str], read: Callable[[Collection[str]], Contents],
                    io: IoExecutor | None) -> list[tuple[str, OSError]]:
        """Write ``read(files)`` (called on the loop once this pass holds the lock). A call that finds a
        pass of its files begun after it was made returns: that pass read the state this one would have,
        so callers queued together (leaders securing their logs, replica manager) share one."""
        asked = {name: self._passes.get(name, 0) for name in files}
        async with self._lock:
            if all(self._passes.get(name, 0) > count for name, count in asked.items()):
                return []  # a pass that began after this call read the state this call would have written
            for name in files:
                self._passes[name] = self._passes.get(name, 0) + 1
            contents = read(files)
            if io is None:
                return write_checkpoints(contents)
            return await io.run(lambda: write_checkpoints(contents))
