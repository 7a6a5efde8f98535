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

Anything else in the root (``meta.properties``, a metadata store, ``*-stray``/``*-future``
directories) is left alone. The manager owns no timer: the server calls ``flush_dirty``,
``run_retention`` and ``checkpoint`` periodically with the current time, and runs the log
cleaner as ``plan_cleaning`` (loop) -> ``CleaningJob.run`` (worker thread) ->
``finish_cleaning`` (loop); see ``cleaner.py``.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from typing import Mapping

from pybroker.log.checkpoint import OffsetCheckpointFile, fsync_dir
from pybroker.log.cleaner import CleaningJob, assess_log, discard_outputs, install_cleaned, map_capacity
from pybroker.log.config import LogConfig
from pybroker.common.topic import topic_name_error
from pybroker.log.errors import CorruptLogError, IllegalTopicNameError, LogError
from pybroker.log.log import PartitionLog

__all__ = ["LogManager", "parse_partition_dir_name"]

logger = logging.getLogger("pybroker.log")

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
DEFAULT_DEDUPE_BUFFER_SIZE = 134217728
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX = "-delete"
_SKIPPED_DIR_SUFFIXES = (DELETE_DIR_SUFFIX, "-stray", "-future")
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


class LogManager:
    """Opens, creates, deletes, flushes, retains and checkpoints the partition logs."""

    def __init__(self, log_dirs: list[str], default_config: LogConfig) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is required")
        self._log_dirs = [os.path.abspath(d) for d in log_dirs]
        self._default_config = default_config
        self._topic_configs: dict[str, LogConfig] = {}
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._root_of: dict[TopicPartition, str] = {}
        self._now_ms = 0
        self._cleaner_offsets: dict[TopicPartition, int] = {}  # first dirty offset per compacted log
        self._tombstone_horizons: dict[TopicPartition, int] = {}  # earliest horizon of kept tombstones
        self._cleaning: set[TopicPartition] = set()  # a job is planned or running
        self._uncleanable: set[TopicPartition] = set()  # a pass failed; skipped until restart/deletion

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
            if clean:
                os.unlink(clean_file)

    def shutdown(self) -> None:
        """Flush everything, write the checkpoints, close the logs and mark the shutdown clean."""
        for log in self._logs.values():
            log.flush()
        self.checkpoint()
        for log in self._logs.values():
            log.close()
        for root in self._log_dirs:
            with open(os.path.join(root, CLEAN_SHUTDOWN_FILE), "w", encoding="utf-8") as f:
                f.flush()
                os.fsync(f.fileno())
            fsync_dir(root)
        self._logs.clear()
        self._root_of.clear()

    # -- lookup and lifecycle -----------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def log_dir_of(self, topic: str, partition: int) -> str | None:
        """The log dir root holding the partition."""
        return self._root_of.get((topic, partition))

    def _choose_root(self) -> str:
        """The log dir with the fewest partitions (first one on a tie), as Kafka does."""
        counts = {root: 0 for root in self._log_dirs}
        for root in self._root_of.values():
            counts[root] += 1
        return min(self._log_dirs, key=lambda r: counts[r])

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None,
                          topic_id: uuid.UUID | None = None, *, now_ms: int | None = None) -> PartitionLog:
        """The existing log, or a new one in the least loaded log dir; records the topic id."""
        error = topic_name_error(topic)
        if error is not None or partition < 0:
            raise IllegalTopicNameError(error or f"Partition {partition} of {topic} is negative")
        tp = (topic, partition)
        if config is not None:
            self._topic_configs[topic] = config
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
        logger.info("Deleted log for %s-%d", topic, partition)
        return True

    def update_config(self, topic: str, config: LogConfig) -> None:
        """New config for every partition of ``topic`` (and for ones created later)."""
        self._topic_configs[topic] = config
        for (t, _), log in self._logs.items():
            if t == topic:
                log.update_config(config)

    # -- periodic work ------------------------------------------------------------------------

    def flush_dirty(self, now_ms: int) -> int:
        """fsync logs idle longer than flush.ms, and segments rolled since the last flush."""
        self._now_ms = now_ms
        flushed = 0
        for log in self._logs.values():
            if now_ms - log.last_flush_ms >= log.config.flush_ms:
                log.flush(now_ms=now_ms)
                flushed += 1
            elif log.recovery_point < log.active_segment.base_offset:
                log.flush(log.active_segment.base_offset, now_ms=now_ms)
                flushed += 1
        return flushed

    def run_retention(self, now_ms: int) -> int:
        """Apply retention to every log; returns the number of segments deleted."""
        self._now_ms = now_ms
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
        for tp, log in self._logs.items():
            if not log.config.compact_enabled or tp in self._cleaning or tp in self._uncleanable:
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
        OffsetCheckpointFile(os.path.join(root, CLEANER_OFFSET_CHECKPOINT)).write(
            {tp: offset for tp, offset in self._cleaner_offsets.items() if self._root_of.get(tp) == root})

    def checkpoint(self) -> None:
        """Write the recovery-point, log-start and high-watermark checkpoints of every log dir."""
        for root in self._log_dirs:
            logs = {tp: log for tp, log in self._logs.items() if self._root_of.get(tp) == root}
            OffsetCheckpointFile(os.path.join(root, RECOVERY_POINT_CHECKPOINT)).write(
                {tp: log.recovery_point for tp, log in logs.items()})
            OffsetCheckpointFile(os.path.join(root, LOG_START_OFFSET_CHECKPOINT)).write(
                {tp: log.log_start_offset for tp, log in logs.items()
                 if log.log_start_offset > log.segments[0].base_offset})
            OffsetCheckpointFile(os.path.join(root, HIGH_WATERMARK_CHECKPOINT)).write(
                {tp: log.high_watermark for tp, log in logs.items()})
