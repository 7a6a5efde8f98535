"""TxnRuntime's ordering rules: no marker for a Prepare record the ISR does not hold yet, no stale
marker after the transaction moved on, failed markers retried after a backoff while they are current
(the failed partitions only), markers a leader refuses as fenced not sent again, and partitions that
join a transaction only once their record is on the ISR (chaos round 3003)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import pytest

from pybroker.common.clock import ManualClock
from pybroker.controller.producer_ids import ProducerIdsUnavailableError
from pybroker.coordinator.runtime import CoordinatorStorageError
from pybroker.coordinator.txn_coordinator import MarkerRequest, TransactionCoordinator, TxnConfig
from pybroker.coordinator.txn_records import TV_2, TxnState, decode_txn_record
from pybroker.replication.errors import NotEnoughReplicasError
from pybroker.coordinator.txn_runtime import RETRY_BACKOFF_MAX_S, RETRY_BACKOFF_S, TxnRuntime
from pybroker.protocol.error_codes import ErrorCode
from tests.eventually import eventually_async

TXN = "txn"
TIMEOUT_MS = 60_000


class Harness:
    """A runtime over a fake internal topic whose ISR waits a test can hold back or fail, on a clock that
    moves only when the test says so."""

    def __init__(self, *, marker_results: list[ErrorCode | dict[tuple[str, int], ErrorCode]] | None = None,
                 transaction_version: int = TV_2) -> None:
        self.clock = ManualClock(wall_ms=1_000_000)
        self.end_offset = 0
        self.held: dict[int, asyncio.Event] = {}  # end offset -> released when set
        self.failing: set[int] = set()  # end offsets whose first ISR wait fails
        self.refusing = 0  # appends still to refuse, as a leader whose ISR is below min.insync.replicas does
        self.log: list[tuple[int, Any]] = []  # (end offset of its append, record), oldest first
        self.unreplicated: set[int] = set()  # end offsets of appends whose ISR wait failed
        self.markers: list[tuple[MarkerRequest, TxnState]] = []
        self.marker_results = marker_results or []
        """Answers to the next marker writes: one code for every partition sent, or a code per partition."""
        self.markers_held: asyncio.Event | None = None
        """When set here, marker writes wait until the test sets the event."""
        self.producer_ids: list[int | Exception] = []
        """The answers of the next producer-id allocations: an id, or the error the allocation raises."""
        self.producer_ids_held: asyncio.Event | None = None
        """When set here, producer-id allocations wait until the test sets the event."""
        self.coordinator = TransactionCoordinator(TxnConfig(abort_check_interval_ms=1000),
                                                  transaction_version=lambda: transaction_version)
        self.runtime = TxnRuntime(self.coordinator, self._persist, self._write_markers, self._next_producer_id,
                                  self.clock, self._replicated)

    async def _next_producer_id(self) -> int:
        if self.producer_ids_held is not None:
            await self.producer_ids_held.wait()
        answer = self.producer_ids.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

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

    async def _write_markers(self, marker: MarkerRequest) -> dict[tuple[str, int], ErrorCode]:
        self.markers.append((marker, self.coordinator.transactions[marker.transactional_id].state))
        if self.markers_held is not None:
            await self.markers_held.wait()
        answer = self.marker_results.pop(0) if self.marker_results else ErrorCode.NONE
        return answer if isinstance(answer, dict) else {tp: answer for tp in marker.partitions}

    async def quiet(self) -> None:
        """Let the runtime's tasks run until each waits for the clock or an event."""
        for _ in range(100):
            await asyncio.sleep(0)

    def state(self) -> TxnState:
        return self.coordinator.transactions[TXN].state

    async def call(self, operation: Callable[[Any, int], Any]) -> Any:
        return await self.runtime.call(operation)

    async def open_transaction(self, partitions: tuple[tuple[str, int], ...] = (("out", 0),)) -> tuple[int, int]:
        init = await self.call(lambda w, t: self.coordinator.init_producer_id(w, TXN, TIMEOUT_MS, -1, -1, 1000, t))
        added = await self.call(lambda w, t: self.coordinator.add_partitions(
            w, TXN, init.producer_id, init.producer_epoch, partitions, t))
        assert added is ErrorCode.NONE
        return init.producer_id, init.producer_epoch

    def commit(self, pid: int, epoch: int) -> asyncio.Future[Any]:
        return asyncio.ensure_future(self.call(lambda w, t: self.coordinator.end_txn(w, TXN, pid, epoch, True, t)))

    async def completed(self) -> None:
        """Wait until the transaction's markers are written and its Complete record stands (the producer's
        EndTxn is answered before)."""
        await eventually_async(lambda: self.state() in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
                               and TXN not in self.coordinator.pending, "the transaction to complete")

    async def first_marker_attempt(self) -> None:
        """Wait until the first attempt at the markers was made and its answer handled."""
        await eventually_async(lambda: len(self.markers) == 1, "the first marker attempt")
        await self.quiet()

    async def abort_check(self) -> None:
        """Run the coordinator's abort check 1.5 s on, and wait until the runtime finished what it started."""
        self.clock.advance(1.5)
        started = set(self.runtime._replicating)
        self.runtime.apply(self.coordinator.tick(self.clock.wall_ms()))
        await asyncio.gather(*(set(self.runtime._replicating) - started))

    async def appended(self, end_offset: int) -> None:
        await eventually_async(lambda: self.end_offset >= end_offset, f"the append up to {end_offset}")

    async def commit_held(self, pid: int, epoch: int) -> tuple[asyncio.Future[Any], asyncio.Event]:
        """A commit whose PrepareCommit record is appended and kept from the ISR until the event is set."""
        prepare = self.end_offset + 1
        self.held[prepare] = release = asyncio.Event()
        commit = self.commit(pid, epoch)
        await self.appended(prepare)
        return commit, release


