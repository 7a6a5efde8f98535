"""Produce and fetch through the replica manager, without a socket: a real log manager on a temporary
directory, a real ReplicaManager, and the data path's functions as the Produce and Fetch handlers call them."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Awaitable, Callable, Iterator

import pytest

from pybroker.common.clock import SystemClock
from pybroker.common.io_executor import IoExecutor
from pybroker.log import LogConfig
from pybroker.log.errors import LogStorageError
from pybroker.log.manager import LogManager
from pybroker.records.batch import Compression, RecordBatch, iter_batches
from pybroker.records.control import build_end_txn_marker
from pybroker.records.errors import RecordTooLargeError, UnsupportedCompressionError
from pybroker.records.record import RecordInput, build_batch
from pybroker.replication.append_records import PartitionAppend, RecordsCheck, append_records, wait_for_acks
from pybroker.replication.errors import (
    InternalTopicError,
    InvalidRequiredAcksError,
    ReplicaTimeoutError,
    TransactionalIdRequiredError,
    UnknownPartitionError,
)
from pybroker.replication.fetch_messages import FetchParams, FetchPartition, FetchResult, fetch_messages
from pybroker.replication.manager import ReplicaManager

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=1 << 20, max_message_bytes=4096)


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager([str(tmp_path)], CONFIG)
    logs.startup(NOW)
    manager = ReplicaManager(logs, 0, SystemClock())
    yield manager
    logs.shutdown()


def lead(replicas: ReplicaManager, topic: str = "t", index: int = 0, isr: tuple[int, ...] = (0,)) -> None:
    replicas.become_leader(topic, index, uuid.UUID(int=1), leader_epoch=0, replicas=(0, 1), isr=isr, config=CONFIG,
                           min_insync_replicas=1)


def batch(*values: bytes, **options: object) -> bytes:
    return build_batch([RecordInput(None, v, timestamp=NOW) for v in values], **options)  # type: ignore[arg-type]


def produce(replicas: ReplicaManager, *items: PartitionAppend, acks: int = 1, transactional_id: str | None = None,
            **options: object) -> list[PartitionAppend]:
    async def appending() -> list[PartitionAppend]:
        return await appended(append_records(replicas, list(items), required_acks=acks,
                                             transactional_id=transactional_id, allow_zstd=True, now_ms=NOW,
                                             **options))  # type: ignore[arg-type]

    return asyncio.run(appending())


async def appended(outcome: list[PartitionAppend] | Awaitable[list[PartitionAppend]]) -> list[PartitionAppend]:
    """append_records' outcomes, returned at once or by the coroutine it gave when some append waits."""
    return outcome if isinstance(outcome, list) else await outcome


async def fetched(outcome: FetchResult | Awaitable[FetchResult]) -> FetchResult:
    """fetch_messages' result: at once, or once its delayed fetch completes."""
    return outcome if isinstance(outcome, FetchResult) else await outcome


def fetch(replicas: ReplicaManager, *partitions: FetchPartition, replica_id: int = -1, read_committed: bool = False,
          min_bytes: int = 0, max_wait_ms: int = 0, limit: int = 1 << 20) -> FetchResult:
    async def run() -> FetchResult:
        io = IoExecutor(1)
        try:
            return await fetched(fetch_messages(replicas, io, FetchParams(replica_id, read_committed, min_bytes,
                                                                          max_wait_ms, lambda: limit),
                                                list(partitions)))
        finally:
            io.shutdown()
    return asyncio.run(run())


def values(result: FetchResult, index: int = 0) -> list[bytes]:
    records = result.reads[index].records
    data = records if isinstance(records, bytes) else records.read()
    return [r.value for b in iter_batches(data) if not b.is_control for r in b.records()]


def at(offset: int, topic: str = "t", index: int = 0, **options: int) -> FetchPartition:
    return FetchPartition(topic, index, offset, 1 << 20, **options)


# Produce


def test_appended_batches_get_their_offsets_and_are_read_back(replicas: ReplicaManager) -> None:
    lead(replicas)
    first, second = produce(replicas, PartitionAppend("t", 0, batch(b"a", b"b")),
                            PartitionAppend("t", 0, batch(b"c")))
    assert (first.error, second.error) == (None, None)
    assert first.info is not None and second.info is not None
    assert (first.info.first_offset, second.info.first_offset) == (0, 2)
    assert values(fetch(replicas, at(0))) == [b"a", b"b", b"c"]
    assert values(fetch(replicas, at(2))) == [b"c"]


