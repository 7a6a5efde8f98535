"""``LogDirLoader``: the partition logs found in the log dirs at start-up (Kafka's ``LogManager.loadLogs``),
and the stray ones among them moved aside (its ``isStray`` check) before the duplicate check.

Each ``<topic>-<partition>`` directory of each log dir is opened, with its recovery after an unclean stop
(``loader.py``, Kafka's ``LogLoader``), from the offsets of the dir's checkpoint files; a ``-delete``
directory is a deletion that did not finish and is removed; a ``-stray`` one is kept for the operator and
not loaded; a ``-future`` one is handed to ``future_logs.py`` once every current log is known. The logs
found join the ``LogManager``'s registry, which keeps them from then on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from typing import Callable

from pybroker.common.topic import TopicPartition

from pybroker.log.checkpoint import fsync_dir
from pybroker.log.cleaner_manager import CleanerManager
from pybroker.log.config import LogConfig
from pybroker.log.dir_checkpoints import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    read_checkpoint,
)
from pybroker.log.errors import CorruptLogError, LogError
from pybroker.log.future_logs import FutureLogs
from pybroker.log.log import PartitionLog
from pybroker.log.log_dirs import (
    DELETE_DIR_SUFFIX,
    FUTURE_DIR_SUFFIX,
    STRAY_DIR_SUFFIX,
    LogDirs,
    parse_partition_dir_name,
)
from pybroker.log.stray_logs import ReplicasOf, stray_path, stray_reason

__all__ = ["LogDirLoader"]

logger = logging.getLogger("pybroker.log")

class LogDirLoader:
    """Loads the logs of ``dirs`` into ``logs`` (the manager's registry, whose dirs ``root_of`` names); each
    one registered is handed to ``adopt``."""

    def __init__(self, dirs: LogDirs, logs: dict[TopicPartition, PartitionLog], root_of: dict[TopicPartition, str],
                 cleaner: CleanerManager, futures: FutureLogs, config_for: Callable[[str], LogConfig],
                 adopt: Callable[[TopicPartition], None]) -> None:
        self._dirs = dirs
        self._logs = logs
        self._root_of = root_of
        self._cleaner = cleaner
        self._futures = futures
        self._config_for = config_for
        self._adopt = adopt
        self._second_copies: list[tuple[str, PartitionLog]] = []  # (root, log): see load's strays_checked

    def load(self, now_ms: int, *, strays_checked: bool) -> None:
        """See ``LogManager.startup``."""
        futures: list[tuple[str, str, TopicPartition, bool]] = []  # (root, path, partition, clean shutdown)
        for root in self._dirs.paths:
            os.makedirs(root, exist_ok=True)
            clean_file = os.path.join(root, CLEAN_SHUTDOWN_FILE)
            clean = os.path.exists(clean_file)
            recovery = read_checkpoint(os.path.join(root, RECOVERY_POINT_CHECKPOINT))
            starts = read_checkpoint(os.path.join(root, LOG_START_OFFSET_CHECKPOINT))
            hws = read_checkpoint(os.path.join(root, HIGH_WATERMARK_CHECKPOINT))
            self._cleaner.load(root)
            if os.listdir(root):
                logger.info("Loading logs from %s (%s shutdown)", root, "clean" if clean else "unclean")
            else:
                logger.info("Log directory %s is new and empty", root)
            for name in sorted(os.listdir(root)):
                path = os.path.join(root, name)
                if not os.path.isdir(path):
                    continue
                if name.endswith(DELETE_DIR_SUFFIX):
                    logger.info("Removing %s, a log deletion that did not finish", path)
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                if name.endswith(STRAY_DIR_SUFFIX):
                    logger.warning("Found stray log %s: not loaded, kept for the operator to inspect and remove",
                                   path)
                    continue
                if name.endswith(FUTURE_DIR_SUFFIX):
                    future_of = parse_partition_dir_name(name.rsplit(".", 1)[0])
                    if future_of is not None:
                        futures.append((root, path, future_of, clean))
                    continue
                tp = parse_partition_dir_name(name)
                if tp is None:
                    continue
                if tp in self._logs and not strays_checked:
                    raise _duplicate(tp, path, self._logs[tp].dir)
                loaded = PartitionLog.open(
                    path, tp[0], tp[1], self._config_for(tp[0]), now_ms=now_ms,
                    recovery_point=recovery.get(tp, 0), log_start_offset=starts.get(tp, 0),
                    clean_shutdown=clean, high_watermark=hws.get(tp))
                with contextlib.suppress(CorruptLogError):  # raised again where the topic id is used
                    loaded.read_topic_id()  # the stray check and each LeaderAndIsr's compare it: read before serving
                if tp in self._logs:
                    self._second_copies.append((root, loaded))
                    continue
                self._logs[tp], self._root_of[tp] = loaded, root
                self._adopt(tp)
            if clean:
                os.unlink(clean_file)
        for root, path, tp, clean in futures:
            self._futures.load(root, path, tp, self._config_for(tp[0]), clean=clean, now_ms=now_ms)

    def move_strays(self, replicas_of: ReplicasOf, broker_id: int,
                    detach: Callable[[TopicPartition], tuple[str, str] | None]) -> list[str]:
        """See ``LogManager.move_strays``; ``detach`` takes a stray current log out of the registry and renames
        it aside (its log dir and new directory, None if unknown)."""
        second_copies, self._second_copies = self._second_copies, []
        reasons = {log.dir: stray_reason(log.dir, log.topic_id, log.partition, replicas_of, broker_id)
                   for log in [*self._logs.values(), *(log for _, log in second_copies)]}
        kept = {tp: log.dir for tp, log in self._logs.items() if reasons[log.dir] is None}
        for _, log in second_copies:  # a second log of a partition is refused unless it or the first one is stray
            tp = TopicPartition(log.topic, log.partition)
            if reasons[log.dir] is None and tp in kept:
                raise _duplicate(tp, log.dir, kept[tp])
            if reasons[log.dir] is None:
                kept[tp] = log.dir
        moved: dict[str, list[str]] = {}
        for tp, log in list(self._logs.items()):
            reason = reasons[log.dir]
            if reason is None:
                continue
            logger.info("%s", reason)
            future, future_root = self._futures.logs.pop(tp, None), self._futures.root_of.pop(tp, None)
            if future is not None and future_root is not None:
                moved.setdefault(future_root, []).append(future.detach(rename_to=stray_path(future_root, tp)))
            found = log.dir
            detached = detach(tp)
            if detached is not None:
                moved.setdefault(detached[0], []).append(detached[1])
                logger.warning("Log in %s marked stray and renamed to %s", found, detached[1])
        for root, log in second_copies:
            tp, found = TopicPartition(log.topic, log.partition), log.dir
            if reasons[found] is None:  # the first log of its partition was stray: this one is served
                self._logs[tp], self._root_of[tp] = log, root
                self._adopt(tp)
                continue
            logger.info("%s", reasons[found])
            moved.setdefault(root, []).append(log.detach(rename_to=stray_path(root, tp)))
            logger.warning("Log in %s marked stray and renamed to %s", found, moved[root][-1])
        for root in moved:
            fsync_dir(root)
        return [path for paths in moved.values() for path in paths]


def _duplicate(tp: TopicPartition, path: str, other: str) -> LogError:
    return LogError(f"Duplicate log directories for {tp[0]}-{tp[1]}: {path} and {other}")
