"""Kafka's transaction coordinator as a pure state machine: requests and timers in, answers out.

Rules of this module (the same as ``coordinator.py``'s):

1. No I/O and no clock: every entry point takes ``now_ms`` and returns a ``TxnOutcome`` with the
   answers to deliver, the ``__transaction_state`` records to persist first, and the
   transaction markers to write after those records and before the answers.
2. Ending a transaction is two steps, as in Kafka's ``TransactionCoordinator``: EndTxn (or a
   timeout, or a fencing InitProducerId) moves it to PrepareCommit/PrepareAbort and asks for
   markers; once the runtime wrote them it calls ``markers_written``, which moves it to
   CompleteCommit/CompleteAbort. A transaction found in a Prepare state (markers that failed,
   or a restart after the Prepare record) gets its markers again on the next abort check, unless a
   leader refused them as fenced (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED): those are
   left to the next coordinator, as Kafka's marker channel leaves them.
3. Errors follow Kafka: a wrong producer id is INVALID_PRODUCER_ID_MAPPING, a wrong epoch is
   PRODUCER_FENCED (INVALID_PRODUCER_EPOCH for requests too old to know it), a request racing a
   commit or abort is CONCURRENT_TRANSACTIONS.
4. ``transactions`` holds what the log holds. Every change (partitions joining, InitProducerId's epoch
   bump, the Prepare of an end, the Complete* step after the markers) is made to a copy kept in ``pending``
   (Kafka's pendingState and TxnTransitMetadata) and replaces the metadata only once its record is on the
   ISR, when the runtime calls ``persisted``; a write that failed drops the copy, so a Prepare that failed
   leaves the transaction Ongoing and no marker of it is written (Kafka's endTransaction answers the
   append's error and sends nothing). Meanwhile the id answers CONCURRENT_TRANSACTIONS, and
   DescribeTransactions, ListTransactions, producers and timers see the metadata as logged. Otherwise a
   retry found the change made and was told so with nothing on the log: AddPartitions' partitions were
   forgotten by a failover, EndTxn took the previous transaction's CompleteCommit for a retry, and the
   partitions never got their marker (chaos round 3003: a committed transaction's record closed by the
   producer's next ABORT); InitProducerId's retry (KIP-360) got an epoch the next coordinator never heard of,
   so the producer it should have fenced could go on; a transaction was reported CompleteCommit (and a
   retried EndTxn told it committed) while its CompleteCommit record waited for the ISR or had failed, with
   PrepareCommit on the log.
   A transaction in PrepareCommit/PrepareAbort counts as changing too: Kafka prepares its Complete* step as
   soon as the Prepare is logged (or loaded) and keeps it pending through the marker phase, so every
   request meets the pending check there and is answered CONCURRENT_TRANSACTIONS where Kafka makes that
   check: first for InitProducerId, AddPartitions and a V2 EndTxn, after the producer id and epoch for a
   V1 EndTxn (so an EndTxn with the other result is CONCURRENT_TRANSACTIONS, not INVALID_TXN_STATE).
5. Both transaction protocols at once, per transaction (``TxnMetadata.client_version``): a V1 client
   adds its partitions itself and keeps its epoch; a V2 client (KIP-890 part 2: partitions added by
   the leaders its Produce v12+ reaches, EndTxn v5) has its epoch bumped when the transaction ends,
   the markers carry the bumped epoch (fencing any late write of the ended transaction), and EndTxn
   answers the epoch (or, when the epochs run out, the next producer id at epoch 0) to go on with.
   A V2 EndTxn retried with the epoch before the bump gets the same answer again. A V2 abort with nothing
   open (Empty, or a completed transaction at the current epoch) ends an empty transaction as Kafka does
   (KIP-890): the epoch is bumped, PrepareAbort with no partitions is logged, then CompleteAbort.
6. A client-initiated end runs as the client's EndTxn version says (v5: V2); an end the coordinator starts
   itself (the fence of InitProducerId, the timeout abort) runs as the cluster's finalized
   ``transaction.version`` says, whatever client opened the transaction (Kafka's
   ``txnManager.transactionVersionLevel()``): at 2 a V1 client's transaction is fenced the V2 way, below 2
   a V2 client's the V1 way.
7. A V2 end at an exhausted epoch (32766 and up) moves the producer to a new producer id, the coordinator's own
   ends too (KAFKA-20090: Kafka's endTransaction takes the next id for a fence since PR #21506, whose case is
   the timeout abort). InitProducerId's handler allocates the id before the fence; the timeout abort, started by
   the synchronous ``tick``, asks the runtime for one (``TxnOutcome.id_requests``) and writes its PrepareAbort
   in ``producer_id_allocated``. Meanwhile the transaction counts as changing (Kafka's pending PrepareEpochFence,
   set before its endTransaction takes the id): requests for it are answered CONCURRENT_TRANSACTIONS. A V2 end
   that finds the epoch exhausted without an id (the handler looked before the transaction got there) writes
   nothing and is answered CONCURRENT_TRANSACTIONS: the retry brings an id.
8. No epoch goes past 32767 (Short.MaxValue). A transaction open at 32767 (a V1 fence at 32766 then an upgrade
   to transaction.version 2 and a V2 retry of that end, which Kafka answers with 32767) can only be aborted: an
   abort there (fence, timeout, EndTxn) keeps the epoch, as Kafka's prepareFenceProducerEpoch and
   prepareAbortOrCommit do since KAFKA-20090 (PR #21469), and under V2 moves the producer to a new id (PR
   #21506); its V2 markers are at the producer's epoch, which a leader takes at 32767 only (that PR's
   ProducerAppendInfo). A V2 commit there, which Kafka would fail on the overflow, is INVALID_TXN_STATE.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Iterable

from pybroker.common.ids import ProducerEpoch, ProducerId
from pybroker.coordinator.group import Waiter
from pybroker.coordinator.records import Record, partition_for
from pybroker.coordinator.txn_records import (
    TV_1,
    TV_2,
    TopicPartition,
    TxnEntry,
    TxnMetadata,
    TxnState,
    txn_key,
    txn_record,
)
from pybroker.protocol.error_codes import ErrorCode

MAX_EPOCH = 2**15 - 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
PREPARE_STATES = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})


@dataclass(frozen=True, slots=True)
class TxnConfig:
    """The broker settings the coordinator obeys (Kafka's key names in the field docs)."""

    num_partitions: int = 50  # transaction.state.log.num.partitions
    max_timeout_ms: int = 900000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604800000  # transactional.id.expiration.ms
    abort_check_interval_ms: int = 10000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    expiration_check_interval_ms: int = 3600000  # transaction.remove.expired.transaction.cleanup.interval.ms


@dataclass(frozen=True, slots=True)
class MarkerRequest:
    """Write a COMMIT/ABORT marker for ``producer_id`` to every partition of the transaction."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]
    transaction_version: int = TV_1
    """The transaction's client version: TV_2 markers carry the bumped epoch, which the leaders check for
    (WriteTxnMarkers v2, KIP-1228)."""


@dataclass(slots=True)
class TxnOutcome:
    replies: list[tuple[Waiter, Any]] = field(default_factory=list)
    records: list[tuple[int, Record]] = field(default_factory=list)
    """(partition of __transaction_state, record)."""
    markers: list[MarkerRequest] = field(default_factory=list)
    pending: dict[str, TxnMetadata] = field(default_factory=dict)
    """Transactional id -> its metadata as this outcome changes it, which replaces the logged metadata once
    ``records`` are on the ISR (rule 4)."""
    id_requests: list[str] = field(default_factory=list)
    """Transactional ids whose timeout abort waits for a new producer id (rule 7): the runtime allocates one
    and hands it to ``producer_id_allocated``."""

    def reply(self, waiter: Waiter, response: Any) -> None:
        self.replies.append((waiter, response))


@dataclass(frozen=True, slots=True)
class InitResult:
    """InitProducerId's and EndTxn's answer: an error, or the producer id and epoch to use (EndTxn v5)."""

    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1


class TransactionCoordinator:
    def __init__(self, config: TxnConfig, transaction_version: Callable[[], int] = lambda: TV_2) -> None:
        self.config = config
        self.transaction_version = transaction_version
        """The cluster's finalized ``transaction.version`` (Kafka's TransactionStateManager.transactionVersionLevel):
        how the ends this coordinator starts itself run (rule 6)."""
        self.transactions: dict[str, TxnMetadata] = {}
        self.coordinator_epochs: dict[int, int] = {}  # partition -> leader epoch of __transaction_state
        self.pending: dict[str, TxnMetadata] = {}
        """Transactional id -> its metadata as changed, while the change's record waits for the ISR (rule 4)."""
        self.allocating: set[str] = set()
        """Transactional ids whose timeout abort waits for the runtime's new producer id (rule 7)."""
        self._next_abort_check_ms: int | None = None
        self._next_expiration_check_ms: int | None = None

    # ------------------------------------------------------------------ queries

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.num_partitions)

    def needs_producer_id(self, transactional_id: str) -> bool:
        """True when InitProducerId would hand out a new producer id (unknown id, epoch exhausted)."""
        meta = self.transactions.get(transactional_id)
        return meta is None or meta.producer_epoch >= MAX_EPOCH - 1

    def end_needs_producer_id(self, transactional_id: str) -> bool:
        """True when a V2 EndTxn finds the epochs exhausted (Kafka's isProducerEpochExhausted, before the bump):
        the producer moves to a new id."""
        meta = self.transactions.get(transactional_id)
        return meta is not None and meta.producer_epoch >= MAX_EPOCH - 1

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for d in (self._next_abort_check_ms, self._next_expiration_check_ms) if d is not None]
        return min(deadlines, default=None)

    # ------------------------------------------------------------------ InitProducerId

    def init_producer_id(self, waiter: Waiter, transactional_id: str, timeout_ms: int, producer_id: ProducerId,
                         producer_epoch: ProducerEpoch, fresh_producer_id: ProducerId | None,
                         now_ms: int) -> TxnOutcome:
        """InitProducerId with a transactional id; ``fresh_producer_id`` is used if a new id is needed."""
        out = TxnOutcome()
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            out.reply(waiter, InitResult(ErrorCode.INVALID_TRANSACTION_TIMEOUT))
            return out
        meta = self.transactions.get(transactional_id)
        if meta is None:
            if fresh_producer_id is None:
                out.reply(waiter, InitResult(ErrorCode.CONCURRENT_TRANSACTIONS))
                return out
            # As Kafka: the id is known at no epoch yet, and the bump below takes it to epoch 0.
            meta = self.transactions[transactional_id] = TxnMetadata(
                transactional_id, fresh_producer_id, NO_PRODUCER_EPOCH, timeout_ms, TxnState.EMPTY,
                last_update_ms=now_ms)
        elif self._changing(meta):  # Kafka checks this first
            out.reply(waiter, InitResult(ErrorCode.CONCURRENT_TRANSACTIONS))
            return out
        if producer_id != NO_PRODUCER_ID and meta.producer_epoch != NO_PRODUCER_EPOCH:  # Kafka: no epoch, any id
            retried = producer_id == meta.producer_id and producer_epoch == meta.last_producer_epoch \
                and meta.state in (TxnState.EMPTY, TxnState.COMPLETE_ABORT, TxnState.COMPLETE_COMMIT)
            if retried:  # KIP-360: the answer to this bump was lost; hand out the same epoch again
                out.reply(waiter, InitResult(ErrorCode.NONE, meta.producer_id, meta.producer_epoch))
                return out
            if producer_id != meta.producer_id or producer_epoch != meta.producer_epoch:
                out.reply(waiter, InitResult(ErrorCode.PRODUCER_FENCED))
                return out
        if meta.state is TxnState.ONGOING:
            # A new instance of this producer: fence the old one and abort its transaction with
            # the bumped epoch; the client retries and then gets the next epoch. A V2 fence that needs an id
            # it was not given writes nothing: the retry comes with one (rule 7).
            self._fence_and_abort(out, meta, now_ms, fresh_producer_id)
            out.reply(waiter, InitResult(ErrorCode.CONCURRENT_TRANSACTIONS))
            return out
        if meta.producer_epoch >= MAX_EPOCH - 1 and fresh_producer_id is None:
            out.reply(waiter, InitResult(ErrorCode.CONCURRENT_TRANSACTIONS))
            return out
        new = self._transit(out, meta)
        self._bump_epoch(new, fresh_producer_id)
        new.previous_producer_id = new.next_producer_id = NO_PRODUCER_ID
        new.timeout_ms = timeout_ms
        new.state = TxnState.EMPTY
        new.partitions.clear()
        new.start_ms = -1
        new.last_update_ms = now_ms
        self._persist(out, new)
        out.reply(waiter, InitResult(ErrorCode.NONE, new.producer_id, new.producer_epoch))
        return out

    def _bump_epoch(self, meta: TxnMetadata, fresh_producer_id: int | None) -> None:
        if meta.producer_epoch >= MAX_EPOCH - 1 and fresh_producer_id is not None:
            meta.producer_id, meta.producer_epoch, meta.last_producer_epoch = fresh_producer_id, 0, -1
        else:
            meta.last_producer_epoch = meta.producer_epoch
            meta.producer_epoch += 1

    # ------------------------------------------------------------------ AddPartitions / AddOffsets

    def add_partitions(self, waiter: Waiter, transactional_id: str, producer_id: ProducerId,
                       producer_epoch: ProducerEpoch,
                       partitions: Iterable[TopicPartition], now_ms: int, *, verify_only: bool = False,
                       client_version: int = TV_1) -> TxnOutcome:
        """AddPartitionsToTxn / AddOffsetsToTxn: the reply is one ErrorCode for all partitions.

        ``verify_only`` (the v4+ broker-to-broker form) only checks that the partitions are
        already part of the ongoing transaction. ``client_version`` TV_2: the add a leader makes
        for a V2 client's Produce; a transaction it opens ends with an epoch bump.
        """
        out = TxnOutcome()
        wanted = set(partitions)
        meta = self.transactions.get(transactional_id)
        if meta is not None and not verify_only and self._changing(meta):
            out.reply(waiter, ErrorCode.CONCURRENT_TRANSACTIONS)  # Kafka checks this first (KAFKA-18660)
            return out
        error = self._check_producer(meta, producer_id, producer_epoch)
        if error is ErrorCode.NONE and meta is not None:
            ending = self.pending.get(transactional_id)
            # A Prepare on its way counts too, though Kafka's verification ignores pending changes: Kafka's
            # VerificationGuard then refuses the append if the marker came first; this broker has none.
            if meta.state in PREPARE_STATES or (ending is not None and ending.state in PREPARE_STATES):
                error = ErrorCode.CONCURRENT_TRANSACTIONS
            elif verify_only:  # Kafka's answer; the leader tells clients before KIP-890 INVALID_TXN_STATE
                if meta.state is not TxnState.ONGOING or not wanted <= meta.partitions:
                    error = ErrorCode.TRANSACTION_ABORTABLE
            elif not wanted <= meta.partitions or meta.state is not TxnState.ONGOING:
                new = self._transit(out, meta)
                if new.state is not TxnState.ONGOING:
                    new.partitions.clear()
                    new.start_ms = now_ms
                    new.state = TxnState.ONGOING
                    new.client_version = client_version
                new.partitions |= wanted
                new.last_update_ms = now_ms
                self._persist(out, new)
        out.reply(waiter, error)
        return out

    def _changing(self, meta: TxnMetadata) -> bool:
        """A change of ``meta`` waits for the ISR, or its markers are being written: Kafka's pending transition
        (rule 4)."""
        return meta.transactional_id in self.pending or meta.state in PREPARE_STATES \
            or meta.transactional_id in self.allocating

    def _transit(self, out: TxnOutcome, meta: TxnMetadata) -> TxnMetadata:
        """A copy of ``meta`` to change, pending until its record is on the ISR (rule 4)."""
        new = self.pending[meta.transactional_id] = out.pending[meta.transactional_id] = replace(
            meta, partitions=set(meta.partitions))
        return new

    def persisted(self, outcome: TxnOutcome, ok: bool) -> bool:
        """The records of an outcome's pending changes are on the ISR (``ok``): the metadata takes the
        change; or they could not be written or replicated: the change is dropped (rule 4). A change that
        an unload (and maybe a new load) has replaced since is left alone, and False returned: the partition
        moved, which Kafka answers NOT_COORDINATOR."""
        current = True
        for transactional_id, new in outcome.pending.items():
            meta = self.transactions.get(transactional_id)
            if self.pending.get(transactional_id) is not new or meta is None:
                current = False
                continue
            del self.pending[transactional_id]
            if ok:
                for name in (f.name for f in fields(TxnMetadata)):
                    setattr(meta, name, getattr(new, name))
        return current

    def _check_producer(self, meta: TxnMetadata | None, producer_id: int, producer_epoch: int) -> ErrorCode:
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        return ErrorCode.NONE

    # ------------------------------------------------------------------ EndTxn

    def end_txn(self, waiter: Waiter, transactional_id: str, producer_id: ProducerId, producer_epoch: ProducerEpoch,
                commit: bool, now_ms: int, *, bump_epoch: bool = False,
                fresh_producer_id: ProducerId | None = None) -> TxnOutcome:
        """EndTxn; ``bump_epoch`` for v5 (a V2 client), whose answer carries the producer id and epoch to go
        on with; ``fresh_producer_id`` is the id to move to if the bumped epoch is the last one. The checks and
        their order are Kafka's endTransactionWithTV1: producer id, epoch, then a change under way."""
        if bump_epoch:
            return self._end_txn_v2(waiter, transactional_id, producer_id, producer_epoch, commit, now_ms,
                                    fresh_producer_id)
        out = TxnOutcome()
        meta = self.transactions.get(transactional_id)
        error = self._check_producer(meta, producer_id, producer_epoch)
        if error is ErrorCode.NONE and meta is not None and self._changing(meta):
            error = ErrorCode.CONCURRENT_TRANSACTIONS  # also the other result than the one under way
        elif error is ErrorCode.NONE and meta is not None and meta.state is TxnState.ONGOING and meta.bumps_epoch_at_end:
            error = ErrorCode.INVALID_TXN_STATE  # a V2 transaction ends with EndTxn v5 (Kafka's check)
        elif error is ErrorCode.NONE and meta is not None:
            match meta.state:
                case TxnState.ONGOING:
                    self._prepare_end(out, meta, commit=commit, now_ms=now_ms)
                case TxnState.COMPLETE_COMMIT | TxnState.COMPLETE_ABORT:
                    # A retry of the EndTxn that completed this transaction succeeds again.
                    if (meta.state is TxnState.COMPLETE_COMMIT) != commit:
                        error = ErrorCode.INVALID_TXN_STATE
                case _:
                    error = ErrorCode.INVALID_TXN_STATE
        out.reply(waiter, error)
        return out

    def _end_txn_v2(self, waiter: Waiter, transactional_id: str, producer_id: int, producer_epoch: int,
                    commit: bool, now_ms: int, fresh_producer_id: int | None) -> TxnOutcome:
        """Kafka's endTransaction for transactions V2, in its order: a change under way (so a producer that
        already goes on with the bumped epoch or the next producer id is not fenced by it), the producer id,
        the epoch (the current one, or the one before the bump for a retry of a completed end), then the
        state table of KIP-890 (Kafka's TransactionCoordinator): an abort with nothing open ends an empty
        transaction with an epoch bump, a commit with nothing open or a retry with the other result is
        INVALID_TXN_STATE."""
        out = TxnOutcome()
        meta = self.transactions.get(transactional_id)
        if meta is None:
            out.reply(waiter, InitResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING))
            return out
        if self._changing(meta):
            out.reply(waiter, InitResult(ErrorCode.CONCURRENT_TRANSACTIONS))
            return out
        completed = meta.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        retry_on_overflow = meta.producer_epoch == 0 and producer_id == meta.previous_producer_id >= 0 \
            and producer_epoch == meta.last_producer_epoch  # the end that moved the producer to its next id
        retry_on_bump = producer_id == meta.producer_id and producer_epoch + 1 == meta.producer_epoch
        retried = completed and (retry_on_bump or retry_on_overflow)
        if producer_id != meta.producer_id and not retry_on_overflow:
            answer = InitResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        elif producer_epoch != meta.producer_epoch and not retried:
            answer = InitResult(ErrorCode.PRODUCER_FENCED)
        elif meta.state is TxnState.ONGOING and meta.bumps_epoch_at_end and commit and meta.producer_epoch >= MAX_EPOCH:
            answer = InitResult(ErrorCode.INVALID_TXN_STATE)  # no epoch to bump to; an abort recovers (rule 8)
        elif meta.state is TxnState.ONGOING and meta.bumps_epoch_at_end:
            answer = self._next_producer(self._prepare_end(out, meta, commit=commit, now_ms=now_ms, bump=True,
                                                           fresh_producer_id=fresh_producer_id))
        elif retried and commit == (meta.state is TxnState.COMPLETE_COMMIT):  # this end's answer was lost
            answer = InitResult(ErrorCode.NONE, meta.producer_id, meta.producer_epoch)
        elif not commit and not retried and (completed or meta.state is TxnState.EMPTY):
            # A V2 client cannot know whether any of its writes reached a leader: it may abort with nothing
            # open, which ends an empty transaction as any end does (Kafka's prepareAbortOrCommit with no
            # partition added: the start time is now).
            answer = self._next_producer(self._prepare_end(out, meta, commit=False, now_ms=now_ms, bump=True,
                                                           fresh_producer_id=fresh_producer_id, started_ms=now_ms))
        else:  # a commit with nothing open, a retry with the other result, or a V1 transaction
            answer = InitResult(ErrorCode.INVALID_TXN_STATE)
        out.reply(waiter, answer)
        return out

    @staticmethod
    def _next_producer(new: TxnMetadata | None) -> InitResult:
        """A V2 EndTxn's answer: the bumped epoch, or the next producer id at epoch 0 once the epochs ran out;
        CONCURRENT_TRANSACTIONS when the end waits for a new producer id (``_prepare_end``: the retry brings one)."""
        if new is None:
            return InitResult(ErrorCode.CONCURRENT_TRANSACTIONS)
        if new.next_producer_id < 0:
            return InitResult(ErrorCode.NONE, new.producer_id, new.producer_epoch)
        return InitResult(ErrorCode.NONE, new.next_producer_id, 0)

    def _fence_and_abort(self, out: TxnOutcome, meta: TxnMetadata, now_ms: int,
                         fresh_producer_id: int | None = None) -> None:
        """Abort ``meta``'s open transaction with a bumped epoch, which fences its producer. The finalized
        transaction.version decides how, not the transaction's client (Kafka passes its server level to
        endTransaction for a fence or a timeout, rule 6): below 2 the V1 way (the epoch bumped, no last epoch
        kept, so the fenced producer's InitProducerId is not taken for a retry; the Prepare a V1 one); at 2
        the V2 end, whose bump is the fence (one bump, KAFKA-19367; the Prepare a V2 one, its markers V2 ones).
        The bump is part of the pending Prepare: a fence whose record failed leaves the epoch as logged, and the
        next attempt bumps from there. A V2 fence of an exhausted epoch moves the producer to
        ``fresh_producer_id`` as a V2 EndTxn does (KAFKA-20090, rule 7)."""
        v2 = self.transaction_version() >= TV_2
        self._prepare_end(out, meta, commit=False, now_ms=now_ms, bump=v2, fence=not v2,
                          fresh_producer_id=fresh_producer_id if v2 else None)

    def _prepare_end(self, out: TxnOutcome, meta: TxnMetadata, *, commit: bool, now_ms: int, bump: bool = False,
                     fence: bool = False, fresh_producer_id: int | None = None,
                     started_ms: int | None = None) -> TxnMetadata | None:
        """The PrepareCommit/PrepareAbort of ``meta``'s transaction, pending until its record is on the ISR;
        its markers are written only then (rule 4). ``bump``: a V2 end (the epoch bumped, the next producer id
        taken if it is the last epoch); ``fence``: a V1 abort by the coordinator. None, and nothing written, for a
        V2 end at an exhausted epoch without ``fresh_producer_id`` (rule 7): it would leave the producer at the
        last epoch with no id to move to. An abort at the last epoch itself keeps it (rule 8)."""
        next_producer_id = NO_PRODUCER_ID
        if bump and meta.producer_epoch >= MAX_EPOCH - 1:
            if fresh_producer_id is None:
                return None
            next_producer_id = fresh_producer_id  # the bump takes the last epoch, the producer goes on with this
        new = self._transit(out, meta)
        new.next_producer_id = next_producer_id
        if bump or fence:
            new.last_producer_epoch = NO_PRODUCER_EPOCH if fence else new.producer_epoch
            if new.producer_epoch < MAX_EPOCH:
                new.producer_epoch += 1
        if bump:
            new.client_version = TV_2
        elif fence:
            new.client_version = TV_1  # Kafka's endTransactionWithTV1 writes its Prepare as TV_0's
        if started_ms is not None:
            new.start_ms = started_ms
        new.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        new.last_update_ms = now_ms
        self._persist(out, new)
        out.markers.append(self._marker_request(new))
        return new

    def _marker_request(self, meta: TxnMetadata) -> MarkerRequest:
        """The markers of ``meta``'s end, as its client version writes them. A V2 abort at the last epoch keeps
        it (rule 8), so its V2 markers are at the producer's epoch rather than above: the leaders take those at
        32767 (``producer_log.check_unsequenced_epoch``, as Kafka's since KAFKA-20090, PR #21469)."""
        return MarkerRequest(meta.transactional_id, meta.producer_id, meta.producer_epoch,
                             self.coordinator_epochs.get(self.partition_of(meta.transactional_id), 0),
                             meta.state is TxnState.PREPARE_COMMIT, tuple(sorted(meta.partitions)),
                             meta.client_version)

    def markers_written(self, marker: MarkerRequest, now_ms: int) -> TxnOutcome:
        """Every marker of ``marker`` is written: complete the transaction once the outcome's CompleteCommit
        or CompleteAbort record is on the ISR (rule 4). An empty outcome when the marker is stale or the
        Complete* record is already on its way."""
        out = TxnOutcome()
        meta = self.transactions.get(marker.transactional_id)
        expected = TxnState.PREPARE_COMMIT if marker.commit else TxnState.PREPARE_ABORT
        if meta is None or meta.state is not expected or meta.producer_id != marker.producer_id \
                or meta.producer_epoch != marker.producer_epoch or marker.transactional_id in self.pending:
            return out
        new = self._transit(out, meta)
        new.state = TxnState.COMPLETE_COMMIT if marker.commit else TxnState.COMPLETE_ABORT
        if new.next_producer_id >= 0:  # V2, epochs exhausted: the producer goes on with the next id
            new.previous_producer_id, new.producer_id = new.producer_id, new.next_producer_id
            new.producer_epoch, new.next_producer_id = 0, NO_PRODUCER_ID
        new.partitions.clear()
        new.last_update_ms = now_ms
        self._persist(out, new)
        return out

    # ------------------------------------------------------------------ timers

    def tick(self, now_ms: int) -> TxnOutcome:
        out = TxnOutcome()
        if self._next_abort_check_ms is None or now_ms >= self._next_abort_check_ms:
            self._next_abort_check_ms = now_ms + self.config.abort_check_interval_ms
            self.abort_timed_out(out, now_ms)
        if self._next_expiration_check_ms is None:
            self._next_expiration_check_ms = now_ms + self.config.expiration_check_interval_ms
        elif now_ms >= self._next_expiration_check_ms:
            self._next_expiration_check_ms = now_ms + self.config.expiration_check_interval_ms
            self.expire_ids(out, now_ms)
        return out

    def abort_timed_out(self, out: TxnOutcome, now_ms: int) -> None:
        """Abort transactions open longer than their timeout (fencing their producer), and resend
        the markers of transactions stuck in a Prepare state."""
        for meta in self.transactions.values():
            if meta.transactional_id in self.pending or meta.transactional_id in self.allocating:
                continue  # decided once its record is on the ISR or put back (rule 4), or its id came (rule 7)
            if meta.state is TxnState.ONGOING and now_ms >= meta.start_ms + meta.timeout_ms:
                if self.transaction_version() >= TV_2 and meta.producer_epoch >= MAX_EPOCH - 1:
                    self.allocating.add(meta.transactional_id)
                    out.id_requests.append(meta.transactional_id)
                else:
                    self._fence_and_abort(out, meta, now_ms)
            elif meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                out.markers.append(self._marker_request(meta))

    def producer_id_allocated(self, transactional_id: str, fresh_producer_id: ProducerId | None,
                              now_ms: int) -> TxnOutcome:
        """The runtime's answer to an id request of the timeout abort (rule 7): the abort's PrepareAbort, which
        moves the producer to ``fresh_producer_id``. Nothing when no id came (the next abort check asks again) or
        the partition was unloaded meanwhile (the next coordinator aborts the transaction)."""
        out = TxnOutcome()
        if transactional_id not in self.allocating:
            return out
        self.allocating.discard(transactional_id)
        meta = self.transactions.get(transactional_id)
        if fresh_producer_id is not None and meta is not None and meta.state is TxnState.ONGOING:
            self._fence_and_abort(out, meta, now_ms, fresh_producer_id)
        return out

    def expire_ids(self, out: TxnOutcome, now_ms: int) -> None:
        """Forget transactional ids unused for ``transactional.id.expiration.ms`` (tombstones)."""
        idle = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        for transactional_id, meta in list(self.transactions.items()):
            if meta.state in idle and now_ms - meta.last_update_ms >= self.config.id_expiration_ms \
                    and transactional_id not in self.pending:  # Kafka's expiration skips a pending transition
                del self.transactions[transactional_id]
                out.records.append((self.partition_of(transactional_id), (txn_key(transactional_id), None)))

    # ------------------------------------------------------------------ admin

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        return self.transactions.get(transactional_id)

    def list_transactions(self, states: Iterable[str], producer_ids: Iterable[int], min_duration_ms: int,
             now_ms: int) -> list[TxnMetadata]:
        """ListTransactions' filters: state names, producer ids, open longer than a duration (-1: any)."""
        wanted_states = set(states)
        wanted_ids = set(producer_ids)
        return [meta for meta in sorted(self.transactions.values(), key=lambda m: m.transactional_id)
                if (not wanted_states or meta.state.display_name in wanted_states)
                and (not wanted_ids or meta.producer_id in wanted_ids)
                and (min_duration_ms < 0 or (meta.state is TxnState.ONGOING
                                             and now_ms - meta.start_ms >= min_duration_ms))]

    # ------------------------------------------------------------------ loading

    def unload(self, partition: int) -> list[Waiter]:
        """Forget the transactional ids of ``partition``: another broker now coordinates them and
        finishes their transactions from the replicated log. No request waits here beyond one
        outcome, so there are no waiters to fail (the group runtime's protocol)."""
        for transactional_id in [t for t in self.transactions if self.partition_of(t) == partition]:
            del self.transactions[transactional_id]
            self.pending.pop(transactional_id, None)
            self.allocating.discard(transactional_id)
        self.coordinator_epochs.pop(partition, None)
        return []

    def load(self, entries: Iterable[TxnEntry]) -> None:
        """Replay ``__transaction_state`` (oldest first); open and half-ended transactions are
        finished by the timers (timeout abort, marker resend)."""
        for entry in entries:
            if entry.metadata is None:
                self.transactions.pop(entry.transactional_id, None)
            else:
                previous = self.transactions.get(entry.transactional_id)
                if previous is not None and previous.producer_id == entry.metadata.producer_id \
                        and previous.producer_epoch < entry.metadata.producer_epoch:
                    entry.metadata.last_producer_epoch = previous.producer_epoch
                elif previous is not None and previous.producer_id == entry.metadata.producer_id:
                    entry.metadata.last_producer_epoch = previous.last_producer_epoch
                self.transactions[entry.transactional_id] = entry.metadata
        self._next_abort_check_ms = None

    def _persist(self, out: TxnOutcome, meta: TxnMetadata) -> None:
        out.records.append((self.partition_of(meta.transactional_id), txn_record(meta)))
