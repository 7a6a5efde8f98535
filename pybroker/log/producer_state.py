"""Idempotent-producer state of one partition: the epoch and last batches of each producer id.

Kafka keeps, per producer id, the current epoch and the metadata of the last five batches
(``ProducerStateEntry.NUM_BATCHES_TO_RETAIN``): enough to answer a producer that retries any of
its up to five in-flight requests with the offsets of the original append instead of writing
the batch twice. The rules (``ProducerAppendInfo.checkProducerEpoch/checkSequence`` and
``UnifiedLog.analyzeAndValidateProducerState``) are:

1. An epoch below the producer's current epoch is a zombie: ``InvalidProducerEpochError``.
2. Same epoch and (first_seq, last_seq) equal to one of the retained batches: a duplicate;
   answer with that batch's offsets, write nothing.
   2b. Not for a transactional batch while the producer has no open transaction here: the
   retained batch belongs to a transaction whose marker is written, which no client retries.
   librdkafka reuses an aborted transaction's sequence numbers at the same epoch when it purged
   a batch it had sent but not seen answered (chaos rounds 7003, 8013): answered as a duplicate,
   the next transaction committed without its records. ``UnknownProducerIdError`` instead: the
   Java client and librdkafka take it as an abortable error and bump the epoch, so the sequence
   numbers restart at 0 (librdkafka takes an out-of-order answer to its first batch as fatal).
   Kafka (transaction version 1) answers the duplicate.
3. A new epoch must start at sequence 0, else ``OutOfOrderSequenceError``.
4. Same epoch: the first sequence must be ``last_seq + 1`` (wrapping from 2**31-1 to 0), else
   ``OutOfOrderSequenceError``.
5. An unknown producer id must start at sequence 0. Otherwise, if its state may have been
   removed (the log head was deleted, or the id expired) the answer is
   ``UnknownProducerIdError`` so the client resets its sequence; if not, ``OutOfOrderSequenceError``.

Transactions: the first transactional batch of a producer opens a transaction at its base
offset; the producer's COMMIT or ABORT marker closes it (``complete_txn``). The smallest first
offset of the open transactions is the *first unstable offset*: the last stable offset (LSO)
read-committed consumers may read up to is the smaller of it and the high watermark.

``PartitionLog`` rebuilds this state at open and after truncation from the newest usable
``.snapshot`` file (``producer_snapshot.py``) plus the batch headers after it (``load_batch``;
only markers have their one control record decoded). Not thread-safe.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple

from pybroker.log.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    UnknownProducerIdError,
)

__all__ = [
    "BatchMetadata",
    "CompletedTxn",
    "ProducerCheckResult",
    "ProducerStateEntry",
    "ProducerStateManager",
    "SequenceCheck",
]

INT32_MAX = 2**31 - 1
NUM_BATCHES_TO_RETAIN = 5
_MAX_EXPIRED_REMEMBERED = 100_000


class SequenceCheck(enum.Enum):
    """Outcome of ``check_and_prepare`` that does not raise."""

    NEW = "new"  # first batch of an unknown producer id (sequence 0)
    OK = "ok"  # continues the producer's sequence, or starts a new epoch at 0
    DUPLICATE = "duplicate"  # retry of a retained batch: do not write it again


class BatchMetadata(NamedTuple):
    """What is remembered of one appended batch. A named tuple, immutable as a frozen dataclass would be,
    built in a quarter of its time: every idempotent append builds one."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction closed by a marker at ``last_offset``; aborted ones go to the ``.txnindex``."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(frozen=True, slots=True)
class ProducerCheckResult:
    """``kind`` plus, for a duplicate, the original batch."""

    kind: SequenceCheck
    duplicate: BatchMetadata | None = None


# The answers without a duplicate, built once: every idempotent append gets one (frozen, so shared).
_NEW = ProducerCheckResult(SequenceCheck.NEW)
_OK = ProducerCheckResult(SequenceCheck.OK)


