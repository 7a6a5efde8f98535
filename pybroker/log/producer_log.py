"""Producer and transaction state as a log sees it: the epoch fence of appends without sequences, the
state change of every written batch, snapshot load and replay, and the aborted transactions of a fetch
(the producer-state parts of Kafka's ``UnifiedLog`` and ``LogLoader``).

Producer state (``producer_state.py``) is snapshotted to ``<offset>.snapshot`` files
(``producer_snapshot.py``) at every roll and at close; opening the log loads the newest snapshot at or
below the recovery point and replays only the batches after it. Transaction markers (control batches)
close a producer's transaction; an ABORT adds an entry to the ``.txnindex`` of the segment it lands in,
which ``collect_aborted`` reads for read-committed fetches.
"""

from __future__ import annotations

import logging
import os

from pybroker.log.errors import InvalidProducerEpochError, TransactionCoordinatorFencedError
from pybroker.log.producer_snapshot import delete_snapshots, read_snapshot, snapshot_offsets, snapshot_path, \
    write_snapshot
from pybroker.log.producer_state import ProducerStateManager
from pybroker.log.segment import LogSegment
from pybroker.log.segments import LogSegments
from pybroker.log.txn_index import AbortedTxn
from pybroker.records.batch import BatchHeader, RecordBatch, increment_sequence
from pybroker.records.constants import CONTROL_FLAG_MASK, LOG_OVERHEAD, TRANSACTIONAL_FLAG_MASK, ControlRecordType
from pybroker.records.control import parse_control_key, parse_end_txn_marker
from pybroker.records.errors import RecordsError

__all__ = ["FIRST_BUMPED_MARKER_TRANSACTION_VERSION", "LAST_PRODUCER_EPOCH", "apply_batch", "check_unsequenced_epoch", "collect_aborted", "marker_of", "rebuild", "take_snapshot"]

logger = logging.getLogger("pybroker.log")


FIRST_BUMPED_MARKER_TRANSACTION_VERSION = 2
"""Transactions V2 (KIP-890 part 2): the coordinator bumps the producer's epoch at the end of every transaction,
and its markers carry the bumped epoch (WriteTxnMarkers v2's TransactionVersion tells the leader, KIP-1228)."""

LAST_PRODUCER_EPOCH = 2**15 - 1
"""Short.MaxValue: the producer epoch no bump goes past."""


def check_unsequenced_epoch(state: ProducerStateManager, h: BatchHeader, rb: RecordBatch,
                            transaction_version: int = 0) -> None:
    """Markers and TxnOffsetCommit batches carry a producer but no sequence: only their epoch (and a
    marker's coordinator epoch) is checked against the producer's.

    A marker of a V2 transaction (``transaction_version`` 2) must be above the producer's epoch, not merely
    at it: a V2 producer writes its next transaction at the epoch the last marker carried, so a marker at
    that epoch is a late one of the transaction before, and would close the open one. One exception is
    the retry of the marker just written (same epoch, no transaction open), which Kafka also lets through
    (KAFKA-19999), or a coordinator whose answer was lost would never complete its transaction. The other is
    the last epoch, 32767, which has no epoch above it: the coordinator aborts a transaction open there with
    that epoch (KAFKA-20090), and Kafka's leaders take its V2 marker at the producer's epoch since PR #21469.
    After that abort the producer goes on with a new producer id (PR #21506): no later transaction of it runs at
    that epoch for a late marker to close."""
    entry = state.get(h.producer_id)
    marker = marker_of(rb) if rb.is_control else None
    if entry is not None:
        bumped = marker is not None and transaction_version >= FIRST_BUMPED_MARKER_TRANSACTION_VERSION
        if h.producer_epoch < entry.epoch or (
                bumped and h.producer_epoch == entry.epoch < LAST_PRODUCER_EPOCH
                and entry.current_txn_first_offset is not None):
            older = "not above" if bumped else "older than"
            raise InvalidProducerEpochError(
                f"Batch of producer {h.producer_id} has epoch {h.producer_epoch}, {older} the current epoch "
                f"{entry.epoch}" + (" (a transaction V2 marker carries the bumped epoch)" if bumped else ""))
    if entry is not None and marker is not None and marker[1] < entry.coordinator_epoch:
        raise TransactionCoordinatorFencedError(
            f"Marker of producer {h.producer_id} comes from coordinator epoch {marker[1]}, "
            f"older than coordinator epoch {entry.coordinator_epoch} seen before")


