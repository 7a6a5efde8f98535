"""The file work of log compaction: the key map, the per-batch rules, ``.cleaned`` output.

Everything here runs in a cleaner worker thread (``CleaningJob.run`` in ``cleaner.py``), so
it touches files only. It opens the inactive segments' ``.log`` files by path with its own
descriptors (never the ones a ``LogSegment`` owns: the loop may close those and the OS may
hand the number to another file) and never reads or changes ``PartitionLog``/``LogSegment``
objects. Inactive segments are immutable, so reading them races with nothing but retention
and truncation, which the swap step on the loop detects afterwards.

Output files, next to the segments they replace, named by the base offset of the first one
(Kafka ``LogFileUtils``): ``<base>.log.cleaned`` holds the retained batches back to back with
their original absolute offsets; ``<base>.index.cleaned`` and ``<base>.timeindex.cleaned`` are
built with ``LogSegment.append``'s rule (an entry once more than index.interval.bytes were
written since the last one) plus the final time-index entry ``roll_close`` writes. All three
are fsynced before ``run`` returns.

Per-batch rules (``filter_batch``; Kafka ``LogCleaner.shouldRetainRecord``,
``CleanedTransactionMetadata`` and ``MemoryRecords.filterTo``, KIP-98 and KIP-534). A pass reads
the cleanable segments from the log start in offset order; it never sees data of an open
transaction, because the cleanable part ends at the last stable offset (``cleaner.py``).

1. A transactional data batch of an aborted transaction (one listed in the ``.txnindex``
   entries captured at planning, ``AbortedTxns``) loses all its records and never enters the
   key map, so an aborted write neither survives nor hides an older committed value.
   Committed transactional batches follow rules 2-5 like any other batch.
2. A record without a key is kept (Kafka drops it as invalid; the produce path should refuse
   it on compacted topics instead).
3. A keyed record is kept when its offset is >= the key's offset in the map (the map covers
   the dirty section only; a key absent from it keeps its record).
4. A tombstone (null value) that passes rule 3 is kept until its batch's delete horizon: the
   first pass that keeps it rewrites the batch with attribute bit 6 set and baseTimestamp =
   now + delete.retention.ms; a later pass at or after that time drops it.
5. A batch whose records all survive and that needs no new horizon is copied byte for byte.
   Otherwise it is rebuilt with the same base offset, lastOffsetDelta, producer fields,
   transactional flag, leader epoch, timestamp type and codec (compressed batches are
   decompressed, filtered and recompressed), so every retained record keeps its offset and
   sequence.
6. A batch left without records is dropped, unless it is the last batch of a producer that
   still has state: then a 61-byte empty header (recordsCount 0, same offsets, producer id,
   epoch and base sequence) is kept so producer state survives a restart (Kafka RETAIN_EMPTY).
   For a producer whose state holds no data batch, its markers of the current epoch count as
   its last batch (they carry the epoch that fences zombies).
7. A COMMIT/ABORT marker is copied untouched while a batch of its transaction was kept by
   this pass (empty headers of rule 6 included: replaying them opens the transaction, which
   the marker must close). An ABORT marker kept that way also keeps its ``.txnindex`` entry
   in the output; every other entry of the replaced segments is dropped. A marker whose
   transaction has nothing left waits for a delete horizon exactly as a tombstone does
   (rule 4), then goes (or becomes an empty header under rule 6). Other control batches are
   copied untouched; an empty control batch is dropped unless rule 6 keeps it.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping

from pybroker.log.errors import CorruptLogError
from pybroker.log.file_names import CLEANED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, filename_prefix
from pybroker.log.index import OffsetIndex, TimeIndex
from pybroker.log.txn_index import AbortedTxn
from pybroker.records.batch import RecordBatch, update_crc, validate_batch
from pybroker.records.constants import (
    BATCH_HEADER,
    CONTROL_FLAG_MASK,
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    ControlRecordType,
    TimestampType,
)
from pybroker.records.control import parse_control_key
from pybroker.records.errors import RecordsError
from pybroker.records.record import Record, build_batch

__all__ = ["SegmentRef", "AbortedTxns", "FilterRules", "TxnPassState", "FilteredBatch", "CleanedSegmentWriter",
           "iter_file_batches", "build_offset_map", "filter_batch", "group_segments", "cleaned_paths"]

INT32_MAX = 2**31 - 1
_READ_CHUNK = 1 << 20  # many batches per pread, few syscalls


@dataclass(frozen=True)
class SegmentRef:
    """What the thread may know of one inactive segment, captured on the loop at planning time."""

    base_offset: int
    end_offset: int  # base offset of the next segment: every offset here is below it
    path: str
    size: int
    offset_index_bytes: int
    time_index_bytes: int


class AbortedTxns:
    """The aborted transactions overlapping the cleanable segments, by producer (rule 1).

    A producer's transactions never overlap, so a transactional batch is aborted exactly when
    its base offset lies in one of its producer's aborted [first offset, marker offset] ranges.
    Immutable once built (captured on the loop, read by the thread).
    """

    def __init__(self, entries: Iterable[AbortedTxn]) -> None:
        by_producer: dict[int, list[AbortedTxn]] = {}
        for entry in entries:
            by_producer.setdefault(entry.producer_id, []).append(entry)
        self._by_producer = {pid: sorted(txns, key=lambda t: t.first_offset) for pid, txns in by_producer.items()}
        self._firsts = {pid: [t.first_offset for t in txns] for pid, txns in self._by_producer.items()}

    def covers(self, producer_id: int, offset: int) -> bool:
        """True when ``offset`` of ``producer_id`` belongs to an aborted transaction."""
        return self._containing(producer_id, offset) is not None

    def ended_by(self, producer_id: int, marker_offset: int) -> AbortedTxn | None:
        """The entry whose ABORT marker is at ``marker_offset``."""
        entry = self._containing(producer_id, marker_offset)
        return entry if entry is not None and entry.last_offset == marker_offset else None

    def _containing(self, producer_id: int, offset: int) -> AbortedTxn | None:
        firsts = self._firsts.get(producer_id)
        if not firsts:
            return None
        i = bisect_right(firsts, offset) - 1
        entry = self._by_producer[producer_id][i] if i >= 0 else None
        return entry if entry is not None and offset <= entry.last_offset else None


@dataclass(frozen=True)
class FilterRules:
    """The inputs of rules 1-7 besides the batch itself, fixed for a whole pass."""

    now_ms: int
    delete_retention_ms: int
    producer_last_offsets: Mapping[int, int]  # producer id -> last offset of its last data batch
    producer_marker_epochs: Mapping[int, int]  # producer id -> epoch, for producers without one (rule 6)
    aborted: AbortedTxns


@dataclass
class TxnPassState:
    """What rule 7 remembers while a pass reads the log in order (Kafka ``CleanedTransactionMetadata``)."""

    producers_with_data: set[int] = field(default_factory=set)  # a batch of their open txn was kept
    kept_aborted: list[AbortedTxn] = field(default_factory=list)  # entries of the current output

    def take_kept_aborted(self) -> list[AbortedTxn]:
        """The ``.txnindex`` entries of the output just finished; starts the next one empty."""
        kept, self.kept_aborted = self.kept_aborted, []
        return kept


@dataclass(frozen=True)
class FilteredBatch:
    """Outcome of ``filter_batch``: the bytes to write (None = drop) and what changed."""

    data: bytes | memoryview | None
    changed: bool
    records_removed: int
    tombstone_horizon: int | None  # delete horizon of tombstones or a marker still in ``data``


def cleaned_paths(dir_path: str, base_offset: int) -> tuple[str, str, str]:
    """``.log.cleaned``, ``.index.cleaned`` and ``.timeindex.cleaned`` paths for ``base_offset``."""
    prefix = os.path.join(dir_path, filename_prefix(base_offset))
    return (prefix + LOG_SUFFIX + CLEANED_SUFFIX, prefix + INDEX_SUFFIX + CLEANED_SUFFIX,
            prefix + TIME_INDEX_SUFFIX + CLEANED_SUFFIX)


def iter_file_batches(path: str, size: int) -> Iterator[RecordBatch]:
    """Every batch in the first ``size`` bytes of ``path``, CRC-checked.

    Raises CorruptLogError when the file is shorter than ``size`` (it was truncated after the
    job was planned) or a batch is malformed; the job then fails and nothing is swapped.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        pos = 0
        while pos + RECORD_BATCH_OVERHEAD <= size:
            chunk = os.pread(fd, min(_READ_CHUNK, size - pos), pos)
            first = _batch_size(chunk, 0, path, pos)
            if first > len(chunk):
                chunk = os.pread(fd, first, pos)
                if len(chunk) < first:
                    raise CorruptLogError(f"{path} is shorter than planned: batch at {pos} is cut")
            off = 0
            while off + RECORD_BATCH_OVERHEAD <= len(chunk):
                n = _batch_size(chunk, off, path, pos + off)
                if off + n > len(chunk):
                    break
                yield validate_batch(chunk, off)
                off += n
            pos += off
    finally:
        os.close(fd)