def test_the_abort_check_sends_no_marker_while_the_prepare_record_waits_for_the_isr() -> None:
    """Meanwhile the transaction is Ongoing, as the log says (Kafka's pending PrepareCommit transition), and
    either end of it is CONCURRENT_TRANSACTIONS."""
    async def scenario() -> None:
        harness = Harness()
        pid, epoch = await harness.open_transaction()
        commit, release = await harness.commit_held(pid, epoch)
        assert harness.state() is TxnState.ONGOING
        await harness.abort_check()
        assert harness.markers == [] and not commit.done()
        for result in (True, False):
            retry = await harness.call(lambda w, t: harness.coordinator.end_txn(w, TXN, pid, epoch, result, t))
            assert retry is ErrorCode.CONCURRENT_TRANSACTIONS
        release.set()
        assert await commit is ErrorCode.NONE
        await harness.completed()
        assert [(m.commit, state) for m, state in harness.markers] == [(True, TxnState.PREPARE_COMMIT)]
        assert harness.coordinator.transactions[TXN].state is TxnState.COMPLETE_COMMIT

    asyncio.run(scenario())


def test_end_txn_is_answered_once_the_prepare_record_is_on_the_isr_before_any_marker_is_written() -> None:
    """Kafka's endTransaction answers from the Prepare append's callback and hands the markers to its marker
    channel afterwards; until the Complete record is on the ISR the transaction stays in PrepareCommit and
    InitProducerId, AddPartitionsToTxn and EndTxn get CONCURRENT_TRANSACTIONS. The answer used to wait for
    the first attempt at the markers, which a leader that answers slowly held up."""
    async def scenario() -> None:
        harness = Harness()
        harness.markers_held = release = asyncio.Event()
        pid, epoch = await harness.open_transaction()
        assert await asyncio.wait_for(harness.commit(pid, epoch), 10) is ErrorCode.NONE
        await eventually_async(lambda: len(harness.markers) == 1, "the marker write to start")
        assert harness.state() is TxnState.PREPARE_COMMIT
        assert await harness.commit(pid, epoch) is ErrorCode.CONCURRENT_TRANSACTIONS
        add = lambda w, t: harness.coordinator.add_partitions(w, TXN, pid, epoch, [("out", 1)], t)
        assert await harness.call(add) is ErrorCode.CONCURRENT_TRANSACTIONS
        init = await harness.call(lambda w, t: harness.coordinator.init_producer_id(w, TXN, TIMEOUT_MS, pid, epoch,
                                                                                    None, t))
        assert init.error is ErrorCode.CONCURRENT_TRANSACTIONS
        release.set()
        await harness.completed()
        assert harness.state() is TxnState.COMPLETE_COMMIT
        assert await harness.call(add) is ErrorCode.NONE

    asyncio.run(scenario())


def test_a_failed_marker_is_retried_after_the_backoff_not_at_the_abort_check() -> None:
    """A marker a leader did not take is sent again after retry.backoff.ms, doubling up to
    retry.backoff.max.ms (Kafka's marker channel re-queues it), not at the next abort check: no tick
    runs here. The producer's answer does not wait for the retries."""
    async def scenario() -> None:
        waits = [RETRY_BACKOFF_S * 2**n for n in range(4)] + [RETRY_BACKOFF_MAX_S] * 2
        assert waits[:4] == [0.1, 0.2, 0.4, 0.8]  # retry.backoff.ms 100 doubling to retry.backoff.max.ms 1000
        harness = Harness(marker_results=[ErrorCode.NOT_LEADER_OR_FOLLOWER] * len(waits) + [ErrorCode.NONE])
        pid, epoch = await harness.open_transaction()
        assert await harness.commit(pid, epoch) is ErrorCode.NONE
        await harness.first_marker_attempt()
        for attempt, wait in enumerate(waits, start=2):
            harness.clock.advance(wait / 2)
            await harness.quiet()
            assert len(harness.markers) == attempt - 1 and harness.state() is TxnState.PREPARE_COMMIT
            harness.clock.advance(wait / 2 + 1e-6)  # the microsecond absorbs the float sums of the clock
            await eventually_async(lambda: len(harness.markers) == attempt, f"attempt {attempt}")
        await eventually_async(lambda: harness.state() is TxnState.COMPLETE_COMMIT, "the transaction to complete")
        assert len(harness.markers) == len(waits) + 1

    asyncio.run(scenario())


