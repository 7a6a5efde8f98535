"""Runs the pure ``TransactionCoordinator`` on the event loop (the group runtime's timers and futures).

An outcome is applied in three steps, as Kafka's coordinator does: its ``__transaction_state``
records are appended and the runtime waits until the in-sync replicas hold them; then its
answers are delivered; then its markers are written in the background (to this broker's partitions
and, through WriteTxnMarkers, to other leaders; each fully written marker set completes its transaction,
whose Complete record is persisted the same way). As Kafka's endTransaction answers from the Prepare
append's callback and hands the markers to its marker channel afterwards, a producer hears of its commit
once the decision is on the ISR: its records may not be readable (read_committed) yet, and until the
Complete record is on the ISR the transactional id answers CONCURRENT_TRANSACTIONS to InitProducerId,
AddPartitionsToTxn and EndTxn.

A change of a transaction stands only once its record is on the ISR: the runtime tells the coordinator
(``persisted``), which otherwise drops the change. A timeout abort at an exhausted epoch needs a new producer id
first (KAFKA-20090): the runtime allocates it off the timer and hands it back (``producer_id_allocated``).

Three rules keep a marker from ever reaching a log it does not belong in, and a transaction from being
reported complete before the log says so:

1. No marker of a transaction is written before its Prepare record is on the ISR: until then the Prepare is
   a pending change and the transaction is Ongoing (Kafka's endTransaction sends the markers from the
   append's callback). If the append or the ISR wait fails, the change is dropped, the transaction stays
   Ongoing, no marker is written, and the answers fail with ``CoordinatorStorageError`` whose cause the
   handlers map as Kafka's appendTransactionToLog does (a timeout or too few replicas
   COORDINATOR_NOT_AVAILABLE, a lost leadership NOT_COORDINATOR); the producer retries the EndTxn. A
   partition unloaded meanwhile answers NOT_COORDINATOR and leaves the transaction to its next leader.
2. Just before each write the marker is checked against the coordinator's current state
   (same producer id, epoch, Prepare state and coordinator epoch): a marker made stale by a
   completed transaction, a fenced producer or a moved partition is dropped, so it can never
   close the producer's next transaction.
3. Once every marker is written, the transaction's Complete* record is appended and the transaction is
   complete only when the ISR holds it (the coordinator keeps the change pending, rule 4 there); a failed
   write is retried after the backoff until it succeeds or the partition is unloaded.

The answer of each partition is handled as Kafka's TransactionMarkerRequestCompletionHandler does: a
written partition (or one whose log cannot take markers: UNSUPPORTED_FOR_MESSAGE_FORMAT, UNSUPPORTED_VERSION)
leaves the set still to write; INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED means the producer
or the coordinator moved on, so no more markers of that transaction are sent (the abort check does not
resend them either, while the marker stays what the coordinator holds); any other code (NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS*, REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, a lost connection)
is retried for the failed partitions only, after ``retry.backoff.ms`` (100 ms) doubling up to
``retry.backoff.max.ms`` (1 s), instead of at the next abort check: the producer gets
CONCURRENT_TRANSACTIONS for its next transaction until they are written. After a failover the new
coordinator's abort check resends the markers of transactions it loads in a Prepare state.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any, Awaitable, Callable

from pybroker.common.clock import Clock
from pybroker.common.ids import ProducerId
from pybroker.common.topic import TopicPartition
from pybroker.coordinator.records import Record
from pybroker.coordinator.runtime import (
    CoordinatorRuntime,
    CoordinatorStorageError,
    NotCoordinatorError,
    Persist,
    Replicated,
    deliver,
)
from pybroker.coordinator.txn_coordinator import MarkerRequest, TransactionCoordinator, TxnOutcome
from pybroker.coordinator.txn_records import TxnState
from pybroker.protocol.error_codes import ErrorCode

log = logging.getLogger("pybroker.coordinator")

WriteMarkers = Callable[[MarkerRequest], Awaitable[dict[TopicPartition, ErrorCode]]]
"""Write one marker to every partition of ``partitions``; the leader's answer per partition."""
NextProducerId = Callable[[], Awaitable[ProducerId]]
"""A new producer id (from this broker's block of the controller's ids)."""

