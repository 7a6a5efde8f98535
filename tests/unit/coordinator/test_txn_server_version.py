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


def exhausted_and_timed_out(level: int = TV_2) -> tuple[TransactionCoordinator, ManualClock, InitResult, TxnOutcome]:
    """A transaction at epoch 32766 (the last before an exhausted one) past its timeout, and the abort check."""
    coordinator, clock, producer = opened(level, TV_2)
    coordinator.transactions[TXN].producer_epoch = 32766
    return coordinator, clock, producer, timed_out(coordinator, clock)


def test_a_v2_timeout_abort_of_an_exhausted_epoch_waits_for_a_new_id_and_moves_the_producer_to_it() -> None:
    """KAFKA-20090's case (PR #21506): a transaction timed out at epoch 32766 is fenced with the next producer id,
    so its CompleteAbort moves the producer to it at epoch 0 and the producer's late EndTxn v5 abort is a retry
    of that end. The abort check asks for the id first, writing nothing; until it comes the transaction is
    changing (Kafka's pending PrepareEpochFence) and a later check does not ask again."""
    coordinator, clock, producer, check = exhausted_and_timed_out()
    pid = producer.producer_id
    assert (check.id_requests, check.records, check.markers) == ([TXN], [], [])
    assert coordinator.describe(TXN).state is TxnState.ONGOING
    requests = [coordinator.init_producer_id("w", TXN, TIMEOUT_MS, -1, -1, 7000, clock.now),
                coordinator.end_txn("w", TXN, pid, 32766, False, clock.now, bump_epoch=True, fresh_producer_id=7000),
                coordinator.end_txn("w", TXN, pid, 32766, False, clock.now),
                coordinator.add_partitions("w", TXN, pid, 32766, [("out", 1)], clock.now)]
    for request in requests:
        answer = only_reply(request)
        assert getattr(answer, "error", answer) is ErrorCode.CONCURRENT_TRANSACTIONS
        assert request.records == []
    assert timed_out(coordinator, clock).id_requests == []

    outcome = coordinator.producer_id_allocated(TXN, 5000, clock.now)
    [(_, (key, value))] = outcome.records
    prepare = decode_txn_record(key, value).metadata
    assert (prepare.state, prepare.producer_id, prepare.producer_epoch, prepare.next_producer_id) == \
        (TxnState.PREPARE_ABORT, pid, 32767, 5000)
    [marker] = complete(coordinator, outcome, clock.now)
    assert (marker.producer_id, marker.producer_epoch, marker.commit) == (pid, 32767, False)
    meta = coordinator.describe(TXN)
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (5000, 0, TxnState.COMPLETE_ABORT)
    late = coordinator.end_txn("w", TXN, pid, 32766, False, clock.now, bump_epoch=True)
    assert only_reply(late) == InitResult(ErrorCode.NONE, 5000, 0)


def test_a_timeout_abort_without_a_new_id_is_asked_for_again_at_the_next_check() -> None:
    """The id allocation failed (no producer-id block from the controller): nothing is written, the transaction
    is Ongoing and open to requests again, and the next abort check asks again."""
    coordinator, clock, producer, _ = exhausted_and_timed_out()
    assert coordinator.producer_id_allocated(TXN, None, clock.now).records == []
    add = coordinator.add_partitions("w", TXN, producer.producer_id, 32766, [("out", 0)], clock.now)
    assert only_reply(add) is ErrorCode.NONE
    assert timed_out(coordinator, clock).id_requests == [TXN]


def test_an_id_that_comes_after_the_partition_moved_writes_nothing() -> None:
    coordinator, clock, _, _ = exhausted_and_timed_out()
    coordinator.unload(coordinator.partition_of(TXN))
    assert coordinator.allocating == set()
    assert coordinator.producer_id_allocated(TXN, 5000, clock.now) == TxnOutcome()


def test_a_timeout_abort_of_an_exhausted_epoch_below_transaction_version_2_needs_no_new_id() -> None:
    """Kafka's endTransactionWithTV1 takes no next producer id: the V1 fence ends at epoch 32767 at once, and the
    producer's next InitProducerId moves it to a new id."""
    coordinator, clock, producer, check = exhausted_and_timed_out(TV_1)
    assert check.id_requests == []
    [marker] = complete(coordinator, check, clock.now)
    assert (marker.producer_id, marker.producer_epoch) == (producer.producer_id, 32767)
    assert coordinator.needs_producer_id(TXN)
