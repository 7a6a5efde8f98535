"""Deleted logs' directories: their ``-delete`` name and the removal of their files (Kafka's
``LogManager.asyncDelete`` renames a log ``<topic>-<partition>.<uuid>-delete``; its ``kafka-delete-logs``
task removes the files later).

The rename is the deletion that a later request must see done; it happens on the loop (``LogManager``).
What is left, the unlinks of every file, runs on the I/O executor: a thousand partitions' unlinks held
the loop for seconds. A crash before they finish leaves only ``-delete`` directories, which the next start
removes (``dir_loader.py``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import shutil

from pybroker.common.io_executor import IoExecutor
from pybroker.common.topic import TopicPartition
from pybroker.log.log_dirs import DELETE_DIR_SUFFIX, suffixed_dir_name

__all__ = ["DirRemovals", "trash_path"]

logger = logging.getLogger("pybroker.log")


def trash_path(root: str, tp: TopicPartition) -> str:
    """Where a log of ``tp`` in ``root`` is renamed to be deleted: a crash mid-way leaves a directory the
    next startup removes, never a half-deleted partition."""
    return os.path.join(root, suffixed_dir_name(tp, DELETE_DIR_SUFFIX))


class DirRemovals:
    """The removals of deleted logs' renamed directories still running on the I/O executor."""

    def __init__(self) -> None:
        self._removals: set[asyncio.Future[None]] = set()

    def remove(self, paths: list[str], io: IoExecutor | None) -> None:
        """Remove the renamed directories ``paths``: on ``io``'s threads, here without one."""
        if io is None:
            _remove_dirs(paths)
        elif paths:
            removal = asyncio.ensure_future(io.run(functools.partial(_remove_dirs, paths)))
            self._removals.add(removal)
            removal.add_done_callback(self._removed)

    async def wait_removed(self) -> None:
        """Wait until the files of the logs deleted so far are gone (whoever must see them gone: tests)."""
        await asyncio.gather(*self._removals, return_exceptions=True)

    def _removed(self, removal: asyncio.Future[None]) -> None:
        self._removals.discard(removal)
        if not removal.cancelled() and removal.exception() is not None:
            logger.warning("Removing deleted log directories failed (the next start removes them): %s",
                           removal.exception())


def _remove_dirs(paths: list[str]) -> None:
    """The files of deleted logs' renamed directories (an I/O thread's part of `LogManager.delete_logs`)."""
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
