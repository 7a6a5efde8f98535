"""``PartitionLog``: the ordered segments of one partition and its offsets.

Directory ``<log.dir>/<topic>-<partition>`` holds the segment files (see ``segment.py``),
``partition.metadata`` (see ``checkpoint.py``) and, in flight, ``*.deleted`` / ``*.cleaned`` /
``*.swap`` files cleaned up by ``loader.py`` at the next open. ``replace_segments`` swaps in
the output of the log cleaner (``cleaner.py``).

Offsets kept here (Kafka ``UnifiedLog``): ``log_start_offset`` (first visible offset; moved by
retention), ``log_end_offset`` (LEO, next offset to assign), ``high_watermark`` (set by the
replication layer, clamped to [log start, LEO]; retention never deletes at or above it),
``last_stable_offset`` (LSO: the high watermark, or the first offset of the oldest transaction
still open or whose marker is not replicated yet, if that is lower) and ``recovery_point``
(everything below it was fsynced, so an unclean restart only re-validates from the segment holding it).

Producer state (``producer_state.py``) is snapshotted to ``<offset>.snapshot`` files
(``producer_snapshot.py``) at every roll and at close; opening the log loads the newest snapshot
at or below the recovery point and replays only the batches after it.

Transaction markers (control batches) close a producer's transaction; an ABORT adds an entry
to the ``.txnindex`` of the segment it lands in, which ``collect_aborted`` reads for
read-committed fetches.

Every method is synchronous and short enough for the event loop; time comes in as ``now_ms``.
Not thread-safe.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import uuid
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Iterator, Sequence, TypeVar, cast

from pybroker.common.io_executor import IoExecutor

from pybroker.log.checkpoint import PartitionMetadataFile
from pybroker.log.config import LogConfig
from pybroker.log.errors import (
    InvalidProducerEpochError,
    LogClosedError,
    LogError,
    LogStorageError,
    OffsetOutOfRangeError,
    SliceUnavailableError,
    TransactionCoordinatorFencedError,
    UnexpectedAppendOffsetError,
)
from pybroker.log.file_slice import FileSlice
from pybroker.log.flush import FlushJob
from pybroker.log.loader import SWAP_SUFFIX, load_segments
from pybroker.log.producer_snapshot import delete_snapshots, read_snapshot, snapshot_offsets, snapshot_path, \
    write_snapshot
from pybroker.log.producer_state import ProducerStateManager, SequenceCheck
from pybroker.log.retention import (
    Predicate,
    deletable_segments,
    log_start_breached,
    retention_ms_breached,
    retention_size_breached,
)
from pybroker.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, filename_prefix
from pybroker.log.txn_index import AbortedTxn
from pybroker.records.batch import (
    BatchHeader,
    RecordBatch,
    increment_sequence,
    iter_batches,
    scan_batches,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
)
from pybroker.records.constants import (
    CONTROL_FLAG_MASK,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TRANSACTIONAL_FLAG_MASK,
    ControlRecordType,
)
from pybroker.records.control import parse_control_key, parse_end_txn_marker
from pybroker.records.errors import CorruptRecordError, RecordsError, RecordTooLargeError

__all__ = ["PartitionLog", "AppendInfo", "FetchInfo"]

logger = logging.getLogger("pybroker.log")

_Method = TypeVar("_Method", bound=Callable[..., Any])


def _reports_storage_errors(method: _Method) -> _Method:
    """An I/O error of the log's files (an OSError becomes LogStorageError) is reported to the log's
    ``storage_error_listener`` before it propagates: the LogManager then takes the log dir offline, as
    Kafka's LogDirFailureChannel does."""

    @functools.wraps(method)
    def reporting(self: PartitionLog, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (LogStorageError, OSError) as exc:
            error = exc if isinstance(exc, LogStorageError) else LogStorageError(f"I/O error in {self._dir}: {exc}")
            if error is not exc:
                error.__cause__ = exc  # the listener tells a full descriptor table from a failed disk by it
            if self.storage_error_listener is not None and not isinstance(error, SliceUnavailableError):
                self.storage_error_listener(self, error)
            if error is exc:
                raise
            raise error from exc

    return cast(_Method, reporting)

PARTITION_METADATA_FILE = "partition.metadata"


@dataclass(frozen=True)
class AppendInfo:
    """Outcome of an append; ``duplicate`` means an idempotent retry answered from state."""

    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless message.timestamp.type=LogAppendTime
    log_start_offset: int
    duplicate: bool
    max_timestamp: int
    offset_of_max_timestamp: int


@dataclass(frozen=True)
class FetchInfo:
    """Whole batches read from one segment (None when there is nothing to return)."""

    slices: FileSlice | None
    log_start_offset: int
    log_end_offset: int
    high_watermark: int


class PartitionLog:
    """One partition's log; open it with ``PartitionLog.open``. See the module doc."""

    def __init__(self, dir_path: str, topic: str, partition: int, config: LogConfig,
                 segments: list[LogSegment], *, log_start_offset: int, log_end_offset: int,
                 recovery_point: int, high_watermark: int, now_ms: int) -> None:
        self._dir = dir_path
        self._topic = topic
        self._partition = partition
        self._config = config
        self._segments = segments
        self._log_start_offset = log_start_offset
        self._leo = log_end_offset
        self._recovery_point = recovery_point
        self._high_watermark = max(log_start_offset, min(high_watermark, log_end_offset))
        self._now_ms = now_ms
        self._last_flush_ms = now_ms
        self._dir_dirty = False  # a segment file was created since the last directory fsync
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._closed = False
        self._truncations = 0  # lets the cleaner see that segments it read were rewritten in place
        #: Called instead of a flush when flush.messages is reached (set by the LogManager).
        self.flush_requester: Callable[[PartitionLog], None] | None = None
        #: Told of an I/O error of this log's files (set by the LogManager).
        self.storage_error_listener: Callable[[PartitionLog, LogStorageError], None] | None = None
        #: Told when a segment rolled or the config changed (set by the LogManager, whose periodic flusher
        #: and cleaner then look only at the logs these make due, never at every log on every pass).
        self.schedule_listener: Callable[[PartitionLog], None] | None = None
        self.producer_state = ProducerStateManager()
        self._rebuild_producer_state()

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
        return (f"PartitionLog({self._topic}-{self._partition}, start={self._log_start_offset}, "
                f"end={self._leo}, hw={self._high_watermark})")

    # -- properties ---------------------------------------------------------------------------

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def partition(self) -> int:
        return self._partition

    @property
    def dir(self) -> str:
        return self._dir

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """LEO: the offset the next appended record gets."""
        return self._leo

    @property
    def recovery_point(self) -> int:
        """Everything below this offset is fsynced."""
        return self._recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        self.set_high_watermark(offset)

    def set_high_watermark(self, offset: int) -> int:
        """Set the HW clamped to [log start, LEO]; returns the value stored."""
        self._high_watermark = max(self._log_start_offset, min(offset, self._leo))
        self.producer_state.on_high_watermark(self._high_watermark)
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Read-committed consumers read below this: no transaction that is open, or whose marker is
        not replicated yet, starts before it; never above the high watermark (Kafka's rule)."""
        first_unstable = self.producer_state.first_unstable_offset()
        if first_unstable is None:
            return self._high_watermark
        return max(self._log_start_offset, min(first_unstable, self._high_watermark))

    @property
    def segments(self) -> list[LogSegment]:
        """The segments in base-offset order (a copy); the last one is active."""
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def truncations(self) -> int:
        """How many times the log was truncated (truncate_to / truncate_fully_and_start_at)."""
        return self._truncations

    @property
    def unflushed_messages(self) -> int:
        return self._leo - self._recovery_point

    @property
    def topic_id(self) -> uuid.UUID | None:
        """Topic id recorded in ``partition.metadata``, None when absent."""
        return PartitionMetadataFile(os.path.join(self._dir, PARTITION_METADATA_FILE)).read()

    def assign_topic_id(self, topic_id: uuid.UUID) -> None:
        """Write ``partition.metadata`` (atomically)."""
        PartitionMetadataFile(os.path.join(self._dir, PARTITION_METADATA_FILE)).write(topic_id)

    def update_config(self, config: LogConfig) -> None:
        """New settings apply to the next append, roll and retention run."""
        self._config = config
        if self.schedule_listener is not None:
            self.schedule_listener(self)

    # -- appends ------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self._dir} is closed")

    @_reports_storage_errors
    def append_as_leader(self, batch: bytearray, *, leader_epoch: int, now_ms: int) -> AppendInfo:
        """Assign offsets to ONE validated v2 batch, stamp it in place and write it.

        The caller validated the CRC. Raises RecordTooLargeError, OutOfOrderSequenceError,
        InvalidProducerEpochError or UnknownProducerIdError without writing anything; an
        idempotent retry of a retained batch returns its original offsets (duplicate=True).
        """
        self._check_open()
        self._now_ms = now_ms
        rb = RecordBatch(batch)
        size = rb.size
        if size != len(batch):
            raise CorruptRecordError(f"expected exactly one batch of {size} bytes, got {len(batch)} bytes")
        if size > self._config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {size} bytes exceeds max.message.bytes {self._config.max_message_bytes}")
        h = rb.header()
        idempotent = h.producer_id >= 0 and h.base_sequence >= 0 and not rb.is_control
        last_seq = increment_sequence(h.base_sequence, h.last_offset_delta) if idempotent else -1
        if h.producer_id >= 0 and not idempotent:  # markers and TxnOffsetCommit batches: epoch only
            entry = self.producer_state.get(h.producer_id)
            if entry is not None and h.producer_epoch < entry.epoch:
                raise InvalidProducerEpochError(
                    f"Batch of producer {h.producer_id} has epoch {h.producer_epoch}, "
                    f"older than the current epoch {entry.epoch}")
            marker = _marker_of(rb) if rb.is_control else None
            if entry is not None and marker is not None and marker[1] < entry.coordinator_epoch:
                raise TransactionCoordinatorFencedError(
                    f"Marker of producer {h.producer_id} comes from coordinator epoch {marker[1]}, "
                    f"older than coordinator epoch {entry.coordinator_epoch} seen before")
        if idempotent:
            check = self.producer_state.check_and_prepare(h.producer_id, h.producer_epoch,
                                                          h.base_sequence, last_seq,
                                                          transactional=rb.is_transactional)
            if check.kind is SequenceCheck.DUPLICATE and check.duplicate is not None:
                dup = check.duplicate
                return AppendInfo(dup.first_offset, dup.last_offset,
                                  dup.timestamp if self._config.log_append_time else -1,
                                  self._log_start_offset, True, dup.timestamp, dup.last_offset)
        base = self._leo
        last = base + h.last_offset_delta
        set_base_offset(batch, 0, base)
        set_partition_leader_epoch(batch, 0, leader_epoch)
        log_append_time = -1
        max_ts = h.max_timestamp
        if self._config.log_append_time:
            set_log_append_time(batch, 0, now_ms)
            log_append_time = max_ts = now_ms
        segment = self._maybe_roll_for(size, now_ms, max_ts, last)
        segment.append(last, max_ts, last, batch)
        self._leo = last + 1
        if idempotent:
            self.producer_state.update(h.producer_id, h.producer_epoch, h.base_sequence, last_seq,
                                       base, last, max_ts, transactional=rb.is_transactional)
        else:
            self._apply_producer_batch(h._replace(base_offset=base, max_timestamp=max_ts), rb, segment)
        if self.unflushed_messages >= self._config.flush_messages:
            self._flush_for_messages()
        return AppendInfo(base, last, log_append_time, self._log_start_offset, False, max_ts, last)

    @_reports_storage_errors
    def append_as_follower(self, batches: bytes | bytearray | memoryview, *,
                           now_ms: int | None = None) -> AppendInfo:
        """Append batches fetched from the leader as-is (offsets already assigned).

        Each batch is CRC-checked; the first must start at or after the LEO and offsets must
        grow, else UnexpectedAppendOffsetError. A trailing partial batch (a fetch response cut
        at max_bytes) is ignored, as Kafka's MemoryRecords iteration does. One ``os.write`` per
        batch keeps every index entry exact and lets a roll happen between batches.
        """
        self._check_open()
        if now_ms is not None:
            self._now_ms = now_ms
        view = memoryview(batches)
        parsed: list[RecordBatch] = []
        pos, prev_last = 0, self._leo - 1
        while pos + RECORD_BATCH_OVERHEAD <= len(view):
            if pos + RecordBatch(view, pos).size > len(view):
                break
            rb = validate_batch(view, pos)
            if rb.base_offset <= prev_last:
                raise UnexpectedAppendOffsetError(
                    f"Out of order offsets in append to {self._dir}: batch at {rb.base_offset} after "
                    f"offset {prev_last} (log end {self._leo})", rb.base_offset, rb.last_offset)
            prev_last = rb.last_offset
            parsed.append(rb)
            pos += rb.size
        if not parsed:
            return AppendInfo(-1, -1, -1, self._log_start_offset, False, -1, -1)
        max_ts, offset_of_max = -1, -1
        for rb in parsed:
            h = rb.header()
            last = rb.last_offset
            segment = self._maybe_roll_for(rb.size, self._now_ms, h.max_timestamp, last, first=h.base_offset)
            segment.append(last, h.max_timestamp, last, rb.raw())
            self._leo = last + 1
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max = h.max_timestamp, last
            self._apply_producer_batch(h, rb, segment)
        if self.unflushed_messages >= self._config.flush_messages:
            self._flush_for_messages()
        return AppendInfo(parsed[0].base_offset, parsed[-1].last_offset, -1, self._log_start_offset,
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
        active = self._segments[-1]
        if active.should_roll(size, now_ms, self._config, max_timestamp=max_timestamp, max_offset=max_offset):
            return self.roll(now_ms, max(first if first is not None else self._leo, self._leo))
        return active

    @_reports_storage_errors
    def roll(self, now_ms: int, new_base: int | None = None) -> LogSegment:
        """Close the active segment for appends and start one at ``new_base`` (default LEO)."""
        self._check_open()
        base = self._leo if new_base is None else max(new_base, self._leo)
        active = self._segments[-1]
        if active.base_offset == base and active.size == 0:
            return active
        active.roll_close()
        segment = LogSegment.open(self._dir, base, self._config, created_ms=now_ms, active=True)
        if segment.size:  # a stale file with this base offset (e.g. a crash during truncation)
            logger.warning("Newly rolled segment %s already exists; deleting its content", segment.log_path)
            segment.truncate_to(base)
        self._segments.append(segment)
        self._dir_dirty = True
        self._take_snapshot(base, sync=False)  # fsynced by the flush that reaches ``base``, as Kafka
        if self.schedule_listener is not None:
            self.schedule_listener(self)  # the rolled segment is flushed soon after (Kafka's flush-log task)
        logger.info("Rolled new segment %s for %s-%d", segment.log_path, self._topic, self._partition)
        return segment

    def maybe_roll(self, now_ms: int) -> bool:
        """Roll the active segment if segment.ms elapsed since it was created (idle partitions)."""
        self._check_open()
        self._now_ms = now_ms
        if self._segments[-1].should_roll(0, now_ms, self._config):
            self.roll(now_ms)
            return True
        return False

    # -- reads --------------------------------------------------------------------------------

    def _floor_segment_index(self, offset: int) -> int:
        return max(0, bisect_right([s.base_offset for s in self._segments], offset) - 1)

    def read_from_start(self, chunk_bytes: int = 1 << 20) -> Iterator[bytes]:
        """Whole batches from the log start to its end, at most ``chunk_bytes`` (one segment) at a time.

        For replaying internal topics at start-up and on election; stops, with one log line, at a
        chunk that holds no complete batch rather than looping on it.
        """
        offset = self.log_start_offset
        while (found := self._next_chunk(offset, chunk_bytes)) is not None:
            data = found.read()
            offset, ok = self._after_chunk(data, offset)
            if not ok:
                return
            yield data

    async def read_from_start_off_loop(self, io: IoExecutor, chunk_bytes: int = 1 << 20) -> AsyncIterator[bytes]:
        """``read_from_start`` with every file read on ``io``'s threads: segments are read as raw
        ranges of about ``chunk_bytes`` (no header walk on the loop) and cut at batch boundaries
        here, on the loop; batches below the log start are left out. Reads on until the log end,
        even if it moved meanwhile (a transaction marker appended during a coordinator load)."""
        offset = self.log_start_offset
        while offset < self.log_end_offset:
            self._check_open()
            segment = self._segments[self._floor_segment_index(offset)]
            position, end, carry, before = segment.offset_index.lookup(offset)[1], segment.size, b"", offset
            while position < end:
                part = segment.raw_slice(position, min(chunk_bytes, end - position)).detached_read()
                data = carry + await io.run(part)
                self._check_open()  # closed or deleted meanwhile: a partial replay must not be applied
                position += part.size
                batches, whole = scan_batches(data)
                keep = [(pos, size) for pos, size in batches if RecordBatch(data, pos).next_offset > offset]
                if keep:
                    offset = RecordBatch(data, keep[-1][0]).next_offset
                    yield data[keep[0][0]:whole]
                carry = data[whole:]
            following = [s.base_offset for s in self._segments if s.base_offset > segment.base_offset]
            if following:  # past a gap left by compaction, or a partial batch at the segment's end
                offset = max(offset, following[0])
            elif offset == before:
                logger.warning("Stopped reading %s-%d at offset %d: no complete batch", self._topic, self._partition,
                               offset)
                return

    def _next_chunk(self, offset: int, chunk_bytes: int) -> FileSlice | None:
        if offset >= self.log_end_offset:
            return None
        return self.read(offset, chunk_bytes).slices

    def _after_chunk(self, data: bytes, offset: int) -> tuple[int, bool]:
        """The offset after the chunk's last batch, and False when it held no complete batch."""
        next_offset = offset
        for batch in iter_batches(data):
            next_offset = batch.next_offset
        if next_offset <= offset:
            logger.warning("Stopped reading %s-%d at offset %d: no complete batch", self._topic, self._partition,
                           offset)
            return offset, False
        return next_offset, True

    def read(self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True, cached_only: bool = False) -> FetchInfo:
        """Whole batches from the one holding ``fetch_offset``, from a single segment (like Kafka).

        ``max_offset`` is an exclusive bound (e.g. the high watermark for consumers). With
        ``cached_only`` a page out of the page cache raises ColdReadError (see LogSegment.read).
        """
        self._check_open()
        if fetch_offset < self._log_start_offset or fetch_offset > self._leo:
            raise OffsetOutOfRangeError(fetch_offset, self._log_start_offset, self._leo)
        found: FileSlice | None = None
        if fetch_offset < self._leo and (max_offset is None or fetch_offset < max_offset):
            for segment in self._segments[self._floor_segment_index(fetch_offset):]:
                found = segment.read(fetch_offset, max_bytes, min_one_batch=min_one_batch,
                                     max_offset=max_offset, cached_only=cached_only)
                if found is not None:
                    break
        return FetchInfo(found if found is not None and found.size else None,
                         self._log_start_offset, self._leo, self._high_watermark)

    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``, else None.

        -2 (EARLIEST) answers ``(log_start_offset, -1)``, -1 (LATEST) ``(LEO, -1)`` and -3
        (MAX_TIMESTAMP) ``latest_timestamp_offset()``. Capping at the high watermark for
        consumers is the caller's job (Kafka does it in Partition, not in the log).
        """
        self._check_open()
        if timestamp == -2:
            return self._log_start_offset, -1
        if timestamp == -1:
            return self._leo, -1
        if timestamp == -3:
            found = self.latest_timestamp_offset()
            return None if found[0] < 0 else found
        for segment in self._segments:
            if segment.max_timestamp_so_far >= timestamp:
                hit = segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
                if hit is not None:
                    return hit
        return None

    async def fetch_offset_by_timestamp_off_loop(self, io: IoExecutor, timestamp: int) -> tuple[int, int] | None:
        """``fetch_offset_by_timestamp`` with each segment's scan and batch decoding on ``io``'s
        threads (ListOffsets by timestamp); the segments to search are chosen here, on the loop."""
        if timestamp in (-1, -2, -3):
            return self.fetch_offset_by_timestamp(timestamp)
        self._check_open()
        for segment in list(self._segments):
            if segment.max_timestamp_so_far >= timestamp:
                hit = await io.run(segment.timestamp_search(timestamp, self._log_start_offset))
                self._check_open()
                if hit is not None and hit[0] >= self._log_start_offset:
                    return hit
        return None

    def latest_timestamp_offset(self) -> tuple[int, int]:
        """(offset, timestamp) of the first record with the largest timestamp; (-1, -1) if none."""
        self._check_open()
        best: LogSegment | None = None
        for segment in self._segments:
            if segment.max_timestamp_so_far >= 0 and (
                    best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far):
                best = segment
        hit = best.offset_of_max_timestamp() if best is not None else None
        return hit if hit is not None else (-1, -1)

    # -- truncation ---------------------------------------------------------------------------

    @_reports_storage_errors
    def truncate_to(self, offset: int) -> bool:
        """Remove everything at or after ``offset`` (follower truncation); False if nothing to do.

        A batch straddling ``offset`` is removed whole and the LEO becomes its base offset.
        """
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self._leo:
            return False
        self._truncations += 1
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        doomed = [s for s in self._segments if s.base_offset > offset]
        self._segments = [s for s in self._segments if s.base_offset <= offset]
        self._schedule_delete(doomed)
        active = self._segments[-1]
        straddling = active.find_batch(offset)
        new_end = offset
        if straddling is not None and straddling[1].base_offset < offset:
            new_end = straddling[1].base_offset
        active.truncate_to(offset)
        logger.info("Truncated %s to offset %d", self._dir, offset)
        self._leo = new_end
        delete_snapshots(self._dir, above=new_end)
        self._log_start_offset = min(self._log_start_offset, new_end)
        self._recovery_point = min(self._recovery_point, new_end)
        self._high_watermark = min(self._high_watermark, new_end)
        if self.producer_state.needs_rebuild_after_truncation(new_end):
            self._rebuild_producer_state()
        return True

    @_reports_storage_errors
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart empty at ``offset`` (a follower far behind)."""
        self._check_open()
        self._truncations += 1
        self._schedule_delete(self._segments)
        self._segments = [LogSegment.open(self._dir, offset, self._config, created_ms=self._now_ms,
                                          active=True)]
        self._dir_dirty = True
        self._leo = self._log_start_offset = self._high_watermark = offset
        self._recovery_point = min(self._recovery_point, offset)
        self.producer_state.clear()
        self.producer_state.truncate_head(offset)
        delete_snapshots(self._dir, above=-1)
        logger.info("Truncated %s fully; it now starts at offset %d", self._dir, offset)

    def _rebuild_producer_state(self) -> None:
        """Load the newest usable snapshot, then replay the batch headers after it; markers replayed
        also rebuild their ``.txnindex`` entries.

        Only snapshots at or below the recovery point are used: above it, the data (and the
        ``.txnindex`` entries) the snapshot summarises may not have reached the disk.
        """
        delete_snapshots(self._dir, above=self._leo)
        start = self._load_snapshot()
        for segment in self._segments[self._floor_segment_index(start):]:
            segment.txn_index.truncate_to(start)
            for position, h in segment.iter_headers(start):
                if h.producer_id < 0:
                    continue
                batch = None
                if h.attributes & CONTROL_FLAG_MASK:
                    batch = segment.read_batch(position, h.batch_length + LOG_OVERHEAD)
                self._apply_producer_batch(h, batch, segment)
        self.producer_state.truncate_head(self._log_start_offset)
        self.producer_state.on_high_watermark(self._high_watermark)

    def _load_snapshot(self) -> int:
        """Restore the newest readable snapshot within [first segment base, recovery point];
        returns the offset to replay from."""
        self.producer_state.clear()
        first = self._segments[0].base_offset
        for offset in reversed(snapshot_offsets(self._dir)):
            if offset > self._recovery_point:
                continue
            if offset < first:
                break
            entries = read_snapshot(snapshot_path(self._dir, offset))
            if entries is None:
                logger.warning("Deleting damaged producer snapshot %s", snapshot_path(self._dir, offset))
                os.unlink(snapshot_path(self._dir, offset))
                continue
            self.producer_state.restore(entries)
            return offset
        return first

    def _take_snapshot(self, offset: int, *, sync: bool = True) -> None:
        write_snapshot(self._dir, offset, list(self.producer_state.producers.values()), sync=sync)

    def _apply_producer_batch(self, h: BatchHeader, batch: RecordBatch | None, segment: LogSegment) -> None:
        """Update producer state for a written batch that needs no sequence check.

        ``batch`` is needed for control batches only: a COMMIT/ABORT marker closes the
        producer's transaction, and an aborted one is indexed in ``segment``'s ``.txnindex``.
        """
        if h.producer_id < 0:
            return
        last = h.base_offset + h.last_offset_delta
        if h.attributes & CONTROL_FLAG_MASK:
            marker = _marker_of(batch) if batch is not None else None
            if marker is None:
                self.producer_state.load_batch(h.producer_id, h.producer_epoch, -1, -1, h.base_offset, last,
                                               h.max_timestamp, is_control=True)
                return
            commit, coordinator_epoch = marker
            completed = self.producer_state.complete_txn(h.producer_id, h.producer_epoch, h.base_offset,
                                                         commit=commit, coordinator_epoch=coordinator_epoch,
                                                         timestamp=h.max_timestamp)
            if completed.is_aborted:
                first_undecided = self.producer_state.first_undecided_offset()
                lso = completed.last_offset + 1 if first_undecided is None else first_undecided
                segment.txn_index.append(AbortedTxn(h.producer_id, completed.first_offset,
                                                    completed.last_offset, lso))
            return
        last_seq = increment_sequence(h.base_sequence, h.last_offset_delta) if h.base_sequence >= 0 else -1
        self.producer_state.load_batch(h.producer_id, h.producer_epoch, h.base_sequence, last_seq,
                                       h.base_offset, last, h.max_timestamp,
                                       transactional=bool(h.attributes & TRANSACTIONAL_FLAG_MASK))

    def collect_aborted(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound), for read-committed fetches."""
        self._check_open()
        found: list[AbortedTxn] = []
        for segment in self._segments[self._floor_segment_index(fetch_offset):]:
            entries, complete = segment.txn_index.collect(fetch_offset, upper_bound)
            found.extend(entries)
            if complete:
                break
        return found

    def increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start forward (DeleteRecords on a leader, the leader's start on a follower);
        it may not pass the high watermark. The segments wholly below it go in the next retention
        pass, and ``log-start-offset-checkpoint`` takes it at the next checkpoint, as Kafka's
        ``maybeIncrementLogStartOffset``; nothing below it needs recovering, so the recovery point follows."""
        self._check_open()
        if offset > self._high_watermark:
            raise OffsetOutOfRangeError(offset, self._log_start_offset, self._high_watermark)
        if offset <= self._log_start_offset:
            return False
        self._log_start_offset = offset
        self._recovery_point = max(self._recovery_point, offset)
        self.producer_state.truncate_head(offset)
        logger.info("Incremented log start offset of %s to %d", self._dir, offset)
        return True

    # -- compaction -----------------------------------------------------------------------------

    def holds_segments(self, segments: list[LogSegment]) -> bool:
        """True when ``segments`` are, in order, consecutive inactive segments of this log."""
        if self._closed or not segments:
            return False
        try:
            start = next(i for i, s in enumerate(self._segments) if s is segments[0])
        except StopIteration:
            return False
        run = self._segments[start:start + len(segments)]
        return (len(run) == len(segments) and all(a is b for a, b in zip(run, segments))
                and start + len(segments) < len(self._segments))

    def replace_segments(self, old: list[LogSegment], new_base: int, *, now_ms: int,
                         aborted_txns: Sequence[AbortedTxn]) -> LogSegment:
        """Install ``<new_base>.{log,index,timeindex}.swap`` in place of ``old`` (Kafka ``replaceSegments``);
        ``aborted_txns`` are the ``.txnindex`` entries of what the cleaner kept.

        Order matters for crash safety: the old segments are renamed to ``.deleted`` first and
        only then the swap files lose their suffix, so a crash leaves either a ``.swap`` (which
        the loader completes) or the finished segment, never two live files for one offset.
        """
        self._check_open()
        if not self.holds_segments(old) or new_base != old[0].base_offset:
            raise LogError(f"segments {[s.base_offset for s in old]} of {self._dir} cannot be replaced")
        start = next(i for i, s in enumerate(self._segments) if s is old[0])
        self._now_ms = now_ms
        self._schedule_delete(old)
        prefix = os.path.join(self._dir, filename_prefix(new_base))
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX):
            os.rename(prefix + suffix + SWAP_SUFFIX, prefix + suffix)
        segment = LogSegment.open(self._dir, new_base, self._config, created_ms=now_ms)
        for entry in aborted_txns:
            segment.txn_index.append(entry)
        self._segments[start:start + len(old)] = [segment]
        self._dir_dirty = True
        return segment

    # -- flush, retention, deletion -----------------------------------------------------------

    @_reports_storage_errors
    def flush(self, up_to: int | None = None, *, now_ms: int | None = None) -> None:
        """fsync every segment holding offsets in [recovery point, up_to) and advance it, on this
        thread (shutdown, tests); the broker runs ``begin_flush``/``FlushJob.run``/``finish_flush``."""
        job = self.begin_flush(up_to, now_ms=now_ms)
        job.run()
        self.finish_flush(job)

    def begin_flush(self, up_to: int | None = None, *, now_ms: int | None = None) -> FlushJob:
        """Plan a flush to ``up_to`` (default LEO): open what must be fsynced (loop thread)."""
        self._check_open()
        target = self._leo if up_to is None else min(up_to, self._leo)
        if now_ms is not None:
            self._now_ms = now_ms
        job = FlushJob(target=max(target, self._recovery_point), truncations=self._truncations,
                       now_ms=self._now_ms)
        try:
            if target > self._recovery_point:
                start = self._floor_segment_index(self._recovery_point)
                for segment in self._segments[start:]:
                    if segment.base_offset >= target and segment is not self._segments[start]:
                        break
                    job.fds += segment.sync_fds()
                for offset in snapshot_offsets(self._dir):
                    if self._recovery_point < offset <= target:
                        path = snapshot_path(self._dir, offset)
                        job.fds.append((os.open(path, os.O_RDONLY), path))
            if self._dir_dirty:
                job.fds.append((os.open(self._dir, os.O_RDONLY | os.O_DIRECTORY), self._dir))
                job.syncs_dir = True
                self._dir_dirty = False
        except OSError as exc:
            for fd, _ in job.fds:
                os.close(fd)
            raise LogStorageError(f"flush of {self._dir} failed: {exc}") from exc
        return job

    @_reports_storage_errors
    def finish_flush(self, job: FlushJob) -> None:
        """Apply a job's fsyncs (loop thread): advance the recovery point unless the log was
        truncated or closed meanwhile; raise its error after marking the directory dirty again."""
        if job.error is not None:
            self._dir_dirty |= job.syncs_dir
            raise job.error
        if self._closed or job.truncations != self._truncations:
            self._dir_dirty |= job.syncs_dir
            return
        self._recovery_point = max(self._recovery_point, min(job.target, self._leo))
        self._last_flush_ms = max(self._last_flush_ms, job.now_ms)

    def delete_old_segments(self, now_ms: int) -> int:
        """Apply log-start, retention.ms and retention.bytes (see ``retention.py``); returns count."""
        self._check_open()
        self._now_ms = now_ms
        self._delete_expired_files(now_ms)
        deleted = self._delete_segments(log_start_breached(self._log_start_offset))
        if self._config.delete_enabled and self._config.retention_ms >= 0:
            deleted += self._delete_segments(retention_ms_breached(now_ms, self._config.retention_ms))
        if self._config.delete_enabled and 0 <= self._config.retention_bytes < self.size_in_bytes:
            deleted += self._delete_segments(
                retention_size_breached(self.size_in_bytes, self._config.retention_bytes))
        return deleted

    def _delete_segments(self, predicate: Predicate) -> int:
        doomed = deletable_segments(self._segments, self._high_watermark, self._leo, predicate)
        if not doomed:
            return 0
        if len(doomed) == len(self._segments):
            self.roll(self._now_ms)  # there must always be an active segment
        self._segments = self._segments[len(doomed):]
        self._schedule_delete(doomed)
        if self._segments[0].base_offset > self._log_start_offset:
            self._log_start_offset = self._segments[0].base_offset
            self._high_watermark = max(self._high_watermark, self._log_start_offset)
            self.producer_state.on_high_watermark(self._high_watermark)
            self._recovery_point = max(self._recovery_point, self._log_start_offset)
        self.producer_state.truncate_head(self._log_start_offset)
        delete_snapshots(self._dir, below=self._segments[0].base_offset)
        logger.info("Deleted %d segment(s) of %s; log start offset is now %d", len(doomed), self._dir,
                    self._log_start_offset)
        return len(doomed)

    def _schedule_delete(self, segments: list[LogSegment]) -> None:
        """Rename to ``.deleted`` now; remove after file.delete.delay.ms so open slices finish."""
        for segment in segments:
            segment.rename_to_deleted()
            if self._config.file_delete_delay_ms <= 0:
                segment.delete()
            else:
                self._pending_deletes.append((self._now_ms + self._config.file_delete_delay_ms, segment))

    def _delete_expired_files(self, now_ms: int, *, force: bool = False) -> None:
        keep: list[tuple[int, LogSegment]] = []
        for deadline, segment in self._pending_deletes:
            if force or now_ms >= deadline:
                segment.delete()
            else:
                keep.append((deadline, segment))
        self._pending_deletes = keep

    def close(self) -> None:
        """Flush, close every segment (trimming indexes) and remove pending deletions."""
        if self._closed:
            return
        self.flush()
        self._take_snapshot(self._leo)
        for segment in self._segments:
            segment.close()
        self._delete_expired_files(self._now_ms, force=True)
        self._closed = True

    def retire(self) -> None:
        """Refuse every further use but keep the files open: the log was replaced (its replica moved to
        another log dir) and ranges read from it may still be on their way to fetchers; the owner
        calls ``close_handlers`` later (after file.delete.delay.ms, as Kafka deletes a replaced log)."""
        self._closed = True

    def close_handlers(self) -> None:
        """Close the files without a flush or snapshot (Kafka's closeHandlers): the log dir failed, so
        nothing more may be written there; errors on the way are ignored."""
        for segment in self._segments:
            try:
                segment.close()
            except (OSError, LogError):
                pass
        self._closed = True

    def delete(self, rename_to: str | None = None) -> None:
        """Close without flushing and remove the directory, renamed to ``rename_to`` first.

        The rename comes first so that a crash mid-way leaves a ``-delete`` directory that
        the next startup removes, never a half-deleted partition that would be loaded.
        """
        if rename_to is not None:
            os.rename(self._dir, rename_to)
            self._dir = rename_to
        for segment in self._segments:
            segment.delete()  # closes descriptors; the unlinks miss after a rename, rmtree does them
        self._delete_expired_files(self._now_ms, force=True)
        self._closed = True
        shutil.rmtree(self._dir, ignore_errors=True)


def _marker_of(batch: RecordBatch) -> tuple[bool, int] | None:
    """(commit?, coordinator epoch) of a transaction-marker batch; None for other control batches."""
    try:
        records = batch.records()
        if not records:
            return None
        _, control_type = parse_control_key(records[0].key)
        if control_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
            return None
        _, coordinator_epoch = parse_end_txn_marker(records[0].value)
    except RecordsError as exc:
        logger.warning("Unreadable control batch at offset %d: %s", batch.base_offset, exc)
        return None
    return control_type == ControlRecordType.COMMIT, coordinator_epoch
