"""Log compaction for ``cleanup.policy`` ``compact`` and ``compact,delete`` (Kafka ``LogCleaner``).

A pass keeps, for every key, only its latest record among the cleanable segments; offsets never
change, so the log gets gaps. The record-level rules and the ``.cleaned`` file format are in
``compactor.py``. A pass has three steps, split between threads so the event loop never waits
for segment I/O:

1. Plan, on the loop (``assess_log``, ``CleaningJob.plan``). The dirty section starts at the
   log's cleaner checkpoint (the log start offset when there is none, or when it lies outside
   [log start, log end]). The cleanable part ends at the first uncleanable offset: the smallest
   of the active segment's base offset, the last stable offset (the high watermark, or the first
   offset of the oldest open transaction: the outcome of its data is not known yet), and
   (min.compaction.lag.ms > 0) the base offset of the first dirty segment holding a record
   newer than now - min lag. Only whole
   inactive segments below it are cleaned. dirty ratio = dirty bytes / (clean + dirty bytes),
   counted in whole segments. A log is cleaned when the ratio exceeds min.cleanable.dirty.ratio,
   or when the first batch of some dirty inactive segment is older than now -
   max.compaction.lag.ms (Kafka ``needCompactionNow``), or when tombstones or transaction
   markers this broker kept earlier have reached their delete horizon (in memory only: after a
   restart they wait for the next pass the ratio triggers). The highest ratio goes first. The
   job captures immutable ``SegmentRef``s, the producers' last offsets and epochs, and the
   aborted transactions overlapping the cleanable segments (from their ``.txnindex`` files),
   and nothing else the thread uses.
2. Run, in a worker thread (``CleaningJob.run``): build the key -> latest offset map over the
   dirty section (bounded by the dedupe buffer: ~24 bytes per key, 90% load, as Kafka sizes
   its map), then rewrite every cleanable segment up to the end of the map, in groups of
   consecutive segments that fit one segment (``group_segments``), into ``.cleaned`` files.
   A single-segment group in which nothing changed is not rewritten.
3. Finish, on the loop (``install_cleaned``): if the log is still open, was not truncated, and
   every group is still a run of its inactive segments (retention may have deleted some
   meanwhile), rename each output's files ``.cleaned`` -> ``.swap`` (indexes first, then the
   log; outputs in ascending base offset, matching the loader's KAFKA-6264 rule), fsync the
   directory, and let ``PartitionLog.replace_segments`` rename the old segments to ``.deleted``
   and the swaps to their final names, and give the new segment the ``.txnindex`` entries of
   the aborted transactions whose markers and data the pass kept (compactor rule 7).
   Otherwise the outputs are deleted and nothing changes.

Progress: after a successful pass the log's first dirty offset becomes the end of the mapped
section, stored per log in ``cleaner-offset-checkpoint`` in the log dir root (``topic partition
offset`` lines, Kafka's checkpoint format; see ``checkpoint.py``) by ``LogManager``.

Crash safety: ``.cleaned`` files are fsynced before they become ``.swap``; a ``.swap`` is a
complete replacement. At start-up ``loader.py`` deletes ``.cleaned`` files and completes
``.swap`` files (Kafka ``LogLoader``), then rebuilds the swapped segment's indexes. The
``.txnindex`` entries a swapped segment keeps only ever cover emptied batches (a pass keeps
no record of an aborted transaction), so a crash that loses them exposes nothing to
read-committed consumers.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field

from pybroker.common.topic import TopicPartition
from pybroker.log.checkpoint import fsync_dir
from pybroker.log.compactor import (
    AbortedTxns,
    CleanedSegmentWriter,
    FilterRules,
    SegmentRef,
    TxnPassState,
    build_offset_map,
    filter_batch,
    group_segments,
    iter_file_batches,
)
from pybroker.log.file_names import CLEANED_SUFFIX, SWAP_SUFFIX
from pybroker.log.log import PartitionLog
from pybroker.log.segment import LogSegment
from pybroker.log.txn_index import AbortedTxn
from pybroker.records.batch import RecordBatch

__all__ = ["LogToClean", "CleaningJob", "CleanedOutput", "assess_log", "install_cleaned",
           "discard_outputs", "map_capacity"]

logger = logging.getLogger("pybroker.log")

_BYTES_PER_MAP_ENTRY = 24  # Kafka SkimpyOffsetMap: 16-byte MD5 of the key + 8-byte offset
_MAP_LOAD_FACTOR = 0.9


def map_capacity(dedupe_buffer_size: int, threads: int) -> int:
    """Keys one job's map may hold: the dedupe buffer shared by the cleaner threads."""
    return max(1, int(dedupe_buffer_size / max(1, threads) / _BYTES_PER_MAP_ENTRY * _MAP_LOAD_FACTOR))