RETRY_BACKOFF_S = 0.1
"""retry.backoff.ms: the first wait before a failed marker is sent again."""
RETRY_BACKOFF_MAX_S = 1.0
"""retry.backoff.max.ms: the wait doubles per failed attempt up to this."""

DONE = frozenset({ErrorCode.NONE, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT, ErrorCode.UNSUPPORTED_VERSION})
"""Codes after which a partition needs no marker: written, or a log that cannot hold one (Kafka's handler)."""
FENCED = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED})
"""Codes after which no marker of the transaction is sent again: the producer or coordinator moved on."""


class TxnRuntime(CoordinatorRuntime):
    def __init__(self, coordinator: TransactionCoordinator, persist: Persist, write_markers: WriteMarkers,
                 next_producer_id: NextProducerId, clock: Clock, replicated: Replicated | None = None) -> None:
        super().__init__(coordinator, persist, clock, replicated)  # type: ignore[arg-type]  # same timer protocol
        self.txn = coordinator
        self._write_markers = write_markers
        self._next_producer_id = next_producer_id
        self._marking: set[MarkerRequest] = set()
        """Markers being written now, so the abort check's resend does not send them twice at once."""
        self._fenced: set[MarkerRequest] = set()
        """Markers a leader refused as fenced: not sent again while they stay current."""

    def apply(self, outcome: TxnOutcome) -> None:  # type: ignore[override]
        for transactional_id in outcome.id_requests:
            self._spawn(self._allocate(transactional_id))
        try:
            ends = self._persist_records(outcome.records)
        except Exception as exc:
            self.txn.persisted(outcome, ok=False)
            _fail(outcome.replies, exc)
            ends, outcome = {}, _unchanged(outcome)
        finally:
            self._wake.set()
        if not outcome.markers and (self._replicated is None or not ends):
            if self._settle(outcome):
                deliver(outcome.replies)
            return
        self._spawn(self._finish(ends, outcome))

    async def _allocate(self, transactional_id: str) -> None:
        """The new producer id a timeout abort at an exhausted epoch moves its producer to (the coordinator's
        rule 7). Without one the abort waits for the next abort check (Kafka's abort check logs the allocator's
        error as a failed rollback)."""
        fresh: ProducerId | None = None
        try:
            fresh = await self._next_producer_id()
        except Exception as exc:
            log.warning("No new producer id for the timeout abort of transaction %s (%s): tried again at the "
                        "next abort check", transactional_id, exc)
        self.apply(self.txn.producer_id_allocated(transactional_id, fresh, self._clock.wall_ms()))

    def _settle(self, outcome: TxnOutcome) -> bool:
        """The outcome's records are on the ISR: its changes stand, unless the partition moved meanwhile,
        which fails the answers as Kafka's NOT_COORDINATOR."""
        if self.txn.persisted(outcome, ok=True):
            return True
        _answer_error(outcome.replies, NotCoordinatorError("the partition moved while its record was replicated"))
        return False

    async def _finish(self, ends: dict[int, int], outcome: TxnOutcome) -> None:
        """Wait for the ISR, then write the outcome's markers: those of its Prepare records only once these
        stand (rule 1); the others (the abort check's resends) in any case."""
        try:
            if self._replicated is not None and ends:
                await asyncio.gather(*(self._replicated(p, end) for p, end in ends.items()))
        except Exception as exc:
            self.txn.persisted(outcome, ok=False)
            _fail(outcome.replies, exc)
            outcome = _unchanged(outcome)
        else:
            self._settle(outcome)
        deliver(outcome.replies)  # Kafka's endTransaction answers before it hands the markers on
        await asyncio.gather(*(self._write(marker) for marker in outcome.markers))

    async def _write(self, marker: MarkerRequest) -> None:
        """Write ``marker`` until it is written, fenced or no longer current; a retry goes to the partitions
        that failed. An empty transaction (a V2 abort with nothing open) has no marker to write and is
        completed at once."""
        self._fenced = {m for m in self._fenced if self._is_current(m)}
        if marker in self._marking or marker in self._fenced:
            return
        self._marking.add(marker)
        pending = marker
        backoff = RETRY_BACKOFF_S
        try:
            while True:
                if not self._is_current(marker):
                    return
                try:
                    codes = await self._write_markers(pending) if pending.partitions else {}
                except Exception:
                    log.exception("Writing the markers of transaction %s failed", marker.transactional_id)
                    codes = {tp: ErrorCode.UNKNOWN_SERVER_ERROR for tp in pending.partitions}
                fenced = {tp: code for tp, code in codes.items() if code in FENCED}
                if fenced:
                    log.info("Markers of transaction %s refused (%s): no more are sent", marker.transactional_id,
                             {f"{t}-{p}": code.name for (t, p), code in fenced.items()})
                    self._fenced.add(marker)
                    return
                codes = {tp: codes.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR) for tp in pending.partitions}
                failed = tuple(tp for tp, code in codes.items() if code not in DONE)
                if not failed:
                    break
                log.info("Markers of transaction %s not written yet, retried in %d ms: %s", marker.transactional_id,
                         backoff * 1000, {f"{t}-{p}": codes[TopicPartition(t, p)].name for t, p in failed})
                pending = replace(marker, partitions=failed)
                await self._clock.sleep(backoff)
                backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)
            await self._complete(marker)
        finally:
            self._marking.discard(marker)

    async def _complete(self, marker: MarkerRequest) -> None:
        """Write the CompleteCommit/CompleteAbort record of a transaction whose markers are all written (rule 3).
        The transaction is complete once the ISR holds the record; until then it stays pending (the id answers
        CONCURRENT_TRANSACTIONS). A failed append or ISR wait is retried after the backoff, keeping it pending,
        as Kafka's marker channel re-queues the append on COORDINATOR_NOT_AVAILABLE; once the partition is
        unloaded (Kafka's NOT_COORDINATOR) the retry stops and the next coordinator, which loads the Prepare
        record, writes the markers and the record again."""
        outcome = self.txn.markers_written(marker, self._clock.wall_ms())
        transit = outcome.pending.get(marker.transactional_id)
        backoff = RETRY_BACKOFF_S
        while transit is not None and self.txn.pending.get(marker.transactional_id) is transit:
            try:
                ends = self._persist_records(outcome.records)
                if self._replicated is not None:
                    await asyncio.gather(*(self._replicated(p, end) for p, end in ends.items()))
            except Exception as exc:
                log.warning("The %s record of transaction %s was not written (%s): retried in %d ms",
                            transit.state.display_name, marker.transactional_id, exc, backoff * 1000)
                await self._clock.sleep(backoff)
                backoff = min(backoff * 2, RETRY_BACKOFF_MAX_S)
                continue
            self.txn.persisted(outcome, ok=True)
            return

    def _is_current(self, marker: MarkerRequest) -> bool:
        """The transaction still waits for exactly these markers (rule 2)."""
        meta = self.txn.transactions.get(marker.transactional_id)
        expected = TxnState.PREPARE_COMMIT if marker.commit else TxnState.PREPARE_ABORT
        partition = self.txn.partition_of(marker.transactional_id)
        return meta is not None and meta.state is expected and meta.producer_id == marker.producer_id \
            and meta.producer_epoch == marker.producer_epoch \
            and self.txn.coordinator_epochs.get(partition, 0) == marker.coordinator_epoch

    def _persist_records(self, records: list[tuple[int, Record]]) -> dict[int, int]:
        """Append the records per partition; the offset just past each partition's append."""
        by_partition: dict[int, list[Record]] = {}
        for partition, record in records:
            by_partition.setdefault(partition, []).append(record)
        return {partition: self._persist(partition, batch) for partition, batch in by_partition.items()}


def _unchanged(outcome: TxnOutcome) -> TxnOutcome:
    """What is left of an outcome whose records failed: its markers of transactions it did not change."""
    return replace(outcome, pending={}, markers=[m for m in outcome.markers
                                                 if m.transactional_id not in outcome.pending])


def _fail(replies: list[tuple[Any, Any]], exc: Exception) -> None:
    """``fail`` with the append's error as the cause, which the handlers answer as Kafka maps it."""
    log.error("Could not persist or replicate transaction records: %s", exc)
    error = CoordinatorStorageError(str(exc))
    error.__cause__ = exc
    _answer_error(replies, error)


def _answer_error(replies: list[tuple[Any, Any]], error: Exception) -> None:
    for waiter, _ in replies:
        if not waiter.done():
            waiter.set_exception(error)
