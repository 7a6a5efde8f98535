"""``CleanerManager``: which compacted logs the log cleaner works on, and its checkpoint (Kafka
``LogCleanerManager``).

The cleaner runs as ``plan`` (loop) -> ``CleaningJob.run`` (worker thread) -> ``finish`` (loop); see
``cleaner.py``. Per log it keeps the first dirty offset, written to ``cleaner-offset-checkpoint`` of the
log's dir after every pass, and the earliest horizon of the tombstones it kept. A log whose pass failed is
skipped until a restart or its deletion; a log moving to another log dir is paused.
"""

from __future__ import annotations

import logging
import os
from typing import Callable, Mapping

from pybroker.common.topic import TopicPartition
from pybroker.log.checkpoint import OffsetCheckpointFile
from pybroker.log.cleaner import CleaningJob, assess_log, discard_outputs, install_cleaned, map_capacity
from pybroker.log.dir_checkpoints import CLEANER_OFFSET_CHECKPOINT, read_checkpoint
from pybroker.log.log import PartitionLog
from pybroker.log.log_dirs import live_logs

__all__ = ["CleanerManager", "DEFAULT_DEDUPE_BUFFER_SIZE"]

logger = logging.getLogger("pybroker.log")

DEFAULT_DEDUPE_BUFFER_SIZE = 134217728


class CleanerManager:
    """Cleaning state of the logs in ``logs``, whose dirs ``root_of`` names (the manager's registry)."""

    def __init__(self, logs: Mapping[TopicPartition, PartitionLog], root_of: Mapping[TopicPartition, str],
                 is_online: Callable[[str], bool]) -> None:
        self._logs = logs
        self._root_of = root_of
        self._is_online = is_online
        self._offsets: dict[TopicPartition, int] = {}  # first dirty offset per compacted log
        self._tombstone_horizons: dict[TopicPartition, int] = {}  # earliest horizon of kept tombstones
        self._cleaning: set[TopicPartition] = set()  # a job is planned or running
        self._uncleanable: set[TopicPartition] = set()  # a pass failed; skipped until restart/deletion
        self._paused: set[TopicPartition] = set()  # moving to another log dir
        self._compacted: set[TopicPartition] = set()  # cleanup.policy has compact

    def load(self, root: str) -> None:
        """Read ``cleaner-offset-checkpoint`` of log dir ``root`` (startup)."""
        self._offsets.update(read_checkpoint(os.path.join(root, CLEANER_OFFSET_CHECKPOINT)))

    def watch(self, tp: TopicPartition, log: PartitionLog) -> None:
        """Whether ``plan`` has to look at ``log`` (its cleanup.policy has compact)."""
        if log.config.compact_enabled:
            self._compacted.add(tp)
        else:
            self._compacted.discard(tp)

    def pause(self, tp: TopicPartition) -> None:
        self._paused.add(tp)

    def resume(self, tp: TopicPartition) -> None:
        self._paused.discard(tp)

    def offset(self, tp: TopicPartition) -> int | None:
        """The log's cleaner checkpoint (first dirty offset), None before its first pass."""
        return self._offsets.get(tp)

    def plan(self, now_ms: int, max_jobs: int, dedupe_buffer_size: int) -> list[CleaningJob]:
        """Up to ``max_jobs`` jobs for the dirtiest compacted logs (loop thread); see ``LogManager.plan_cleaning``."""
        candidates = []
        for tp, log in live_logs(self._compacted, self._logs):
            if (not log.config.compact_enabled or tp in self._cleaning or tp in self._uncleanable
                    or tp in self._paused):
                continue
            candidate = assess_log(log, self._offsets.get(tp), now_ms, self._tombstone_horizons.get(tp))
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

    def finish(self, job: CleaningJob, now_ms: int) -> bool:
        """Install a job's result (loop thread); see ``LogManager.finish_cleaning``."""
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
        self._offsets[tp] = job.end_offset
        if job.tombstone_horizon is None:
            self._tombstone_horizons.pop(tp, None)
        else:
            self._tombstone_horizons[tp] = job.tombstone_horizon
        self.write_checkpoint(self._root_of[tp])
        logger.info("Cleaned log %s-%d (dirty section [%d, %d), ratio %.2f): %d records removed, "
                    "%d -> %d bytes in %d segment(s), %.3f s", tp[0], tp[1], job.first_dirty, job.end_offset,
                    job.dirty_ratio, job.records_removed, job.bytes_read, job.bytes_written, len(job.outputs),
                    job.elapsed_s)
        return True

    def moved(self, tp: TopicPartition, old_root: str, new_root: str) -> None:
        """The log moved to another log dir (already in ``root_of``): its checkpoint entry moves too."""
        self._paused.discard(tp)
        if self._offsets.get(tp) is not None:
            self.write_checkpoint(old_root)
            self.write_checkpoint(new_root)

    def forget(self, tp: TopicPartition, root: str) -> None:
        """The log was deleted from log dir ``root`` (no longer in ``root_of``)."""
        if self._offsets.pop(tp, None) is not None:
            self.write_checkpoint(root)
        self._tombstone_horizons.pop(tp, None)
        self._uncleanable.discard(tp)

    def write_checkpoint(self, root: str) -> None:
        if not self._is_online(root):
            return
        OffsetCheckpointFile(os.path.join(root, CLEANER_OFFSET_CHECKPOINT)).write(
            {tp: offset for tp, offset in self._offsets.items() if self._root_of.get(tp) == root})
