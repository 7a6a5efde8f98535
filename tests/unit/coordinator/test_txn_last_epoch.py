"""No producer epoch past 32767 (Short.MaxValue), the coordinator's rule 8. A transaction open at 32767 is reachable:
a V1 fence at 32766 leaves the transaction CompleteAbort at 32767, and after an upgrade to transaction.version 2
the fenced client's EndTxn v5 abort is taken for a retry of that end and answered epoch 32767 (as Kafka does), with
which it opens its next transaction. Every end of it used to bump to 32768: an epoch a 16-bit field cannot hold,
written in the Prepare record and the markers. Kafka since KAFKA-20090 (PR #21469) keeps the epoch for an abort at
Short.MaxValue (prepareFenceProducerEpoch, prepareAbortOrCommit) and takes the next producer id for it (PR #21506);
its V2 commit there fails on the overflow."""

from __future__ import annotations

from typing import Callable

import pytest

from pybroker.coordinator.txn_coordinator import InitResult, TransactionCoordinator, TxnOutcome
from pybroker.coordinator.txn_records import TV_1, TV_2, TxnState, decode_txn_record
from pybroker.protocol.error_codes import ErrorCode
from pybroker.records.control import build_end_txn_marker
from tests.unit.coordinator.test_txn_coordinator import CONFIG, TIMEOUT_MS, TXN, ManualClock, complete, init, only_reply
from tests.unit.log.logtest_util import NOW, open_log
from tests.unit.log.test_log_transactions import append, txn_batch

LAST = 32767
FRESH = 5000


def open_at(epoch: int, level: int, client_version: int = TV_2) -> tuple[TransactionCoordinator, ManualClock, int]:
    """A transaction of a ``client_version`` client open at ``epoch``, on a cluster at transaction.version ``level``;
    the producer id is returned."""
    coordinator, clock = TransactionCoordinator(CONFIG, transaction_version=lambda: level), ManualClock()
    producer = init(coordinator, clock)
    coordinator.transactions[TXN].producer_epoch = epoch
    added = coordinator.add_partitions("w", TXN, producer.producer_id, epoch, [("out", 0)], clock.now,
                                       client_version=client_version)
    assert only_reply(added) is ErrorCode.NONE
    complete(coordinator, added, clock.now)
    return coordinator, clock, producer.producer_id


def fence(coordinator: TransactionCoordinator, clock: ManualClock, pid: int, epoch: int) -> TxnOutcome:
    """A new instance's InitProducerId; the handler gives it an id whenever the epoch is exhausted."""
    fresh = FRESH if coordinator.needs_producer_id(TXN) else None
    outcome = coordinator.init_producer_id("w", TXN, TIMEOUT_MS, -1, -1, fresh, clock.now)
    assert only_reply(outcome).error is ErrorCode.CONCURRENT_TRANSACTIONS
    return outcome


def timeout(coordinator: TransactionCoordinator, clock: ManualClock, pid: int, epoch: int) -> TxnOutcome:
    """The abort check, and the runtime's id for it when it asks for one."""
    outcome = coordinator.tick(clock.advance(TIMEOUT_MS + CONFIG.abort_check_interval_ms))
    if outcome.id_requests:
        assert (outcome.id_requests, outcome.records) == ([TXN], [])
        outcome = coordinator.producer_id_allocated(TXN, FRESH, clock.now)
    return outcome


def v2_abort(coordinator: TransactionCoordinator, clock: ManualClock, pid: int, epoch: int) -> TxnOutcome:
    fresh = FRESH if coordinator.end_needs_producer_id(TXN) else None
    outcome = coordinator.end_txn("w", TXN, pid, epoch, False, clock.now, bump_epoch=True, fresh_producer_id=fresh)
    assert only_reply(outcome).error is ErrorCode.NONE
    return outcome


def epochs_written(outcome: TxnOutcome) -> list[int]:
    """The epochs of the outcome's records and markers."""
    epochs = []
    for _, (key, value) in outcome.records:
        entry = decode_txn_record(key, value)
        assert entry is not None and entry.metadata is not None
        epochs.append(entry.metadata.producer_epoch)
    return epochs + [marker.producer_epoch for marker in outcome.markers]


