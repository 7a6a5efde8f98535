"""The coordinators' replay read (``read_from_start_off_loop``): every pread of the log's files on a
pybroker-io thread, the same batches as the synchronous ``read_from_start``.

Which thread reads is observed with a profile hook on the real ``os.pread`` (``c_call`` events),
as in test_log_flush_offloop.py: the caller's frame names the file read (``self.path``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from pybroker.common.io_executor import IO_THREAD_PREFIX, IoExecutor
from pybroker.log import PartitionLog
from pybroker.records.batch import iter_batches

from logtest_util import NOW, batch, open_log


@pytest.fixture()
def pread_threads() -> Iterator[list[tuple[str, str]]]:
    """(thread name, path) of every os.pread while the fixture is active."""
    seen: list[tuple[str, str]] = []

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call" and arg is os.pread:
            owner = frame.f_locals.get("self")
            seen.append((threading.current_thread().name, str(getattr(owner, "path", "?"))))

    threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        yield seen
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def _offsets(chunks: list[bytes]) -> list[int]:
    return [b.base_offset for chunk in chunks for b in iter_batches(chunk)]


def _replay(log: PartitionLog, chunk_bytes: int) -> list[bytes]:
    async def scenario() -> list[bytes]:
        io = IoExecutor(1)
        try:
            return [chunk async for chunk in log.read_from_start_off_loop(io, chunk_bytes)]
        finally:
            io.shutdown()
    return asyncio.run(scenario())


def test_replay_reads_on_io_threads_only(tmp_path: Any, pread_threads: list[tuple[str, str]]) -> None:
    log = open_log(tmp_path)
    for _ in range(30):  # many 1 KiB segments
        log.append_as_leader(batch(3, value=b"x" * 40), leader_epoch=0, now_ms=NOW)
    expected = _offsets(list(log.read_from_start()))
    pread_threads.clear()
    chunks = _replay(log, 300)  # chunks smaller than a segment: batches cut across reads are carried over
    assert _offsets(chunks) == expected == list(range(0, 90, 3))
    assert pread_threads and all(name.startswith(IO_THREAD_PREFIX) for name, _ in pread_threads), pread_threads
    log.close()


def test_replay_skips_gaps_and_batches_below_the_log_start(tmp_path: Any) -> None:
    """A compacted log has offset gaps, within and between segments; DeleteRecords can move the log
    start inside a segment."""
    log = open_log(tmp_path)
    base = 0
    for i in range(20):
        log.append_as_follower(batch(2, base_offset=base, value=b"y" * 60), now_ms=NOW)
        base += 2 + (5 if i % 4 == 3 else 0)
    log.set_high_watermark(log.log_end_offset)
    log.increment_log_start_offset(3)
    expected = _offsets(list(log.read_from_start()))
    assert expected[:2] == [2, 4]
    assert _offsets(_replay(log, 1 << 20)) == expected
    assert _offsets(_replay(log, 100)) == expected
    log.close()


def test_a_log_closed_during_the_replay_fails_it(tmp_path: Any) -> None:
    """The caller must not apply part of a log: closing (deletion, shutdown) raises instead."""
    log = open_log(tmp_path)
    for _ in range(10):
        log.append_as_leader(batch(3, value=b"x" * 40), leader_epoch=0, now_ms=NOW)

    async def scenario() -> None:
        io = IoExecutor(1)
        try:
            async for _ in log.read_from_start_off_loop(io, 200):
                log.close()
        finally:
            io.shutdown()

    with pytest.raises(Exception, match="closed"):
        asyncio.run(scenario())


def test_timestamp_lookup_scans_on_io_threads(tmp_path: Any, pread_threads: list[tuple[str, str]]) -> None:
    log = open_log(tmp_path)
    for i in range(30):
        log.append_as_leader(batch(3, value=b"x" * 40, ts=NOW + 10 * i, ts_step=1), leader_epoch=0, now_ms=NOW)
    targets = [NOW - 5, NOW + 1, NOW + 3, NOW + 151, NOW + 292, NOW + 1000]
    expected = [log.fetch_offset_by_timestamp(t) for t in targets]
    assert expected[:3] == [(0, NOW), (1, NOW + 1), (3, NOW + 10)] and expected[-1] is None
    for segment in log.segments:
        segment.max_timestamp_so_far  # loaded once per segment, on the loop (not a lookup's scan)
    pread_threads.clear()

    async def scenario() -> list[tuple[int, int] | None]:
        io = IoExecutor(1)
        try:
            return [await log.fetch_offset_by_timestamp_off_loop(io, t) for t in targets]
        finally:
            io.shutdown()

    assert asyncio.run(scenario()) == expected
    assert pread_threads and all(name.startswith(IO_THREAD_PREFIX) for name, _ in pread_threads), pread_threads
    log.close()