def apply_batch(state: ProducerStateManager, h: BatchHeader, batch: RecordBatch | None, segment: LogSegment) -> None:
    """Update producer state for a written batch that needs no sequence check.

    ``batch`` is needed for control batches only: a COMMIT/ABORT marker closes the
    producer's transaction, and an aborted one is indexed in ``segment``'s ``.txnindex``.
    """
    if h.producer_id < 0:
        return
    last = h.base_offset + h.last_offset_delta
    if h.attributes & CONTROL_FLAG_MASK:
        marker = marker_of(batch) if batch is not None else None
        if marker is None:
            state.load_batch(h.producer_id, h.producer_epoch, -1, -1, h.base_offset, last,
                             h.max_timestamp, is_control=True)
            return
        commit, coordinator_epoch = marker
        completed = state.complete_txn(h.producer_id, h.producer_epoch, h.base_offset,
                                       commit=commit, coordinator_epoch=coordinator_epoch,
                                       timestamp=h.max_timestamp)
        if completed.is_aborted:
            first_undecided = state.first_undecided_offset()
            lso = completed.last_offset + 1 if first_undecided is None else first_undecided
            segment.txn_index.append(AbortedTxn(h.producer_id, completed.first_offset,
                                                completed.last_offset, lso))
        return
    last_seq = increment_sequence(h.base_sequence, h.last_offset_delta) if h.base_sequence >= 0 else -1
    state.load_batch(h.producer_id, h.producer_epoch, h.base_sequence, last_seq,
                     h.base_offset, last, h.max_timestamp,
                     transactional=bool(h.attributes & TRANSACTIONAL_FLAG_MASK))


def rebuild(state: ProducerStateManager, dir_path: str, segments: LogSegments, *, log_end_offset: int,
            recovery_point: int, log_start_offset: int, high_watermark: int) -> None:
    """Load the newest usable snapshot, then replay the batch headers after it; markers replayed
    also rebuild their ``.txnindex`` entries.

    Only snapshots at or below the recovery point are used: above it, the data (and the
    ``.txnindex`` entries) the snapshot summarises may not have reached the disk.
    """
    delete_snapshots(dir_path, above=log_end_offset)
    start = _load_snapshot(state, dir_path, segments.first.base_offset, recovery_point)
    for segment in segments.from_offset(start):
        segment.txn_index.truncate_to(start)
        for position, h in segment.iter_headers(start):
            if h.producer_id < 0:
                continue
            batch = None
            if h.attributes & CONTROL_FLAG_MASK:
                batch = segment.read_batch(position, h.batch_length + LOG_OVERHEAD)
            apply_batch(state, h, batch, segment)
    state.truncate_head(log_start_offset)
    state.on_high_watermark(high_watermark)


def _load_snapshot(state: ProducerStateManager, dir_path: str, first: int, recovery_point: int) -> int:
    """Restore the newest readable snapshot within [first segment base, recovery point];
    returns the offset to replay from."""
    state.clear()
    for offset in reversed(snapshot_offsets(dir_path)):
        if offset > recovery_point:
            continue
        if offset < first:
            break
        entries = read_snapshot(snapshot_path(dir_path, offset))
        if entries is None:
            logger.warning("Deleting damaged producer snapshot %s", snapshot_path(dir_path, offset))
            os.unlink(snapshot_path(dir_path, offset))
            continue
        state.restore(entries)
        return offset
    return first


def take_snapshot(state: ProducerStateManager, dir_path: str, offset: int, *, sync: bool = True) -> None:
    write_snapshot(dir_path, offset, list(state.producers.values()), sync=sync)


def collect_aborted(segments: LogSegments, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
    """Aborted transactions overlapping [fetch_offset, upper_bound), from the ``.txnindex`` files."""
    found: list[AbortedTxn] = []
    for segment in segments.from_offset(fetch_offset):
        entries, complete = segment.txn_index.collect(fetch_offset, upper_bound)
        found.extend(entries)
        if complete:
            break
    return found


def marker_of(batch: RecordBatch) -> tuple[bool, int] | None:
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