End = Callable[[TransactionCoordinator, ManualClock, int, int], TxnOutcome]


@pytest.mark.parametrize("end", [fence, timeout, v2_abort])
def test_a_v2_abort_at_the_last_epoch_keeps_it_and_moves_the_producer_to_a_new_id(end: End) -> None:
    coordinator, clock, pid = open_at(LAST, TV_2)
    outcome = end(coordinator, clock, pid, LAST)
    [(_, (key, value))] = outcome.records
    prepare = decode_txn_record(key, value).metadata
    assert (prepare.state, prepare.producer_id, prepare.producer_epoch, prepare.next_producer_id) == \
        (TxnState.PREPARE_ABORT, pid, LAST, FRESH)
    [marker] = complete(coordinator, outcome, clock.now)
    # A V2 marker at the producer's epoch, which the leaders take at 32767 (test_log_last_epoch_marker.py).
    assert (marker.producer_id, marker.producer_epoch, marker.commit, marker.transaction_version) == \
        (pid, LAST, False, TV_2)
    meta = coordinator.describe(TXN)
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (FRESH, 0, TxnState.COMPLETE_ABORT)


@pytest.mark.parametrize("end", [fence, timeout, v2_abort])
def test_the_v2_marker_at_the_last_epoch_closes_the_transaction_on_its_leader(end: End, tmp_path) -> None:
    """The coordinator's marker, written as its WriteTxnMarkers asks, where the transaction at 32767 wrote."""
    coordinator, clock, pid = open_at(LAST, TV_2)
    log = open_log(tmp_path)
    append(log, txn_batch(pid, 0, epoch=LAST))  # 0-1
    [marker] = complete(coordinator, end(coordinator, clock, pid, LAST), clock.now)
    batch = build_end_txn_marker(marker.commit, producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                                 coordinator_epoch=marker.coordinator_epoch, timestamp=NOW)
    written = log.append_as_leader(bytearray(batch), leader_epoch=0, now_ms=NOW,
                                   transaction_version=marker.transaction_version)
    log.set_high_watermark(log.log_end_offset)
    assert written.first_offset == 2 and log.last_stable_offset == log.log_end_offset == 3
    log.close()


@pytest.mark.parametrize("end", [fence, timeout])
def test_a_v1_fence_at_the_last_epoch_keeps_it_and_the_next_init_moves_the_producer_to_a_new_id(end: End) -> None:
    coordinator, clock, pid = open_at(LAST, TV_1, client_version=TV_1)
    [marker] = complete(coordinator, end(coordinator, clock, pid, LAST), clock.now)
    assert (marker.producer_id, marker.producer_epoch, marker.commit, marker.transaction_version) == \
        (pid, LAST, False, TV_1)
    meta = coordinator.describe(TXN)
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (pid, LAST, TxnState.COMPLETE_ABORT)
    assert init(coordinator, clock, fresh=FRESH) == InitResult(ErrorCode.NONE, FRESH, 0)


def test_a_v2_commit_at_the_last_epoch_is_invalid_txn_state_and_the_abort_after_it_recovers() -> None:
    coordinator, clock, pid = open_at(LAST, TV_2)
    commit = coordinator.end_txn("w", TXN, pid, LAST, True, clock.now, bump_epoch=True, fresh_producer_id=FRESH)
    assert only_reply(commit) == InitResult(ErrorCode.INVALID_TXN_STATE)
    assert (commit.records, commit.markers, coordinator.pending) == ([], [], {})
    abort = v2_abort(coordinator, clock, pid, LAST)
    assert only_reply(abort) == InitResult(ErrorCode.NONE, FRESH, 0)
    complete(coordinator, abort, clock.now)
    assert coordinator.describe(TXN).producer_id == FRESH


