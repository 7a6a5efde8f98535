"""TxnRuntime's ordering rules: no marker for a Prepare record the ISR does not hold yet, no stale
marker after the transaction moved on, failed markers retried while they are current."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import pytest

from pybroker.coordinator.runtime import CoordinatorStorageError
from pybroker.coordinator.txn_coordinator import MarkerRequest, TransactionCoordinator, TxnConfig
from pybroker.coordinator.txn_records import TxnState
from pybroker.coordinator.txn_runtime import TxnRuntime
from pybroker.protocol.error_codes import ErrorCode

TXN = "txn"
TIMEOUT_MS = 60_000


class Harness:
    """A runtime over a fake internal topic whose ISR waits a test can hold back or fail."""

    def __init__(self, *, marker_results: list[bool] | None = None) -> None:
        self.now = 1_000_000
        self.end_offset = 0
        self.held: dict[int, asyncio.Event] = {}  # end offset -> released when set
        self.failing: set[int] = set()  # end offsets whose first ISR wait fails
        self.markers: list[tuple[MarkerRequest, TxnState]] = []
        self.marker_results = marker_results or []
        self.coordinator = TransactionCoordinator(TxnConfig(abort_check_interval_ms=1000))
        self.runtime = TxnRuntime(self.coordinator, self._persist, self._write_markers, lambda: self.now,
                                  self._replicated)

    def _persist(self, partition: int, records: list[Any]) -> int:
        self.end_offset += len(records)
        return self.end_offset

    async def _replicated(self, partition: int, end: int) -> None:
        if end in self.failing:
            self.failing.discard(end)
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

    def abort_check(self) -> None:
        self.now += 1500
        self.runtime.apply(self.coordinator.tick(self.now))


def test_the_abort_check_sends_no_marker_while_the_prepare_record_waits_for_the_isr() -> None:
    async def scenario() -> None:
        harness = Harness()
        pid, epoch = await harness.open_transaction()
        harness.held[harness.end_offset + 1] = release = asyncio.Event()  # the PrepareCommit record
        commit = harness.commit(pid, epoch)
        await asyncio.sleep(0.01)
        harness.abort_check()
        await asyncio.sleep(0.01)
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
        for _ in range(60):  # the runtime keeps waiting for the record (backoff 2 s) and then writes
            if harness.markers:
                break
            await asyncio.sleep(0.05)
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
        for _ in range(40):
            if harness.coordinator.transactions[TXN].state is TxnState.COMPLETE_COMMIT:
                break
            await asyncio.sleep(0.05)
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
        await asyncio.sleep(0.5)  # past the retry's backoff
        assert len(harness.markers) == 1  # the stale retry was dropped

    asyncio.run(scenario())
