"""The Prepare of a transaction's end is a pending change like any other, as in Kafka's endTransaction: the
metadata stays Ongoing until the PrepareCommit/PrepareAbort record is on the ISR, no marker is written before,
and a Prepare whose append or ISR wait failed leaves the transaction Ongoing with the append's error as the
answer. The coordinator used to set the Prepare state in memory at once and, when the ISR wait failed, kept
waiting and wrote the markers anyway."""

from __future__ import annotations

import asyncio

import pytest

from pybroker.coordinator.runtime import CoordinatorStorageError, NotCoordinatorError
from pybroker.coordinator.txn_records import TV_1, TxnState
from pybroker.coordinator.txn_runtime import RETRY_BACKOFF_MAX_S
from pybroker.protocol.error_codes import ErrorCode
from pybroker.replication.errors import NotEnoughReplicasError
from tests.eventually import eventually_async
from tests.unit.coordinator.test_txn_complete_record import describe, end_v2, open_v2_transaction
from tests.unit.coordinator.test_txn_runtime import TXN, Harness


@pytest.mark.parametrize("failure", ["isr-timeout", "append-refused"])
def test_a_failed_prepare_leaves_the_transaction_ongoing_and_writes_no_marker(failure: str) -> None:
    """The EndTxn fails with the append's error as the cause (the handler answers it as Kafka maps it); the
    producer's retry then ends the transaction."""
    async def scenario() -> None:
        harness = Harness()
        pid, epoch = await harness.open_transaction()
        if failure == "isr-timeout":
            harness.failing.add(harness.end_offset + 1)
        else:
            harness.refusing = 1
        with pytest.raises(CoordinatorStorageError) as failed:
            await harness.commit(pid, epoch)
        harness.clock.advance(RETRY_BACKOFF_MAX_S * 2)
        await harness.quiet()
        assert harness.markers == []
        meta = harness.coordinator.describe(TXN)
        assert meta is not None and (meta.state, meta.producer_epoch) == (TxnState.ONGOING, epoch)
        assert harness.coordinator.pending == {}
        assert isinstance(failed.value.__cause__, TimeoutError if failure == "isr-timeout" else NotEnoughReplicasError)
        assert await harness.commit(pid, epoch) is ErrorCode.NONE
        assert [(m.commit, state) for m, state in harness.markers] == [(True, TxnState.PREPARE_COMMIT)]
        await eventually_async(lambda: describe(harness) is TxnState.COMPLETE_COMMIT, "the commit to complete")

    asyncio.run(scenario())


def test_a_failed_v2_prepare_keeps_the_epoch_and_the_retry_bumps_it_once() -> None:
    async def scenario() -> None:
        harness = Harness()
        pid, epoch = await open_v2_transaction(harness)
        harness.failing.add(harness.end_offset + 1)
        with pytest.raises(CoordinatorStorageError):
            await end_v2(harness, pid, epoch, True)
        meta = harness.coordinator.describe(TXN)
        assert meta is not None and (meta.state, meta.producer_epoch) == (TxnState.ONGOING, epoch)
        answer = await end_v2(harness, pid, epoch, True)
        assert (answer.error, answer.producer_epoch) == (ErrorCode.NONE, epoch + 1)
        assert [(m.producer_epoch, m.commit) for m, _ in harness.markers] == [(epoch + 1, True)]

    asyncio.run(scenario())


def test_a_timeout_fence_that_failed_leaves_the_epoch_and_the_next_check_bumps_it_once() -> None:
    """Kafka (KAFKA-9666, KAFKA-19367): a failed fence does not move the epoch on at each attempt. Below
    transaction.version 2, where the fence keeps no last epoch."""
    async def scenario() -> None:
        harness = Harness(transaction_version=TV_1)
        pid, epoch = await harness.open_transaction()
        harness.clock.advance(61)  # past the transaction's 60 s timeout
        harness.failing.add(harness.end_offset + 1)
        harness.clock.advance(1.5)
        harness.runtime.apply(harness.coordinator.tick(harness.clock.wall_ms()))
        await harness.quiet()
        assert harness.markers == [] and describe(harness) is TxnState.ONGOING
        await harness.abort_check()
        assert [(m.producer_epoch, m.commit) for m, _ in harness.markers] == [(epoch + 1, False)]
        late = await harness.call(lambda w, t: harness.coordinator.init_producer_id(w, TXN, 60_000, pid, epoch,
                                                                                    None, t))
        assert late.error is ErrorCode.PRODUCER_FENCED  # the fence keeps no last epoch to take this for a retry

    asyncio.run(scenario())


def test_a_prepare_whose_partition_moved_meanwhile_answers_not_coordinator_and_writes_no_marker() -> None:
    async def scenario() -> None:
        harness = Harness()
        pid, epoch = await harness.open_transaction()
        commit, release = await harness.commit_held(pid, epoch)
        harness.runtime.unload(harness.coordinator.partition_of(TXN))
        release.set()
        with pytest.raises(NotCoordinatorError):
            await commit
        assert harness.markers == []

    asyncio.run(scenario())