def test_a_retry_sends_the_marker_only_to_the_partitions_that_failed() -> None:
    async def scenario() -> None:
        harness = Harness(marker_results=[{("out", 0): ErrorCode.NONE, ("out", 1): ErrorCode.NOT_ENOUGH_REPLICAS}])
        pid, epoch = await harness.open_transaction((("out", 0), ("out", 1)))
        assert await harness.commit(pid, epoch) is ErrorCode.NONE
        harness.clock.advance(RETRY_BACKOFF_S)
        await eventually_async(lambda: harness.state() is TxnState.COMPLETE_COMMIT, "the transaction to complete")
        assert [m.partitions for m, _ in harness.markers] == [(("out", 0), ("out", 1)), (("out", 1),)]

    asyncio.run(scenario())


@pytest.mark.parametrize("code", [ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED])
def test_a_marker_refused_as_fenced_is_not_sent_again(code: ErrorCode) -> None:
    """Kafka's TransactionMarkerRequestCompletionHandler: the producer or the coordinator moved on, so
    no more markers of the transaction are sent; neither the backoff nor the abort check resends it."""
    async def scenario() -> None:
        harness = Harness(marker_results=[{("out", 0): ErrorCode.NONE, ("out", 1): code}])
        pid, epoch = await harness.open_transaction((("out", 0), ("out", 1)))
        assert await harness.commit(pid, epoch) is ErrorCode.NONE
        await eventually_async(lambda: not harness.runtime._marking, "the marker task to end")
        harness.clock.advance(RETRY_BACKOFF_MAX_S * 10)
        await harness.abort_check()
        await harness.quiet()
        assert len(harness.markers) == 1
        assert harness.state() is TxnState.PREPARE_COMMIT  # as in Kafka: left to the next coordinator

    asyncio.run(scenario())


def test_a_marker_made_stale_by_a_newer_producer_epoch_is_not_written() -> None:
    async def scenario() -> None:
        harness = Harness(marker_results=[ErrorCode.REQUEST_TIMED_OUT])
        pid, epoch = await harness.open_transaction()
        assert await harness.commit(pid, epoch) is ErrorCode.NONE
        await harness.first_marker_attempt()  # failed; a retry waits
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
        assert await harness.call(verify) is ErrorCode.TRANSACTION_ABORTABLE  # judged by what the log holds
        release.set()
        assert await first is ErrorCode.NONE
        assert await harness.call(verify) is ErrorCode.NONE
        assert await harness.commit(pid, epoch) is ErrorCode.NONE

    asyncio.run(scenario())


def test_a_producer_epoch_is_bumped_only_once_its_record_is_on_the_isr() -> None:
    """InitProducerId's bump, as Kafka's pending transition: the coordinator used to bump the epoch in
    memory before its record was written and kept it when the append was refused or the ISR wait failed.
    The client's retry (KIP-360: the producer id and epoch it had) was then taken for a retry of a bump
    that had succeeded and answered the new epoch with nothing on the log; after a failover the next
    coordinator had the old epoch, so the fenced producer could go on and the new one was fenced."""
    async def scenario() -> None:
        harness = Harness()
        pid, epoch = await harness.open_transaction()
        assert await harness.commit(pid, epoch) is ErrorCode.NONE
        await harness.completed()

        def init() -> Any:
            return harness.call(lambda w, t: harness.coordinator.init_producer_id(w, TXN, TIMEOUT_MS, pid, epoch,
                                                                                  None, t))

        harness.refusing = 1
        with pytest.raises(CoordinatorStorageError):
            await init()
        harness.failing.add(harness.end_offset + 1)
        with pytest.raises(CoordinatorStorageError):
            await init()
        bumped = await init()
        assert (bumped.error, bumped.producer_id, bumped.producer_epoch) == (ErrorCode.NONE, pid, epoch + 1)
        successor = harness.failover()
        assert successor.transactions[TXN].producer_epoch == epoch + 1
        fenced = successor.add_partitions("w", TXN, pid, epoch, [("out", 1)], harness.clock.wall_ms())
        assert fenced.replies == [("w", ErrorCode.PRODUCER_FENCED)]

    asyncio.run(scenario())


