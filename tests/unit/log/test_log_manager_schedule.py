"""The log manager's periodic passes look only at the logs something made due: a rolled segment, a finite
flush.ms, a compacted topic. An idle broker with many partitions then does no work per partition on every
flusher or cleaner pass, and nothing due is missed: a config changed on the log itself (as the replica
manager changes it) and a flush that fell short are picked up too."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import os
from pathlib import Path

import pytest

from logtest_util import NOW, SMALL, batch
from pybroker.common.io_executor import IoExecutor
from pybroker.log.config import LogConfig
from pybroker.log.errors import LogStorageError
from pybroker.log.flush import FlushJob
from pybroker.log.log import PartitionLog
from pybroker.log.manager import MAX_CONCURRENT_FLUSHES, LogManager


class CountingConfig(LogConfig):
    """A LogConfig that counts how often the passes read its flush.ms: once per log they look at."""

    reads = 0

    def __getattribute__(self, name: str) -> object:
        if name == "flush_ms":
            type(self).reads += 1
        return super().__getattribute__(name)


def test_the_flusher_and_the_cleaner_do_not_visit_idle_logs(tmp_path: Path) -> None:
    config = CountingConfig(**dataclasses.asdict(SMALL))
    manager = LogManager([str(tmp_path)], config)
    manager.startup(NOW)
    for partition in range(200):
        manager.get_or_create_log("idle", partition, config)
    CountingConfig.reads = 0
    assert manager.flush_dirty(NOW + 10**9) == 0
    assert manager.plan_cleaning(NOW + 10**9) == []
    assert CountingConfig.reads == 0
    manager.shutdown()


def _rolled(manager: LogManager) -> PartitionLog:
    log = manager.get_or_create_log("t", 0)
    while len(log.segments) < 2:
        log.append_as_leader(batch(3, value=b"x" * 100), leader_epoch=0, now_ms=NOW)
    return log


def test_a_rolled_segment_is_flushed_by_the_next_pass(tmp_path: Path) -> None:
    manager = LogManager([str(tmp_path)], SMALL)
    manager.startup(NOW)
    log = _rolled(manager)
    assert log.recovery_point < log.active_segment.base_offset
    assert manager.flush_dirty(NOW) == 1
    assert log.recovery_point == log.active_segment.base_offset
    assert manager.flush_dirty(NOW) == 0
    manager.shutdown()


def out_of_descriptors(*_args: object) -> int:
    raise OSError(errno.EMFILE, "Too many open files")


def test_a_rolled_segment_whose_flush_failed_is_flushed_by_a_later_pass(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    manager = LogManager([str(tmp_path)], SMALL)
    manager.startup(NOW)
    log = _rolled(manager)
    with monkeypatch.context() as patch:
        patch.setattr(os, "open", out_of_descriptors)  # the flush cannot open its index files
        with pytest.raises(LogStorageError):
            manager.flush_dirty(NOW)
    assert manager.online_dirs == [str(tmp_path)]
    assert log.recovery_point < log.active_segment.base_offset
    assert manager.flush_dirty(NOW) == 1
    assert log.recovery_point == log.active_segment.base_offset
    manager.shutdown()


def test_a_config_changed_on_the_log_itself_is_seen_by_the_passes(tmp_path: Path) -> None:
    manager = LogManager([str(tmp_path)], SMALL)
    manager.startup(NOW)
    log = manager.get_or_create_log("t", 0)
    log.append_as_leader(batch(), leader_epoch=0, now_ms=NOW)
    assert manager.flush_dirty(NOW + 10**9) == 0  # flush.ms is infinite
    log.update_config(dataclasses.replace(SMALL, flush_ms=1000))  # as the replica manager applies a change
    assert manager.flush_dirty(NOW + 1000) == 1
    assert log.recovery_point == log.log_end_offset
    log.update_config(SMALL)
    log.append_as_leader(batch(), leader_epoch=0, now_ms=NOW)
    assert manager.flush_dirty(NOW + 10**9) == 0
    manager.shutdown()


def test_flushes_due_together_hold_descriptors_a_bounded_number_at_a_time(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker-wide flush.ms makes every log due at once: each flush keeps descriptors open until its fsyncs
    are done, so only MAX_CONCURRENT_FLUSHES of them are begun at a time."""
    timed = dataclasses.replace(SMALL, flush_ms=1000)
    outstanding, peak = [0], [0]
    begin, run = PartitionLog.begin_flush, FlushJob.run

    def counting_begin(self: PartitionLog, *args: object, **kwargs: object) -> FlushJob:
        job = begin(self, *args, **kwargs)  # type: ignore[arg-type]
        outstanding[0] += 1
        peak[0] = max(peak[0], outstanding[0])
        return job

    def counting_run(self: FlushJob) -> None:
        run(self)
        outstanding[0] -= 1

    async def scenario() -> int:
        io = IoExecutor(4)
        manager = LogManager([str(tmp_path)], timed)
        manager.startup(NOW)
        manager.attach_executor(io)
        for partition in range(3 * MAX_CONCURRENT_FLUSHES):
            manager.get_or_create_log("t", partition, timed).append_as_leader(batch(), leader_epoch=0, now_ms=NOW)
        monkeypatch.setattr(PartitionLog, "begin_flush", counting_begin)
        monkeypatch.setattr(FlushJob, "run", counting_run)
        flushed = await manager.flush_dirty_async(NOW + 1000)
        io.shutdown()
        manager.shutdown()
        return flushed

    assert asyncio.run(scenario()) == 3 * MAX_CONCURRENT_FLUSHES
    assert 0 < peak[0] <= MAX_CONCURRENT_FLUSHES
