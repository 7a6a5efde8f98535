"""Ends the coordinator starts itself (the fence of InitProducerId, the timeout abort) run as the cluster's
finalized ``transaction.version`` says, whatever client opened the transaction: Kafka's TransactionCoordinator
passes ``txnManager.transactionVersionLevel()`` to endTransaction for both. The coordinator used to choose per
transaction, so a V1 client's transaction on a cluster at transaction.version 2 was fenced the V1 way and a
V2 client's below 2 the V2 way."""

from __future__ import annotations

import pytest

from pybroker.coordinator.txn_coordinator import InitResult, TransactionCoordinator, TxnOutcome
from pybroker.coordinator.txn_records import TV_1, TV_2, TxnState, decode_txn_record
from pybroker.protocol.error_codes import ErrorCode
from tests.unit.coordinator.test_txn_coordinator import CONFIG, TIMEOUT_MS, TXN, ManualClock, complete, init, only_reply


def opened(level: int, client_version: int) -> tuple[TransactionCoordinator, ManualClock, InitResult]:
    """A transaction of a ``client_version`` client on a cluster whose finalized transaction.version is ``level``."""
    coordinator, clock = TransactionCoordinator(CONFIG, transaction_version=lambda: level), ManualClock()
    producer = init(coordinator, clock)
    added = coordinator.add_partitions("w", TXN, producer.producer_id, producer.producer_epoch, [("out", 0)],
                                       clock.now, client_version=client_version)
    assert only_reply(added) is ErrorCode.NONE
    complete(coordinator, added, clock.now)
    return coordinator, clock, producer


def timed_out(coordinator: TransactionCoordinator, clock: ManualClock) -> TxnOutcome:
    return coordinator.tick(clock.advance(TIMEOUT_MS + CONFIG.abort_check_interval_ms))


def fenced(coordinator: TransactionCoordinator, clock: ManualClock) -> TxnOutcome:
    outcome = coordinator.init_producer_id("w", TXN, TIMEOUT_MS, -1, -1, None, clock.now)
    assert only_reply(outcome).error is ErrorCode.CONCURRENT_TRANSACTIONS
    return outcome


def prepare_record_version(outcome: TxnOutcome) -> int:
    [(_, (key, value))] = outcome.records
    entry = decode_txn_record(key, value)
    assert entry is not None and entry.metadata is not None and entry.metadata.state is TxnState.PREPARE_ABORT
    return entry.metadata.client_version


@pytest.mark.parametrize("end", [timed_out, fenced])
def test_a_v1_clients_transaction_on_a_v2_cluster_is_aborted_the_v2_way(end) -> None:
    coordinator, clock, producer = opened(TV_2, TV_1)
    pid, epoch = producer.producer_id, producer.producer_epoch
    outcome = end(coordinator, clock)
    assert prepare_record_version(outcome) == TV_2
    [marker] = complete(coordinator, outcome, clock.now)
    assert (marker.producer_epoch, marker.transaction_version, marker.commit) == (epoch + 1, TV_2, False)
    meta = coordinator.describe(TXN)
    assert meta is not None and (meta.state, meta.producer_epoch, meta.last_producer_epoch) == \
        (TxnState.COMPLETE_ABORT, epoch + 1, epoch)  # prepareAbortOrCommit's TV_2 bump keeps the epoch before
    late = coordinator.end_txn("w", TXN, pid, epoch, False, clock.now)  # the fenced V1 client's EndTxn
    assert only_reply(late) is ErrorCode.PRODUCER_FENCED


@pytest.mark.parametrize("level", [0, TV_1])
@pytest.mark.parametrize("end", [timed_out, fenced])
def test_a_v2_clients_transaction_below_transaction_version_2_is_aborted_the_v1_way(end, level: int) -> None:
    coordinator, clock, producer = opened(level, TV_2)
    pid, epoch = producer.producer_id, producer.producer_epoch
    outcome = end(coordinator, clock)
    assert prepare_record_version(outcome) == TV_1
    [marker] = complete(coordinator, outcome, clock.now)
    assert (marker.producer_epoch, marker.transaction_version, marker.commit) == (epoch + 1, TV_1, False)
    meta = coordinator.describe(TXN)
    assert meta is not None and (meta.state, meta.producer_epoch, meta.last_producer_epoch) == \
        (TxnState.COMPLETE_ABORT, epoch + 1, -1)  # a V1 fence keeps no last epoch
    late = coordinator.init_producer_id("w", TXN, TIMEOUT_MS, pid, epoch, None, clock.now)
    assert only_reply(late).error is ErrorCode.PRODUCER_FENCED  # not taken for a retry of a bump


def test_the_level_is_read_at_each_end_not_when_the_transaction_opened() -> None:
    """UpdateFeatures may change the level while a transaction is open (Kafka reads the metadata cache's
    finalized features each time)."""
    level = [TV_1]
    coordinator, clock = TransactionCoordinator(CONFIG, transaction_version=lambda: level[0]), ManualClock()
    producer = init(coordinator, clock)
    added = coordinator.add_partitions("w", TXN, producer.producer_id, producer.producer_epoch, [("out", 0)],
                                       clock.now)
    complete(coordinator, added, clock.now)
    level[0] = TV_2
    [marker] = timed_out(coordinator, clock).markers
    assert marker.transaction_version == TV_2


def test_a_v2_fence_of_an_exhausted_epoch_moves_the_producer_to_a_new_id() -> None:
    """KAFKA-20090: Kafka's V2 endTransaction takes the next producer id for a fence too when the epoch is
    exhausted (32766 and up), so the abort's CompleteAbort moves the producer to it at epoch 0; a late EndTxn v5
    abort of the fenced producer is then taken for a retry of that end (retryOnOverflow)."""
    coordinator, clock, producer = opened(TV_2, TV_2)
    meta = coordinator.transactions[TXN]
    meta.producer_epoch = 32766
    assert coordinator.needs_producer_id(TXN)  # the handler allocates the fresh id
    outcome = coordinator.init_producer_id("w", TXN, TIMEOUT_MS, -1, -1, 5000, clock.now)
    assert only_reply(outcome).error is ErrorCode.CONCURRENT_TRANSACTIONS
    [marker] = complete(coordinator, outcome, clock.now)
    assert (marker.producer_id, marker.producer_epoch, marker.commit) == (producer.producer_id, 32767, False)
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (5000, 0, TxnState.COMPLETE_ABORT)
    late = coordinator.end_txn("w", TXN, producer.producer_id, 32766, False, clock.now, bump_epoch=True)
    assert only_reply(late) == InitResult(ErrorCode.NONE, 5000, 0)
    retried = init(coordinator, clock, fresh=None)  # the new producer's InitProducerId, retried
    assert (retried.error, retried.producer_id, retried.producer_epoch) == (ErrorCode.NONE, 5000, 1)
