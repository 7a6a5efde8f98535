"""A big produced batch's records are read on an I/O thread, its verdict and append stay on the loop, in order.

The caller's own reading of the records (schema validation) goes with the batch's other record checks: to an
I/O thread when the batch holds more than CALLER_CHECK_RECORDS records, where decoding them cannot stall the
loop; its verdict (the registry's lookups) is heard on the loop, just before the append. An append given up
while its batch is checked (the connection closed) leaves its partition's queue: the next one goes through.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

from pybroker.common.clock import SystemClock
from pybroker.common.io_executor import IoExecutor
from pybroker.log import LogConfig
from pybroker.log.manager import LogManager
from pybroker.records.batch import RecordBatch
from pybroker.records.record import RecordInput, build_batch
from pybroker.replication.append_records import CALLER_CHECK_RECORDS, PartitionAppend, RecordsCheck, append_records
from pybroker.replication.manager import ReplicaManager
from tests.unit.replication.test_data_path import appended

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=8 << 20, max_message_bytes=4 << 20)


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager([str(tmp_path)], CONFIG)
    logs.startup(NOW)
    manager = ReplicaManager(logs, 0, SystemClock())
    manager.become_leader("t", 0, uuid.UUID(int=1), leader_epoch=0, replicas=(0,), isr=(0,), config=CONFIG,
                          min_insync_replicas=1)
    yield manager
    logs.shutdown()


def batch(count: int) -> bytes:
    return build_batch([RecordInput(None, b"v%d" % i, timestamp=NOW) for i in range(count)])


async def append(replicas: ReplicaManager, io: IoExecutor, records: bytes,
                 check: Callable[[str, int], RecordsCheck | None]) -> PartitionAppend:
    [item] = await appended(append_records(replicas, [PartitionAppend("t", 0, records)], required_acks=1,
                                           transactional_id=None, allow_zstd=True, now_ms=NOW, before_append=check,
                                           io=io))
    return item


@pytest.mark.parametrize(("count", "on_loop"), [(CALLER_CHECK_RECORDS, True), (CALLER_CHECK_RECORDS + 1, False)])
def test_the_callers_records_check_runs_with_the_batchs_and_its_verdict_on_the_loop(
        replicas: ReplicaManager, count: int, on_loop: bool) -> None:
    threads: dict[str, str] = {}

    def check(topic: str, index: int) -> RecordsCheck:
        def read(records: RecordBatch) -> Callable[[], None]:
            threads["read"] = threading.current_thread().name
            return lambda: threads.setdefault("verdict", threading.current_thread().name)
        return read

    async def run() -> PartitionAppend:
        io = IoExecutor(2)
        try:
            return await append(replicas, io, batch(count), check)
        finally:
            io.shutdown()

    item = asyncio.run(run())
    assert item.error is None and item.info is not None and item.info.first_offset == 0
    loop_thread = threading.current_thread().name
    assert threads["verdict"] == loop_thread
    assert (threads["read"] == loop_thread) == on_loop, threads


def test_an_append_given_up_while_checked_lets_the_next_one_through(replicas: ReplicaManager) -> None:
    started, release = threading.Event(), threading.Event()

    def check(topic: str, index: int) -> RecordsCheck:
        def read(records: RecordBatch) -> Callable[[], None]:
            if records.header().records_count > 1:  # the big batch: held on its I/O thread
                started.set()
                release.wait(30)
            return lambda: None
        return read

    async def run() -> tuple[PartitionAppend, bool]:
        io = IoExecutor(2)
        try:
            big = asyncio.ensure_future(append(replicas, io, batch(CALLER_CHECK_RECORDS + 1), check))
            await asyncio.get_running_loop().run_in_executor(None, started.wait, 30)
            small = asyncio.ensure_future(append(replicas, io, batch(1), check))
            await asyncio.sleep(0)  # let it queue behind the big one
            assert not small.done()  # it waits for the big batch's turn
            big.cancel()
            release.set()
            return await small, replicas.append_queue.busy("t", 0)
        finally:
            io.shutdown()

    item, busy = asyncio.run(run())
    assert item.error is None and item.info is not None and item.info.first_offset == 0
    assert not busy
    assert replicas.partition("t", 0).log.log_end_offset == 1  # the given-up batch was not appended