def test_a_new_transactional_id_is_known_only_once_its_record_is_on_the_isr() -> None:
    """The first InitProducerId of an id whose record fails: the retry gets the same producer id at epoch
    0 (Kafka keeps the id, at no epoch, and bumps it again), and that is what the log holds."""
    async def scenario() -> None:
        harness = Harness()
        harness.failing.add(1)
        first = lambda w, t: harness.coordinator.init_producer_id(w, TXN, TIMEOUT_MS, -1, -1, 1000, t)
        with pytest.raises(CoordinatorStorageError):
            await harness.call(first)
        again = await harness.call(lambda w, t: harness.coordinator.init_producer_id(w, TXN, TIMEOUT_MS, -1, -1,
                                                                                     None, t))
        assert (again.error, again.producer_id, again.producer_epoch) == (ErrorCode.NONE, 1000, 0)
        successor = harness.failover().transactions[TXN]
        assert (successor.producer_id, successor.producer_epoch) == (1000, 0)

    asyncio.run(scenario())


def test_requests_wait_while_an_epoch_bump_is_on_its_way_to_the_isr() -> None:
    """Meanwhile the id answers CONCURRENT_TRANSACTIONS, the producer of the epoch the log holds included
    (it is fenced only once the bump is on the ISR, as in Kafka)."""
    async def scenario() -> None:
        harness = Harness()
        pid, epoch = await harness.open_transaction()
        assert await harness.commit(pid, epoch) is ErrorCode.NONE
        await harness.completed()
        bumped = harness.end_offset + 1
        harness.held[bumped] = release = asyncio.Event()
        bump = asyncio.ensure_future(harness.call(lambda w, t: harness.coordinator.init_producer_id(
            w, TXN, TIMEOUT_MS, -1, -1, None, t)))
        await harness.appended(bumped)
        again = await harness.call(lambda w, t: harness.coordinator.init_producer_id(w, TXN, TIMEOUT_MS, -1, -1,
                                                                                     None, t))
        assert again.error is ErrorCode.CONCURRENT_TRANSACTIONS
        add = lambda w, t: harness.coordinator.add_partitions(w, TXN, pid, epoch, [("out", 0)], t)
        assert await harness.call(add) is ErrorCode.CONCURRENT_TRANSACTIONS
        assert await harness.commit(pid, epoch) is ErrorCode.CONCURRENT_TRANSACTIONS
        release.set()
        bumped = await bump
        assert (bumped.error, bumped.producer_epoch) == (ErrorCode.NONE, epoch + 1)
        assert await harness.call(add) is ErrorCode.PRODUCER_FENCED

    asyncio.run(scenario())


def test_a_timeout_abort_at_an_exhausted_epoch_is_written_once_its_new_producer_id_came() -> None:
    """KAFKA-20090 (the coordinator's rule 7): the abort check's tick cannot wait for the allocation, so the
    runtime allocates the id and then writes the PrepareAbort with it; meanwhile the producer's requests are
    CONCURRENT_TRANSACTIONS. A failed allocation writes nothing and the next abort check asks again."""
    async def scenario() -> None:
        harness = Harness()
        pid, _ = await harness.open_transaction()
        harness.coordinator.transactions[TXN].producer_epoch = 32766
        harness.clock.advance(TIMEOUT_MS / 1000)
        harness.producer_ids = [ProducerIdsUnavailableError("no block yet")]
        appended = harness.end_offset
        await harness.abort_check()
        await harness.quiet()
        assert (harness.end_offset, harness.state(), harness.markers) == (appended, TxnState.ONGOING, [])

        harness.producer_ids, harness.producer_ids_held = [5000], asyncio.Event()
        harness.clock.advance(1.5)
        harness.runtime.apply(harness.coordinator.tick(harness.clock.wall_ms()))
        await harness.quiet()
        init = await harness.call(lambda w, t: harness.coordinator.init_producer_id(w, TXN, TIMEOUT_MS, -1, -1,
                                                                                    7000, t))
        assert init.error is ErrorCode.CONCURRENT_TRANSACTIONS
        assert harness.end_offset == appended
        harness.producer_ids_held.set()
        await harness.completed()
        [(marker, _)] = harness.markers
        assert (marker.producer_id, marker.producer_epoch, marker.commit) == (pid, 32767, False)
        meta = harness.coordinator.transactions[TXN]
        assert (meta.producer_id, meta.producer_epoch, meta.state) == (5000, 0, TxnState.COMPLETE_ABORT)

    asyncio.run(scenario())
