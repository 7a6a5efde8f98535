"""The broker's log directories: their names, which of them failed, and where a new log goes.

A log dir whose I/O failed is taken offline (Kafka's LogDirFailureChannel): nothing more is written
there until a restart. Running out of descriptors (EMFILE, ENFILE) is the process's failure, not the
disk's: ``LogDirs.fail`` leaves the dir online then. Closing the dir's logs is the ``LogManager``'s.
"""

from __future__ import annotations

import logging
import os
import re
import uuid
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from pybroker.common.open_files import is_descriptor_exhaustion

from pybroker.common.topic import TopicPartition
from pybroker.log.errors import LogDirNotFoundError, LogStorageError
from pybroker.log.log import PartitionLog

__all__ = ["DELETE_DIR_SUFFIX", "FUTURE_DIR_SUFFIX", "STRAY_DIR_SUFFIX", "LogDirStatus", "LogDirs", "TopicPartition",
           "parse_partition_dir_name", "live_logs", "suffixed_dir_name"]

logger = logging.getLogger("pybroker.log")

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
_SKIPPED_DIR_SUFFIXES = (DELETE_DIR_SUFFIX, STRAY_DIR_SUFFIX, FUTURE_DIR_SUFFIX)
_PARTITION_DIR = re.compile(r"([a-zA-Z0-9._-]+)-(\d+)")
_MAX_NAME = 255  # a file name's bytes on the file systems Kafka runs on


def suffixed_dir_name(tp: TopicPartition, suffix: str) -> str:
    """``<topic>-<partition>.<uuid>`` + ``suffix``, the topic cut short so that the name stays within 255
    characters (Kafka's logDirNameWithSuffixCappedLength: a 249-character topic would not fit otherwise)."""
    tail = f"-{tp[1]}.{uuid.uuid4().hex}{suffix}"
    return tp[0][: _MAX_NAME - len(tail)] + tail


def parse_partition_dir_name(name: str) -> TopicPartition | None:
    """(topic, partition) of ``<topic>-<partition>`` (split at the LAST '-'), else None."""
    if name.endswith(_SKIPPED_DIR_SUFFIXES):
        return None
    match = _PARTITION_DIR.fullmatch(name)
    if match is None or match.group(1) in (".", ".."):
        return None
    return TopicPartition(match.group(1), int(match.group(2)))


def live_logs(members: set[TopicPartition],
              logs: Mapping[TopicPartition, PartitionLog]) -> list[tuple[TopicPartition, PartitionLog]]:
    """The logs of ``members`` that are still on this broker (the others leave the set): what the
    periodic flusher and cleaner look at, so that an idle broker does no per-partition work."""
    found = []
    for tp in sorted(members):
        log = logs.get(tp)
        if log is None or log.closed:
            members.discard(tp)
        else:
            found.append((tp, log))
    return found


@dataclass(slots=True)
class LogDirStatus:
    """One log dir as DescribeLogDirs reports it: offline, or its logs (current and future) and volume."""

    path: str
    online: bool
    logs: list[tuple[PartitionLog, bool]] = field(default_factory=list)  # (log, is_future)
    total_bytes: int = -1
    usable_bytes: int = -1


class LogDirs:
    """The configured log dirs (absolute paths, in order) and the ones that went offline."""

    def __init__(self, paths: list[str]) -> None:
        if not paths:
            raise ValueError("at least one log directory is required")
        self.paths = [os.path.abspath(d) for d in paths]
        self.offline: set[str] = set()

    @property
    def online(self) -> list[str]:
        return [root for root in self.paths if root not in self.offline]

    def root_of_path(self, path: str) -> str | None:
        """The log dir holding ``path`` (a file or directory under it), None if none does."""
        path = os.path.abspath(path)
        return next((root for root in self.paths if path == root or path.startswith(root + os.sep)), None)

    def check(self, path: str) -> str:
        """The configured log dir ``path`` names (absolute); LogDirNotFoundError if none, LogStorageError
        if it is offline (Kafka's isLogDirOnline)."""
        root = os.path.abspath(path)
        if root not in self.paths:
            raise LogDirNotFoundError(f"Log dir {root} is not found in the config.")
        if root in self.offline:
            raise LogStorageError(f"Log dir {root} is offline")
        return root

    def choose(self, roots_in_use: Iterable[str]) -> str:
        """The online log dir holding the fewest of ``roots_in_use`` (one per log, current and future;
        first one on a tie), as Kafka's nextLogDirs does."""
        online = self.online
        if not online:
            raise LogStorageError(f"Can not create a log: every log dir is offline ({', '.join(self.paths)})")
        counts = {root: 0 for root in online}
        for root in roots_in_use:
            if root in counts:
                counts[root] += 1
        return min(online, key=lambda r: counts[r])

    def fail(self, root: str, cause: BaseException) -> bool:
        """Mark ``root`` offline after an I/O error; False when it already was, is not a log dir, or the
        process (not the disk) is out of descriptors."""
        if root in self.offline or root not in self.paths:
            return False
        if is_descriptor_exhaustion(cause):  # the process is out of descriptors: the disk is not at fault
            logger.error("Out of open files (RLIMIT_NOFILE), log dir %s stays online: %s", root, cause)
            return False
        self.offline.add(root)
        logger.error("Stopping serving logs in dir %s: %s", root, cause)
        return True

    def status(self, root: str, logs: list[tuple[PartitionLog, bool]]) -> LogDirStatus:
        """``root`` as DescribeLogDirs reports it, with the volume's total and usable bytes (``statvfs``,
        as Java's FileStore: usable is what an unprivileged writer may still use); OSError if unreadable."""
        if root in self.offline:
            return LogDirStatus(root, False)
        vfs = os.statvfs(root)
        return LogDirStatus(root, True, logs, vfs.f_blocks * vfs.f_frsize, vfs.f_bavail * vfs.f_frsize)

