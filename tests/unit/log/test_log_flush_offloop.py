"""Flushes and checkpoint writes fsync on pybroker-io threads, never on the event loop's thread.

Which thread calls ``os.fsync`` is observed with a profile hook (``c_call`` events of the real
function), not by replacing it: every fsync still happens. The hook is installed before the
executor starts its threads, which then inherit it through ``threading.setprofile``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from pybroker.common.io_executor import IO_THREAD_PREFIX, IoExecutor
from pybroker.log import LogManager
from pybroker.log.manager import RECOVERY_POINT_CHECKPOINT
from pybroker.log.checkpoint import OffsetCheckpointFile

from logtest_util import NOW, SMALL, batch, open_log


@pytest.fixture()
def fsync_threads() -> Iterator[list[str]]:
    """Names of the threads that called os.fsync while the fixture is active."""
    names: list[str] = []

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "c_call" and arg is os.fsync:
            names.append(threading.current_thread().name)

    threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        yield names
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def test_flush_messages_fsyncs_off_the_loop_and_produce_waits_for_it(tmp_path: Any, fsync_threads: list[str]) -> None:
    config = dataclasses.replace(SMALL, flush_messages=1)

    async def scenario() -> tuple[int, int, set[tuple[str, int]], list[str]]:
        io = IoExecutor(2)
        manager = LogManager([str(tmp_path)], config)
        manager.startup(NOW)
        manager.attach_executor(io)
        log = manager.get_or_create_log("t", 0, config)
        fsync_threads.clear()  # creating the log directory fsyncs its parent on the loop (metadata, rare)
        for _ in range(20):  # past SMALL's 1 KiB segments: rolls write producer snapshots too
            log.append_as_leader(batch(3, value=b"x" * 40), leader_epoch=0, now_ms=NOW)
        assert log.recovery_point < log.log_end_offset  # the append itself did not fsync
        failed = await manager.wait_flushed([("t", 0)])
        recovery_point, leo = log.recovery_point, log.log_end_offset
        await manager.checkpoint_async()
        seen = fsync_threads[:]  # shutdown's final flush runs on this thread, the loop being gone
        io.shutdown()
        manager.shutdown()
        return recovery_point, leo, failed, seen

    recovery_point, leo, failed, seen = asyncio.run(scenario())
    assert failed == set() and recovery_point == leo
    assert seen and all(name.startswith(IO_THREAD_PREFIX) for name in seen), seen


def test_periodic_flush_and_checkpoint_run_on_io_threads(tmp_path: Any, fsync_threads: list[str]) -> None:
    async def scenario() -> list[str]:
        io = IoExecutor(2)
        timed = dataclasses.replace(SMALL, flush_ms=1000)
        manager = LogManager([str(tmp_path)], timed)
        manager.startup(NOW)
        manager.attach_executor(io)
        log = manager.get_or_create_log("t", 0, timed)
        for _ in range(20):
            log.append_as_leader(batch(3, value=b"x" * 40), leader_epoch=0, now_ms=NOW)
        fsync_threads.clear()
        flushed = await manager.flush_dirty_async(NOW + timed.flush_ms)
        await manager.checkpoint_async()
        seen = fsync_threads[:]
        assert flushed == 1 and log.recovery_point == log.log_end_offset
        io.shutdown()
        manager.shutdown()
        return seen

    seen = asyncio.run(scenario())
    assert seen and all(name.startswith(IO_THREAD_PREFIX) for name in seen), seen
    checkpoint = OffsetCheckpointFile(os.path.join(tmp_path, RECOVERY_POINT_CHECKPOINT)).read()
    assert checkpoint[("t", 0)] > 0


def test_truncation_during_a_flush_keeps_the_recovery_point(tmp_path: Any) -> None:
    """A follower truncating while a flush is in flight: the flush's target may name offsets that
    are gone or rewritten, so the recovery point must not move to it."""
    log = open_log(tmp_path)
    for _ in range(4):
        log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    job = log.begin_flush()
    assert job.target == 8
    log.truncate_to(2)
    log.append_as_follower(batch(2, base_offset=2), now_ms=NOW)
    job.run()  # the I/O thread's part
    log.finish_flush(job)
    assert log.recovery_point == 0
    log.flush()
    assert log.recovery_point == log.log_end_offset == 4
    log.close()


def test_a_job_owns_its_descriptors(tmp_path: Any) -> None:
    """Closing the log (segments, indexes) while its fsyncs are pending does not break them."""
    log = open_log(tmp_path)
    log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    job = log.begin_flush()
    log.close()
    job.run()
    assert job.error is None and job.fds == []
    log.finish_flush(job)  # ignored: the log is closed


def test_checkpoint_calls_waiting_together_share_the_pass_that_began_after_them(
        tmp_path: Any, fsync_threads: list[str]) -> None:
    """Many partitions falling below their minimum ISR at once each ask for the recovery points to be
    written: callers that queued behind a running pass need only the next one, not one each."""

    async def scenario() -> tuple[int, int, int, int]:
        io = IoExecutor(2)
        manager = LogManager([str(tmp_path)], SMALL)
        manager.startup(NOW)
        manager.attach_executor(io)
        log = manager.get_or_create_log("t", 0, SMALL)
        log.append_as_leader(batch(3), leader_epoch=0, now_ms=NOW)
        await manager.flush_log(log)
        fsync_threads.clear()
        await manager.checkpoint_async((RECOVERY_POINT_CHECKPOINT,))
        one_pass = len(fsync_threads)
        fsync_threads.clear()
        await asyncio.gather(*(manager.checkpoint_async((RECOVERY_POINT_CHECKPOINT,)) for _ in range(10)))
        together = len(fsync_threads)
        io.shutdown()
        manager.shutdown()
        written = OffsetCheckpointFile(os.path.join(str(tmp_path), RECOVERY_POINT_CHECKPOINT)).read()
        return one_pass, together, written[("t", 0)], log.recovery_point

    one_pass, together, written, recovery_point = asyncio.run(scenario())
    assert one_pass > 0 and together <= 2 * one_pass, (one_pass, together)
    assert written == recovery_point == 3
