"""Idempotent-producer state of one partition: the epoch and last batches of each producer id.

Kafka keeps, per producer id, the current epoch and the metadata of the last five batches
(``ProducerStateEntry.NUM_BATCHES_TO_RETAIN``): enough to answer a producer that retries any of
its up to five in-flight requests with the offsets of the original append instead of writing
the batch twice. The rules (``ProducerAppendInfo.checkProducerEpoch/checkSequence`` and
``UnifiedLog.analyzeAndValidateProducerState``) are:

1. An epoch below the producer's current epoch is a zombie: ``InvalidProducerEpochError``.
2. Same epoch and (first_seq, last_seq) equal to one of the retained batches: a duplicate;
   answer with that batch's offsets, write nothing.
3. A new epoch must start at sequence 0, else ``OutOfOrderSequenceError``.
4. Same epoch: the first sequence must be ``last_seq + 1`` (wrapping from 2**31-1 to 0), else
   ``OutOfOrderSequenceError``.
5. An unknown producer id must start at sequence 0. Otherwise, if its state may have been
   removed (the log head was deleted, or the id expired) the answer is
   ``UnknownProducerIdError`` so the client resets its sequence; if not, ``OutOfOrderSequenceError``.

The state is in memory only (no ``.snapshot`` files yet): ``PartitionLog`` rebuilds it at open
and after truncation by replaying batch headers (``load_batch``), which carry producer id,
epoch, base sequence and offsets, so no record is ever decoded. Not thread-safe.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from typing import Mapping

from pybroker.log.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    UnknownProducerIdError,
)

__all__ = [
    "BatchMetadata",
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


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What is remembered of one appended batch."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class ProducerCheckResult:
    """``kind`` plus, for a duplicate, the original batch."""

    kind: SequenceCheck
    duplicate: BatchMetadata | None = None


@dataclass(slots=True)
class ProducerStateEntry:
    """State of one producer id."""

    producer_id: int
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    last_timestamp: int = -1

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
        self._expired: set[int] = set()
        self._head_truncated = False

    @property
    def producers(self) -> Mapping[int, ProducerStateEntry]:
        """Read-only view of the current entries."""
        return self._producers

    def get(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def check_and_prepare(self, producer_id: int, epoch: int, base_seq: int,
                          last_seq: int) -> ProducerCheckResult:
        """Validate an idempotent batch before it is written; raises on rules 1, 3, 4, 5."""
        entry = self._producers.get(producer_id)
        if entry is None:
            if base_seq == 0:
                return ProducerCheckResult(SequenceCheck.NEW)
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
            if dup is not None:
                return ProducerCheckResult(SequenceCheck.DUPLICATE, dup)
            if entry.batches and not in_sequence(entry.last_seq, base_seq):
                raise OutOfOrderSequenceError(
                    f"Out of order sequence number for producer {producer_id} at epoch {epoch}: "
                    f"{base_seq} (incoming seq. number), {entry.last_seq} (current end sequence number)")
            return ProducerCheckResult(SequenceCheck.OK)
        if base_seq != 0:
            raise OutOfOrderSequenceError(
                f"Invalid sequence number for new epoch of producer {producer_id}: {epoch} "
                f"(request epoch), {base_seq} (seq. number), {entry.epoch} (current producer epoch)")
        return ProducerCheckResult(SequenceCheck.OK)

    def update(self, producer_id: int, epoch: int, first_seq: int, last_seq: int,
               first_offset: int, last_offset: int, timestamp: int) -> None:
        """Record a batch that was appended (after check_and_prepare accepted it)."""
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerStateEntry(producer_id, epoch)
            self._expired.discard(producer_id)
        entry.add(epoch, BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp))

    def load_batch(self, producer_id: int, epoch: int, first_seq: int, last_seq: int,
                   first_offset: int, last_offset: int, timestamp: int, *,
                   is_control: bool = False) -> None:
        """Replay a batch header found in the log (load, truncation, follower append): no checks.

        A batch with an older epoch than the one already seen is skipped rather than letting
        the epoch go backwards; a control batch (transaction marker) only moves the epoch.
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
            return
        self.update(producer_id, epoch, first_seq, last_seq, first_offset, last_offset, timestamp)

    def needs_rebuild_after_truncation(self, offset: int) -> bool:
        """True when some retained batch ends at or after ``offset`` (state must be replayed)."""
        return any(e.batches and e.batches[-1].last_offset >= offset for e in self._producers.values())

    def truncate_head(self, log_start_offset: int) -> None:
        """The log head below ``log_start_offset`` is gone: unknown ids may be removed ones.

        Entries are kept (Kafka >= 2.5 behaviour, KIP-360) so that a producer whose batches
        were all deleted by retention can still continue its sequence.
        """
        if log_start_offset > 0:
            self._head_truncated = True

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Drop producers idle for longer than ``expiration_ms``; returns how many."""
        expired = [pid for pid, e in self._producers.items() if now_ms - e.last_timestamp >= expiration_ms]
        for pid in expired:
            del self._producers[pid]
            if len(self._expired) < _MAX_EXPIRED_REMEMBERED:
                self._expired.add(pid)
        return len(expired)

    def clear(self) -> None:
        """Forget everything (before a full replay)."""
        self._producers.clear()
