"""``PartitionLog``: one partition's log and the offsets clients see (Kafka ``UnifiedLog``).

Directory ``<log.dir>/<topic>-<partition>`` holds the segment files (see ``segment.py``),
``partition.metadata`` (see ``checkpoint.py``) and, in flight, ``*.deleted`` / ``*.cleaned`` /
``*.swap`` files cleaned up by ``loader.py`` at the next open. The files, the log end offset and the
recovery point are ``local_log.py``'s (roll, read, truncate, flush planning, the cleaner's swap);
producer and transaction state, its snapshots and the aborted transactions are ``producer_log.py``'s;
which segments retention deletes is ``retention.py``'s. This class ties them together.

Offsets kept here (Kafka ``UnifiedLog``): ``log_start_offset`` (first visible offset; moved by
retention), ``log_end_offset`` (LEO, next offset to assign), ``high_watermark`` (set by the
replication layer, clamped to [log start, LEO]; retention never deletes at or above it),
``last_stable_offset`` (LSO: the high watermark, or the first offset of the oldest transaction
still open or whose marker is not replicated yet, if that is lower) and ``recovery_point``
(everything below it was fsynced, so an unclean restart only re-validates from the segment holding it).

Every method is synchronous and short enough for the event loop; time comes in as ``now_ms``.
Not thread-safe.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from typing import AsyncIterator, Callable, Iterator, Sequence

from pybroker.common.io_executor import IoExecutor

from pybroker.log import producer_log
from pybroker.log.checkpoint import PartitionMetadataFile
from pybroker.log.config import LogConfig
from pybroker.log.errors import LogStorageError, OffsetOutOfRangeError, UnexpectedAppendOffsetError
from pybroker.log.file_slice import FileSlice
from pybroker.log.flush import FlushJob
from pybroker.log.loader import load_segments
from pybroker.log.local_log import LocalLog
from pybroker.log.producer_snapshot import delete_snapshots
from pybroker.log.producer_state import ProducerStateManager, SequenceCheck
from pybroker.log.results import AppendInfo, FetchInfo
from pybroker.log.retention import Predicate, deletable_segments, retention_rules
from pybroker.log.segment import LogSegment
from pybroker.log.storage_errors import reported, reports_storage_errors
from pybroker.log.txn_index import AbortedTxn
from pybroker.records.batch import (
    BatchHeader,
    RecordBatch,
    increment_sequence,
    set_base_offset_and_epoch,
    set_log_append_time,
    validate_batch,
)
from pybroker.records.constants import CONTROL_FLAG_MASK, LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, \
    TRANSACTIONAL_FLAG_MASK
from pybroker.records.errors import CorruptRecordError

__all__ = ["PartitionLog"]

logger = logging.getLogger("pybroker.log")

PARTITION_METADATA_FILE = "partition.metadata"


class PartitionLog:
    """One partition's log; open it with ``PartitionLog.open``. See the module doc."""

    def __init__(self, dir_path: str, topic: str, partition: int, config: LogConfig,
                 segments: list[LogSegment], *, log_start_offset: int, log_end_offset: int,
                 recovery_point: int, high_watermark: int, now_ms: int) -> None:
        self._local = LocalLog(dir_path, topic, partition, config, segments, log_end_offset=log_end_offset,
                               recovery_point=recovery_point, now_ms=now_ms)
        #: The log's settings: the local log's, kept here too as a plain attribute (every Produce reads it a few
        #: times); replaced only by `update_config`.
        self.config = config
        #: The first visible offset: a plain attribute that only this class moves (retention, DeleteRecords,
        #: truncation), read by every append.
        self.log_start_offset = log_start_offset
        self._high_watermark = max(log_start_offset, min(high_watermark, log_end_offset))
        #: Called instead of a flush when flush.messages is reached (set by the LogManager).
        self.flush_requester: Callable[[PartitionLog], None] | None = None
        #: Told of an I/O error of this log's files (set by the LogManager).
        self.storage_error_listener: Callable[[PartitionLog, LogStorageError], None] | None = None
        #: Told when a segment rolled or the config changed (set by the LogManager, whose periodic flusher
        #: and cleaner then look only at the logs these make due, never at every log on every pass).
        self.schedule_listener: Callable[[PartitionLog], None] | None = None
        self.producer_state = ProducerStateManager()
        self._rebuild_producer_state()
        self._topic_id: uuid.UUID | None = None
        self._topic_id_read = False

    @classmethod
    def open(cls, dir_path: str, topic: str, partition: int, config: LogConfig, *, now_ms: int,
             recovery_point: int = 0, log_start_offset: int = 0, clean_shutdown: bool = False,
             high_watermark: int | None = None) -> PartitionLog:
        """Load (recovering if needed, see ``loader.py``) or create the log in ``dir_path``."""
        loaded = load_segments(dir_path, config, now_ms=now_ms, recovery_point=recovery_point,
                               log_start_offset=log_start_offset, clean_shutdown=clean_shutdown)
        hw = loaded.log_start_offset if high_watermark is None else high_watermark  # Kafka: 0, clamped
        log = cls(dir_path, topic, partition, config, loaded.segments,
                  log_start_offset=loaded.log_start_offset, log_end_offset=loaded.log_end_offset,
                  recovery_point=loaded.recovery_point, high_watermark=hw, now_ms=now_ms)
        logger.log(logging.INFO if log.log_end_offset else logging.DEBUG,
                   "Loaded log %s: log start %d, log end %d, %d segment(s)", dir_path,
                   log.log_start_offset, log.log_end_offset, len(loaded.segments))
        return log

    def __repr__(self) -> str:
        return (f"PartitionLog({self.topic}-{self.partition}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, hw={self._high_watermark})")

    # -- properties ---------------------------------------------------------------------------

    @property
    def topic(self) -> str:
        return self._local.topic

    @property
    def partition(self) -> int:
        return self._local.partition

    @property
    def dir(self) -> str:
        return self._local.dir

    @property
    def log_end_offset(self) -> int:
        """LEO: the offset the next appended record gets."""
        return self._local.log_end_offset

    @property
    def recovery_point(self) -> int:
        """Everything below this offset is fsynced."""
        return self._local.recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._local.last_flush_ms

    @property
    def closed(self) -> bool:
        return self._local.closed

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        self.set_high_watermark(offset)

    def set_high_watermark(self, offset: int) -> int:
        """Set the HW clamped to [log start, LEO]; returns the value stored. (Comparisons rather than min and
        max: every acks=all Produce sets it.)"""
        end = self._local.log_end_offset
        if offset > end:
            offset = end
        if offset < self.log_start_offset:
            offset = self.log_start_offset
        self._high_watermark = offset
        self.producer_state.on_high_watermark(offset)
        return offset

    @property
    def last_stable_offset(self) -> int:
        """Read-committed consumers read below this: no transaction that is open, or whose marker is
        not replicated yet, starts before it; never above the high watermark (Kafka's rule)."""
        first_unstable = self.producer_state.first_unstable_offset()
        if first_unstable is None:
            return self._high_watermark
        return max(self.log_start_offset, min(first_unstable, self._high_watermark))

    @property
    def segments(self) -> list[LogSegment]:
        """The segments in base-offset order (a copy); the last one is active."""
        return self._local.segments.as_list()

    @property
    def active_segment(self) -> LogSegment:
        return self._local.segments.active

    @property
    def size_in_bytes(self) -> int:
        return self._local.segments.size_in_bytes

    @property
    def truncations(self) -> int:
        """How many times the log was truncated (truncate_to / truncate_fully_and_start_at)."""
        return self._local.truncations

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self.recovery_point

    @property
    def topic_id(self) -> uuid.UUID | None:
        """Topic id recorded in ``partition.metadata``, None when absent; read once (only this log writes the
        file), so a LeaderAndIsr's topic id check after start-up (`read_topic_id`) reads nothing on the loop."""
        if not self._topic_id_read:
            self.read_topic_id()
        return self._topic_id

    def read_topic_id(self) -> None:
        """Read ``partition.metadata`` now (start-up, before anything is served); CorruptLogError when malformed."""
        self._topic_id = PartitionMetadataFile(os.path.join(self.dir, PARTITION_METADATA_FILE)).read()
        self._topic_id_read = True

    def assign_topic_id(self, topic_id: uuid.UUID) -> None:
        """Write ``partition.metadata`` (atomically)."""
        PartitionMetadataFile(os.path.join(self.dir, PARTITION_METADATA_FILE)).write(topic_id)
        self._topic_id, self._topic_id_read = topic_id, True

    def update_config(self, config: LogConfig) -> None:
        """New settings apply to the next append, roll and retention run."""
        self._local.config = self.config = config
        if self.schedule_listener is not None:
            self.schedule_listener(self)

    # -- appends ------------------------------------------------------------------------------

    def append_as_leader(self, batch: bytearray, *, leader_epoch: int, now_ms: int,
                         transaction_version: int = 0, header: BatchHeader | None = None) -> AppendInfo:
        """Assign offsets to ONE validated v2 batch, stamp it in place and write it.

        The caller validated the CRC and checked the size against max.message.bytes (the replica
        manager, once per append, as Kafka's UnifiedLog does for leader appends only). Raises OutOfOrderSequenceError,
        InvalidProducerEpochError or UnknownProducerIdError without writing anything; an
        idempotent retry of a retained batch returns its original offsets (duplicate=True).
        ``transaction_version`` is a transaction marker's (WriteTxnMarkers v2), which decides its epoch check.
        ``header``: the batch's header as it is now, when the caller has unpacked it already (a produce's).
        Reports storage errors as `reports_storage_errors` does, inline: this runs per Produce.
        """
        try:
            local = self._local
            if local.closed:  # check_open raises; not called on every Produce
                local.check_open()
            local.now_ms = now_ms
            h = RecordBatch(batch).header() if header is None else header
            size = h.batch_length + LOG_OVERHEAD
            if size != len(batch):
                raise CorruptRecordError(f"expected exactly one batch of {size} bytes, got {len(batch)} bytes")
            config = local.config
            attributes = h.attributes
            control = (attributes & CONTROL_FLAG_MASK) != 0
            transactional = (attributes & TRANSACTIONAL_FLAG_MASK) != 0
            idempotent = h.producer_id >= 0 and h.base_sequence >= 0 and not control
            last_seq = increment_sequence(h.base_sequence, h.last_offset_delta) if idempotent else -1
            if h.producer_id >= 0 and not idempotent:
                producer_log.check_unsequenced_epoch(self.producer_state, h, RecordBatch(batch), transaction_version)
            if idempotent:
                check = self.producer_state.check_and_prepare(h.producer_id, h.producer_epoch,
                                                              h.base_sequence, last_seq,
                                                              transactional=transactional)
                if check.kind is SequenceCheck.DUPLICATE and check.duplicate is not None:
                    dup = check.duplicate
                    return AppendInfo(dup.first_offset, dup.last_offset,
                                      dup.timestamp if config.log_append_time else -1,
                                      self.log_start_offset, True, dup.timestamp, dup.last_offset)
            base = local.log_end_offset
            last = base + h.last_offset_delta
            set_base_offset_and_epoch(batch, 0, base, h.batch_length, leader_epoch)
            log_append_time = -1
            max_ts = h.max_timestamp
            if config.log_append_time:
                set_log_append_time(batch, 0, now_ms)
                log_append_time = max_ts = now_ms
            segment = local.segments.active
            if segment.should_roll(size, now_ms, config, max_ts, last):
                segment = self.roll(now_ms, base)
            segment.append(last, max_ts, last, batch)
            local.log_end_offset = last + 1
            if idempotent:
                self.producer_state.update(h.producer_id, h.producer_epoch, h.base_sequence, last_seq,
                                           base, last, max_ts, transactional=transactional)
            elif h.producer_id >= 0:  # a batch without a producer id leaves the producer state alone
                producer_log.apply_batch(self.producer_state, h._replace(base_offset=base, max_timestamp=max_ts),
                                         RecordBatch(batch), segment)
            if local.log_end_offset - local.recovery_point >= config.flush_messages:  # unflushed_messages
                self._flush_for_messages()
            return AppendInfo(base, last, log_append_time, self.log_start_offset, False, max_ts, last)
        except (LogStorageError, OSError) as exc:
            error = reported(self, exc)
            if error is exc:
                raise
            raise error from exc

    @reports_storage_errors
    def append_as_follower(self, batches: bytes | bytearray | memoryview, *,
                           now_ms: int | None = None) -> AppendInfo:
        """Append batches fetched from the leader as-is (offsets already assigned).

        Each batch is CRC-checked; the first must start at or after the LEO and offsets must
        grow, else UnexpectedAppendOffsetError. A trailing partial batch (a fetch response cut
        at max_bytes) is ignored, as Kafka's MemoryRecords iteration does. One ``os.write`` per
        batch keeps every index entry exact and lets a roll happen between batches.
        """
        local = self._local
        local.check_open()
        if now_ms is not None:
            local.now_ms = now_ms
        view = memoryview(batches)
        parsed: list[RecordBatch] = []
        pos, prev_last = 0, local.log_end_offset - 1
        while pos + RECORD_BATCH_OVERHEAD <= len(view):
            if pos + RecordBatch(view, pos).size > len(view):
                break
            rb = validate_batch(view, pos)
            if rb.base_offset <= prev_last:
                raise UnexpectedAppendOffsetError(
                    f"Out of order offsets in append to {local.dir}: batch at {rb.base_offset} after "
                    f"offset {prev_last} (log end {local.log_end_offset})", rb.base_offset, rb.last_offset)
            prev_last = rb.last_offset
            parsed.append(rb)
            pos += rb.size
        if not parsed:
            return AppendInfo(-1, -1, -1, self.log_start_offset, False, -1, -1)
        max_ts, offset_of_max = -1, -1
        for rb in parsed:
            h = rb.header()
            last = rb.last_offset
            segment = self._maybe_roll_for(rb.size, local.now_ms, h.max_timestamp, last, first=h.base_offset)
            segment.append(last, h.max_timestamp, last, rb.raw())
            local.log_end_offset = last + 1
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max = h.max_timestamp, last
            producer_log.apply_batch(self.producer_state, h, rb, segment)
        if self.unflushed_messages >= local.config.flush_messages:
            self._flush_for_messages()
        return AppendInfo(parsed[0].base_offset, parsed[-1].last_offset, -1, self.log_start_offset,
                          False, max_ts, offset_of_max)

    def _flush_for_messages(self) -> None:
        """flush.messages reached: hand the flush to ``flush_requester`` (the broker's, which fsyncs
        off the loop and holds the produce answers until it is done), else flush here."""
        if self.flush_requester is not None:
            self.flush_requester(self)
        else:
            self.flush()

    def _maybe_roll_for(self, size: int, now_ms: int, max_timestamp: int, max_offset: int,
                        first: int | None = None) -> LogSegment:
        if self._local.should_roll(size, now_ms, max_timestamp, max_offset):
            leo = self.log_end_offset
            return self.roll(now_ms, max(first if first is not None else leo, leo))
        return self._local.segments.active

    @reports_storage_errors
    def roll(self, now_ms: int, new_base: int | None = None) -> LogSegment:
        """Close the active segment for appends and start one at ``new_base`` (default LEO); the
        producer state is snapshotted at the new base."""
        segment, rolled = self._local.roll(now_ms, new_base)
        if rolled:
            # fsynced by the flush that reaches the new base, as Kafka
            producer_log.take_snapshot(self.producer_state, self.dir, segment.base_offset, sync=False)
            if self.schedule_listener is not None:
                self.schedule_listener(self)  # the rolled segment is flushed soon after (Kafka's flush-log task)
        return segment

    def maybe_roll(self, now_ms: int) -> bool:
        """Roll the active segment if segment.ms elapsed since it was created (idle partitions)."""
        self._local.check_open()
        self._local.now_ms = now_ms
        if self._local.segments.active.should_roll(0, now_ms, self.config):
            self.roll(now_ms)
            return True
        return False

    # -- reads --------------------------------------------------------------------------------

    def read_from_start(self, chunk_bytes: int = 1 << 20) -> Iterator[bytes]:
        """Whole batches from the log start to its end, at most ``chunk_bytes`` (one segment) at a time.

        For replaying internal topics at start-up and on election; stops, with one log line, at a
        chunk that holds no complete batch rather than looping on it.
        """
        offset = self.log_start_offset
        while offset < self.log_end_offset and (found := self.read(offset, chunk_bytes).slices) is not None:
            data = found.read()
            offset, ok = self._local.after_chunk(data, offset)
            if not ok:
                return
            yield data

    async def read_from_start_off_loop(self, io: IoExecutor, chunk_bytes: int = 1 << 20) -> AsyncIterator[bytes]:
        """``read_from_start`` with every file read on ``io``'s threads: segments are read as raw
        ranges of about ``chunk_bytes`` (no header walk on the loop) and cut at batch boundaries
        here, on the loop; batches below the log start are left out. Reads on until the log end,
        even if it moved meanwhile (a transaction marker appended during a coordinator load)."""
        async for data in self._local.read_from_off_loop(self.log_start_offset, io, chunk_bytes):
            yield data

    def read(self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True, cached_only: bool = False) -> FetchInfo:
        """Whole batches from the one holding ``fetch_offset``, from a single segment (like Kafka).

        ``max_offset`` is an exclusive bound (e.g. the high watermark for consumers). With
        ``cached_only`` a page out of the page cache raises ColdReadError (see LogSegment.read).
        """
        found = self._local.read(fetch_offset, max_bytes, self.log_start_offset, max_offset=max_offset,
                                 min_one_batch=min_one_batch, cached_only=cached_only)
        return FetchInfo(found, self.log_start_offset, self._local.log_end_offset, self._high_watermark)

    def read_for_fetch(self, fetch_offset: int, max_bytes: int, follower: bool, read_committed: bool,
                       min_one_batch: bool, cached_only: bool) -> tuple[FileSlice | None, int, int, int]:
        """A Fetch's `read`, up to what its reader may see: a follower the log end, a consumer the high watermark
        or, ``read_committed``, the LSO. (records or None, high watermark, LSO, log start), in one call."""
        high_watermark = self._high_watermark
        first_unstable = self.producer_state.first_unstable_offset()  # last_stable_offset, inline
        last_stable = high_watermark if first_unstable is None else \
            max(self.log_start_offset, min(first_unstable, high_watermark))
        max_offset = None if follower else last_stable if read_committed else high_watermark
        found = self._local.read(fetch_offset, max_bytes, self.log_start_offset, max_offset=max_offset,
                                 min_one_batch=min_one_batch, cached_only=cached_only)
        return found, self._high_watermark, last_stable, self.log_start_offset

    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``, else None.

        -2 (EARLIEST) answers ``(log_start_offset, -1)``, -1 (LATEST) ``(LEO, -1)`` and -3
        (MAX_TIMESTAMP) ``latest_timestamp_offset()``. Capping at the high watermark for
        consumers is the caller's job (Kafka does it in Partition, not in the log).
        """
        self._local.check_open()
        if timestamp == -2:
            return self.log_start_offset, -1
        if timestamp == -1:
            return self.log_end_offset, -1
        if timestamp == -3:
            found = self.latest_timestamp_offset()
            return None if found[0] < 0 else found
        return self._local.offset_by_timestamp(timestamp, self.log_start_offset)

    async def fetch_offset_by_timestamp_off_loop(self, io: IoExecutor, timestamp: int) -> tuple[int, int] | None:
        """``fetch_offset_by_timestamp`` with each segment's scan and batch decoding on ``io``'s
        threads (ListOffsets by timestamp); the segments to search are chosen here, on the loop."""
        if timestamp in (-1, -2, -3):
            return self.fetch_offset_by_timestamp(timestamp)
        return await self._local.offset_by_timestamp_off_loop(io, timestamp, self.log_start_offset)

    def latest_timestamp_offset(self) -> tuple[int, int]:
        """(offset, timestamp) of the first record with the largest timestamp; (-1, -1) if none."""
        return self._local.latest_timestamp_offset()

    # -- truncation ---------------------------------------------------------------------------

    @reports_storage_errors
    def truncate_to(self, offset: int) -> bool:
        """Remove everything at or after ``offset`` (follower truncation); False if nothing to do.

        A batch straddling ``offset`` is removed whole and the LEO becomes its base offset.
        """
        local = self._local
        local.check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= local.log_end_offset:
            return False
        local.truncations += 1
        if offset < local.segments.first.base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        new_end = local.truncate_to(offset)
        delete_snapshots(self.dir, above=new_end)
        self.log_start_offset = min(self.log_start_offset, new_end)
        self._high_watermark = min(self._high_watermark, new_end)
        if self.producer_state.needs_rebuild_after_truncation(new_end):
            self._rebuild_producer_state()
        return True

    @reports_storage_errors
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart empty at ``offset`` (a follower far behind)."""
        self._local.check_open()
        self._local.truncate_fully_and_start_at(offset)
        self.log_start_offset = self._high_watermark = offset
        self.producer_state.clear()
        self.producer_state.truncate_head(offset)
        delete_snapshots(self.dir, above=-1)
        logger.info("Truncated %s fully; it now starts at offset %d", self.dir, offset)

    # -- producer state -------------------------------------------------------------------------

    def _rebuild_producer_state(self) -> None:
        """Load the newest usable snapshot and replay the batches after it (see ``producer_log.rebuild``)."""
        local = self._local
        producer_log.rebuild(self.producer_state, local.dir, local.segments, log_end_offset=local.log_end_offset,
                             recovery_point=local.recovery_point, log_start_offset=self.log_start_offset,
                             high_watermark=self._high_watermark)

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound), for read-committed fetches."""
        self._local.check_open()
        return producer_log.collect_aborted(self._local.segments, fetch_offset, upper_bound)

    def increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start forward (DeleteRecords on a leader, the leader's start on a follower);
        it may not pass the high watermark. The segments wholly below it go in the next retention
        pass, and ``log-start-offset-checkpoint`` takes it at the next checkpoint, as Kafka's
        ``maybeIncrementLogStartOffset``; nothing below it needs recovering, so the recovery point follows."""
        self._local.check_open()
        if offset > self._high_watermark:
            raise OffsetOutOfRangeError(offset, self.log_start_offset, self._high_watermark)
        if offset <= self.log_start_offset:
            return False
        self.log_start_offset = offset
        self._local.recovery_point = max(self._local.recovery_point, offset)
        self.producer_state.truncate_head(offset)
        logger.info("Incremented log start offset of %s to %d", self.dir, offset)
        return True

    # -- compaction -----------------------------------------------------------------------------

    def holds_segments(self, segments: list[LogSegment]) -> bool:
        """True when ``segments`` are, in order, consecutive inactive segments of this log."""
        return self._local.holds_segments(segments)

    def replace_segments(self, old: list[LogSegment], new_base: int, *, now_ms: int,
                         aborted_txns: Sequence[AbortedTxn]) -> LogSegment:
        """Install ``<new_base>.{log,index,timeindex}.swap`` in place of ``old`` (Kafka ``replaceSegments``);
        ``aborted_txns`` are the ``.txnindex`` entries of what the cleaner kept.

        Order matters for crash safety: the old segments are renamed to ``.deleted`` first and
        only then the swap files lose their suffix, so a crash leaves either a ``.swap`` (which
        the loader completes) or the finished segment, never two live files for one offset.
        """
        return self._local.replace_segments(old, new_base, now_ms=now_ms, aborted_txns=aborted_txns)

    # -- flush, retention, deletion -----------------------------------------------------------

    @reports_storage_errors
    def flush(self, up_to: int | None = None, *, now_ms: int | None = None) -> None:
        """fsync every segment holding offsets in [recovery point, up_to) and advance it, on this
        thread (shutdown, tests); the broker runs ``begin_flush``/``FlushJob.run``/``finish_flush``."""
        job = self.begin_flush(up_to, now_ms=now_ms)
        job.run()
        self.finish_flush(job)

    def begin_flush(self, up_to: int | None = None, *, now_ms: int | None = None) -> FlushJob:
        """Plan a flush to ``up_to`` (default LEO): open what must be fsynced (loop thread)."""
        return self._local.begin_flush(up_to, now_ms=now_ms)

    @reports_storage_errors
    def finish_flush(self, job: FlushJob) -> None:
        """Apply a job's fsyncs (loop thread): advance the recovery point unless the log was
        truncated or closed meanwhile; raise its error after marking the directory dirty again."""
        self._local.finish_flush(job)

    def delete_old_segments(self, now_ms: int) -> int:
        """Apply log-start, retention.ms and retention.bytes (see ``retention.py``); returns count."""
        local = self._local
        local.check_open()
        local.now_ms = now_ms
        local.delete_expired_files(now_ms)
        rules = retention_rules(self.log_start_offset, local.config, now_ms, lambda: self.size_in_bytes)
        return sum(self._delete_segments(rule) for rule in rules)

    def _delete_segments(self, predicate: Predicate) -> int:
        local = self._local
        doomed = deletable_segments(local.segments.as_list(), self._high_watermark, local.log_end_offset,
                                    predicate)
        if not doomed:
            return 0
        if len(doomed) == len(local.segments):
            self.roll(local.now_ms)  # there must always be an active segment
        local.delete_prefix(len(doomed))
        first_base = local.segments.first.base_offset
        if first_base > self.log_start_offset:
            self.log_start_offset = first_base
            self._high_watermark = max(self._high_watermark, self.log_start_offset)
            self.producer_state.on_high_watermark(self._high_watermark)
            local.recovery_point = max(local.recovery_point, self.log_start_offset)
        self.producer_state.truncate_head(self.log_start_offset)
        delete_snapshots(self.dir, below=first_base)
        logger.info("Deleted %d segment(s) of %s; log start offset is now %d", len(doomed), self.dir,
                    self.log_start_offset)
        return len(doomed)

    def close(self) -> None:
        """Flush, snapshot the producer state, close every segment (trimming indexes) and remove
        pending deletions."""
        if self.closed:
            return
        self.flush()
        producer_log.take_snapshot(self.producer_state, self.dir, self.log_end_offset)
        self._local.close()

    def retire(self) -> None:
        """Refuse every further use but keep the files open: the log was replaced (its replica moved to
        another log dir) and ranges read from it may still be on their way to fetchers; the owner
        calls ``close_handlers`` later (after file.delete.delay.ms, as Kafka deletes a replaced log)."""
        self._local.closed = True

    def close_handlers(self) -> None:
        """Close the files without a flush or snapshot (Kafka's closeHandlers): the log dir failed, so
        nothing more may be written there; errors on the way are ignored."""
        self._local.close_handlers()

    def detach(self, rename_to: str | None = None) -> str:
        """The first half of a deletion, cheap enough for the event loop: rename the directory to
        ``rename_to`` and close the descriptors and index mappings without a flush (a slice still held
        by a fetch then raises SliceUnavailableError, never reads a reused descriptor). Returns the
        directory, whose files the caller removes (``delete``, or Kafka's later asyncDelete on a
        background thread). The rename comes first so that a crash before the removal leaves a
        ``-delete`` directory that the next startup removes, never a half-deleted partition that would
        be loaded."""
        return self._local.detach(rename_to)

    def delete(self, rename_to: str | None = None) -> None:
        """``detach`` and remove the directory at once."""
        shutil.rmtree(self.detach(rename_to), ignore_errors=True)