def _batch_size(chunk: bytes, off: int, path: str, position: int) -> int:
    if len(chunk) - off < RECORD_BATCH_OVERHEAD:
        raise CorruptLogError(f"{path} is shorter than planned: no batch header at {position}")
    n = int.from_bytes(chunk[off + 8: off + 12], "big", signed=True) + LOG_OVERHEAD
    if n < RECORD_BATCH_OVERHEAD:
        raise CorruptLogError(f"Corrupt batch length {n} in {path} at {position}")
    return n


def build_offset_map(segments: list[SegmentRef], first_dirty: int, capacity: int,
                     aborted: AbortedTxns) -> tuple[dict[bytes, int], int]:
    """(key -> latest offset in the dirty section, end offset of the section mapped).

    Control batches and aborted transactional batches are left out (rule 1).

    Whole segments from the one holding ``first_dirty`` are added while the map stays within
    ``capacity`` keys (the dedupe buffer); the first dirty segment is always added so that a
    pass makes progress. The end offset (the next cleaner checkpoint) is the end of the last
    segment added, or ``first_dirty`` when there is no dirty segment.
    """
    offsets: dict[bytes, int] = {}
    end = first_dirty
    for ref in segments:
        if ref.end_offset <= first_dirty:
            continue
        found: dict[bytes, int] = {}
        for rb in iter_file_batches(ref.path, ref.size):
            if rb.is_control or rb.last_offset < first_dirty or _is_aborted(rb, aborted):
                continue
            for record in rb.records():
                if record.key is not None and record.offset >= first_dirty:
                    found[record.key] = record.offset
        if offsets and len(offsets) + sum(1 for k in found if k not in offsets) > capacity:
            break
        offsets.update(found)
        end = ref.end_offset
    return offsets, end