def test_each_refusal_is_its_partitions_own_and_writes_nothing(replicas: ReplicaManager) -> None:
    lead(replicas)
    lead(replicas, "__consumer_offsets")
    results = produce(
        replicas,
        PartitionAppend("__consumer_offsets", 0, batch(b"x")),
        PartitionAppend("t", 1, batch(b"x")),  # not hosted here
        PartitionAppend("t", 0, batch(b"x" * 5000)),  # over max.message.bytes
        PartitionAppend("t", 0, batch(b"x", producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)),
        PartitionAppend("t", 0, batch(b"ok")),
    )
    assert [type(r.error) for r in results] == [InternalTopicError, UnknownPartitionError, RecordTooLargeError,
                                                TransactionalIdRequiredError, type(None)]
    assert results[-1].info is not None and results[-1].info.first_offset == 0
    assert [type(r.error) for r in produce(replicas, PartitionAppend("t", 0, batch(b"y")), acks=2)] == \
        [InvalidRequiredAcksError]
    assert replicas.partition("t", 0).log.log_end_offset == 1


def test_zstd_needs_the_produce_version_that_allows_it(replicas: ReplicaManager) -> None:
    lead(replicas)
    item = PartitionAppend("t", 0, batch(b"z", compression=Compression.ZSTD))
    [refused] = asyncio.run(appended(append_records(replicas, [item], required_acks=1, transactional_id=None,
                                                    allow_zstd=False, now_ms=NOW)))
    assert isinstance(refused.error, UnsupportedCompressionError)
    [taken] = produce(replicas, PartitionAppend("t", 0, batch(b"z", compression=Compression.ZSTD)))
    assert taken.error is None


def test_the_callers_checks_refuse_before_the_append_and_appends_are_counted(replicas: ReplicaManager) -> None:
    lead(replicas)
    seen: list[tuple[str, int, int]] = []

    def refuse_b(topic: str, index: int) -> RecordsCheck:
        def read(records: RecordBatch) -> Callable[[], None]:
            has_b = any(r.value == b"b" for r in records.records())

            def verdict() -> None:
                if has_b:
                    raise ValueError("no b")
            return verdict
        return read

    results = produce(replicas, PartitionAppend("t", 0, batch(b"a")), PartitionAppend("t", 0, batch(b"b")),
                      before_append=refuse_b, appended=lambda topic, size, count: seen.append((topic, size, count)))
    assert results[0].error is None and str(results[1].error) == "no b"
    assert seen == [("t", len(batch(b"a")), 1)]
    assert replicas.partition("t", 0).log.log_end_offset == 1


def test_a_failed_flush_is_the_partitions_answer(replicas: ReplicaManager, monkeypatch: pytest.MonkeyPatch) -> None:
    lead(replicas)
    logs = replicas.log_manager
    monkeypatch.setattr(type(logs), "flushing", property(lambda self: True))

    async def flush_fails(partitions: object) -> set[tuple[str, int]]:
        return {("t", 0)}

    monkeypatch.setattr(logs, "wait_flushed", flush_fails)
    [result] = produce(replicas, PartitionAppend("t", 0, batch(b"a")))
    assert isinstance(result.error, LogStorageError) and str(result.error) == "Flush of t-0 failed"


def test_acks_all_waits_for_the_follower_and_times_out_without_it(replicas: ReplicaManager) -> None:
    lead(replicas, isr=(0, 1))
    waits: list[None] = []

    async def scenario() -> tuple[PartitionAppend, PartitionAppend]:
        waiting = asyncio.Event()

        def on_wait() -> None:
            waits.append(None)
            waiting.set()

        [first] = await appended(append_records(replicas, [PartitionAppend("t", 0, batch(b"a"))], required_acks=-1,
                                                transactional_id=None, allow_zstd=True, now_ms=NOW))
        await wait_for_acks(replicas, [first], timeout_ms=1, on_wait=on_wait)
        waiting.clear()
        [second] = await appended(append_records(replicas, [PartitionAppend("t", 0, batch(b"b"))], required_acks=-1,
                                                 transactional_id=None, allow_zstd=True, now_ms=NOW))
        acked = asyncio.ensure_future(wait_for_acks(replicas, [second], timeout_ms=60_000, on_wait=on_wait))
        await waiting.wait()  # it waits: now the follower fetches everything
        replicas.record_follower_fetch("t", 0, 1, 2, current_leader_epoch=0)
        await acked
        return first, second

    first, second = asyncio.run(scenario())
    assert isinstance(first.error, ReplicaTimeoutError)
    assert second.error is None and len(waits) == 2
    assert replicas.partition("t", 0).log.high_watermark == 2