@pytest.mark.parametrize("epoch", [LAST - 1, LAST])
@pytest.mark.parametrize("commit", [True, False])
def test_a_v2_end_at_an_exhausted_epoch_without_a_new_id_writes_nothing(epoch: int, commit: bool) -> None:
    """The handler looked for an exhausted epoch before the transaction got there (it was loaded meanwhile): the
    end used to bump to the last epoch with no id to move to, and answer it. Now the retry brings the id."""
    coordinator, clock, pid = open_at(epoch, TV_2)
    outcome = coordinator.end_txn("w", TXN, pid, epoch, commit, clock.now, bump_epoch=True)
    expected = ErrorCode.INVALID_TXN_STATE if commit and epoch == LAST else ErrorCode.CONCURRENT_TRANSACTIONS
    assert only_reply(outcome) == InitResult(expected)
    assert (outcome.records, outcome.markers, coordinator.pending) == ([], [], {})
    assert coordinator.describe(TXN).state is TxnState.ONGOING


@pytest.mark.parametrize("epoch", [LAST - 1, LAST])
def test_a_v2_fence_without_a_new_id_writes_nothing_and_its_retry_fences(epoch: int) -> None:
    coordinator, clock, pid = open_at(epoch, TV_2)
    outcome = coordinator.init_producer_id("w", TXN, TIMEOUT_MS, -1, -1, None, clock.now)
    assert only_reply(outcome).error is ErrorCode.CONCURRENT_TRANSACTIONS
    assert (outcome.records, outcome.markers, coordinator.pending) == ([], [], {})
    [marker] = complete(coordinator, fence(coordinator, clock, pid, epoch), clock.now)
    assert (marker.producer_id, marker.producer_epoch) == (pid, LAST)


@pytest.mark.parametrize("level", [TV_1, TV_2])
@pytest.mark.parametrize("epoch", [LAST - 2, LAST - 1, LAST])
@pytest.mark.parametrize("end", [fence, timeout, v2_abort])
def test_no_end_writes_an_epoch_past_the_last(end: End, epoch: int, level: int) -> None:
    coordinator, clock, pid = open_at(epoch, level)
    outcome = end(coordinator, clock, pid, epoch)
    written = epochs_written(outcome)
    markers = complete(coordinator, outcome, clock.now)
    assert written and max(written) <= LAST
    assert markers and all(m.producer_epoch <= LAST for m in markers)
    meta = coordinator.describe(TXN)
    assert meta.state is TxnState.COMPLETE_ABORT and 0 <= meta.producer_epoch <= LAST


def test_a_v1_fence_at_32766_then_an_upgrade_then_the_v2_retry_and_its_transaction_end_within_the_epochs() -> None:
    """The whole way to a transaction open at 32767, and out of it."""
    level = [TV_1]
    coordinator, clock = TransactionCoordinator(CONFIG, transaction_version=lambda: level[0]), ManualClock()
    pid = init(coordinator, clock).producer_id
    coordinator.transactions[TXN].producer_epoch = LAST - 1
    added = coordinator.add_partitions("w", TXN, pid, LAST - 1, [("out", 0)], clock.now)
    complete(coordinator, added, clock.now)
    complete(coordinator, timeout(coordinator, clock, pid, LAST - 1), clock.now)  # the V1 fence: 32767
    level[0] = TV_2
    retry = coordinator.end_txn("w", TXN, pid, LAST - 1, False, clock.now, bump_epoch=True)
    assert only_reply(retry) == InitResult(ErrorCode.NONE, pid, LAST)  # Kafka's answer to retryOnEpochBump
    reopened = coordinator.add_partitions("w", TXN, pid, LAST, [("out", 0)], clock.now, client_version=TV_2)
    assert only_reply(reopened) is ErrorCode.NONE
    complete(coordinator, reopened, clock.now)
    outcome = timeout(coordinator, clock, pid, LAST)
    assert max(epochs_written(outcome)) == LAST
    complete(coordinator, outcome, clock.now)
    meta = coordinator.describe(TXN)
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (FRESH, 0, TxnState.COMPLETE_ABORT)
