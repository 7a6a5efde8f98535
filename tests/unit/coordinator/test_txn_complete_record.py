"""A transaction is CompleteCommit/CompleteAbort only once that record is on the ISR, as Kafka's pending
state transition: while the record is on its way, DescribeTransactions and ListTransactions report the
Prepare state the log holds and every request for the transactional id is answered CONCURRENT_TRANSACTIONS;
a write that fails leaves the Prepare state and is retried after the backoff (Kafka's
TransactionMarkerChannelManager re-queues the append on COORDINATOR_NOT_AVAILABLE), until the partition
moves to another coordinator, which completes the transaction from the Prepare record it loads. The
coordinator used to move to Complete* before appending the record and kept it when the write failed."""

from __future__ import annotations

import asyncio
from typing import Any

from pybroker.coordinator.txn_coordinator import InitResult, TransactionCoordinator, TxnConfig
from pybroker.coordinator.txn_records import TV_2, TxnState
from pybroker.coordinator.txn_runtime import RETRY_BACKOFF_S
from pybroker.protocol.error_codes import ErrorCode
from tests.eventually import eventually_async
from tests.unit.coordinator.test_txn_runtime import TIMEOUT_MS, TXN, Harness


def listed(harness: Harness, state: str) -> list[str]:
    return [m.transactional_id for m in harness.coordinator.list_transactions([state], [], -1, harness.clock.wall_ms())]


def describe(harness: Harness) -> TxnState:
    meta = harness.coordinator.describe(TXN)
    assert meta is not None
    return meta.state


async def open_v2_transaction(harness: Harness) -> tuple[int, int]:
    """InitProducerId, then the implicit add a leader makes for a V2 client's Produce (KIP-890)."""
    init = await harness.call(lambda w, t: harness.coordinator.init_producer_id(w, TXN, TIMEOUT_MS, -1, -1, 1000, t))
    added = await harness.call(lambda w, t: harness.coordinator.add_partitions(
        w, TXN, init.producer_id, init.producer_epoch, [("out", 0)], t, client_version=TV_2))
    assert added is ErrorCode.NONE
    return init.producer_id, init.producer_epoch


def end_v2(harness: Harness, pid: int, epoch: int, commit: bool) -> asyncio.Future[Any]:
    return asyncio.ensure_future(harness.call(lambda w, t: harness.coordinator.end_txn(
        w, TXN, pid, epoch, commit, t, bump_epoch=True)))


def test_a_commit_is_complete_only_once_its_complete_record_is_on_the_isr() -> None:
    async def scenario() -> None:
        harness = Harness()
        pid, epoch = await harness.open_transaction()
        completed = harness.end_offset + 2  # the PrepareCommit record, then the CompleteCommit one
        harness.held[completed] = release = asyncio.Event()
        assert await harness.commit(pid, epoch) is ErrorCode.NONE
        await harness.appended(completed)
        assert describe(harness) is TxnState.PREPARE_COMMIT
        assert listed(harness, "CompleteCommit") == [] and listed(harness, "PrepareCommit") == [TXN]
        assert await harness.commit(pid, epoch) is ErrorCode.CONCURRENT_TRANSACTIONS  # not "committed" yet
        add = lambda w, t: harness.coordinator.add_partitions(w, TXN, pid, epoch, [("out", 1)], t)
        assert await harness.call(add) is ErrorCode.CONCURRENT_TRANSACTIONS
        init = await harness.call(lambda w, t: harness.coordinator.init_producer_id(w, TXN, TIMEOUT_MS, pid, epoch,
                                                                                    None, t))
        assert init.error is ErrorCode.CONCURRENT_TRANSACTIONS
        assert harness.end_offset == completed  # none of them wrote anything
        release.set()
        await eventually_async(lambda: describe(harness) is TxnState.COMPLETE_COMMIT, "the commit to complete")
        assert await harness.commit(pid, epoch) is ErrorCode.NONE  # a retry of the completed commit
        assert harness.failover().transactions[TXN].state is TxnState.COMPLETE_COMMIT

    asyncio.run(scenario())


