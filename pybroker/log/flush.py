"""``FlushJob``: one log flush, split so that only its fsyncs leave the event loop.

``PartitionLog.begin_flush`` (loop) picks the target offset and opens fresh descriptors of every
file to sync: the segments holding [recovery point, target), the producer snapshots written at
their rolls (Kafka's ``flushSnapshot``), and the partition directory when a file was created in it.
``FlushJob.run`` (an I/O thread) fsyncs and closes them, touching nothing else; because the
descriptors are its own, a segment closed, renamed or deleted meanwhile cannot hand it another
file's descriptor. ``PartitionLog.finish_flush`` (loop) then advances the recovery point, so the
recovery-point checkpoint written after it (Kafka's order: flush, then checkpoint) only names
offsets that are on disk.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pybroker.log.errors import LogStorageError

__all__ = ["FlushJob"]


@dataclass
class FlushJob:
    """The descriptors of one flush and what to apply once they are synced."""

    target: int  # the recovery point once the fsyncs succeed
    truncations: int  # the log's truncation count when planned: a truncation meanwhile voids the job
    now_ms: int
    fds: list[tuple[int, str]] = field(default_factory=list)  # (descriptor, path), synced in order
    syncs_dir: bool = False  # the partition directory is among fds (a file was created or renamed)
    error: LogStorageError | None = None

    def run(self) -> None:
        """fsync every descriptor in order and close them all (any thread); records the first error."""
        try:
            for fd, path in self.fds:
                if self.error is None:
                    try:
                        os.fsync(fd)
                    except OSError as exc:
                        self.error = LogStorageError(f"fsync of {path} failed: {exc}")
        finally:
            for fd, _ in self.fds:
                os.close(fd)
            self.fds = []