# Fetch


def test_consumers_read_to_the_high_watermark_and_followers_to_the_log_end(replicas: ReplicaManager) -> None:
    lead(replicas, isr=(0, 1))
    produce(replicas, PartitionAppend("t", 0, batch(b"a", b"b")))
    assert values(fetch(replicas, at(0))) == [] and fetch(replicas, at(0)).reads[0].high_watermark == 0
    assert values(fetch(replicas, at(0), replica_id=1)) == [b"a", b"b"]  # fetch at 0: the follower holds nothing
    assert replicas.partition("t", 0).log.high_watermark == 0
    fetch(replicas, at(2), replica_id=1)  # its next fetch says it holds both
    assert replicas.partition("t", 0).log.high_watermark == 2
    assert values(fetch(replicas, at(0))) == [b"a", b"b"]


def test_read_committed_stops_at_the_open_transaction_and_lists_the_aborted_one(replicas: ReplicaManager) -> None:
    lead(replicas)
    produce(replicas, PartitionAppend("t", 0, batch(b"a", producer_id=7, producer_epoch=0, base_sequence=0,
                                                    is_transactional=True)), transactional_id="tx")
    open_txn = fetch(replicas, at(0), read_committed=True)
    assert values(open_txn) == [] and open_txn.reads[0].last_stable_offset == 0
    assert values(fetch(replicas, at(0))) == [b"a"]
    replicas.append("t", 0, bytearray(build_end_txn_marker(False, producer_id=7, producer_epoch=0,
                                                           coordinator_epoch=0, timestamp=NOW)),
                    required_acks=1, now_ms=NOW)
    aborted = fetch(replicas, at(0), read_committed=True)
    assert values(aborted) == [b"a"] and aborted.reads[0].aborted == [(7, 0)]
    assert fetch(replicas, at(0)).reads[0].aborted is None  # read_uncommitted lists none


def test_the_long_poll_answers_after_an_append(replicas: ReplicaManager) -> None:
    lead(replicas)

    async def scenario() -> tuple[FetchResult, int]:
        io = IoExecutor(1)
        waiting = asyncio.Event()
        waits = 0

        def on_wait() -> None:
            nonlocal waits
            waits += 1
            waiting.set()

        try:
            polling = asyncio.ensure_future(fetched(fetch_messages(
                replicas, io, FetchParams(-1, False, 1, 60_000, lambda: 1 << 20), [at(0)], on_wait=on_wait)))
            await waiting.wait()
            await appended(append_records(replicas, [PartitionAppend("t", 0, batch(b"late"))], required_acks=1,
                                          transactional_id=None, allow_zstd=True, now_ms=NOW))
            return await polling, waits
        finally:
            io.shutdown()

    result, waits = asyncio.run(scenario())
    assert values(result) == [b"late"] and waits == 1


def test_the_long_poll_ends_at_max_wait_and_never_starts_after_an_error(replicas: ReplicaManager) -> None:
    lead(replicas)
    empty = fetch(replicas, at(0), min_bytes=1, max_wait_ms=5)
    assert empty.bytes == 0 and empty.reads[0].error is None
    failed = fetch(replicas, at(0), at(0, index=3), min_bytes=1, max_wait_ms=60_000)  # answers at once
    assert failed.has_error and isinstance(failed.reads[1].error, UnknownPartitionError)


def test_the_byte_limit_lets_only_the_first_non_empty_partition_exceed_it(replicas: ReplicaManager) -> None:
    lead(replicas)
    lead(replicas, index=1)
    produce(replicas, PartitionAppend("t", 0, batch(b"x" * 300)), PartitionAppend("t", 1, batch(b"y")))
    result = fetch(replicas, at(0), at(0, index=1), limit=10)
    assert values(result, 0) == [b"x" * 300] and values(result, 1) == []
    assert result.bytes == result.reads[0].size
