"""``LogManager``: every partition log on the broker's log directories.

Layout of each log directory root (Kafka ``LogManager``)::

    <log.dir>/
      recovery-point-offset-checkpoint   and the other checkpoint files: see dir_checkpoints.py
      .kafka_cleanshutdown               present only between a clean shutdown and the next start
      <topic>-<partition>/               one PartitionLog each
      <topic>-<partition>.<uuid>-delete  a deletion in progress (log_deletion.py; removed at startup)
      <topic>-<partition>.<uuid>-future  a replica moving here from another log dir (future_logs.py)
      <topic>-<partition>.<uuid>-stray   a log the metadata does not give this broker, moved aside at
                                         start-up and kept for the operator (stray_logs.py)

Anything else in the root (``meta.properties``, a metadata store) is left alone. This class keeps the
registry of current logs and their dirs and hands the rest to its parts: ``dir_loader.py`` (the logs
found at start-up, the stray ones moved aside), ``log_dirs.py`` (the dirs, which failed, where a new log
goes), ``future_logs.py`` (AlterReplicaLogDirs), ``log_deletion.py`` (deleted logs' directories),
``flush_scheduler.py`` (flushes off the loop and their waiters), ``cleaner_manager.py`` (the log
cleaner's planning and checkpoint) and ``dir_checkpoints.py`` (the checkpoint files).

A log dir whose I/O failed is taken offline (``fail_dir``, Kafka's LogDirFailureChannel): its logs
are closed without a flush and dropped, so every later use of its partitions answers
KAFKA_STORAGE_ERROR, and nothing more is written there until a restart.
The manager owns no timer: the server calls ``flush_dirty_async``,
``run_retention`` and ``checkpoint_async`` periodically with the current time, and runs the log
cleaner as ``plan_cleaning`` (loop) -> ``CleaningJob.run`` (worker thread) ->
``finish_cleaning`` (loop); see ``cleaner.py``. The synchronous ``flush_dirty`` and
``checkpoint`` remain for start-up, shutdown and callers without a loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Collection, Iterable, Mapping

from pybroker.common.io_executor import IoExecutor
from pybroker.common.topic import TopicPartition, topic_name_error

from pybroker.log.checkpoint import fsync_dir
from pybroker.log.cleaner import CleaningJob
from pybroker.log.cleaner_manager import DEFAULT_DEDUPE_BUFFER_SIZE, CleanerManager
from pybroker.log.config import LogConfig
from pybroker.log.dir_checkpoints import (
    CHECKPOINT_FILES,
    CLEAN_SHUTDOWN_FILE,
    CLEANER_OFFSET_CHECKPOINT,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CheckpointPasses,
    checkpoint_contents,
    write_checkpoints,
)
from pybroker.log.dir_loader import LogDirLoader
from pybroker.log.errors import (
    IllegalTopicNameError,
    InconsistentTopicIdError,
    LogError,
    LogStorageError,
    SliceUnavailableError,
)
from pybroker.log.flush_scheduler import MAX_CONCURRENT_FLUSHES, FlushScheduler
from pybroker.log.future_logs import FutureLogs
from pybroker.log.log import PartitionLog
from pybroker.log.log_deletion import DirRemovals, trash_path
from pybroker.log.log_dirs import LogDirs, LogDirStatus, parse_partition_dir_name
from pybroker.log.stray_logs import ReplicasOf, stray_path

__all__ = ["CHECKPOINT_FILES", "CLEANER_OFFSET_CHECKPOINT", "HIGH_WATERMARK_CHECKPOINT", "LOG_START_OFFSET_CHECKPOINT",
           "LogDirStatus", "LogManager", "MAX_CONCURRENT_FLUSHES", "RECOVERY_POINT_CHECKPOINT",
           "parse_partition_dir_name"]

logger = logging.getLogger("pybroker.log")


class LogManager:
    """Opens, creates, deletes, flushes, retains and checkpoints the partition logs."""

    def __init__(self, log_dirs: list[str], default_config: LogConfig, *, recovery_threads: int = 1) -> None:
        """``recovery_threads``: num.recovery.threads.per.data.dir, the threads per log dir of a shutdown."""
        self._dirs = LogDirs(log_dirs)
        self._recovery_threads = recovery_threads
        self._default_config = default_config
        self._topic_configs: dict[str, LogConfig] = {}
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._root_of: dict[TopicPartition, str] = {}
        self._offline_logs: set[TopicPartition] = set()  # partitions whose log was in a dir that went offline
        self._now_ms = 0
        self._cleaner = CleanerManager(self._logs, self._root_of, lambda root: root not in self._dirs.offline)
        self._futures = FutureLogs(self._logs, self._root_of, self._dirs, self._cleaner, self.fail_dir_of)
        self._flusher = FlushScheduler(self._logs)
        self._checkpoints = CheckpointPasses()
        self._loader = LogDirLoader(self._dirs, self._logs, self._root_of, self._cleaner, self._futures,
                                    self.config_for, self._adopt)
        self._creating: dict[TopicPartition, str] = {}  # logs `create_log` is making, and their log dirs
        self._creation_slots = asyncio.Semaphore(1)  # see attach_executor
        self._removals = DirRemovals()  # deleted logs' files being removed, see delete_logs
        #: Called with a log dir's path and the partitions whose logs it held when it goes offline (the
        #: replica manager's handleLogDirFailure).
        self.dir_failure_listeners: list[Callable[[str, list[TopicPartition]], None]] = []

    @property
    def log_dirs(self) -> list[str]:
        return list(self._dirs.paths)

    @property
    def default_config(self) -> LogConfig:
        return self._default_config

    def config_for(self, topic: str) -> LogConfig:
        """The topic's config (set by update_config / get_or_create_log) or the default."""
        return self._topic_configs.get(topic, self._default_config)

    # -- startup and shutdown -----------------------------------------------------------------

    def startup(self, now_ms: int, topic_configs: Mapping[str, LogConfig] | None = None, *,
                strays_checked: bool = False) -> None:
        """Load every partition directory of every log dir (``dir_loader.py``), recovering after an unclean
        stop. Two logs of one
        partition stop it (LogError), unless ``strays_checked``: then `move_strays` must follow, which sees
        them first (one may be stray), as Kafka's loadLogs checks isStray before its duplicate check."""
        self._now_ms = now_ms
        self._topic_configs.update(topic_configs or {})
        self._loader.load(now_ms, strays_checked=strays_checked)

    def move_strays(self, replicas_of: ReplicasOf, broker_id: int) -> list[str]:
        """Move aside every loaded log the metadata does not give this broker (``stray_logs.py``), with its
        future log: each is renamed ``<topic>-<partition>.<uuid>-stray`` and forgotten, and nothing of it is
        deleted. Call once the metadata is known and before any partition is served (Kafka does it while it
        loads the logs), and after a `startup` with ``strays_checked``: a second log of a partition loaded then
        is served if the first is stray, moved aside if it is stray itself, else refused (LogError, Kafka's
        "Duplicate log directories"). Returns the stray directories."""
        return self._loader.move_strays(replicas_of, broker_id, functools.partial(self._detach, stray=True))

    def _in_threads(self, work: Callable[[PartitionLog], None], logs: list[PartitionLog]) -> None:
        """``work`` on every log, ``recovery_threads`` threads per log dir; a storage error is reported here,
        on the calling thread (the listeners touch the event loop's state), and the first one raised."""
        listeners = [(log, log.storage_error_listener) for log in logs]
        for log in logs:
            log.storage_error_listener = None
        try:
            with ThreadPoolExecutor(self._recovery_threads * len(self._dirs.paths), "pybroker-shutdown") as threads:
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

    def shutdown(self) -> None:
        """Flush everything, write the checkpoints, close the logs and mark the shutdown clean.

        Logs are flushed and closed by ``recovery_threads`` threads per log dir, as Kafka's shutdown does:
        each close fsyncs a producer snapshot, and concurrent fsyncs share the file system's journal
        commits. Each log is used by one thread at a time, and the event loop is held meanwhile."""
        self._in_threads(lambda log: log.flush(), list(self._logs.values()))
        self.checkpoint()
        self._in_threads(lambda log: log.close(), [*self._logs.values(), *self._futures.logs.values()])
        self._futures.close_retired(self._now_ms, force=True)
        for root in self.online_dirs:
            with open(os.path.join(root, CLEAN_SHUTDOWN_FILE), "w", encoding="utf-8") as f:
                f.flush()
                os.fsync(f.fileno())
            fsync_dir(root)
        self._logs.clear()
        self._root_of.clear()
        self._futures.logs.clear()
        self._futures.root_of.clear()

    # -- lookup and lifecycle -----------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get(TopicPartition(topic, partition))

    def all_logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def log_dir_of(self, topic: str, partition: int) -> str | None:
        """The log dir root holding the partition."""
        return self._root_of.get(TopicPartition(topic, partition))

    @property
    def online_dirs(self) -> list[str]:
        return self._dirs.online

    def describe_dirs(self) -> list[LogDirStatus]:
        """Every configured log dir in order, with its logs and its volume's total and usable bytes."""
        statuses = []
        for root in self._dirs.paths:
            logs = [(log, False) for tp, log in self._logs.items() if self._root_of[tp] == root]
            logs += [(log, True) for tp, log in self._futures.logs.items() if self._futures.root_of[tp] == root]
            try:
                statuses.append(self._dirs.status(root, logs))
            except OSError as exc:
                self.fail_dir(root, exc)
                statuses.append(LogDirStatus(root, False))
        return statuses

    # -- replicas moving between log dirs (AlterReplicaLogDirs) --------------------------------

    def future_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._futures.logs.get(TopicPartition(topic, partition))

    def check_dir(self, path: str) -> str:
        """The configured log dir ``path`` names (absolute); LogDirNotFoundError if none, LogStorageError
        if it is offline (Kafka's isLogDirOnline)."""
        return self._dirs.check(path)

    def create_future_log(self, topic: str, partition: int, path: str) -> PartitionLog | None:
        """Start moving the partition's replica to log dir ``path``: a new empty ``-future`` log there,
        or the one already there. None when the replica already lives in ``path`` (a move elsewhere is
        dropped). A future log in another dir is dropped and replaced, as Kafka does."""
        return self._futures.create(TopicPartition(topic, partition), path, self.config_for(topic), self._now_ms)

    def drop_future_log(self, topic: str, partition: int) -> None:
        """Abandon a move: delete the ``-future`` log (if any) and resume cleaning."""
        self._futures.drop(TopicPartition(topic, partition))

    def replace_current_with_future(self, topic: str, partition: int) -> PartitionLog:
        """Swap in the caught-up future log (its LEO equals the current one's; call on the loop with no
        await in between, which is the partition lock here): the current directory is renamed
        ``-delete`` and removed after file.delete.delay.ms (fetches may still read it), the future one renamed
        ``<topic>-<partition>``, and the log reopened there with the current log's start offset and high
        watermark. Returns the new current log."""
        log = self._futures.replace_current(TopicPartition(topic, partition), self.config_for(topic), self._now_ms)
        self._adopt(TopicPartition(topic, partition))
        return log

    # -- log dir failure ------------------------------------------------------------------------

    def root_of_path(self, path: str) -> str | None:
        """The log dir holding ``path`` (a file or directory under it), None if none does."""
        return self._dirs.root_of_path(path)

    def fail_dir(self, root: str, cause: BaseException) -> bool:
        """Take log dir ``root`` offline after an I/O error (Kafka's LogManager.handleLogDirFailure):
        its current and future logs are closed without a flush and forgotten. True if it was online."""
        if not self._dirs.fail(root, cause):
            return False
        failed = [tp for tp, r in self._root_of.items() if r == root]
        for tps, roots, logs in ((list(self._root_of), self._root_of, self._logs),
                                 (list(self._futures.root_of), self._futures.root_of, self._futures.logs)):
            for tp in tps:
                if roots[tp] == root:
                    del roots[tp]
                    logs.pop(tp).close_handlers()
                    self._cleaner.resume(tp)
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
        tp = self._check_creatable(topic, partition, config)
        log = self._logs.get(tp)
        if log is None:
            root = self._choose_root()
            log = _open_new_log(root, topic, partition, self.config_for(topic),
                                self._now_ms if now_ms is None else now_ms)
            self._register_new(tp, root, log)
        if topic_id is not None:
            _record_topic_id(log, topic_id)
        return log

    async def create_log(self, topic: str, partition: int, config: LogConfig | None = None,
                         topic_id: uuid.UUID | None = None, *,
                         prepare: Callable[[PartitionLog], None] | None = None) -> PartitionLog:
        """``get_or_create_log`` for a log that does not exist yet, its durable work on the I/O executor:
        the partition directory and the fsync of its log dir, ``partition.metadata`` and whatever
        ``prepare`` writes into the new log (the replica's first ``leader-epoch-checkpoint``): five fsyncs
        that on the loop would hold every client up for as long as the disk takes them (Kafka makes a log
        on a request handler thread). The log is registered on the loop once its files are durable, and
        the caller serves it in that same step. At most half the I/O threads make logs at once, so
        flushes and cold reads still find threads free while a topic's thousand partitions are made.
        One creation at a time per partition: the replica manager sees to it."""
        tp = self._check_creatable(topic, partition, config)
        if tp in self._creating:
            raise LogError(f"The log of {topic}-{partition} is already being created")
        io = self._flusher.io
        if tp in self._logs or io is None:  # nothing to make, or no loop to keep free (start-up, tools)
            log = self.get_or_create_log(topic, partition, config, topic_id)
            if prepare is not None:
                prepare(log)
            return log
        root = self._choose_root()
        self._creating[tp] = root
        try:
            async with self._creation_slots:
                log = await io.run(functools.partial(_make_new_log, root, topic, partition, self.config_for(topic),
                                                     self._now_ms, topic_id, prepare))
        finally:
            del self._creating[tp]
        if root in self._dirs.offline:  # failed while the files were made: nothing more goes there
            log.close_handlers()
            raise LogStorageError(f"The log dir of {topic}-{partition} went offline while its log was created")
        self._register_new(tp, root, log)
        return log

    def _check_creatable(self, topic: str, partition: int, config: LogConfig | None) -> TopicPartition:
        error = topic_name_error(topic)
        if error is not None or partition < 0:
            raise IllegalTopicNameError(error or f"Partition {partition} of {topic} is negative")
        tp = TopicPartition(topic, partition)
        if config is not None:
            self._topic_configs[topic] = config
        if tp in self._offline_logs:
            raise LogStorageError(f"The log dir of {topic}-{partition} is offline")
        return tp

    def _choose_root(self) -> str:
        return self._dirs.choose([*self._root_of.values(), *self._futures.root_of.values(),
                                  *self._creating.values()])

    def _register_new(self, tp: TopicPartition, root: str, log: PartitionLog) -> None:
        self._logs[tp] = log
        self._root_of[tp] = root
        self._adopt(tp)
        logger.info("Created log for %s-%d in %s", tp[0], tp[1], root)

    def delete_log(self, topic: str, partition: int) -> bool:
        """``delete_logs`` of one log; False if unknown."""
        return self.delete_logs([TopicPartition(topic, partition)]) == 1

    def delete_logs(self, partitions: Iterable[TopicPartition]) -> int:
        """Delete logs as Kafka's asyncDelete does; returns how many there were.

        On the loop, what a later request must find done: each log leaves the served set, its descriptors
        close and its directory is renamed ``<tp>.<uuid>-delete``, and each log dir is fsynced once, not
        once per log (a thousand fsyncs held every client up for seconds). A topic created again thus gets
        new directories, and a crash leaves only ``-delete`` ones, which the next start removes. The
        renamed directories' files are removed on the I/O executor (here without one): a thousand
        partitions' unlinks held the loop for seconds too."""
        renamed: dict[str, list[str]] = {}
        for tp in partitions:
            detached = self._detach(tp)
            if detached is not None:
                renamed.setdefault(detached[0], []).append(detached[1])
        for root in renamed:
            fsync_dir(root)
        paths = [path for paths in renamed.values() for path in paths]
        self._removals.remove(paths, self._flusher.io)
        return len(paths)

    def _detach(self, tp: TopicPartition, *, stray: bool = False) -> tuple[str, str] | None:
        """A log's deletion on the loop, or its move aside as a ``stray`` one: its log dir and the directory
        it was renamed to (None if unknown)."""
        self.drop_future_log(*tp)
        self._offline_logs.discard(tp)
        log = self._logs.pop(tp, None)
        root = self._root_of.pop(tp, None)
        if log is None or root is None:
            return None
        path = log.detach(rename_to=(stray_path if stray else trash_path)(root, tp))
        self._cleaner.forget(tp, root)
        self._flusher.forget(tp)
        if not stray:
            logger.info("Deleted log for %s-%d", tp[0], tp[1])
        return root, path

    async def wait_removed(self) -> None:
        """Wait until the files of the logs deleted so far are gone (whoever must see them gone: tests)."""
        await self._removals.wait_removed()

    def update_config(self, topic: str, config: LogConfig) -> None:
        """New config for every partition of ``topic`` (and for ones created later)."""
        self._topic_configs[topic] = config
        for (t, _), log in self._logs.items():
            if t == topic:
                log.update_config(config)

    # -- flushing off the loop -----------------------------------------------------------------

    def attach_executor(self, io: IoExecutor) -> None:
        """From now on fsync on ``io``'s threads (call on the broker's running loop)."""
        self._flusher.io = io
        # New logs made at once by `create_log`: half the threads, whose other work (flushes, cold reads)
        # must not queue behind a big topic's creation.
        self._creation_slots = asyncio.Semaphore(max(1, io.threads // 2))
        for tp in self._logs:
            self._adopt(tp)

    def _adopt(self, tp: TopicPartition) -> None:
        self._logs[tp].storage_error_listener = self.fail_dir_of
        self._logs[tp].schedule_listener = self._watch
        self._watch(self._logs[tp])
        if self._flusher.io is not None:
            self._logs[tp].flush_requester = self._flusher.request_flush

    def _watch(self, log: PartitionLog) -> None:
        """Whether the flusher and the cleaner have to look at ``log`` (after a roll, a config change, or when
        it is adopted); a log dropped since is forgotten when a pass meets it."""
        tp = TopicPartition(log.topic, log.partition)
        if self._logs.get(tp) is not log:
            return
        self._flusher.watch(tp, log)
        self._cleaner.watch(tp, log)

    async def flush_log(self, log: PartitionLog, up_to: int | None = None, *, now_ms: int | None = None) -> None:
        """Flush ``log`` to ``up_to`` (default LEO) with the fsyncs on the I/O executor."""
        await self._flusher.flush_log(log, up_to, now_ms=now_ms)

    @property
    def flushing(self) -> bool:
        """Whether a flush.messages flush is running: only then may a Produce answer have to wait for one."""
        return self._flusher.flushing

    async def wait_flushed(self, partitions: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Wait until the flush.messages flushes running for ``partitions`` cover their current LEO;
        returns those whose flush failed (the caller answers KAFKA_STORAGE_ERROR for them)."""
        return await self._flusher.wait_flushed(partitions)

    # -- periodic work ------------------------------------------------------------------------

    def flush_dirty(self, now_ms: int) -> int:
        """fsync logs idle longer than flush.ms, and segments rolled since the last flush."""
        self._now_ms = now_ms
        return self._flusher.flush_dirty(now_ms)

    async def flush_dirty_async(self, now_ms: int) -> int:
        """``flush_dirty`` with the fsyncs on the I/O executor; a failing log is logged and skipped."""
        self._futures.close_retired(now_ms)
        self._now_ms = now_ms
        return await self._flusher.flush_dirty_async(now_ms)

    def run_retention(self, now_ms: int) -> int:
        """Apply retention to every log; returns the number of segments deleted."""
        self._now_ms = now_ms
        self._futures.close_retired(now_ms)
        return sum(log.delete_old_segments(now_ms) for log in self._logs.values())

    # -- log cleaner --------------------------------------------------------------------------

    def plan_cleaning(self, now_ms: int, *, max_jobs: int = 1,
                      dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE) -> list[CleaningJob]:
        """Up to ``max_jobs`` jobs for the dirtiest compacted logs (loop thread).

        Each returned job must be handed back to ``finish_cleaning`` (after ``run``); until
        then its log is not planned again.
        """
        self._now_ms = now_ms
        return self._cleaner.plan(now_ms, max_jobs, dedupe_buffer_size)

    def finish_cleaning(self, job: CleaningJob, now_ms: int) -> bool:
        """Install a job's result (loop thread); False when it failed or went stale.

        On success the log's cleaner checkpoint moves to the end of the cleaned dirty section
        and ``cleaner-offset-checkpoint`` of its log dir is rewritten.
        """
        self._now_ms = now_ms
        return self._cleaner.finish(job, now_ms)

    def cleaner_offset(self, topic: str, partition: int) -> int | None:
        """The log's cleaner checkpoint (first dirty offset), None before its first pass."""
        return self._cleaner.offset(TopicPartition(topic, partition))

    # -- checkpoints ----------------------------------------------------------------------------

    def _checkpoint_contents(self, files: Collection[str]) -> list[tuple[str, dict[TopicPartition, int]]]:
        return checkpoint_contents(self.online_dirs, self._logs, self._root_of, files)

    def checkpoint(self) -> None:
        """Write the recovery-point, log-start and high-watermark checkpoints of every log dir."""
        self._fail_dirs_of(write_checkpoints(self._checkpoint_contents(CHECKPOINT_FILES)))

    def _fail_dirs_of(self, failures: list[tuple[str, OSError]]) -> None:
        for path, exc in failures:
            root = self.root_of_path(path)
            if root is not None:
                self.fail_dir(root, exc)

    async def checkpoint_async(self, files: Collection[str] = CHECKPOINT_FILES) -> None:
        """``checkpoint`` of the named files with the writes and fsyncs on the I/O executor, one pass at
        a time (Kafka writes each on its own schedule: see the broker's periodic tasks)."""
        self._fail_dirs_of(await self._checkpoints.write(files, self._checkpoint_contents, self._flusher.io))


def _open_new_log(root: str, topic: str, partition: int, config: LogConfig, now_ms: int) -> PartitionLog:
    """Open (a leftover directory is loaded) or create the partition's log under ``root``, the new
    directory's entry made durable."""
    path = os.path.join(root, f"{topic}-{partition}")
    fresh = not os.path.exists(path)
    log = PartitionLog.open(path, topic, partition, config, now_ms=now_ms, clean_shutdown=fresh)
    try:
        fsync_dir(root)
    except BaseException:
        log.close_handlers()
        raise
    return log


def _make_new_log(root: str, topic: str, partition: int, config: LogConfig, now_ms: int,
                  topic_id: uuid.UUID | None, prepare: Callable[[PartitionLog], None] | None) -> PartitionLog:
    """`LogManager.create_log`'s part on an I/O thread: the log no one else sees yet, and its files."""
    log = _open_new_log(root, topic, partition, config, now_ms)
    try:
        if topic_id is not None:
            _record_topic_id(log, topic_id)
        if prepare is not None:
            prepare(log)
    except BaseException:
        log.close_handlers()
        raise
    return log


def _record_topic_id(log: PartitionLog, topic_id: uuid.UUID) -> None:
    current = log.topic_id
    if current is not None and current != topic_id:
        raise InconsistentTopicIdError(f"Topic id {topic_id} of {log.topic}-{log.partition} differs from the "
                                       f"recorded id {current}")
    if current is None:
        log.assign_topic_id(topic_id)


def _outcome(work: Callable[[PartitionLog], None], log: PartitionLog) -> Exception | None:
    try:
        work(log)
    except Exception as exc:
        return exc
    return None
