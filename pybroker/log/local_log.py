"""``LocalLog``: the segment files of one partition and the offsets they define (Kafka ``LocalLog``).

It owns the directory ``<log.dir>/<topic>-<partition>``, the segment list (``segments.py``), the log
end offset, the recovery point and the files on their way out: it rolls, reads, truncates, plans
flushes, swaps in the cleaner's output and deletes segments (renamed ``.deleted`` first, removed after
file.delete.delay.ms so open slices finish). What the offsets mean to clients (log start, high
watermark, producer state) is ``PartitionLog``'s, which drives this class; like it, every method is
synchronous and short enough for the event loop. Not thread-safe.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import AsyncIterator, Sequence

from pybroker.common.io_executor import IoExecutor

from pybroker.log.config import LogConfig
from pybroker.log.errors import LogClosedError, LogError, LogStorageError, OffsetOutOfRangeError
from pybroker.log.file_names import INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, TIME_INDEX_SUFFIX, filename_prefix
from pybroker.log.file_slice import FileSlice
from pybroker.log.flush import FlushJob
from pybroker.log.producer_snapshot import snapshot_offsets, snapshot_path
from pybroker.log.segment import LogSegment
from pybroker.log.segments import LogSegments
from pybroker.log.txn_index import AbortedTxn
from pybroker.records.batch import RecordBatch, iter_batches, scan_batches

__all__ = ["LocalLog"]

logger = logging.getLogger("pybroker.log")


class LocalLog:
    """Segments, log end offset and recovery point of one partition's directory."""

    def __init__(self, dir_path: str, topic: str, partition: int, config: LogConfig, segments: list[LogSegment],
                 *, log_end_offset: int, recovery_point: int, now_ms: int) -> None:
        self.dir = dir_path
        self.topic = topic
        self.partition = partition
        self.config = config
        self.segments = LogSegments(segments)
        self.log_end_offset = log_end_offset
        self.recovery_point = recovery_point
        self.now_ms = now_ms
        self.last_flush_ms = now_ms
        self.dir_dirty = False  # a segment file was created since the last directory fsync
        self.closed = False
        self.truncations = 0  # lets the cleaner see that segments it read were rewritten in place
        self._pending_deletes: list[tuple[int, LogSegment]] = []

    def check_open(self) -> None:
        if self.closed:
            raise LogClosedError(f"log {self.dir} is closed")

    # -- roll -----------------------------------------------------------------------------------

    def should_roll(self, size: int, now_ms: int, max_timestamp: int, max_offset: int) -> bool:
        return self.segments.active.should_roll(size, now_ms, self.config, max_timestamp, max_offset)

    def roll(self, now_ms: int, new_base: int | None = None) -> tuple[LogSegment, bool]:
        """Start a segment at ``new_base`` (default and at least the LEO); (the active segment, whether
        one was started): an empty active segment at that base is kept."""
        self.check_open()
        base = self.log_end_offset if new_base is None else max(new_base, self.log_end_offset)
        active = self.segments.active
        if active.base_offset == base and active.size == 0:
            return active, False
        active.roll_close()
        segment = LogSegment.open(self.dir, base, self.config, created_ms=now_ms, active=True)
        if segment.size:  # a stale file with this base offset (e.g. a crash during truncation)
            logger.warning("Newly rolled segment %s already exists; deleting its content", segment.log_path)
            segment.truncate_to(base)
        self.segments.append(segment)
        self.dir_dirty = True
        logger.info("Rolled new segment %s for %s-%d", segment.log_path, self.topic, self.partition)
        return segment, True

    # -- reads ----------------------------------------------------------------------------------

    def read(self, fetch_offset: int, max_bytes: int, log_start_offset: int, *, max_offset: int | None = None,
             min_one_batch: bool = True, cached_only: bool = False) -> FileSlice | None:
        """Whole batches from the one holding ``fetch_offset``, from a single segment (like Kafka); None
        when there is nothing to return. See ``PartitionLog.read``."""
        if self.closed:  # check_open raises; not called on every Fetch
            self.check_open()
        if fetch_offset < log_start_offset or fetch_offset > self.log_end_offset:
            raise OffsetOutOfRangeError(fetch_offset, log_start_offset, self.log_end_offset)
        found: FileSlice | None = None
        if fetch_offset < self.log_end_offset and (max_offset is None or fetch_offset < max_offset):
            for segment in self.segments.from_offset(fetch_offset):
                found = segment.read(fetch_offset, max_bytes, min_one_batch=min_one_batch,
                                     max_offset=max_offset, cached_only=cached_only)
                if found is not None:
                    break
        return found if found is not None and found.size else None

    def after_chunk(self, data: bytes, offset: int) -> tuple[int, bool]:
        """The offset after the chunk's last batch, and False when it held no complete batch."""
        next_offset = offset
        for batch in iter_batches(data):
            next_offset = batch.next_offset
        if next_offset <= offset:
            self._warn_stopped(offset)
            return offset, False
        return next_offset, True

    def _warn_stopped(self, offset: int) -> None:
        logger.warning("Stopped reading %s-%d at offset %d: no complete batch", self.topic, self.partition, offset)

    async def read_from_off_loop(self, offset: int, io: IoExecutor, chunk_bytes: int) -> AsyncIterator[bytes]:
        """``read_from`` with every file read on ``io``'s threads; see ``PartitionLog.read_from_start_off_loop``."""
        while offset < self.log_end_offset:
            self.check_open()
            segment = self.segments.floor(offset)
            position, end, carry, before = segment.offset_index.lookup(offset)[1], segment.size, b"", offset
            while position < end:
                part = segment.raw_slice(position, min(chunk_bytes, end - position)).detached_read()
                data = carry + await io.run(part)
                self.check_open()  # closed or deleted meanwhile: a partial replay must not be applied
                position += part.size
                batches, whole = scan_batches(data)
                keep = [(pos, size) for pos, size in batches if RecordBatch(data, pos).next_offset > offset]
                if keep:
                    offset = RecordBatch(data, keep[-1][0]).next_offset
                    yield data[keep[0][0]:whole]
                carry = data[whole:]
            following = self.segments.after(segment.base_offset)
            if following:  # past a gap left by compaction, or a partial batch at the segment's end
                offset = max(offset, following[0].base_offset)
            elif offset == before:
                self._warn_stopped(offset)
                return

    def offset_by_timestamp(self, timestamp: int, log_start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or above ``log_start_offset`` with timestamp >= ``timestamp``."""
        for segment in self.segments:
            if segment.max_timestamp_so_far >= timestamp:
                hit = segment.find_offset_by_timestamp(timestamp, log_start_offset)
                if hit is not None:
                    return hit
        return None

    async def offset_by_timestamp_off_loop(self, io: IoExecutor, timestamp: int,
                                           log_start_offset: int) -> tuple[int, int] | None:
        """``offset_by_timestamp`` with each segment's scan on ``io``'s threads."""
        self.check_open()
        for segment in self.segments.as_list():
            if segment.max_timestamp_so_far >= timestamp:
                hit = await io.run(segment.timestamp_search(timestamp, log_start_offset))
                self.check_open()
                if hit is not None and hit[0] >= log_start_offset:
                    return hit
        return None

    def latest_timestamp_offset(self) -> tuple[int, int]:
        """(offset, timestamp) of the first record with the largest timestamp; (-1, -1) if none."""
        self.check_open()
        best: LogSegment | None = None
        for segment in self.segments:
            if segment.max_timestamp_so_far >= 0 and (
                    best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far):
                best = segment
        hit = best.offset_of_max_timestamp() if best is not None else None
        return hit if hit is not None else (-1, -1)

    # -- truncation -----------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove everything at or after ``offset`` (which a segment holds); returns the new LEO: a batch
        straddling ``offset`` is removed whole and the LEO becomes its base offset."""
        self.schedule_delete(self.segments.drop_above(offset))
        active = self.segments.active
        straddling = active.find_batch(offset)
        new_end = offset
        if straddling is not None and straddling[1].base_offset < offset:
            new_end = straddling[1].base_offset
        active.truncate_to(offset)
        logger.info("Truncated %s to offset %d", self.dir, offset)
        self.log_end_offset = new_end
        self.recovery_point = min(self.recovery_point, new_end)
        return new_end

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart empty at ``offset``."""
        self.truncations += 1
        self.schedule_delete(self.segments.as_list())  # renamed away before a segment may reuse a base offset
        self.segments.reset(LogSegment.open(self.dir, offset, self.config, created_ms=self.now_ms, active=True))
        self.dir_dirty = True
        self.log_end_offset = offset
        self.recovery_point = min(self.recovery_point, offset)

    # -- compaction -----------------------------------------------------------------------------

    def holds_segments(self, segments: list[LogSegment]) -> bool:
        """True when ``segments`` are, in order, consecutive inactive segments of this log."""
        if self.closed or not segments:
            return False
        start = self.segments.index_of(segments[0])
        if start is None:
            return False
        run = self.segments.as_list()[start:start + len(segments)]
        return (len(run) == len(segments) and all(a is b for a, b in zip(run, segments))
                and start + len(segments) < len(self.segments))

    def replace_segments(self, old: list[LogSegment], new_base: int, *, now_ms: int,
                         aborted_txns: Sequence[AbortedTxn]) -> LogSegment:
        """See ``PartitionLog.replace_segments``."""
        self.check_open()
        if not self.holds_segments(old) or new_base != old[0].base_offset:
            raise LogError(f"segments {[s.base_offset for s in old]} of {self.dir} cannot be replaced")
        start = self.segments.index_of(old[0])
        assert start is not None
        self.now_ms = now_ms
        self.schedule_delete(old)
        prefix = os.path.join(self.dir, filename_prefix(new_base))
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):
            os.rename(prefix + suffix + SWAP_SUFFIX, prefix + suffix)
        segment = LogSegment.open(self.dir, new_base, self.config, created_ms=now_ms)
        for entry in aborted_txns:
            segment.txn_index.append(entry)
        self.segments.replace(start, len(old), segment)
        self.dir_dirty = True
        return segment

    # -- flush ----------------------------------------------------------------------------------

    def begin_flush(self, up_to: int | None = None, *, now_ms: int | None = None) -> FlushJob:
        """Plan a flush to ``up_to`` (default LEO): open what must be fsynced (loop thread)."""
        self.check_open()
        target = self.log_end_offset if up_to is None else min(up_to, self.log_end_offset)
        if now_ms is not None:
            self.now_ms = now_ms
        job = FlushJob(target=max(target, self.recovery_point), truncations=self.truncations, now_ms=self.now_ms)
        try:
            if target > self.recovery_point:
                start = self.segments.floor_index(self.recovery_point)
                for segment in self.segments.as_list()[start:]:
                    if segment.base_offset >= target and segment is not self.segments[start]:
                        break
                    job.fds += segment.sync_fds()
                for offset in snapshot_offsets(self.dir):
                    if self.recovery_point < offset <= target:
                        path = snapshot_path(self.dir, offset)
                        job.fds.append((os.open(path, os.O_RDONLY), path))
            if self.dir_dirty:
                job.fds.append((os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY), self.dir))
                job.syncs_dir = True
                self.dir_dirty = False
        except OSError as exc:
            for fd, _ in job.fds:
                os.close(fd)
            raise LogStorageError(f"flush of {self.dir} failed: {exc}") from exc
        return job

    def finish_flush(self, job: FlushJob) -> None:
        """See ``PartitionLog.finish_flush``."""
        if job.error is not None:
            self.dir_dirty |= job.syncs_dir
            raise job.error
        if self.closed or job.truncations != self.truncations:
            self.dir_dirty |= job.syncs_dir
            return
        self.recovery_point = max(self.recovery_point, min(job.target, self.log_end_offset))
        self.last_flush_ms = max(self.last_flush_ms, job.now_ms)

    # -- deletion and close ---------------------------------------------------------------------

    def delete_prefix(self, count: int) -> None:
        """Remove the first ``count`` segments (retention); an active segment must remain."""
        self.schedule_delete(self.segments.drop_prefix(count))

    def schedule_delete(self, segments: list[LogSegment]) -> None:
        """Rename to ``.deleted`` now; remove after file.delete.delay.ms so open slices finish."""
        for segment in segments:
            segment.rename_to_deleted()
            if self.config.file_delete_delay_ms <= 0:
                segment.delete()
            else:
                self._pending_deletes.append((self.now_ms + self.config.file_delete_delay_ms, segment))

    def delete_expired_files(self, now_ms: int, *, force: bool = False) -> None:
        keep: list[tuple[int, LogSegment]] = []
        for deadline, segment in self._pending_deletes:
            if force or now_ms >= deadline:
                segment.delete()
            else:
                keep.append((deadline, segment))
        self._pending_deletes = keep

    def close(self) -> None:
        """Close every segment (trimming indexes) and remove pending deletions."""
        for segment in self.segments:
            segment.close()
        self.delete_expired_files(self.now_ms, force=True)
        self.closed = True

    def close_handlers(self) -> None:
        """Close the files, ignoring errors on the way (the log dir failed)."""
        for segment in self.segments:
            with contextlib.suppress(OSError, LogError):
                segment.close()
        self.closed = True

    def detach(self, rename_to: str | None = None) -> str:
        """See ``PartitionLog.detach``."""
        if rename_to is not None:
            os.rename(self.dir, rename_to)
            self.dir = rename_to
        for segment in [*self.segments, *(pending for _, pending in self._pending_deletes)]:
            segment.release()
        self._pending_deletes = []
        self.closed = True
        return self.dir