def _is_aborted(rb: RecordBatch, aborted: AbortedTxns) -> bool:
    return rb.is_transactional and aborted.covers(rb.producer_id, rb.base_offset)


def _is_last_batch_of_producer(rb: RecordBatch, rules: FilterRules) -> bool:
    """Rule 6 (Kafka ``isBatchLastRecordOfProducer``)."""
    if rb.producer_id < 0:
        return False
    last_offset = rules.producer_last_offsets.get(rb.producer_id)
    if last_offset is not None:
        return rb.last_offset == last_offset
    return rb.is_control and rules.producer_marker_epochs.get(rb.producer_id) == rb.producer_epoch


def empty_batch_header(rb: RecordBatch) -> bytes:
    """Kafka ``DefaultRecordBatch.writeEmptyHeader``: same offsets and producer fields, no records."""
    h = rb.header()
    attributes = h.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK)
    buf = bytearray(RECORD_BATCH_OVERHEAD)
    BATCH_HEADER.pack_into(buf, 0, h.base_offset, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD,
                           h.partition_leader_epoch, CURRENT_MAGIC, 0, attributes, h.last_offset_delta,
                           h.max_timestamp, h.max_timestamp, h.producer_id, h.producer_epoch,
                           h.base_sequence, 0)
    update_crc(buf, 0)
    return bytes(buf)


def filter_batch(rb: RecordBatch, offset_map: Mapping[bytes, int], rules: FilterRules,
                 txns: TxnPassState) -> FilteredBatch:
    """Apply the module doc's rules 1-7 to one batch; batches must come in offset order."""
    if rb.is_control:
        return _filter_control_batch(rb, rules, txns)
    result = _filter_data_batch(rb, offset_map, rules)
    if rb.is_transactional and result.data is not None:
        txns.producers_with_data.add(rb.producer_id)
    return result


def _filter_data_batch(rb: RecordBatch, offset_map: Mapping[bytes, int], rules: FilterRules) -> FilteredBatch:
    """Rules 1-6."""
    records = rb.records()
    horizon = rb.delete_horizon_ms
    if _is_aborted(rb, rules.aborted):
        kept: list[Record] = []
    else:
        kept = [r for r in records
                if r.key is None or (r.offset >= offset_map.get(r.key, -1)
                                     and (r.value is not None or horizon is None or rules.now_ms < horizon))]
    removed = len(records) - len(kept)
    if not kept:
        return _emptied(rb, records, rules)
    has_tombstones = any(r.value is None for r in kept)
    if horizon is None and has_tombstones:
        horizon = rules.now_ms + rules.delete_retention_ms
    elif removed == 0:
        return FilteredBatch(rb.raw(), False, 0, horizon if has_tombstones else None)
    return FilteredBatch(_rebuild(rb, kept, horizon), True, removed, horizon if has_tombstones else None)