@dataclass(frozen=True)
class LogToClean:
    """A compacted log measured for cleaning (Kafka ``LogToClean``); see step 1 of the module doc."""

    log: PartitionLog
    first_dirty: int
    segments: list[LogSegment]  # the cleanable segments, in order
    ends: list[int]  # ends[i] = base offset of the segment after segments[i]
    clean_bytes: int
    dirty_bytes: int
    compaction_due: bool
    horizon_due: bool

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0

    @property
    def should_clean(self) -> bool:
        return bool(self.segments) and (
            self.dirty_ratio > self.log.config.min_cleanable_dirty_ratio
            or (self.compaction_due and self.dirty_bytes > 0)
            or self.horizon_due)


def assess_log(log: PartitionLog, checkpoint: int | None, now_ms: int,
               tombstone_horizon: int | None = None) -> LogToClean:
    """Measure ``log`` for cleaning; ``checkpoint`` is its cleaner checkpoint, if any."""
    config = log.config
    segments = log.segments
    first_dirty = checkpoint
    if first_dirty is None or not log.log_start_offset <= first_dirty <= log.log_end_offset:
        first_dirty = log.log_start_offset
    inactive = [(seg, segments[i + 1].base_offset) for i, seg in enumerate(segments[:-1])]
    uncleanable = min(segments[-1].base_offset, log.last_stable_offset)
    if config.min_compaction_lag_ms > 0:
        for seg, end in inactive:
            if end > first_dirty and seg.largest_timestamp > now_ms - config.min_compaction_lag_ms:
                uncleanable = min(uncleanable, seg.base_offset)
                break
    cleanable = [(seg, end) for seg, end in inactive if end <= uncleanable]
    first_batch_times = [ts for seg, end in inactive if end > first_dirty
                         and (ts := seg.rolling_based_timestamp) is not None and ts > 0]
    return LogToClean(
        log=log, first_dirty=first_dirty,
        segments=[seg for seg, _ in cleanable], ends=[end for _, end in cleanable],
        clean_bytes=sum(seg.size for seg, end in cleanable if end <= first_dirty),
        dirty_bytes=sum(seg.size for seg, end in cleanable if end > first_dirty),
        compaction_due=bool(first_batch_times)
        and min(first_batch_times) < now_ms - config.max_compaction_lag_ms,
        horizon_due=tombstone_horizon is not None and now_ms >= tombstone_horizon)


@dataclass(frozen=True)
class CleanedOutput:
    """One ``.cleaned`` segment replacing ``segments[start:start + count]`` of its job."""

    base_offset: int
    start: int
    count: int
    paths: tuple[str, str, str]  # .log.cleaned, .index.cleaned, .timeindex.cleaned
    size: int
    aborted: tuple[AbortedTxn, ...]  # the ``.txnindex`` entries the output keeps


