"""``FutureLogs``: replicas moving to another log dir (AlterReplicaLogDirs; Kafka keeps them in its
``LogManager`` as future logs).

A ``<topic>-<partition>.<uuid>-future`` log is created by ``create`` and copied into by the replication
layer (``replication/log_dir_mover.py``); ``replace_current`` swaps it in, as Kafka's
``replaceCurrentWithFutureLog`` does: the current directory is renamed ``-delete`` and closed only after
file.delete.delay.ms (fetches may still read it). A ``-future`` directory found at startup is loaded, so
the move resumes where it stopped once the partition is served again (as Kafka's); one whose partition has
no current log elsewhere is removed. A log being moved is not cleaned.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from typing import Callable

from pybroker.common.topic import TopicPartition
from pybroker.log.checkpoint import fsync_dir
from pybroker.log.cleaner_manager import CleanerManager
from pybroker.log.config import LogConfig
from pybroker.log.errors import LogError, LogStorageError
from pybroker.log.log import PartitionLog
from pybroker.log.log_deletion import trash_path
from pybroker.log.log_dirs import FUTURE_DIR_SUFFIX, LogDirs

__all__ = ["FutureLogs"]

logger = logging.getLogger("pybroker.log")


class FutureLogs:
    """The future logs of the current logs in ``logs`` (the manager's registry, whose dirs ``root_of`` names)."""

    def __init__(self, logs: dict[TopicPartition, PartitionLog], root_of: dict[TopicPartition, str],
                 dirs: LogDirs, cleaner: CleanerManager,
                 storage_error_listener: Callable[[PartitionLog, LogStorageError], None]) -> None:
        self._logs = logs
        self._root_of = root_of
        self._dirs = dirs
        self._cleaner = cleaner
        self._listener = storage_error_listener
        self.logs: dict[TopicPartition, PartitionLog] = {}
        self.root_of: dict[TopicPartition, str] = {}
        self._retired: list[tuple[int, PartitionLog, str]] = []  # (close at, replaced log, its -delete dir)

    def load(self, root: str, path: str, tp: TopicPartition, config: LogConfig, *, clean: bool, now_ms: int) -> None:
        """A ``-future`` log found at startup: kept to resume its move, unless it cannot be one."""
        if tp not in self._logs or tp in self.logs or self._root_of[tp] == root:
            logger.info("Removing %s, a log move whose partition has no other current log", path)
            shutil.rmtree(path, ignore_errors=True)
            return
        future = PartitionLog.open(path, tp[0], tp[1], config, now_ms=now_ms, clean_shutdown=clean)
        self._add(tp, root, future)
        logger.info("Loaded future log of %s-%d in %s (end %d): its move resumes", tp[0], tp[1], root,
                    future.log_end_offset)

    def _add(self, tp: TopicPartition, root: str, future: PartitionLog) -> None:
        future.storage_error_listener = self._listener
        self.logs[tp] = future
        self.root_of[tp] = root
        self._cleaner.pause(tp)

    def create(self, tp: TopicPartition, path: str, config: LogConfig, now_ms: int) -> PartitionLog | None:
        """See ``LogManager.create_future_log``."""
        root = self._dirs.check(path)
        topic, partition = tp
        if tp not in self._logs:
            raise LogError(f"No log for {topic}-{partition} on this broker")
        if self.root_of.get(tp) not in (None, root) or self._root_of[tp] == root:
            self.drop(tp)
        if self._root_of[tp] == root:
            return None
        if tp in self.logs:
            return self.logs[tp]
        if self._dirs.offline:
            raise LogStorageError(f"Can not create a future log for {topic}-{partition} while log dirs "
                                  f"{', '.join(sorted(self._dirs.offline))} are offline")
        future = PartitionLog.open(os.path.join(root, f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"),
                                   topic, partition, config, now_ms=now_ms, clean_shutdown=True)
        topic_id = self._logs[tp].topic_id
        if topic_id is not None:
            future.assign_topic_id(topic_id)
        fsync_dir(root)
        self._add(tp, root, future)
        logger.info("Created future log for %s-%d in %s", topic, partition, root)
        return future

    def drop(self, tp: TopicPartition) -> None:
        """Abandon a move: delete the ``-future`` log (if any) and resume cleaning."""
        future = self.logs.pop(tp, None)
        root = self.root_of.pop(tp, None)
        self._cleaner.resume(tp)
        if future is not None and root is not None:
            future.delete(rename_to=trash_path(root, tp))
            logger.info("Deleted future log for %s-%d in %s", tp[0], tp[1], root)

    def replace_current(self, tp: TopicPartition, config: LogConfig, now_ms: int) -> PartitionLog:
        """See ``LogManager.replace_current_with_future``; the caller adopts the returned log."""
        topic, partition = tp
        current, future = self._logs[tp], self.logs[tp]
        if future.log_end_offset != current.log_end_offset:
            raise LogError(f"Future log of {topic}-{partition} is at {future.log_end_offset}, "
                           f"the current log at {current.log_end_offset}")
        old_root, new_root = self._root_of[tp], self.root_of[tp]
        start, hw = current.log_start_offset, current.high_watermark
        future.close()
        current.retire()
        target = os.path.join(new_root, f"{topic}-{partition}")
        os.rename(future.dir, target)
        fsync_dir(new_root)
        trash = trash_path(old_root, tp)
        os.rename(current.dir, trash)
        fsync_dir(old_root)
        self._retired.append((now_ms + current.config.file_delete_delay_ms, current, trash))
        log = PartitionLog.open(target, topic, partition, config, now_ms=now_ms,
                                recovery_point=future.log_end_offset, log_start_offset=start, clean_shutdown=True,
                                high_watermark=hw)
        del self.logs[tp], self.root_of[tp]
        self._logs[tp] = log
        self._root_of[tp] = new_root
        self._cleaner.moved(tp, old_root, new_root)
        logger.info("The log of %s-%d moved from %s to %s", topic, partition, old_root, new_root)
        return log

    def close_retired(self, now_ms: int, *, force: bool = False) -> None:
        """Close and remove the replaced logs whose delay has passed."""
        keep = []
        for due, log, trash in self._retired:
            if force or now_ms >= due:
                log.close_handlers()
                shutil.rmtree(trash, ignore_errors=True)
            else:
                keep.append((due, log, trash))
        self._retired = keep