def _filter_control_batch(rb: RecordBatch, rules: FilterRules, txns: TxnPassState) -> FilteredBatch:
    """Rules 6 and 7."""
    records = rb.records()
    if not records:
        return _emptied(rb, records, rules)
    try:
        _, control_type = parse_control_key(records[0].key)
    except RecordsError:
        control_type = None
    if control_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        return FilteredBatch(rb.raw(), False, 0, None)
    if rb.producer_id in txns.producers_with_data:
        txns.producers_with_data.discard(rb.producer_id)
        entry = rules.aborted.ended_by(rb.producer_id, rb.base_offset)
        if entry is not None:
            txns.kept_aborted.append(entry)
        return FilteredBatch(rb.raw(), False, 0, None)
    horizon = rb.delete_horizon_ms
    if horizon is None:
        horizon = rules.now_ms + rules.delete_retention_ms
        return FilteredBatch(_rebuild(rb, records, horizon), True, 0, horizon)
    if rules.now_ms < horizon:
        return FilteredBatch(rb.raw(), False, 0, horizon)
    return _emptied(rb, records, rules)


def _emptied(rb: RecordBatch, records: list[Record], rules: FilterRules) -> FilteredBatch:
    """Rule 6 for a batch that keeps none of ``records``."""
    if _is_last_batch_of_producer(rb, rules):
        return FilteredBatch(empty_batch_header(rb) if records else rb.raw(), bool(records), len(records), None)
    return FilteredBatch(None, True, len(records), None)


def _rebuild(rb: RecordBatch, kept: list[Record], horizon: int | None) -> bytes:
    """Rule 5: ``kept`` in a batch with ``rb``'s header fields."""
    log_append_time = rb.timestamp_type == TimestampType.LOG_APPEND_TIME
    return build_batch(
        kept, base_offset=rb.base_offset, compression=rb.compression, timestamp_type=rb.timestamp_type,
        producer_id=rb.producer_id, producer_epoch=rb.producer_epoch, base_sequence=rb.base_sequence,
        partition_leader_epoch=rb.partition_leader_epoch, last_offset_delta=rb.last_offset_delta,
        is_transactional=rb.is_transactional, is_control=rb.is_control,
        max_timestamp=rb.max_timestamp if log_append_time else None, delete_horizon_ms=horizon)


def group_segments(segments: list[SegmentRef], max_bytes: int, max_index_bytes: int) -> list[list[SegmentRef]]:
    """Consecutive segments merged while one output fits (Kafka ``groupSegmentsBySize``).

    A group's input size bounds its output size, so the output never exceeds segment.bytes,
    its indexes fit segment.index.bytes, and its offsets fit the int32 relative offsets.
    """
    groups: list[list[SegmentRef]] = []
    for ref in segments:
        if groups:
            group = groups[-1]
            if (sum(s.size for s in group) + ref.size <= max_bytes
                    and sum(s.offset_index_bytes for s in group) + ref.offset_index_bytes <= max_index_bytes
                    and sum(s.time_index_bytes for s in group) + ref.time_index_bytes <= max_index_bytes
                    and ref.end_offset - 1 - group[0].base_offset <= INT32_MAX):
                group.append(ref)
                continue
        groups.append([ref])
    return groups


class CleanedSegmentWriter:
    """Writes one ``<base>.log.cleaned`` and its indexes (see the module doc). Thread-confined."""

    def __init__(self, dir_path: str, base_offset: int, *, index_interval_bytes: int,
                 max_index_size: int) -> None:
        self.base_offset = base_offset
        self.paths = cleaned_paths(dir_path, base_offset)
        for path in self.paths:  # a stale file would lend its entries to the new index
            _unlink(path)
        self._fd: int | None = os.open(self.paths[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._offset_index = OffsetIndex(self.paths[1], base_offset, max_index_size, preallocate=True)
        self._time_index = TimeIndex(self.paths[2], base_offset, max_index_size, preallocate=True)
        self._index_interval_bytes = index_interval_bytes
        self._since_index_entry = 0
        self._max_timestamp = -1
        self._offset_of_max_timestamp = base_offset
        self.size = 0

    def append(self, data: bytes | memoryview, last_offset: int, max_timestamp: int) -> None:
        """Write one batch; index entries follow ``LogSegment.append``."""
        assert self._fd is not None
        position = self.size
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.write(self._fd, view[written:])
        self.size += len(view)
        if max_timestamp > self._max_timestamp:
            self._max_timestamp, self._offset_of_max_timestamp = max_timestamp, last_offset
        if self._since_index_entry > self._index_interval_bytes:
            self._offset_index.append(last_offset, position)
            self._time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self._since_index_entry = 0
        self._since_index_entry += len(view)

    def finish(self) -> None:
        """Final time-index entry, trim the indexes, fsync all three files and close them."""
        assert self._fd is not None
        self._time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True)
        for index in (self._offset_index, self._time_index):
            index.trim_to_valid_size()
            index.flush()
            index.close()
            _fsync_path(index.path)
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = None

    def discard(self) -> None:
        """Close whatever is open and remove the three files."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._offset_index.delete()
        self._time_index.delete()
        for path in self.paths:
            _unlink(path)


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