@dataclass(eq=False)
class CleaningJob:
    """One cleaning pass over one log. ``run`` is the thread part; see the module doc.

    ``log`` and ``segments`` are for the loop-side finish only: ``run`` reads ``refs``,
    ``rules`` and the plain values and writes the result fields, which the loop reads after
    the thread is done.
    """

    log: PartitionLog
    segments: list[LogSegment]
    refs: list[SegmentRef]
    dir: str
    first_dirty: int
    map_capacity: int
    rules: FilterRules
    max_segment_bytes: int
    max_index_bytes: int
    index_interval_bytes: int
    truncations: int
    dirty_ratio: float
    end_offset: int = -1
    outputs: list[CleanedOutput] = field(default_factory=list)
    tombstone_horizon: int | None = None
    records_removed: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    elapsed_s: float = 0.0
    error: Exception | None = None
    done: bool = False

    @classmethod
    def plan(cls, candidate: LogToClean, now_ms: int, capacity: int) -> CleaningJob:
        """Capture what ``run`` needs from the log (loop thread)."""
        log, config = candidate.log, candidate.log.config
        refs = [SegmentRef(seg.base_offset, end, seg.log_path, seg.size, seg.offset_index.size_in_bytes,
                           seg.time_index.size_in_bytes)
                for seg, end in zip(candidate.segments, candidate.ends)]
        producers = log.producer_state.producers.values()
        last_offsets = {e.producer_id: e.last_offset for e in producers if e.last_offset >= 0}
        marker_epochs = {e.producer_id: e.epoch for e in producers if e.last_offset < 0}
        aborted = AbortedTxns(log.collect_aborted(refs[0].base_offset, refs[-1].end_offset) if refs else ())
        return cls(log=log, segments=list(candidate.segments), refs=refs, dir=log.dir,
                   first_dirty=candidate.first_dirty, map_capacity=capacity,
                   rules=FilterRules(now_ms, config.delete_retention_ms, last_offsets, marker_epochs, aborted),
                   max_segment_bytes=config.segment_bytes, max_index_bytes=config.segment_index_bytes,
                   index_interval_bytes=config.index_interval_bytes, truncations=log.truncations,
                   dirty_ratio=candidate.dirty_ratio)

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.log.topic, self.log.partition)

    @property
    def stale(self) -> bool:
        """True when the log changed under the job: closed, truncated, or a planned segment gone.

        A job that failed on a stale log read a file that retention or truncation changed;
        that is no reason to stop cleaning the log.
        """
        log = self.log
        return (isinstance(self.error, FileNotFoundError) or log.closed or log.truncations != self.truncations
                or not log.holds_segments(self.segments))

    def run(self) -> None:
        """Build the key map and write the ``.cleaned`` outputs; never raises (see ``error``).

        Thread-safe with respect to the loop: only files and this job's own fields are used.
        """
        started = time.monotonic()
        writers: list[CleanedSegmentWriter] = []
        try:
            offset_map, self.end_offset = build_offset_map(self.refs, self.first_dirty, self.map_capacity,
                                                           self.rules.aborted)
            txns = TxnPassState()
            index_of = {ref.base_offset: i for i, ref in enumerate(self.refs)}
            to_clean = [ref for ref in self.refs if ref.end_offset <= self.end_offset]
            for group in group_segments(to_clean, self.max_segment_bytes, self.max_index_bytes):
                writer = CleanedSegmentWriter(self.dir, group[0].base_offset,
                                              index_interval_bytes=self.index_interval_bytes,
                                              max_index_size=self.max_index_bytes)
                writers.append(writer)
                changed = self._clean_group(group, offset_map, txns, writer)
                aborted = tuple(txns.take_kept_aborted())
                if changed:
                    self.outputs.append(CleanedOutput(group[0].base_offset, index_of[group[0].base_offset],
                                                      len(group), writer.paths, writer.size, aborted))
                    self.bytes_written += writer.size
                else:
                    writer.discard()
        except Exception as exc:  # reported to the loop through ``error``; the files go away
            self.error = exc
            self.outputs = []
            for writer in writers:
                writer.discard()
        finally:
            self.elapsed_s = time.monotonic() - started
            self.done = True

    def _clean_group(self, group: list[SegmentRef], offset_map: dict[bytes, int], txns: TxnPassState,
                     writer: CleanedSegmentWriter) -> bool:
        """Filter every batch of ``group`` into ``writer``; True when the output differs."""
        changed = len(group) > 1
        mtime_ns = max(os.stat(ref.path).st_mtime_ns for ref in group)
        for ref in group:
            self.bytes_read += ref.size
            for rb in iter_file_batches(ref.path, ref.size):
                result = filter_batch(rb, offset_map, self.rules, txns)
                changed |= result.changed
                self.records_removed += result.records_removed
                horizon = result.tombstone_horizon
                if horizon is not None:
                    self.tombstone_horizon = horizon if self.tombstone_horizon is None \
                        else min(horizon, self.tombstone_horizon)
                if result.data is not None:
                    writer.append(result.data, rb.last_offset, RecordBatch(result.data).max_timestamp)
        writer.finish()
        # An empty output's age for retention.ms is its mtime: keep the inputs' (Kafka does too).
        os.utime(writer.paths[0], ns=(mtime_ns, mtime_ns))
        return changed


def install_cleaned(job: CleaningJob, now_ms: int) -> bool:
    """Swap the job's outputs into its log (loop thread); False when the result is stale.

    A stale result (log closed or truncated, or a cleaned segment no longer in the log) is
    left for ``discard_outputs``.
    """
    log = job.log
    if not job.done or job.error is not None or log.closed or log.truncations != job.truncations:
        return False
    groups = [job.segments[out.start:out.start + out.count] for out in job.outputs]
    if not all(log.holds_segments(group) for group in groups):
        return False
    for out in job.outputs:
        for path in (out.paths[1], out.paths[2], out.paths[0]):
            os.rename(path, path[: -len(CLEANED_SUFFIX)] + SWAP_SUFFIX)
    fsync_dir(log.dir)
    for out, group in zip(job.outputs, groups):
        log.replace_segments(group, out.base_offset, now_ms=now_ms, aborted_txns=out.aborted)
    fsync_dir(log.dir)
    return True


def discard_outputs(job: CleaningJob) -> None:
    """Remove the ``.cleaned`` files of a result that will not be installed."""
    for out in job.outputs:
        for path in out.paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
