"""TxnRuntime's ordering rules: no marker for a Prepare record the ISR does not hold yet, no stale
marker after the transaction moved on, failed markers retried while they are current, and partitions
that join a transaction only once their record is on the ISR (chaos round 3003)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import pytest

from pybroker.common.clock import ManualClock
from pybroker.coordinator.runtime import CoordinatorStorageError
from pybroker.coordinator.txn_coordinator import MarkerRequest, TransactionCoordinator, TxnConfig
from pybroker.coordinator.txn_records import TxnState, decode_txn_record
from pybroker.replication.errors import NotEnoughReplicasError
from pybroker.coordinator.txn_runtime import TxnRuntime
from pybroker.protocol.error_codes import ErrorCode
from tests.eventually import eventually_async

TXN = "txn"
TIMEOUT_MS = 60_000


class Harness:
    """A runtime over a fake internal topic whose ISR waits a test can hold back or fail, on a clock that
    moves only when the test says so."""

    def __init__(self, *, marker_results: list[bool] | None = None) -> None:
        self.clock = ManualClock(wall_ms=1_000_000)
        self.end_offset = 0
        self.held: dict[int, asyncio.Event] = {}  # end offset -> released when set
        self.failing: set[int] = set()  # end offsets whose first ISR wait fails
        self.refusing = 0  # appends still to refuse, as a leader whose ISR is below min.insync.replicas does
        self.log: list[tuple[int, Any]] = []  # (end offset of its append, record), oldest first
        self.unreplicated: set[int] = set()  # end offsets of appends whose ISR wait failed
        self.markers: list[tuple[MarkerRequest, TxnState]] = []
        self.marker_results = marker_results or []
        self.coordinator = TransactionCoordinator(TxnConfig(abort_check_interval_ms=1000))
        self.runtime = TxnRuntime(self.coordinator, self._persist, self._write_markers, self.clock,
                                  self._replicated)

    def _persist(self, partition: int, records: list[Any]) -> int:
        if self.refusing:
            self.refusing -= 1
            raise NotEnoughReplicasError("the ISR is smaller than min.insync.replicas")
        self.end_offset += len(records)
        self.log += [(self.end_offset, record) for record in records]
        return self.end_offset

    def failover(self) -> TransactionCoordinator:
        """The next coordinator, on a replica that has every append whose ISR wait succeeded."""
        successor = TransactionCoordinator(TxnConfig())
        successor.load(decode_txn_record(key, value) for end, (key, value) in self.log if end not in self.unreplicated)
        return successor

    async def _replicated(self, partition: int, end: int) -> None:
        if end in self.failing:
            self.failing.discard(end)
            self.unreplicated.add(end)
            raise TimeoutError(f"replication up to {end} timed out")
        if end in self.held:
            await self.held[end].wait()

    async def _write_markers(self, marker: MarkerRequest) -> bool:
        self.markers.append((marker, self.coordinator.transactions[marker.transactional_id].state))
        return self.marker_results.pop(0) if self.marker_results else True

    async def call(self, operation: Callable[[Any, int], Any]) -> Any:
        return await self.runtime.call(operation)

    async def open_transaction(self) -> tuple[int, int]:
        init = await self.call(lambda w, t: self.coordinator.init_producer_id(w, TXN, TIMEOUT_MS, -1, -1, 1000, t))
        added = await self.call(lambda w, t: self.coordinator.add_partitions(
            w, TXN, init.producer_id, init.producer_epoch, [("out", 0)], t))
        assert added is ErrorCode.NONE
        return init.producer_id, init.producer_epoch

    def commit(self, pid: int, epoch: int) -> asyncio.Future[Any]:
        return asyncio.ensure_future(self.call(lambda w, t: self.coordinator.end_txn(w, TXN, pid, epoch, True, t)))

    async def abort_check(self) -> None:
        """Run the coordinator's abort check 1.5 s on, and wait until the runtime finished what it started."""
        self.clock.advance(1.5)
        started = set(self.runtime._replicating)
        self.runtime.apply(self.coordinator.tick(self.clock.wall_ms()))
        await asyncio.gather(*(set(self.runtime._replicating) - started))

    async def appended(self, end_offset: int) -> None:
        await eventually_async(lambda: self.end_offset >= end_offset, f"the append up to {end_offset}")


def test_the_abort_check_sends_no_marker_while_the_prepare_record_waits_for_the_isr() -> None:
    async def scenario() -> None:
        harness = Harness()
        pid, epoch = await harness.open_transaction()
        prepare = harness.end_offset + 1
        harness.held[prepare] = release = asyncio.Event()  # the PrepareCommit record
        commit = harness.commit(pid, epoch)
        await harness.appended(prepare)
        await harness.abort_check()
        assert harness.markers == [] and not commit.done()
        retry = await harness.call(lambda w, t: harness.coordinator.end_txn(w, TXN, pid, epoch, True, t))
        assert retry is ErrorCode.CONCURRENT_TRANSACTIONS
        release.set()
        assert await commit is ErrorCode.NONE
        assert [(m.commit, state) for m, state in harness.markers] == [(True, TxnState.PREPARE_COMMIT)]
        assert harness.coordinator.transactions[TXN].state is TxnState.COMPLETE_COMMIT

    asyncio.run(scenario())


