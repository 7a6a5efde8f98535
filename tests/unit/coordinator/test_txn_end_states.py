"""EndTxn's answers as Kafka 4.x's TransactionCoordinator gives them (endTransactionWithTV1 and the V2
endTransaction with KIP-890's state table).

In the marker phase (PrepareCommit/PrepareAbort) Kafka holds the Complete* step as a pending transition, so
an EndTxn with either result is CONCURRENT_TRANSACTIONS, as are InitProducerId and AddPartitions (for those
and a V2 EndTxn before any producer check); the coordinator used to answer the other result INVALID_TXN_STATE
and a stale producer PRODUCER_FENCED. A V2 abort with nothing open ends an empty transaction: PrepareAbort
with the bumped epoch and no partitions, then CompleteAbort; the coordinator used to write CompleteAbort at
once."""

from __future__ import annotations

from pybroker.coordinator.txn_coordinator import InitResult, TransactionCoordinator
from pybroker.coordinator.txn_records import TV_2, TxnState, decode_txn_record, txn_record
from pybroker.protocol.error_codes import ErrorCode
from tests.unit.coordinator.test_txn_coordinator import (
    CONFIG,
    TXN,
    ManualClock,
    complete,
    init,
    only_reply,
    started,
    v2_started,
    written,
)


def in_marker_phase(v2: bool, commit: bool = True) -> tuple[TransactionCoordinator, ManualClock, int, int]:
    """A transaction whose Prepare record is on the ISR and whose markers are not all written yet."""
    coordinator, clock, producer = v2_started([("out", 0)]) if v2 else started()
    pid, epoch = producer.producer_id, producer.producer_epoch
    outcome = coordinator.end_txn("w", TXN, pid, epoch, commit, clock.now, bump_epoch=v2)
    coordinator.persisted(outcome, ok=True)
    assert coordinator.describe(TXN).state is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
    return coordinator, clock, pid, epoch


def test_v1_end_in_the_marker_phase_is_concurrent_for_either_result_after_the_producer_checks():
    coordinator, clock, pid, epoch = in_marker_phase(v2=False)
    for commit in (True, False):
        assert only_reply(coordinator.end_txn("w", TXN, pid, epoch, commit, clock.now)) \
            is ErrorCode.CONCURRENT_TRANSACTIONS
    assert only_reply(coordinator.end_txn("w", TXN, pid, epoch + 1, False, clock.now)) is ErrorCode.PRODUCER_FENCED
    assert only_reply(coordinator.end_txn("w", TXN, pid + 1, epoch, False, clock.now)) \
        is ErrorCode.INVALID_PRODUCER_ID_MAPPING


def test_v2_end_in_the_marker_phase_is_concurrent_before_any_producer_check():
    coordinator, clock, pid, epoch = in_marker_phase(v2=True, commit=False)
    for producer, commit in [((pid, epoch), True), ((pid, epoch), False), ((pid, epoch + 1), False),
                             ((pid + 1, epoch), True)]:
        answer = coordinator.end_txn("w", TXN, *producer, commit, clock.now, bump_epoch=True)
        assert only_reply(answer) == InitResult(ErrorCode.CONCURRENT_TRANSACTIONS), (producer, commit)


def test_init_and_add_in_the_marker_phase_are_concurrent_before_any_producer_check():
    coordinator, clock, pid, epoch = in_marker_phase(v2=False)
    stale = coordinator.init_producer_id("w", TXN, 60_000, pid, epoch - 1, None, clock.now)
    assert only_reply(stale).error is ErrorCode.CONCURRENT_TRANSACTIONS
    add = coordinator.add_partitions("w", TXN, pid, epoch - 1, [("out", 5)], clock.now)
    assert only_reply(add) is ErrorCode.CONCURRENT_TRANSACTIONS


def test_a_transaction_loaded_in_a_prepare_state_answers_concurrent_until_complete():
    coordinator, clock, pid, epoch = in_marker_phase(v2=False)
    successor = TransactionCoordinator(CONFIG)
    entry = decode_txn_record(*txn_record(coordinator.describe(TXN)))
    assert entry is not None
    successor.load([entry])
    assert only_reply(successor.end_txn("w", TXN, pid, epoch, False, clock.now)) is ErrorCode.CONCURRENT_TRANSACTIONS
    [marker] = successor.tick(clock.now).markers  # the markers are sent again
    written(successor, marker, clock.now)
    assert only_reply(successor.end_txn("w", TXN, pid, epoch, True, clock.now)) is ErrorCode.NONE


