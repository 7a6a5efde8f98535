"""`LogManager.delete_logs`, Kafka's asyncDelete: on the loop a log leaves the manager, closes its files and
has its directory renamed ``-delete``; the files are removed on the I/O executor. The I/O thread is held on a
gate, so the state between the two steps is seen without timing: the name is free for a new log at once, a
slice taken before the deletion fails cleanly (one read on its own descriptor still completes), and a crash
there leaves only the ``-delete`` directory, which the next start removes."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from logtest_util import NOW, batch
from pybroker.common.io_executor import IoExecutor
from pybroker.common.topic import TopicPartition
from pybroker.log import LogConfig, SliceUnavailableError
from pybroker.log.manager import LogManager

CONFIG = LogConfig()


def _names(root: Path) -> list[str]:
    return sorted(path.name for path in root.iterdir() if path.is_dir())


async def _held_deletion(tmp_path: Path, after_rename) -> None:  # type: ignore[no-untyped-def]
    """Two logs with records, deleted while the only I/O thread is held; ``after_rename(logs)`` runs then."""
    logs = LogManager([str(tmp_path)], CONFIG)
    logs.startup(NOW)
    io = IoExecutor(1)
    logs.attach_executor(io)
    for partition in (0, 1):
        logs.get_or_create_log("t", partition).append_as_leader(batch(3), leader_epoch=0, now_ms=NOW)
    gate = threading.Event()
    held = asyncio.ensure_future(io.run(gate.wait))
    try:
        await after_rename(logs)
    finally:
        gate.set()
        await held
        await logs.wait_removed()
        io.shutdown()
        logs.shutdown()


def test_a_deleted_log_is_renamed_at_once_and_removed_on_an_io_thread(tmp_path: Path) -> None:
    async def after_rename(logs: LogManager) -> None:
        log = logs.get_log("t", 0)
        assert log is not None
        log.set_high_watermark(log.log_end_offset)
        taken = log.read(0, 1 << 20).slices
        assert taken is not None
        off_loop_read = taken.detached_read()  # a cold read already handed to an I/O thread
        expected = taken.read()
        assert logs.delete_logs([TopicPartition("t", 0), TopicPartition("t", 1)]) == 2
        assert logs.get_log("t", 0) is None and logs.get_log("t", 1) is None
        renamed = _names(tmp_path)
        assert len(renamed) == 2 and all(name.startswith(("t-0.", "t-1.")) and name.endswith("-delete")
                                         for name in renamed), renamed
        assert any((tmp_path / name / "00000000000000000000.log").exists() for name in renamed)  # not removed yet
        with pytest.raises(SliceUnavailableError):
            taken.read()
        assert off_loop_read() == expected
        again = logs.get_or_create_log("t", 0)  # the topic created again: a new, empty log
        assert again.log_end_offset == 0 and "t-0" in _names(tmp_path)
        assert logs.delete_log("t", 1) is False

    asyncio.run(_held_deletion(tmp_path, after_rename))
    assert _names(tmp_path) == ["t-0"]


def test_a_crash_before_the_removal_leaves_only_delete_dirs_which_the_next_start_removes(tmp_path: Path) -> None:
    async def after_rename(logs: LogManager) -> None:
        logs.delete_logs([TopicPartition("t", 0), TopicPartition("t", 1)])
        assert [name for name in _names(tmp_path) if not name.endswith("-delete")] == []
        restarted = LogManager([str(tmp_path)], CONFIG)  # as after a crash now: the removal never ran
        restarted.startup(NOW)
        assert _names(tmp_path) == [] and restarted.get_log("t", 0) is None
        restarted.shutdown()

    asyncio.run(_held_deletion(tmp_path, after_rename))