def test_a_complete_record_the_isr_did_not_take_leaves_the_prepare_state_and_is_written_again() -> None:
    async def scenario() -> None:
        harness = Harness()
        pid, epoch = await harness.open_transaction()
        completed = harness.end_offset + 2
        harness.failing.add(completed)
        assert await harness.commit(pid, epoch) is ErrorCode.NONE
        await eventually_async(lambda: completed in harness.unreplicated, "the CompleteCommit record's ISR wait to fail")
        await harness.quiet()
        assert describe(harness) is TxnState.PREPARE_COMMIT
        assert harness.failover().transactions[TXN].state is TxnState.PREPARE_COMMIT
        assert await harness.commit(pid, epoch) is ErrorCode.CONCURRENT_TRANSACTIONS
        harness.clock.advance(RETRY_BACKOFF_S)
        await eventually_async(lambda: describe(harness) is TxnState.COMPLETE_COMMIT, "the record written again")
        assert harness.end_offset == completed + 1 and len(harness.markers) == 1  # the markers were not resent
        assert harness.failover().transactions[TXN].state is TxnState.COMPLETE_COMMIT

    asyncio.run(scenario())


def test_a_refused_complete_record_is_retried_with_the_backoff() -> None:
    """The append refused (ISR below min.insync.replicas): an abort stays PrepareAbort until a retry is taken."""
    async def scenario() -> None:
        harness = Harness(marker_results=[ErrorCode.NOT_LEADER_OR_FOLLOWER])
        pid, epoch = await harness.open_transaction()
        abort = harness.call(lambda w, t: harness.coordinator.end_txn(w, TXN, pid, epoch, False, t))
        assert await abort is ErrorCode.NONE
        await harness.first_marker_attempt()  # failed
        harness.refusing = 2  # the CompleteAbort record's first two appends
        harness.clock.advance(RETRY_BACKOFF_S)  # the markers' retry, written
        await eventually_async(lambda: harness.refusing == 1, "the first append of the CompleteAbort record")
        await harness.quiet()
        assert describe(harness) is TxnState.PREPARE_ABORT
        harness.clock.advance(RETRY_BACKOFF_S)
        await eventually_async(lambda: harness.refusing == 0, "the second append")
        await harness.quiet()
        assert describe(harness) is TxnState.PREPARE_ABORT
        harness.clock.advance(RETRY_BACKOFF_S * 2)  # the backoff doubles
        await eventually_async(lambda: describe(harness) is TxnState.COMPLETE_ABORT, "the third append")
        assert harness.failover().transactions[TXN].state is TxnState.COMPLETE_ABORT

    asyncio.run(scenario())


def test_a_coordinator_that_lost_the_partition_stops_retrying_the_complete_record() -> None:
    """Its next coordinator loads the Prepare record and completes the transaction (Kafka's NOT_COORDINATOR)."""
    async def scenario() -> None:
        harness = Harness(marker_results=[ErrorCode.NOT_LEADER_OR_FOLLOWER])
        pid, epoch = await harness.open_transaction()
        assert await harness.commit(pid, epoch) is ErrorCode.NONE
        await harness.first_marker_attempt()  # failed
        harness.refusing = 10**6  # every append from the CompleteCommit record on
        harness.clock.advance(RETRY_BACKOFF_S)
        await eventually_async(lambda: harness.refusing < 10**6, "the first append of the CompleteCommit record")
        harness.runtime.unload(harness.coordinator.partition_of(TXN))
        refused = harness.refusing
        harness.clock.advance(RETRY_BACKOFF_S * 100)
        await eventually_async(lambda: not harness.runtime._marking, "the marker task to end")
        assert harness.refusing == refused
        successor = harness.failover()
        assert successor.transactions[TXN].state is TxnState.PREPARE_COMMIT

    asyncio.run(scenario())