@dataclass(slots=True)
class ProducerStateEntry:
    """State of one producer id."""

    producer_id: int
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int | None = None

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None

    def add(self, epoch: int, meta: BatchMetadata) -> None:
        if epoch != self.epoch:  # a new epoch restarts the sequence space
            self.epoch = epoch
            self.batches.clear()
        self.batches.append(meta)
        self.last_timestamp = max(self.last_timestamp, meta.timestamp)


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """True when ``next_seq`` directly follows ``last_seq`` (int32 wrap to 0)."""
    return next_seq == last_seq + 1 or (last_seq == INT32_MAX and next_seq == 0)


class ProducerStateManager:
    """Producer id -> ProducerStateEntry for one partition; see the module doc for the rules."""

    def __init__(self) -> None:
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        # first offset -> marker offset of a completed transaction whose marker the high watermark
        # has not passed: it stays unstable, as a new leader may not have the marker (Kafka's unreplicatedTxns)
        self._unreplicated: dict[int, int] = {}
        self._expired: set[int] = set()
        self._head_truncated = False

    @property
    def producers(self) -> Mapping[int, ProducerStateEntry]:
        """Read-only view of the current entries."""
        return self._producers

    def get(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def check_and_prepare(self, producer_id: int, epoch: int, base_seq: int,
                          last_seq: int, *, transactional: bool = False) -> ProducerCheckResult:
        """Validate an idempotent batch before it is written; raises on rules 1, 3, 4, 5 and 2b."""
        entry = self._producers.get(producer_id)
        if entry is None:
            if base_seq == 0:
                return _NEW
            if self._head_truncated or producer_id in self._expired:
                raise UnknownProducerIdError(
                    f"Found no record of producerId={producer_id} on the broker (its state was removed); "
                    f"sequence {base_seq} cannot be checked")
            raise OutOfOrderSequenceError(
                f"Out of order sequence number for producer {producer_id}: first sequence {base_seq} "
                f"of a new producer must be 0")
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"Epoch of producer {producer_id} at offset is {epoch}, which is smaller than the last "
                f"seen epoch {entry.epoch}")
        if epoch == entry.epoch:
            dup = entry.find_duplicate(base_seq, last_seq)
            if dup is not None and transactional and entry.current_txn_first_offset is None:
                raise UnknownProducerIdError(
                    f"Sequence numbers {base_seq}..{last_seq} of producer {producer_id} at epoch {epoch} were "
                    f"used by a batch of a transaction that has ended (offsets {dup.first_offset}.."
                    f"{dup.last_offset}): not a retry of it; bump the epoch to start the sequence again")
            if dup is not None:
                return ProducerCheckResult(SequenceCheck.DUPLICATE, dup)
            if entry.batches and not in_sequence(entry.batches[-1].last_seq, base_seq):  # last_seq, inline
                raise OutOfOrderSequenceError(
                    f"Out of order sequence number for producer {producer_id} at epoch {epoch}: "
                    f"{base_seq} (incoming seq. number), {entry.last_seq} (current end sequence number)")
            return _OK
        if base_seq != 0:
            raise OutOfOrderSequenceError(
                f"Invalid sequence number for new epoch of producer {producer_id}: {epoch} "
                f"(request epoch), {base_seq} (seq. number), {entry.epoch} (current producer epoch)")
        return _OK

    def update(self, producer_id: int, epoch: int, first_seq: int, last_seq: int,
               first_offset: int, last_offset: int, timestamp: int, *, transactional: bool = False) -> None:
        """Record a batch that was appended (after check_and_prepare accepted it)."""
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerStateEntry(producer_id, epoch)
            self._expired.discard(producer_id)
        entry.add(epoch, BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp))
        if transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = first_offset
            self._ongoing[producer_id] = first_offset

    def complete_txn(self, producer_id: int, epoch: int, marker_offset: int, *, commit: bool,
                     coordinator_epoch: int, timestamp: int) -> CompletedTxn:
        """Apply a COMMIT/ABORT marker of ``producer_id`` written at ``marker_offset``.

        A marker without an open transaction (a retry, or an abort of a transaction that wrote
        nothing here) still completes one from the marker to itself, as Kafka does.
        """
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerStateEntry(producer_id, epoch)
        elif epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        first = entry.current_txn_first_offset
        entry.current_txn_first_offset = None
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        self._ongoing.pop(producer_id, None)
        if first is not None:
            self._unreplicated[first] = marker_offset
        return CompletedTxn(producer_id, marker_offset if first is None else first, marker_offset, not commit)

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest transaction that is open or whose marker is not replicated."""
        if not self._ongoing and not self._unreplicated:  # every fetch asks: no list for the usual answer
            return None
        return min([*self._ongoing.values(), *self._unreplicated], default=None)

    def first_undecided_offset(self) -> int | None:
        """First offset of the oldest open transaction, None when none is open."""
        return min(self._ongoing.values(), default=None)

    def on_high_watermark(self, high_watermark: int) -> None:
        """Transactions whose marker is below ``high_watermark`` are replicated: stable."""
        if self._unreplicated:
            for first in [f for f, marker in self._unreplicated.items() if marker < high_watermark]:
                del self._unreplicated[first]

    def ongoing_first_offsets(self) -> Mapping[int, int]:
        """Producer id -> first offset of each open transaction."""
        return self._ongoing

    def load_batch(self, producer_id: int, epoch: int, first_seq: int, last_seq: int,
                   first_offset: int, last_offset: int, timestamp: int, *,
                   is_control: bool = False, transactional: bool = False) -> None:
        """Replay a data batch header found in the log (load, truncation, follower append): no checks.

        A batch with an older epoch than the one already seen is skipped rather than letting
        the epoch go backwards; a control batch only moves the epoch (markers go through
        ``complete_txn``).
        """
        if producer_id < 0:
            return
        entry = self._producers.get(producer_id)
        if entry is not None and epoch < entry.epoch:
            return
        if is_control or first_seq < 0:
            if entry is None:
                entry = self._producers[producer_id] = ProducerStateEntry(producer_id, epoch)
            elif epoch != entry.epoch:
                entry.epoch = epoch
                entry.batches.clear()
            entry.last_timestamp = max(entry.last_timestamp, timestamp)
            if transactional and not is_control and entry.current_txn_first_offset is None:
                # The coordinators' own transactional batches carry no sequence (Kafka's
                # ProducerAppendInfo opens the transaction for every transactional data batch).
                entry.current_txn_first_offset = first_offset
                self._ongoing[producer_id] = first_offset
            return
        self.update(producer_id, epoch, first_seq, last_seq, first_offset, last_offset, timestamp,
                    transactional=transactional)

    def needs_rebuild_after_truncation(self, offset: int) -> bool:
        """True when some retained batch ends at or after ``offset`` (state must be replayed)."""
        return any(e.batches and e.batches[-1].last_offset >= offset for e in self._producers.values()) \
            or any(marker >= offset for marker in self._unreplicated.values())

    def truncate_head(self, log_start_offset: int) -> None:
        """The log head below ``log_start_offset`` is gone: unknown ids may be removed ones.

        Entries are kept (Kafka >= 2.5 behaviour, KIP-360) so that a producer whose batches
        were all deleted by retention can still continue its sequence.
        """
        if log_start_offset > 0:
            self._head_truncated = True

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Drop producers idle for longer than ``expiration_ms`` (``producer.id.expiration.ms``)
        that have no open transaction; returns how many."""
        expired = [pid for pid, e in self._producers.items()
                   if now_ms - e.last_timestamp >= expiration_ms and e.current_txn_first_offset is None]
        for pid in expired:
            del self._producers[pid]
            if len(self._expired) < _MAX_EXPIRED_REMEMBERED:
                self._expired.add(pid)
        return len(expired)

    def clear(self) -> None:
        """Forget everything (before a full replay)."""
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()

    def restore(self, entries: list[ProducerStateEntry]) -> None:
        """Start from the entries of a snapshot (replacing everything)."""
        self.clear()
        for entry in entries:
            self._producers[entry.producer_id] = entry
            if entry.current_txn_first_offset is not None:
                self._ongoing[entry.producer_id] = entry.current_txn_first_offset
