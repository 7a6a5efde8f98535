"""``LogManager``: every partition log on the broker's log directories.

Layout of each log directory root (Kafka ``LogManager``)::

    <log.dir>/
      recovery-point-offset-checkpoint   topic partition offset (flushed up to here)
      log-start-offset-checkpoint        topic partition offset (only logs whose start moved)
      replication-offset-checkpoint      topic partition high-watermark
      cleaner-offset-checkpoint          topic partition first-dirty-offset (compacted logs, cleaner.py)
      .kafka_cleanshutdown               present only between a clean shutdown and the next start
      <topic>-<partition>/               one PartitionLog each
      <topic>-<partition>.<uuid>-delete  a deletion in progress (removed at startup)
      <topic>-<partition>.<uuid>-future  a replica moving here from another log dir (AlterReplicaLogDirs)

Anything else in the root (``meta.properties``, a metadata store, ``*-stray`` directories) is left
alone. A ``-future`` log is created by ``create_future_log`` and copied into by the replication
layer (``replication/log_dir_mover.py``); ``replace_current_with_future`` swaps it in, as Kafka's
LogManager.replaceCurrentWithFutureLog does. A ``-future`` directory found at startup is loaded as the
partition's future log, so the move resumes where it stopped once the partition is served again (as
Kafka's); one whose partition has no current log elsewhere is removed.

A log dir whose I/O failed is taken offline (``fail_dir``, Kafka's LogDirFailureChannel): its logs
are closed without a flush and dropped, so every later use of its partitions answers
KAFKA_STORAGE_ERROR, and nothing more is written there until a restart. Running out of descriptors
(EMFILE, ENFILE) is the process's failure, not the disk's: that operation fails, the dir stays online.
The manager owns no timer: the server calls ``flush_dirty_async``,
``run_retention`` and ``checkpoint_async`` periodically with the current time, and runs the log
cleaner as ``plan_cleaning`` (loop) -> ``CleaningJob.run`` (worker thread) ->
``finish_cleaning`` (loop); see ``cleaner.py``.

Once ``attach_executor`` is called (by the broker, on its loop) every flush and checkpoint write
fsyncs on the I/O executor (``pybroker.common.io_executor``): what to write is read on the loop,
the fsyncs run on a ``pybroker-io`` thread, the recovery point moves on the loop afterwards. A log
reaching flush.messages asks for a flush (``PartitionLog.flush_requester``); one flush per log
runs at a time, and ``wait_flushed`` lets a produce answer wait for the offsets it appended, as
Kafka's synchronous flush in the request thread does. The synchronous ``flush_dirty`` and
``checkpoint`` remain for start-up, shutdown and callers without a loop.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Collection, Iterable, Mapping

from pybroker.common.io_executor import IoExecutor
from pybroker.common.open_files import is_descriptor_exhaustion

from pybroker.log.checkpoint import OffsetCheckpointFile, fsync_dir
from pybroker.log.cleaner import CleaningJob, assess_log, discard_outputs, install_cleaned, map_capacity
from pybroker.log.config import LONG_MAX, LogConfig
from pybroker.common.topic import topic_name_error
from pybroker.log.errors import (CorruptLogError, IllegalTopicNameError, LogDirNotFoundError, LogError,
                                 LogStorageError, SliceUnavailableError)
from pybroker.log.log import PartitionLog

__all__ = ["LogManager", "LogDirStatus", "parse_partition_dir_name"]

logger = logging.getLogger("pybroker.log")

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
CHECKPOINT_FILES = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT)
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
DEFAULT_DEDUPE_BUFFER_SIZE = 134217728
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
MAX_CONCURRENT_FLUSHES = 32
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
_SKIPPED_DIR_SUFFIXES = (DELETE_DIR_SUFFIX, "-stray", FUTURE_DIR_SUFFIX)
_PARTITION_DIR = re.compile(r"([a-zA-Z0-9._-]+)-(\d+)")

TopicPartition = tuple[str, int]


def parse_partition_dir_name(name: str) -> TopicPartition | None:
    """(topic, partition) of ``<topic>-<partition>`` (split at the LAST '-'), else None."""
    if name.endswith(_SKIPPED_DIR_SUFFIXES):
        return None
    match = _PARTITION_DIR.fullmatch(name)
    if match is None or match.group(1) in (".", ".."):
        return None
    return match.group(1), int(match.group(2))


def _read_checkpoint(path: str) -> dict[TopicPartition, int]:
    """A checkpoint, or {} when it is corrupt (then recovery starts from offset 0, as Kafka)."""
    try:
        return OffsetCheckpointFile(path).read()
    except CorruptLogError as exc:
        logger.warning("Ignoring corrupt checkpoint %s: %s", path, exc)
        return {}


@dataclass(slots=True)
class LogDirStatus:
    """One log dir as DescribeLogDirs reports it: offline, or its logs (current and future) and volume."""

    path: str
    online: bool
    logs: list[tuple[PartitionLog, bool]] = field(default_factory=list)  # (log, is_future)
    total_bytes: int = -1
    usable_bytes: int = -1


class LogManager:
    """Opens, creates, deletes, flushes, retains and checkpoints the partition logs."""

    def __init__(self, log_dirs: list[str], default_config: LogConfig, *, recovery_threads: int = 1) -> None:
        """``recovery_threads``: num.recovery.threads.per.data.dir, the threads per log dir of a shutdown."""
        if not log_dirs:
            raise ValueError("at least one log directory is required")
        self._log_dirs = [os.path.abspath(d) for d in log_dirs]
        self._recovery_threads = recovery_threads
        self._default_config = default_config
        self._topic_configs: dict[str, LogConfig] = {}
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._root_of: dict[TopicPartition, str] = {}
        self._futures: dict[TopicPartition, PartitionLog] = {}  # replicas moving to another log dir
        self._future_root_of: dict[TopicPartition, str] = {}
        self._offline: set[str] = set()  # log dirs whose I/O failed
        self._offline_logs: set[TopicPartition] = set()  # partitions whose log was in one of them
        self._retired: list[tuple[int, PartitionLog, str]] = []  # (close at, replaced log, its -delete dir)
        self._now_ms = 0
        self._cleaner_offsets: dict[TopicPartition, int] = {}  # first dirty offset per compacted log
        self._tombstone_horizons: dict[TopicPartition, int] = {}  # earliest horizon of kept tombstones
        self._cleaning: set[TopicPartition] = set()  # a job is planned or running
        self._uncleanable: set[TopicPartition] = set()  # a pass failed; skipped until restart/deletion
        self._cleaning_paused: set[TopicPartition] = set()  # moving to another log dir
        #: Called with a log dir's path and the partitions whose logs it held when it goes offline (the
        #: replica manager's handleLogDirFailure).
        self.dir_failure_listeners: list[Callable[[str, list[TopicPartition]], None]] = []
        self._io: IoExecutor | None = None
        self._flush_locks: dict[TopicPartition, asyncio.Lock] = {}  # one flush per log at a time
        # Each flush holds descriptors of its own (a few per segment) until its fsyncs are done: with every
        # log due at once (a broker-wide flush.ms), a bounded number of them run at a time.
        self._flush_slots = asyncio.Semaphore(MAX_CONCURRENT_FLUSHES)
        self._flush_tasks: dict[TopicPartition, asyncio.Task[None]] = {}  # flush.messages flushes
        self._flush_waiters: dict[TopicPartition, list[tuple[int, asyncio.Future[bool]]]] = {}
        # What the periodic passes look at (``_watch``), so that an idle broker does no per-partition work:
        self._timed_flushes: set[TopicPartition] = set()  # flush.ms is finite
        self._rolled: set[TopicPartition] = set()  # a segment below the recovery point's awaits its flush
        self._compacted: set[TopicPartition] = set()  # cleanup.policy has compact
        self._checkpoint_lock = asyncio.Lock()  # an older snapshot never overwrites a newer one
        self._checkpoint_passes: dict[str, int] = {}  # per file, the checkpoint passes begun so far

    @property
    def log_dirs(self) -> list[str]:
        return list(self._log_dirs)

    @property
    def default_config(self) -> LogConfig:
        return self._default_config

    def config_for(self, topic: str) -> LogConfig:
        """The topic's config (set by update_config / get_or_create_log) or the default."""
        return self._topic_configs.get(topic, self._default_config)

    # -- startup and shutdown -----------------------------------------------------------------

    def startup(self, now_ms: int, topic_configs: Mapping[str, LogConfig] | None = None) -> None:
        """Load every partition directory of every log dir, recovering after an unclean stop."""
        self._now_ms = now_ms
        self._topic_configs.update(topic_configs or {})
        futures: list[tuple[str, str, TopicPartition, bool]] = []  # (root, path, partition, clean shutdown)
        for root in self._log_dirs:
            os.makedirs(root, exist_ok=True)
            clean_file = os.path.join(root, CLEAN_SHUTDOWN_FILE)
            clean = os.path.exists(clean_file)
            recovery = _read_checkpoint(os.path.join(root, RECOVERY_POINT_CHECKPOINT))
            starts = _read_checkpoint(os.path.join(root, LOG_START_OFFSET_CHECKPOINT))
            hws = _read_checkpoint(os.path.join(root, HIGH_WATERMARK_CHECKPOINT))
            self._cleaner_offsets.update(_read_checkpoint(os.path.join(root, CLEANER_OFFSET_CHECKPOINT)))
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
                if name.endswith(FUTURE_DIR_SUFFIX):
                    future_of = parse_partition_dir_name(name.rsplit(".", 1)[0])
                    if future_of is not None:
                        futures.append((root, path, future_of, clean))
                    continue
                tp = parse_partition_dir_name(name)
                if tp is None:
                    continue
                if tp in self._logs:
                    raise LogError(f"Duplicate log directories for {tp[0]}-{tp[1]}: {path} and "
                                   f"{self._logs[tp].dir}")
                self._logs[tp] = PartitionLog.open(
                    path, tp[0], tp[1], self.config_for(tp[0]), now_ms=now_ms,
                    recovery_point=recovery.get(tp, 0), log_start_offset=starts.get(tp, 0),
                    clean_shutdown=clean, high_watermark=hws.get(tp))
                self._root_of[tp] = root
                self._adopt(tp)
            if clean:
                os.unlink(clean_file)
        for root, path, tp, clean in futures:
            self._load_future(root, path, tp, clean, now_ms)

    def _in_threads(self, work: Callable[[PartitionLog], None], logs: list[PartitionLog]) -> None:
        """``work`` on every log, ``recovery_threads`` threads per log dir; a storage error is reported here,
        on the calling thread (the listeners touch the event loop's state), and the first one raised."""
        listeners = [(log, log.storage_error_listener) for log in logs]
        for log in logs:
            log.storage_error_listener = None
        try:
            with ThreadPoolExecutor(self._recovery_threads * len(self._log_dirs), "pybroker-shutdown") as threads:
                outcomes = list(threads.map(lambda log: _outcome(work, log), logs))
        finally:
            for log, listener in listeners:
                log.storage_error_listener = listener
        failures = [(log, error) for log, error in zip(logs, outcomes) if error is not None]
        for log, error in failures:
            if isinstance(error, LogStorageError):
                self.fail_dir_of(log, error)
        if failures:
            raise failures[0][1]

    def _load_future(self, root: str, path: str, tp: TopicPartition, clean: bool, now_ms: int) -> None:
        """A ``-future`` log found at startup: kept to resume its move, unless it cannot be one."""
        if tp not in self._logs or tp in self._futures or self._root_of[tp] == root:
            logger.info("Removing %s, a log move whose partition has no other current log", path)
            shutil.rmtree(path, ignore_errors=True)
            return
        future = PartitionLog.open(path, tp[0], tp[1], self.config_for(tp[0]), now_ms=now_ms, clean_shutdown=clean)
        future.storage_error_listener = self.fail_dir_of
        self._futures[tp] = future
        self._future_root_of[tp] = root
        self._cleaning_paused.add(tp)
        logger.info("Loaded future log of %s-%d in %s (end %d): its move resumes", tp[0], tp[1], root,
                    future.log_end_offset)

    def shutdown(self) -> None:
        """Flush everything, write the checkpoints, close the logs and mark the shutdown clean.

        Logs are flushed and closed by ``recovery_threads`` threads per log dir, as Kafka's shutdown does:
        each close fsyncs a producer snapshot, and concurrent fsyncs share the file system's journal
        commits. Each log is used by one thread at a time, and the event loop is held meanwhile."""
        self._in_threads(lambda log: log.flush(), list(self._logs.values()))
        self.checkpoint()
        self._in_threads(lambda log: log.close(), [*self._logs.values(), *self._futures.values()])
        self._close_retired(self._now_ms, force=True)
        for root in self.online_dirs:
            with open(os.path.join(root, CLEAN_SHUTDOWN_FILE), "w", encoding="utf-8") as f:
                f.flush()
                os.fsync(f.fileno())
            fsync_dir(root)
        self._logs.clear()
        self._root_of.clear()
        self._futures.clear()
        self._future_root_of.clear()

    # -- lookup and lifecycle -----------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def log_dir_of(self, topic: str, partition: int) -> str | None:
        """The log dir root holding the partition."""
        return self._root_of.get((topic, partition))

    @property
    def online_dirs(self) -> list[str]:
        return [root for root in self._log_dirs if root not in self._offline]

    def _choose_root(self) -> str:
        """The online log dir with the fewest partitions, current and future (first one on a tie),
        as Kafka's nextLogDirs does."""
        online = self.online_dirs
        if not online:
            raise LogStorageError(f"Can not create a log: every log dir is offline ({', '.join(self._log_dirs)})")
        counts = {root: 0 for root in online}
        for root in [*self._root_of.values(), *self._future_root_of.values()]:
            if root in counts:
                counts[root] += 1
        return min(online, key=lambda r: counts[r])

    def describe_dirs(self) -> list[LogDirStatus]:
        """Every configured log dir in order, with its logs and its volume's total and usable bytes
        (``statvfs``, as Java's FileStore: usable is what an unprivileged writer may still use)."""
        statuses = []
        for root in self._log_dirs:
            status = LogDirStatus(root, root not in self._offline)
            if status.online:
                try:
                    vfs = os.statvfs(root)
                except OSError as exc:
                    self.fail_dir(root, exc)
                    statuses.append(LogDirStatus(root, False))
                    continue
                status.total_bytes = vfs.f_blocks * vfs.f_frsize
                status.usable_bytes = vfs.f_bavail * vfs.f_frsize
                status.logs = [(log, False) for tp, log in self._logs.items() if self._root_of[tp] == root]
                status.logs += [(log, True) for tp, log in self._futures.items() if self._future_root_of[tp] == root]
            statuses.append(status)
        return statuses

    # -- replicas moving between log dirs (AlterReplicaLogDirs) --------------------------------

    def future_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._futures.get((topic, partition))

    def check_dir(self, path: str) -> str:
        """The configured log dir ``path`` names (absolute); LogDirNotFoundError if none, LogStorageError
        if it is offline (Kafka's isLogDirOnline)."""
        root = os.path.abspath(path)
        if root not in self._log_dirs:
            raise LogDirNotFoundError(f"Log dir {root} is not found in the config.")
        if root in self._offline:
            raise LogStorageError(f"Log dir {root} is offline")
        return root

    def create_future_log(self, topic: str, partition: int, path: str) -> PartitionLog | None:
        """Start moving the partition's replica to log dir ``path``: a new empty ``-future`` log there,
        or the one already there. None when the replica already lives in ``path`` (a move elsewhere is
        dropped). A future log in another dir is dropped and replaced, as Kafka does."""
        root = self.check_dir(path)
        tp = (topic, partition)
        if tp not in self._logs:
            raise LogError(f"No log for {topic}-{partition} on this broker")
        if self._future_root_of.get(tp) not in (None, root) or self._root_of[tp] == root:
            self.drop_future_log(topic, partition)
        if self._root_of[tp] == root:
            return None
        if tp in self._futures:
            return self._futures[tp]
        if self._offline:
            raise LogStorageError(f"Can not create a future log for {topic}-{partition} while log dirs "
                                  f"{', '.join(sorted(self._offline))} are offline")
        path = os.path.join(root, f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}")
        future = PartitionLog.open(path, topic, partition, self.config_for(topic), now_ms=self._now_ms,
                                   clean_shutdown=True)
        future.storage_error_listener = self.fail_dir_of
        topic_id = self._logs[tp].topic_id
        if topic_id is not None:
            future.assign_topic_id(topic_id)
        fsync_dir(root)
        self._futures[tp] = future
        self._future_root_of[tp] = root
        self._cleaning_paused.add(tp)
        logger.info("Created future log for %s-%d in %s", topic, partition, root)
        return future

    def drop_future_log(self, topic: str, partition: int) -> None:
        """Abandon a move: delete the ``-future`` log (if any) and resume cleaning."""
        tp = (topic, partition)
        future = self._futures.pop(tp, None)
        root = self._future_root_of.pop(tp, None)
        self._cleaning_paused.discard(tp)
        if future is not None and root is not None:
            future.delete(rename_to=os.path.join(root, f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"))
            logger.info("Deleted future log for %s-%d in %s", topic, partition, root)

    def replace_current_with_future(self, topic: str, partition: int) -> PartitionLog:
        """Swap in the caught-up future log (its LEO equals the current one's; call on the loop with no
        await in between, which is the partition lock here): the current directory is renamed
        ``-delete`` and removed after file.delete.delay.ms (fetches may still read it), the future one renamed ``<topic>-<partition>``, and the log reopened
        there with the current log's start offset and high watermark. Returns the new current log."""
        tp = (topic, partition)
        current, future = self._logs[tp], self._futures[tp]
        if future.log_end_offset != current.log_end_offset:
            raise LogError(f"Future log of {topic}-{partition} is at {future.log_end_offset}, "
                           f"the current log at {current.log_end_offset}")
        old_root, new_root = self._root_of[tp], self._future_root_of[tp]
        start, hw = current.log_start_offset, current.high_watermark
        future.close()
        current.retire()
        target = os.path.join(new_root, f"{topic}-{partition}")
        os.rename(future.dir, target)
        fsync_dir(new_root)
        trash = os.path.join(old_root, f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        os.rename(current.dir, trash)
        fsync_dir(old_root)
        self._retired.append((self._now_ms + current.config.file_delete_delay_ms, current, trash))
        log = PartitionLog.open(target, topic, partition, self.config_for(topic), now_ms=self._now_ms,
                                recovery_point=future.log_end_offset, log_start_offset=start, clean_shutdown=True,
                                high_watermark=hw)
        del self._futures[tp], self._future_root_of[tp]
        self._cleaning_paused.discard(tp)
        self._logs[tp] = log
        self._root_of[tp] = new_root
        if self._cleaner_offsets.get(tp) is not None:
            self._write_cleaner_checkpoint(old_root)
            self._write_cleaner_checkpoint(new_root)
        self._adopt(tp)
        logger.info("The log of %s-%d moved from %s to %s", topic, partition, old_root, new_root)
        return log

    def _close_retired(self, now_ms: int, *, force: bool = False) -> None:
        """Close and remove the replaced logs whose delay has passed."""
        keep = []
        for due, log, trash in self._retired:
            if force or now_ms >= due:
                log.close_handlers()
                shutil.rmtree(trash, ignore_errors=True)
            else:
                keep.append((due, log, trash))
        self._retired = keep

    # -- log dir failure ------------------------------------------------------------------------

    def root_of_path(self, path: str) -> str | None:
        """The log dir holding ``path`` (a file or directory under it), None if none does."""
        path = os.path.abspath(path)
        return next((root for root in self._log_dirs if path == root or path.startswith(root + os.sep)), None)

    def fail_dir(self, root: str, cause: BaseException) -> bool:
        """Take log dir ``root`` offline after an I/O error (Kafka's LogManager.handleLogDirFailure):
        its current and future logs are closed without a flush and forgotten. True if it was online."""
        if root in self._offline or root not in self._log_dirs:
            return False
        if is_descriptor_exhaustion(cause):  # the process is out of descriptors: the disk is not at fault
            logger.error("Out of open files (RLIMIT_NOFILE), log dir %s stays online: %s", root, cause)
            return False
        self._offline.add(root)
        logger.error("Stopping serving logs in dir %s: %s", root, cause)
        failed = [tp for tp, r in self._root_of.items() if r == root]
        for tps, roots, logs in ((list(self._root_of), self._root_of, self._logs),
                                 (list(self._future_root_of), self._future_root_of, self._futures)):
            for tp in tps:
                if roots[tp] == root:
                    del roots[tp]
                    logs.pop(tp).close_handlers()
                    self._cleaning_paused.discard(tp)
                    if logs is self._logs:
                        self._offline_logs.add(tp)
        for listener in self.dir_failure_listeners:
            listener(root, failed)
        if not self.online_dirs:
            logger.error("Every log dir is offline: the broker can serve no partition")
        return True

    def is_offline(self, topic: str, partition: int) -> bool:
        """True when the partition's log was in a log dir that went offline."""
        return (topic, partition) in self._offline_logs

    def fail_dir_of(self, log: PartitionLog, cause: LogStorageError) -> None:
        """``fail_dir`` for the log dir holding ``log`` (its ``storage_error_listener``)."""
        root = self.root_of_path(log.dir)
        if root is not None and not isinstance(cause, SliceUnavailableError):
            self.fail_dir(root, cause)

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None,
                          topic_id: uuid.UUID | None = None, *, now_ms: int | None = None) -> PartitionLog:
        """The existing log, or a new one in the least loaded log dir; records the topic id."""
        error = topic_name_error(topic)
        if error is not None or partition < 0:
            raise IllegalTopicNameError(error or f"Partition {partition} of {topic} is negative")
        tp = (topic, partition)
        if config is not None:
            self._topic_configs[topic] = config
        if tp in self._offline_logs:
            raise LogStorageError(f"The log dir of {topic}-{partition} is offline")
        log = self._logs.get(tp)
        if log is None:
            root = self._choose_root()
            path = os.path.join(root, f"{topic}-{partition}")
            fresh = not os.path.exists(path)
            log = PartitionLog.open(path, topic, partition, self.config_for(topic),
                                    now_ms=self._now_ms if now_ms is None else now_ms,
                                    clean_shutdown=fresh)
            fsync_dir(root)
            self._logs[tp] = log
            self._root_of[tp] = root
            self._adopt(tp)
            logger.info("Created log for %s-%d in %s", topic, partition, root)
        if topic_id is not None:
            current = log.topic_id
            if current is not None and current != topic_id:
                raise LogError(f"Topic id {topic_id} of {topic}-{partition} differs from the "
                               f"recorded id {current}")
            if current is None:
                log.assign_topic_id(topic_id)
        return log

    def delete_log(self, topic: str, partition: int) -> bool:
        """Rename the directory to ``<tp>.<uuid>-delete`` and remove it; False if unknown."""
        tp = (topic, partition)
        self.drop_future_log(topic, partition)
        self._offline_logs.discard(tp)
        log = self._logs.pop(tp, None)
        root = self._root_of.pop(tp, None)
        if log is None or root is None:
            return False
        target = os.path.join(root, f"{topic}-{partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        log.delete(rename_to=target)
        fsync_dir(root)
        if self._cleaner_offsets.pop(tp, None) is not None:
            self._write_cleaner_checkpoint(root)
        self._tombstone_horizons.pop(tp, None)
        self._uncleanable.discard(tp)
        self._flush_locks.pop(tp, None)
        logger.info("Deleted log for %s-%d", topic, partition)
        return True

    def update_config(self, topic: str, config: LogConfig) -> None:
        """New config for every partition of ``topic`` (and for ones created later)."""
        self._topic_configs[topic] = config
        for (t, _), log in self._logs.items():
            if t == topic:
                log.update_config(config)

    # -- flushing off the loop -----------------------------------------------------------------

    def attach_executor(self, io: IoExecutor) -> None:
        """From now on fsync on ``io``'s threads (call on the broker's running loop)."""
        self._io = io
        for tp in self._logs:
            self._adopt(tp)

    def _adopt(self, tp: TopicPartition) -> None:
        self._logs[tp].storage_error_listener = self.fail_dir_of
        self._logs[tp].schedule_listener = self._watch
        self._watch(self._logs[tp])
        if self._io is not None:
            self._logs[tp].flush_requester = self._request_flush

    def _watch(self, log: PartitionLog) -> None:
        """Whether the flusher and the cleaner have to look at ``log`` (after a roll, a config change, or when
        it is adopted); a log dropped since is forgotten when a pass meets it."""
        tp = (log.topic, log.partition)
        if self._logs.get(tp) is not log:
            return
        config = log.config
        for wanted, members in ((config.flush_ms < LONG_MAX, self._timed_flushes),
                                (config.compact_enabled, self._compacted),
                                (log.recovery_point < log.active_segment.base_offset, self._rolled)):
            if wanted:
                members.add(tp)
            elif members is not self._rolled:
                members.discard(tp)

    def _watched(self, members: set[TopicPartition]) -> list[tuple[TopicPartition, PartitionLog]]:
        """The logs of ``members`` that are still on this broker (the others leave the set)."""
        found = []
        for tp in sorted(members):
            log = self._logs.get(tp)
            if log is None or log.closed:
                members.discard(tp)
            else:
                found.append((tp, log))
        return found

    async def flush_log(self, log: PartitionLog, up_to: int | None = None, *, now_ms: int | None = None) -> None:
        """Flush ``log`` to ``up_to`` (default LEO) with the fsyncs on the I/O executor."""
        tp = (log.topic, log.partition)
        async with self._flush_locks.setdefault(tp, asyncio.Lock()), self._flush_slots:
            if log.closed:
                return
            job = log.begin_flush(up_to, now_ms=now_ms)
            if job.fds:
                if self._io is None:
                    job.run()
                else:
                    await self._io.run(job.run)
            try:
                log.finish_flush(job)
            finally:
                self._wake_flush_waiters(tp, log, job.error is None)

    def _request_flush(self, log: PartitionLog) -> None:
        """flush.messages reached: make sure a flush task for ``log`` runs (coalesced)."""
        tp = (log.topic, log.partition)
        task = self._flush_tasks.get(tp)
        if task is None or task.done():
            self._flush_tasks[tp] = asyncio.get_running_loop().create_task(
                self._flush_while_due(tp, log), name=f"flush-{tp[0]}-{tp[1]}")

    async def _flush_while_due(self, tp: TopicPartition, log: PartitionLog) -> None:
        try:
            while not log.closed and (log.unflushed_messages >= log.config.flush_messages
                                      or self._flush_waiters.get(tp)):
                await self.flush_log(log)
        except LogError as exc:
            logger.error("Flush of %s-%d failed: %s", tp[0], tp[1], exc)
        finally:
            self._wake_flush_waiters(tp, log, False, every=True)
            if self._flush_tasks.get(tp) is asyncio.current_task():
                del self._flush_tasks[tp]

    def _wake_flush_waiters(self, tp: TopicPartition, log: PartitionLog, ok: bool, *, every: bool = False) -> None:
        waiters = self._flush_waiters.get(tp)
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
            self._flush_waiters[tp] = left
        else:
            del self._flush_waiters[tp]

    @property
    def flushing(self) -> bool:
        """Whether a flush.messages flush is running: only then may a Produce answer have to wait for one."""
        return bool(self._flush_tasks)

    async def wait_flushed(self, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Wait until the flush.messages flushes running for ``partitions`` cover their current LEO;
        returns those whose flush failed (the caller answers KAFKA_STORAGE_ERROR for them)."""
        pending: list[tuple[TopicPartition, asyncio.Future[bool]]] = []
        for tp in set(partitions):
            log = self._logs.get(tp)
            task = self._flush_tasks.get(tp)
            if log is None or task is None or task.done() or log.recovery_point >= log.log_end_offset:
                continue
            future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            self._flush_waiters.setdefault(tp, []).append((log.log_end_offset, future))
            pending.append((tp, future))
        failed = set()
        for tp, future in pending:
            if not await future:
                failed.add(tp)
        return failed

    # -- periodic work ------------------------------------------------------------------------

    def _due_flushes(self, now_ms: int) -> list[tuple[PartitionLog, int | None]]:
        """Logs idle longer than flush.ms (to their end), and segments rolled since the last flush; only the
        logs with a finite flush.ms and those that rolled are looked at."""
        self._now_ms = now_ms
        due: dict[TopicPartition, tuple[PartitionLog, int | None]] = {}
        for tp, log in self._watched(self._timed_flushes):
            if now_ms - log.last_flush_ms >= log.config.flush_ms:
                due[tp] = (log, None)
        for tp, log in self._watched(self._rolled):
            self._rolled.discard(tp)  # back in once its flush is found to have fallen short
            if tp not in due and log.recovery_point < log.active_segment.base_offset:
                due[tp] = (log, log.active_segment.base_offset)
        return list(due.values())

    def flush_dirty(self, now_ms: int) -> int:
        """fsync logs idle longer than flush.ms, and segments rolled since the last flush."""
        due = self._due_flushes(now_ms)
        try:
            for log, up_to in due:
                log.flush(up_to, now_ms=now_ms)
        finally:
            self._rewatch(due)
        return len(due)

    def _rewatch(self, flushed: list[tuple[PartitionLog, int | None]]) -> None:
        """A rolled segment whose flush failed or was voided (a truncation meanwhile) is due again."""
        for log, _ in flushed:
            if not log.closed:
                self._watch(log)

    async def flush_dirty_async(self, now_ms: int) -> int:
        """``flush_dirty`` with the fsyncs on the I/O executor; a failing log is logged and skipped."""
        self._close_retired(now_ms)
        due = self._due_flushes(now_ms)
        outcomes = await asyncio.gather(*(self.flush_log(log, up_to, now_ms=now_ms) for log, up_to in due),
                                        return_exceptions=True)
        self._rewatch(due)
        for (log, _), outcome in zip(due, outcomes):
            if isinstance(outcome, Exception):
                logger.error("Flush of %s-%d failed: %s", log.topic, log.partition, outcome)
        return len(due)

    def run_retention(self, now_ms: int) -> int:
        """Apply retention to every log; returns the number of segments deleted."""
        self._now_ms = now_ms
        self._close_retired(now_ms)
        return sum(log.delete_old_segments(now_ms) for log in self._logs.values())

    # -- log cleaner --------------------------------------------------------------------------

    def plan_cleaning(self, now_ms: int, *, max_jobs: int = 1,
                      dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE) -> list[CleaningJob]:
        """Up to ``max_jobs`` jobs for the dirtiest compacted logs (loop thread).

        Each returned job must be handed back to ``finish_cleaning`` (after ``run``); until
        then its log is not planned again.
        """
        self._now_ms = now_ms
        candidates = []
        for tp, log in self._watched(self._compacted):
            if (not log.config.compact_enabled or tp in self._cleaning or tp in self._uncleanable
                    or tp in self._cleaning_paused):
                continue
            candidate = assess_log(log, self._cleaner_offsets.get(tp), now_ms, self._tombstone_horizons.get(tp))
            if candidate.should_clean:
                candidates.append(candidate)
        candidates.sort(key=lambda c: c.dirty_ratio, reverse=True)
        capacity = map_capacity(dedupe_buffer_size, max_jobs)
        jobs = [CleaningJob.plan(c, now_ms, capacity) for c in candidates[:max(0, max_jobs)]]
        for job in jobs:
            self._cleaning.add(job.topic_partition)
            logger.info("Beginning cleaning of log %s-%d (dirty section from %d, ratio %.2f, %d segment(s))",
                        job.log.topic, job.log.partition, job.first_dirty, job.dirty_ratio, len(job.refs))
        return jobs

    def finish_cleaning(self, job: CleaningJob, now_ms: int) -> bool:
        """Install a job's result (loop thread); False when it failed or went stale.

        On success the log's cleaner checkpoint moves to the end of the cleaned dirty section
        and ``cleaner-offset-checkpoint`` of its log dir is rewritten.
        """
        self._now_ms = now_ms
        tp = job.topic_partition
        self._cleaning.discard(tp)
        if job.error is not None and not job.stale:
            logger.error("Cleaning of %s-%d failed; it is skipped until restart: %s", tp[0], tp[1], job.error)
            self._uncleanable.add(tp)
        installed = False
        if self._logs.get(tp) is job.log:
            try:
                installed = install_cleaned(job, now_ms)
            except OSError as exc:
                logger.error("Swapping in cleaned segments of %s-%d failed; it is skipped until restart: %s",
                             tp[0], tp[1], exc)
                self._uncleanable.add(tp)
        if not installed:
            discard_outputs(job)
            logger.info("Discarded the cleaning result of %s-%d (%s)", tp[0], tp[1],
                        "failed" if job.error is not None else "its segments changed meanwhile")
            return False
        self._cleaner_offsets[tp] = job.end_offset
        if job.tombstone_horizon is None:
            self._tombstone_horizons.pop(tp, None)
        else:
            self._tombstone_horizons[tp] = job.tombstone_horizon
        root = self._root_of[tp]
        self._write_cleaner_checkpoint(root)
        logger.info("Cleaned log %s-%d (dirty section [%d, %d), ratio %.2f): %d records removed, "
                    "%d -> %d bytes in %d segment(s), %.3f s", tp[0], tp[1], job.first_dirty, job.end_offset,
                    job.dirty_ratio, job.records_removed, job.bytes_read, job.bytes_written, len(job.outputs),
                    job.elapsed_s)
        return True

    def cleaner_offset(self, topic: str, partition: int) -> int | None:
        """The log's cleaner checkpoint (first dirty offset), None before its first pass."""
        return self._cleaner_offsets.get((topic, partition))

    def _write_cleaner_checkpoint(self, root: str) -> None:
        if root in self._offline:
            return
        OffsetCheckpointFile(os.path.join(root, CLEANER_OFFSET_CHECKPOINT)).write(
            {tp: offset for tp, offset in self._cleaner_offsets.items() if self._root_of.get(tp) == root})

    def _checkpoint_contents(self, files: Collection[str]) -> list[tuple[str, dict[TopicPartition, int]]]:
        """The named checkpoints (of ``CHECKPOINT_FILES``) of every log dir, as (path, entries) read
        now: a recovery point is only ever advanced after its fsync."""
        contents = []
        for root in self.online_dirs:
            logs = {tp: log for tp, log in self._logs.items() if self._root_of.get(tp) == root}
            entries = {
                RECOVERY_POINT_CHECKPOINT: lambda: {tp: log.recovery_point for tp, log in logs.items()},
                LOG_START_OFFSET_CHECKPOINT: lambda: {tp: log.log_start_offset for tp, log in logs.items()
                                                      if log.log_start_offset > log.segments[0].base_offset},
                HIGH_WATERMARK_CHECKPOINT: lambda: {tp: log.high_watermark for tp, log in logs.items()},
            }
            contents += [(os.path.join(root, name), entries[name]()) for name in CHECKPOINT_FILES if name in files]
        return contents

    def checkpoint(self) -> None:
        """Write the recovery-point, log-start and high-watermark checkpoints of every log dir."""
        self._fail_dirs_of(_write_checkpoints(self._checkpoint_contents(CHECKPOINT_FILES)))

    def _fail_dirs_of(self, failures: list[tuple[str, OSError]]) -> None:
        for path, exc in failures:
            root = self.root_of_path(path)
            if root is not None:
                self.fail_dir(root, exc)

    async def checkpoint_async(self, files: Collection[str] = CHECKPOINT_FILES) -> None:
        """``checkpoint`` of the named files with the writes and fsyncs on the I/O executor, one pass at
        a time (Kafka writes each on its own schedule: see the broker's periodic tasks). A call that finds
        a pass of its files begun after it was made returns: that pass read the state this one would
        have, so callers queued together (leaders securing their logs, replica manager) share one."""
        asked = {name: self._checkpoint_passes.get(name, 0) for name in files}
        async with self._checkpoint_lock:
            if all(self._checkpoint_passes.get(name, 0) > count for name, count in asked.items()):
                return  # a pass that began after this call read the state this call would have written
            for name in files:
                self._checkpoint_passes[name] = self._checkpoint_passes.get(name, 0) + 1
            contents = self._checkpoint_contents(files)
            if self._io is None:
                failures = _write_checkpoints(contents)
            else:
                failures = await self._io.run(lambda: _write_checkpoints(contents))
            self._fail_dirs_of(failures)


def _outcome(work: Callable[[PartitionLog], None], log: PartitionLog) -> Exception | None:
    try:
        work(log)
    except Exception as exc:
        return exc
    return None


def _write_checkpoints(contents: list[tuple[str, dict[TopicPartition, int]]]) -> list[tuple[str, OSError]]:
    """Write each checkpoint; the (path, error) of those whose write failed (their log dir goes offline)."""
    failures = []
    for path, entries in contents:
        try:
            OffsetCheckpointFile(path).write(entries)
        except OSError as exc:
            failures.append((path, exc))
    return failures
