"""One log segment: a ``.log`` data file plus its ``.index``, ``.timeindex`` and ``.txnindex``.

Files. All three are named by the segment's base offset zero-padded to 20 digits in the
partition directory (``00000000000000368769.log``, see ``file_names.py``). The
``.log`` holds v2 record batches back to back exactly as on the wire, with absolute offsets;
the indexes are described in :mod:`pybroker.log.index` and :mod:`pybroker.log.txn_index` (the
latter exists only once a transaction was aborted). A segment about to be removed gets the
``.deleted`` suffix on all its files.

Reads never decode records: they walk 61-byte batch headers (``os.pread`` of small chunks)
starting at the position the sparse offset index gives, and hand back a ``FileSlice`` covering
whole batches. Only ``find_offset_by_timestamp`` and ``offset_of_max_timestamp`` decode the
records of the single batch they land on, to answer with an exact record offset.

This class is not thread-safe: the event loop that owns the partition serialises every call.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Iterator

from pybroker.log.errors import ColdReadError, CorruptLogError, InvalidReadSizeError, LogError, LogStorageError
from pybroker.log.file_names import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    filename_prefix,
)
from pybroker.log.file_slice import WARM_CHUNK, FileSlice, LogFile, PageCacheMiss
from pybroker.log.header_scan import SCAN_CHUNK, TimestampSearch, scan_headers
from pybroker.log.index import OffsetIndex, TimeIndex
from pybroker.log.txn_index import TransactionIndex
from pybroker.records.batch import BatchHeader, RecordBatch, validate_batch
from pybroker.records.constants import LOG_OVERHEAD, RECORD_BATCH_OVERHEAD, TIMESTAMP_TYPE_MASK
from pybroker.records.errors import RecordsError

if TYPE_CHECKING:
    from pybroker.log.config import LogConfig

__all__ = ["LogSegment"]

logger = logging.getLogger("pybroker.log")

INT32_MAX = 2**31 - 1
_RECOVER_CHUNK = 1 << 20


class LogSegment:
    """A ``.log`` + ``.index`` + ``.timeindex`` triple starting at ``base_offset``; see module doc."""

    def __init__(self, dir_path: str, base_offset: int, *, index_interval_bytes: int,
                 max_index_size: int, created_ms: int, active: bool = False) -> None:
        self.dir = dir_path
        self.base_offset = base_offset
        prefix = os.path.join(dir_path, filename_prefix(base_offset))
        #: False when an index file had to be created: a non-empty segment then needs recover().
        self.indexes_existed = (os.path.exists(prefix + INDEX_SUFFIX)
                                and os.path.exists(prefix + TIME_INDEX_SUFFIX))
        self._log = LogFile.open(prefix + LOG_SUFFIX)
        try:  # a failure (out of descriptors) must not leave the .log open; a mapping goes with its index
            self._size = os.fstat(self._log.fileno()).st_size
            self.offset_index = OffsetIndex(prefix + INDEX_SUFFIX, base_offset, max_index_size, preallocate=active)
            self.time_index = TimeIndex(prefix + TIME_INDEX_SUFFIX, base_offset, max_index_size, preallocate=active)
            self.txn_index = TransactionIndex(prefix + TXN_INDEX_SUFFIX)
        except BaseException:
            self._log.close()
            raise
        self._index_interval_bytes = index_interval_bytes
        self._bytes_since_last_index_entry = 0
        self.created_ms = created_ms
        self._rolling_based_timestamp: int | None = None
        self._next_offset: int | None = None
        self._max_timestamp = -1
        self._offset_of_max_timestamp = base_offset
        self._max_timestamp_loaded = False

    @classmethod
    def open(cls, dir_path: str, base_offset: int, config: LogConfig, *, created_ms: int,
             active: bool = False) -> LogSegment:
        """Open (or create) the segment files for ``base_offset`` with ``config``'s index settings."""
        return cls(dir_path, base_offset, index_interval_bytes=config.index_interval_bytes,
                   max_index_size=config.segment_index_bytes, created_ms=created_ms, active=active)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self._size}, path={self.log_path!r})"

    # -- properties ---------------------------------------------------------------------------

    @property
    def log_path(self) -> str:
        return self._log.path

    @property
    def size(self) -> int:
        """Bytes in the ``.log`` file."""
        return self._size

    @property
    def next_offset(self) -> int:
        """Offset after the last batch, or ``base_offset`` when empty (Kafka ``readNextOffset``)."""
        if self._next_offset is None:
            nxt = self.base_offset
            start = self.offset_index.entry(self.offset_index.entries - 1)[1] if self.offset_index.entries else 0
            for _, h in self._scan(start):
                nxt = h.base_offset + h.last_offset_delta + 1
            self._next_offset = nxt
        return self._next_offset

    @property
    def last_offset(self) -> int:
        """Last offset stored, ``base_offset - 1`` when empty."""
        return self.next_offset - 1

    @property
    def max_timestamp_so_far(self) -> int:
        """Largest batch max timestamp in the segment, -1 when none."""
        self._load_max_timestamp()
        return self._max_timestamp

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        """Last offset of the batch holding ``max_timestamp_so_far`` (Kafka's shallow offset)."""
        self._load_max_timestamp()
        return self._offset_of_max_timestamp

    @property
    def largest_timestamp(self) -> int:
        """What retention.ms compares with: max timestamp, else the file's mtime (Kafka)."""
        ts = self.max_timestamp_so_far
        if ts >= 0:
            return ts
        try:
            return int(os.stat(self.log_path).st_mtime * 1000)
        except OSError:
            return -1

    @property
    def rolling_based_timestamp(self) -> int | None:
        """Max timestamp of the first batch (segment.ms is measured from it), None when empty."""
        if self._rolling_based_timestamp is None and self._size > 0:
            for _, h in self._scan(0):
                self._rolling_based_timestamp = h.max_timestamp
                break
        return self._rolling_based_timestamp

    # -- header walking -----------------------------------------------------------------------

    def _scan(self, start: int, end: int | None = None, *,
              cached_only: bool = False) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each complete batch in ``[start, end)``; reads headers only
        (from the page cache only with ``cached_only``: PageCacheMiss otherwise)."""
        end = self._size if end is None else min(end, self._size)
        return scan_headers(self._log.pread_cached if cached_only else self._log.pread, self.log_path, start, end)

    def iter_headers(self, start_offset: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of every batch from the one holding ``start_offset`` (or the first)."""
        start = 0 if start_offset is None else self.offset_index.lookup(start_offset)[1]
        for pos, h in self._scan(start):
            if start_offset is None or h.base_offset + h.last_offset_delta >= start_offset:
                yield pos, h

    def find_batch(self, offset: int, start_position: int = 0, *,
                   cached_only: bool = False) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= ``offset`` (Kafka translateOffset)."""
        position = max(self.offset_index.lookup(offset)[1], start_position)
        for pos, h in self._scan(position, cached_only=cached_only):
            if h.base_offset + h.last_offset_delta >= offset:
                return pos, h
        return None

    def _load_max_timestamp(self) -> None:
        """Max timestamp = last time-index entry, refined by the batches after it."""
        if self._max_timestamp_loaded:
            return
        ts, off = self.time_index.last_entry
        self._max_timestamp, self._offset_of_max_timestamp = ts, off
        for _, h in self._scan(self.offset_index.lookup(off)[1]):
            if h.max_timestamp > self._max_timestamp:
                self._max_timestamp = h.max_timestamp
                self._offset_of_max_timestamp = h.base_offset + h.last_offset_delta
        self._max_timestamp_loaded = True

    def read_batch(self, position: int, size: int) -> RecordBatch:
        """The batch at ``position`` (whole bytes), for the few paths that decode records."""
        return RecordBatch(self._log.pread(size, position))

    # -- writes -------------------------------------------------------------------------------

    def append(self, largest_offset: int, largest_timestamp: int, offset_of_max_timestamp: int,
               records: bytes | bytearray | memoryview) -> None:
        """Write ``records`` (whole batches with offsets assigned) with one ``os.write``.

        Index entry rule (Kafka ``LogSegment.append``): once more than index.interval.bytes
        were written since the last entry, add (largest offset of this append, position where
        it starts). The key is the *last* offset because a lookup must return a position at or
        before the batch holding the target; readers then scan headers forward to the first
        batch whose last offset is >= the target.
        """
        if largest_offset - self.base_offset > INT32_MAX or largest_offset < self.base_offset:
            raise LogError(f"offset {largest_offset} does not fit segment {self.base_offset}")
        n = len(records)
        if n == 0:
            return
        if not self._max_timestamp_loaded:
            self._load_max_timestamp()
        if self._size == 0:
            self._rolling_based_timestamp = largest_timestamp
        position = self._size
        fd = self._log.fileno()
        try:
            written = os.write(fd, records)
            while written < n:  # regular files write fully; this only guards a short write
                written += os.write(fd, memoryview(records)[written:])
        except OSError as exc:
            try:
                os.ftruncate(fd, position)
            except OSError:
                pass
            raise LogStorageError(f"append to {self.log_path} failed: {exc}") from exc
        self._size += n
        if largest_timestamp > self._max_timestamp:
            self._max_timestamp = largest_timestamp
            self._offset_of_max_timestamp = offset_of_max_timestamp
        if self._bytes_since_last_index_entry > self._index_interval_bytes:
            self.offset_index.append(largest_offset, position)
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += n
        self._next_offset = largest_offset + 1

    def should_roll(self, batch_size: int, now_ms: int, config: LogConfig, max_timestamp: int = -1,
                    max_offset: int | None = None) -> bool:
        """Kafka ``LogSegment.shouldRoll``: full (bytes or index), old, or offset overflow."""
        if self._size == 0:
            return False  # rolling an empty segment would recreate the same base offset
        if self._size > config.segment_bytes - batch_size:
            return True
        # Age measured like Kafka: by record time from the first batch, else by wall time. Inline, as each
        # append asks; the property only for a segment loaded from disk, whose first batch is not read yet.
        first = self._rolling_based_timestamp
        if first is None:
            first = self.rolling_based_timestamp
        if first is not None and first >= 0 and max_timestamp >= 0:
            waited = max_timestamp - first
        else:
            waited = now_ms - self.created_ms
        if waited > config.max_segment_ms:
            return True
        if self.offset_index.is_full or self.time_index.is_full:
            return True
        return max_offset is not None and max_offset - self.base_offset > INT32_MAX

    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one_batch: bool = True, *, max_offset: int | None = None,
             cached_only: bool = False) -> FileSlice | None:
        """Whole batches from the one holding ``start_offset``; None if it is past this segment.

        At most ``max_size`` bytes, except that with ``min_one_batch`` the first batch is
        returned even when larger (Kafka does the same so that a consumer always progresses).
        Batches ending at or after ``max_offset`` (exclusive bound, e.g. the high watermark) or
        crossing ``max_position`` are left out; the slice may then be empty (size 0).

        With ``cached_only`` the header walk reads the page cache only, for the event loop: a
        missing page raises ColdReadError, whose ``warm`` reads the rest of the range (what the
        walk and then the response will read) into the cache on an I/O thread.
        """
        if max_size < 0:
            raise InvalidReadSizeError(f"Invalid max size {max_size} for log read from segment {self.log_path}")
        try:
            return self._read(start_offset, max_size, max_position, min_one_batch, max_offset, cached_only)
        except PageCacheMiss as miss:
            span = min(max(max_size, WARM_CHUNK) + 2 * SCAN_CHUNK, self._size - miss.position)
            raise ColdReadError(self.log_path, miss.position, self._log.detached_warm(miss.position, span)) from None

    def _read(self, start_offset: int, max_size: int, max_position: int | None, min_one_batch: bool,
              max_offset: int | None, cached_only: bool) -> FileSlice | None:
        found = self.find_batch(start_offset, cached_only=cached_only)
        if found is None:
            return None
        start, _ = found
        limit = self._size if max_position is None else min(max_position, self._size)
        total = 0
        for pos, h in self._scan(start, limit, cached_only=cached_only):
            if max_offset is not None and h.base_offset + h.last_offset_delta >= max_offset:
                break
            size = h.batch_length + LOG_OVERHEAD
            if total + size > max_size:
                if total == 0 and min_one_batch:
                    total = size
                break
            total += size
        return FileSlice(self.log_path, start, total, self._log)

    def raw_slice(self, position: int, size: int) -> FileSlice:
        """Bytes ``[position, position + size)`` of the ``.log`` file, batch boundaries unchecked."""
        return FileSlice(self.log_path, position, size, self._log)

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int = 0) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``starting_offset`` with ts >= target."""
        return self.timestamp_search(timestamp, starting_offset)()

    def timestamp_search(self, timestamp: int, starting_offset: int = 0) -> TimestampSearch:
        """``find_offset_by_timestamp`` as a call for an I/O thread: the index lookups are done here
        (loop), the forward scan and the batch decoding run on the search's own descriptor.

        The time index is searched for ``timestamp - 1``: every batch before that entry's
        offset then has a max timestamp < target, so the forward scan cannot miss a record
        whose timestamp equals the target.
        """
        _, indexed_offset = self.time_index.lookup(timestamp - 1)
        position = self.offset_index.lookup(max(indexed_offset, starting_offset))[1]
        try:
            fd = os.dup(self._log.fileno())
        except OSError as exc:
            raise LogStorageError(f"cannot read {self.log_path}: {exc}") from exc
        return TimestampSearch(self.log_path, fd, position, self._size, timestamp, starting_offset)

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record carrying the segment's max timestamp."""
        ts = self.max_timestamp_so_far
        if ts < 0:
            return None
        for pos, h in self._scan(self.offset_index.lookup(self._offset_of_max_timestamp)[1]):
            if h.max_timestamp != ts:
                continue
            if h.attributes & TIMESTAMP_TYPE_MASK:
                return h.base_offset, ts  # LogAppendTime: every record carries max timestamp
            try:
                for rec in self.read_batch(pos, h.batch_length + LOG_OVERHEAD).records():
                    if rec.timestamp == ts:
                        return rec.offset, ts
            except RecordsError:
                pass
            return h.base_offset + h.last_offset_delta, ts
        return None

    # -- recovery and truncation --------------------------------------------------------------

    def recover(self, max_message_bytes: int) -> int:
        """Re-validate every batch (CRC), rebuild both indexes, cut a torn or corrupt tail.

        Returns the number of bytes truncated. A batch larger than ``max_message_bytes`` is
        kept if its CRC is valid (the topic limit may have been lowered after it was written);
        only structure, CRC and offset order decide what is corrupt.
        """
        self.offset_index.reset()
        self.time_index.reset()
        valid = last_index_entry = 0
        max_ts, offset_of_max = -1, self.base_offset
        prev_last = self.base_offset - 1
        chunk, chunk_pos = b"", 0
        while valid + LOG_OVERHEAD <= self._size:
            off = valid - chunk_pos
            if off + LOG_OVERHEAD > len(chunk):
                chunk, chunk_pos, off = self._log.pread(min(_RECOVER_CHUNK, self._size - valid), valid), valid, 0
            size = int.from_bytes(chunk[off + 8: off + 12], "big", signed=True) + LOG_OVERHEAD
            if size < RECORD_BATCH_OVERHEAD or valid + size > self._size:
                break
            if off + size > len(chunk):
                chunk, chunk_pos, off = self._log.pread(max(_RECOVER_CHUNK, size), valid), valid, 0
            try:
                batch = validate_batch(chunk, off)
            except RecordsError as exc:
                logger.warning("Found invalid batch in %s at position %d: %s", self.log_path, valid, exc)
                break
            h = batch.header()
            last = h.base_offset + h.last_offset_delta
            if h.base_offset <= prev_last or last - self.base_offset > INT32_MAX:
                logger.warning("Found out-of-order offsets in %s at position %d: base offset %d after %d",
                               self.log_path, valid, h.base_offset, prev_last)
                break
            if size > max_message_bytes:
                logger.info("Batch of %d bytes in %s exceeds max.message.bytes %d; kept (CRC valid)",
                            size, self.log_path, max_message_bytes)
            if h.max_timestamp > max_ts:
                max_ts, offset_of_max = h.max_timestamp, last
            if valid - last_index_entry > self._index_interval_bytes:
                self.offset_index.append(last, valid)
                self.time_index.maybe_append(max_ts, offset_of_max)
                last_index_entry = valid
            valid += size
            prev_last = last
        truncated = self._size - valid
        if truncated:
            self._truncate_file(valid)
        self.time_index.maybe_append(max_ts, offset_of_max, skip_full_check=True)
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, offset_of_max
        self._max_timestamp_loaded = True
        self._next_offset = prev_last + 1
        self._bytes_since_last_index_entry = valid - last_index_entry
        self._rolling_based_timestamp = None
        return truncated

    def _truncate_file(self, size: int) -> None:
        try:
            os.ftruncate(self._log.fileno(), size)
        except OSError as exc:
            raise LogStorageError(f"truncate of {self.log_path} failed: {exc}") from exc
        self._size = size

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset``; returns bytes removed.

        A batch straddling ``offset`` is removed whole. The segment becomes the active one,
        so its indexes are preallocated again.
        """
        found = self.find_batch(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.offset_index.preallocate()
        self.time_index.preallocate()
        truncated = 0
        if found is not None:
            truncated = self._size - found[0]
            self._truncate_file(found[0])
        if self._size == 0:
            self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = 0
        self._next_offset = None
        self._max_timestamp_loaded = False
        return truncated

    def tail_is_intact(self) -> bool:
        """Whether the batches from the last index entry on end exactly at the end of the file.

        After a clean shutdown the segments are trusted without a scan; this cheap check (at most
        ``index.interval.bytes`` of headers) catches a file cut or extended behind the broker's back,
        which must be recovered instead of being read as ending at its base offset.
        """
        start = self.offset_index.entry(self.offset_index.entries - 1)[1] if self.offset_index.entries else 0
        end = start
        try:
            for pos, h in self._scan(start):
                end = pos + h.batch_length + LOG_OVERHEAD
        except CorruptLogError:
            return False
        return end == self._size

    def sanity_check(self) -> None:
        """Raise CorruptLogError if either index is damaged (the caller then recovers)."""
        self.offset_index.sanity_check(self._size)
        self.time_index.sanity_check(self._size)

    # -- lifecycle ----------------------------------------------------------------------------

    def sync_fds(self) -> list[tuple[int, str]]:
        """Fresh descriptors of the files a flush must fsync (data, indexes, then .txnindex), with
        their paths; the caller fsyncs and closes them on an I/O thread. fsync on any descriptor
        of a file writes its dirty pages, those stored through the index mappings included."""
        paths = [self.offset_index.path, self.time_index.path]
        if os.path.exists(self.txn_index.path):
            paths.append(self.txn_index.path)
        fds = [(os.dup(self._log.fileno()), self.log_path)]
        try:
            for path in paths:
                fds.append((os.open(path, os.O_RDONLY), path))
        except OSError:
            for fd, _ in fds:
                os.close(fd)
            raise
        return fds

    def flush(self) -> None:
        """fsync the data file, then msync both indexes."""
        try:
            os.fsync(self._log.fileno())
        except OSError as exc:
            raise LogStorageError(f"fsync of {self.log_path} failed: {exc}") from exc
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def make_active(self) -> None:
        """Preallocate the indexes again: this segment receives the appends from now on."""
        self.offset_index.preallocate()
        self.time_index.preallocate()

    def roll_close(self) -> None:
        """The segment stops being active: record its final max timestamp and trim the indexes."""
        self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far,
                                     skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def rename_to_deleted(self) -> None:
        """Add ``.deleted`` to every file name; open slices keep working until delete()."""
        for target in (self._log, self.offset_index, self.time_index, self.txn_index):
            path = target.path
            if not path.endswith(DELETED_SUFFIX) and os.path.exists(path):
                if isinstance(target, LogFile):
                    os.rename(path, path + DELETED_SUFFIX)
                    target.path = path + DELETED_SUFFIX
                else:
                    target.rename(path + DELETED_SUFFIX)

    def release(self) -> None:
        """Close the data file and unmap the indexes, changing nothing on disk: a load that failed half-way,
        or a deleted log whose directory is removed as a whole afterwards."""
        self._log.close()
        self.offset_index.unmap()
        self.time_index.unmap()

    def close(self) -> None:
        """Record the final time-index entry, trim indexes and close the data file."""
        if self._log.closed:
            return
        if os.path.exists(self.time_index.path):
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far,
                                         skip_full_check=True)
        self.offset_index.close()
        self.time_index.close()
        self._log.close()

    def delete(self) -> None:
        """Close everything and remove the files (whatever their current suffix)."""
        self._log.close()
        try:
            os.unlink(self._log.path)
        except FileNotFoundError:
            pass
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