def test_a_v2_commit_is_complete_only_once_its_complete_record_is_on_the_isr() -> None:
    """KIP-890: EndTxn v5 answers the bumped epoch; its retry (the epoch before the bump) and the producer's
    next transaction (the bumped epoch) wait for the CompleteCommit record."""
    async def scenario() -> None:
        harness = Harness()
        pid, epoch = await open_v2_transaction(harness)
        completed = harness.end_offset + 2
        harness.held[completed] = release = asyncio.Event()
        ended = await end_v2(harness, pid, epoch, True)
        assert ended == InitResult(ErrorCode.NONE, pid, epoch + 1)
        await harness.appended(completed)
        assert describe(harness) is TxnState.PREPARE_COMMIT
        assert listed(harness, "CompleteCommit") == []
        assert (await end_v2(harness, pid, epoch, True)).error is ErrorCode.CONCURRENT_TRANSACTIONS
        add = lambda w, t: harness.coordinator.add_partitions(w, TXN, pid, epoch + 1, [("out", 1)], t,
                                                              client_version=TV_2)
        assert await harness.call(add) is ErrorCode.CONCURRENT_TRANSACTIONS
        assert (await end_v2(harness, pid, epoch + 1, False)).error is ErrorCode.CONCURRENT_TRANSACTIONS
        assert harness.end_offset == completed
        release.set()
        await eventually_async(lambda: describe(harness) is TxnState.COMPLETE_COMMIT, "the commit to complete")
        assert await end_v2(harness, pid, epoch, True) == InitResult(ErrorCode.NONE, pid, epoch + 1)
        assert await harness.call(add) is ErrorCode.NONE

    asyncio.run(scenario())


def test_a_v2_abort_with_nothing_open_is_complete_only_once_its_record_is_on_the_isr() -> None:
    """The abort a V2 client may send with no transaction open bumps the epoch and ends an empty transaction
    (PrepareAbort, no marker to write, CompleteAbort): held as pending too, and put back as the log holds it
    when the write fails."""
    async def scenario() -> None:
        harness = Harness()
        pid, epoch = await open_v2_transaction(harness)
        assert (await end_v2(harness, pid, epoch, True)).error is ErrorCode.NONE
        await eventually_async(lambda: describe(harness) is TxnState.COMPLETE_COMMIT, "the commit to complete")
        aborted = harness.end_offset + 1
        harness.held[aborted] = release = asyncio.Event()
        abort = end_v2(harness, pid, epoch + 1, False)
        await harness.appended(aborted)
        assert describe(harness) is TxnState.COMPLETE_COMMIT and not abort.done()
        assert (await end_v2(harness, pid, epoch + 1, False)).error is ErrorCode.CONCURRENT_TRANSACTIONS
        release.set()
        assert await abort == InitResult(ErrorCode.NONE, pid, epoch + 2)
        await harness.completed()
        harness.failing.add(harness.end_offset + 1)
        failed = end_v2(harness, pid, epoch + 2, False)
        await eventually_async(failed.done, "the failed abort's answer")
        assert failed.exception() is not None
        meta = harness.coordinator.describe(TXN)
        assert meta is not None and (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 2)

    asyncio.run(scenario())


def test_an_id_whose_change_waits_for_the_isr_does_not_expire() -> None:
    """Kafka's expiration skips a transactional id with a pending transition: its metadata as logged may be
    idle past transactional.id.expiration.ms while the change that uses it again is on its way."""
    coordinator = TransactionCoordinator(TxnConfig(id_expiration_ms=1000, expiration_check_interval_ms=1000))
    created = coordinator.init_producer_id("w", TXN, TIMEOUT_MS, -1, -1, 1000, 0)
    coordinator.persisted(created, ok=True)
    coordinator.tick(0)
    bump = coordinator.init_producer_id("w", TXN, TIMEOUT_MS, -1, -1, None, 5000)
    assert coordinator.tick(5000).records == [] and coordinator.describe(TXN) is not None
    coordinator.persisted(bump, ok=True)
    meta = coordinator.describe(TXN)
    assert meta is not None and (meta.producer_epoch, meta.last_update_ms) == (1, 5000)