def test_v2_abort_with_nothing_open_logs_prepare_abort_with_the_bumped_epoch_then_complete_abort():
    coordinator, clock = TransactionCoordinator(CONFIG), ManualClock()
    producer = init(coordinator, clock)
    pid, epoch = producer.producer_id, producer.producer_epoch
    clock.advance(5_000)
    abort = coordinator.end_txn("w", TXN, pid, epoch, False, clock.now, bump_epoch=True)
    assert only_reply(abort) == InitResult(ErrorCode.NONE, pid, epoch + 1)
    [(_, record)] = abort.records
    prepared = decode_txn_record(*record).metadata
    assert prepared is not None
    assert (prepared.state, prepared.producer_epoch, prepared.partitions, prepared.start_ms,
            prepared.client_version) == (TxnState.PREPARE_ABORT, epoch + 1, set(), clock.now, TV_2)
    assert coordinator.describe(TXN).state is TxnState.EMPTY  # until the PrepareAbort is on the ISR
    coordinator.persisted(abort, ok=True)
    [marker] = abort.markers
    assert (marker.partitions, marker.commit, marker.producer_epoch) == ((), False, epoch + 1)
    done = written(coordinator, marker, clock.now)
    [(_, record)] = done.records
    completed = decode_txn_record(*record).metadata
    assert completed is not None and (completed.state, completed.producer_epoch) == (TxnState.COMPLETE_ABORT,
                                                                                     epoch + 1)


def test_v2_abort_with_nothing_open_after_a_commit_and_kafkas_state_table_for_retries():
    coordinator, clock, producer = v2_started([("out", 0)])
    pid, epoch = producer.producer_id, producer.producer_epoch
    complete(coordinator, coordinator.end_txn("w", TXN, pid, epoch, True, clock.now, bump_epoch=True), clock.now)
    # CompleteCommit: a retried abort is INVALID_TXN_STATE, a retried commit answers again, a commit at the
    # current epoch is INVALID_TXN_STATE, an abort at the current epoch ends an empty transaction.
    retried_abort = coordinator.end_txn("w", TXN, pid, epoch, False, clock.now, bump_epoch=True)
    assert only_reply(retried_abort) == InitResult(ErrorCode.INVALID_TXN_STATE)
    retried_commit = coordinator.end_txn("w", TXN, pid, epoch, True, clock.now, bump_epoch=True)
    assert only_reply(retried_commit) == InitResult(ErrorCode.NONE, pid, epoch + 1)
    commit = coordinator.end_txn("w", TXN, pid, epoch + 1, True, clock.now, bump_epoch=True)
    assert only_reply(commit) == InitResult(ErrorCode.INVALID_TXN_STATE)
    abort = coordinator.end_txn("w", TXN, pid, epoch + 1, False, clock.now, bump_epoch=True)
    assert only_reply(abort) == InitResult(ErrorCode.NONE, pid, epoch + 2)
    assert [m.partitions for m in complete(coordinator, abort, clock.now)] == [()]
    # CompleteAbort: a retried commit is INVALID_TXN_STATE, a retried abort answers again.
    assert only_reply(coordinator.end_txn("w", TXN, pid, epoch + 1, True, clock.now, bump_epoch=True)) \
        == InitResult(ErrorCode.INVALID_TXN_STATE)
    assert only_reply(coordinator.end_txn("w", TXN, pid, epoch + 1, False, clock.now, bump_epoch=True)) \
        == InitResult(ErrorCode.NONE, pid, epoch + 2)
    assert only_reply(coordinator.end_txn("w", TXN, pid, epoch, False, clock.now, bump_epoch=True)) \
        == InitResult(ErrorCode.PRODUCER_FENCED)


def test_v2_abort_in_empty_with_the_epoch_before_is_fenced():
    coordinator, clock = TransactionCoordinator(CONFIG), ManualClock()
    init(coordinator, clock)
    producer = init(coordinator, clock, fresh=None)
    answer = coordinator.end_txn("w", TXN, producer.producer_id, producer.producer_epoch - 1, False, clock.now,
                                 bump_epoch=True)
    assert only_reply(answer) == InitResult(ErrorCode.PRODUCER_FENCED)


def test_v2_abort_with_nothing_open_at_the_last_epoch_moves_the_producer_to_a_new_id():
    coordinator, clock = TransactionCoordinator(CONFIG), ManualClock()
    producer = init(coordinator, clock)
    coordinator.transactions[TXN].producer_epoch = 32766
    assert coordinator.end_needs_producer_id(TXN)
    abort = coordinator.end_txn("w", TXN, producer.producer_id, 32766, False, clock.now, bump_epoch=True,
                                fresh_producer_id=5000)
    assert only_reply(abort) == InitResult(ErrorCode.NONE, 5000, 0)
    complete(coordinator, abort, clock.now)
    meta = coordinator.describe(TXN)
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (5000, 0, TxnState.COMPLETE_ABORT)


def test_verification_during_a_prepare_on_its_way_is_concurrent():
    """A leader's verify-only add while the Prepare waits for the ISR: CONCURRENT_TRANSACTIONS, as once the
    Prepare is logged (this broker has no VerificationGuard to refuse an append that comes after the marker)."""
    coordinator, clock, producer = started()
    pid, epoch = producer.producer_id, producer.producer_epoch
    coordinator.end_txn("w", TXN, pid, epoch, True, clock.now)
    verify = coordinator.add_partitions("w", TXN, pid, epoch, [("out", 0)], clock.now, verify_only=True)
    assert only_reply(verify) is ErrorCode.CONCURRENT_TRANSACTIONS