def test_a_failed_isr_wait_fails_the_answer_and_markers_follow_only_once_replicated() -> None:
    async def scenario() -> None:
        harness = Harness()
        pid, epoch = await harness.open_transaction()
        harness.failing.add(harness.end_offset + 1)
        with pytest.raises(CoordinatorStorageError):
            await harness.commit(pid, epoch)
        assert harness.markers == []
        harness.clock.advance(2)  # the runtime keeps waiting for the record (backoff 2 s) and then writes
        await eventually_async(lambda: harness.markers, "the markers, once the record is replicated")
        assert [m.commit for m, _ in harness.markers] == [True]
        assert harness.coordinator.transactions[TXN].state is TxnState.COMPLETE_COMMIT

    asyncio.run(scenario())


def test_a_failed_marker_is_retried_until_written_and_the_answer_does_not_wait_for_it() -> None:
    async def scenario() -> None:
        harness = Harness(marker_results=[False, False, True])
        pid, epoch = await harness.open_transaction()
        assert await harness.commit(pid, epoch) is ErrorCode.NONE
        assert len(harness.markers) == 1  # answered after the first attempt
        assert harness.coordinator.transactions[TXN].state is TxnState.PREPARE_COMMIT
        harness.clock.advance(0.1)  # the first backoff
        await eventually_async(lambda: len(harness.markers) == 2, "the first retry")
        assert harness.coordinator.transactions[TXN].state is TxnState.PREPARE_COMMIT
        harness.clock.advance(0.2)  # the second
        await eventually_async(lambda: harness.coordinator.transactions[TXN].state is TxnState.COMPLETE_COMMIT,
                               "the transaction to complete")
        assert len(harness.markers) == 3
        assert harness.coordinator.transactions[TXN].state is TxnState.COMPLETE_COMMIT

    asyncio.run(scenario())


def test_a_marker_made_stale_by_a_newer_producer_epoch_is_not_written() -> None:
    async def scenario() -> None:
        harness = Harness(marker_results=[False])
        pid, epoch = await harness.open_transaction()
        assert await harness.commit(pid, epoch) is ErrorCode.NONE  # first attempt failed; a retry waits
        meta = harness.coordinator.transactions[TXN]
        meta.state, meta.producer_epoch = TxnState.COMPLETE_COMMIT, epoch + 1  # completed elsewhere, then fenced
        harness.clock.advance(0.1)  # past the retry's backoff
        await eventually_async(lambda: not harness.runtime._marking, "the retry to end")
        assert len(harness.markers) == 1  # the stale retry was dropped

    asyncio.run(scenario())


def test_partitions_join_a_transaction_only_once_their_record_is_on_the_isr() -> None:
    """Chaos round 3003: an AddPartitionsToTxn whose record the ISR did not take was answered with an
    error, but the coordinator kept the partitions; the producer's retry found them added and was told so
    with nothing on the log. After a failover the next coordinator had the previous transaction's
    CompleteCommit, took the EndTxn for a retry of it, and no marker reached the partitions: the
    committed records were closed by the producer's next ABORT. Both ways of failing are covered: the
    append refused (ISR below min.insync.replicas) and the ISR wait failing after the append."""
    async def scenario() -> None:
        harness = Harness()
        init = await harness.call(lambda w, t: harness.coordinator.init_producer_id(w, TXN, TIMEOUT_MS, -1, -1, 1000, t))
        pid, epoch = init.producer_id, init.producer_epoch

        def add(partition: tuple[str, int]) -> Any:
            return harness.call(lambda w, t: harness.coordinator.add_partitions(w, TXN, pid, epoch, [partition], t))

        harness.refusing = 1
        with pytest.raises(CoordinatorStorageError):
            await add(("out", 0))
        harness.failing.add(harness.end_offset + 1)
        with pytest.raises(CoordinatorStorageError):
            await add(("out", 1))
        assert await add(("out", 0)) is ErrorCode.NONE
        assert await add(("out", 1)) is ErrorCode.NONE
        successor = harness.failover().transactions[TXN]
        assert successor.state is TxnState.ONGOING and successor.partitions == {("out", 0), ("out", 1)}

    asyncio.run(scenario())


def test_a_transaction_waits_while_its_partitions_record_is_on_its_way_to_the_isr() -> None:
    """Kafka's pending transition: requests for the transactional id get CONCURRENT_TRANSACTIONS (a
    retry must not be told its partitions were added before the record is on the ISR), and a produce
    to those partitions is not verified yet."""
    async def scenario() -> None:
        harness = Harness()
        init = await harness.call(lambda w, t: harness.coordinator.init_producer_id(w, TXN, TIMEOUT_MS, -1, -1, 1000, t))
        pid, epoch = init.producer_id, init.producer_epoch
        added = harness.end_offset + 1
        harness.held[added] = release = asyncio.Event()
        first = asyncio.ensure_future(harness.call(lambda w, t: harness.coordinator.add_partitions(
            w, TXN, pid, epoch, [("out", 0)], t)))
        await harness.appended(added)
        retry = await harness.call(lambda w, t: harness.coordinator.add_partitions(w, TXN, pid, epoch, [("out", 0)], t))
        assert retry is ErrorCode.CONCURRENT_TRANSACTIONS
        assert await harness.commit(pid, epoch) is ErrorCode.CONCURRENT_TRANSACTIONS
        verify = lambda w, t: harness.coordinator.add_partitions(w, TXN, pid, epoch, [("out", 0)], t, verify_only=True)
        assert await harness.call(verify) is ErrorCode.INVALID_TXN_STATE  # judged by what the log holds
        release.set()
        assert await first is ErrorCode.NONE
        assert await harness.call(verify) is ErrorCode.NONE
        assert await harness.commit(pid, epoch) is ErrorCode.NONE

    asyncio.run(scenario())
