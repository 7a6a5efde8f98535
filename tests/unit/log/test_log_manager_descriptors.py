"""Out of descriptors (EMFILE) is the process's failure, not the disk's: the operation fails, and the log
dir stays online, where an EIO takes it offline (Kafka's LogDirFailureChannel)."""

from __future__ import annotations

import errno
import threading
import os
from pathlib import Path

import pytest

from logtest_util import NOW, SMALL, batch
from pybroker.log.errors import LogStorageError
from pybroker.log.manager import LogManager


def _failing_open(code: int):  # type: ignore[no-untyped-def]
    real_open = os.open

    def failing(path: str, flags: int, *args: int) -> int:
        if str(path).endswith(".log"):
            raise OSError(code, os.strerror(code), path)
        return real_open(path, flags, *args)
    return failing


@pytest.mark.parametrize("code, offline", [(errno.EMFILE, False), (errno.ENFILE, False), (errno.EIO, True)])
def test_a_roll_out_of_descriptors_fails_without_taking_the_log_dir_offline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, offline: bool) -> None:
    manager = LogManager([str(tmp_path)], SMALL)
    manager.startup(now_ms=NOW)
    log = manager.get_or_create_log("t", 0)
    log.append_as_leader(batch(), leader_epoch=0, now_ms=NOW)
    with monkeypatch.context() as patch:
        patch.setattr(os, "open", _failing_open(code))
        with pytest.raises(LogStorageError):
            log.roll(NOW)
    assert (manager.online_dirs == []) is offline
    assert manager.is_offline("t", 0) is offline
    if not offline:  # descriptors back: the same log rolls and takes appends again
        assert manager.get_log("t", 0) is log
        log.roll(NOW)
        assert log.append_as_leader(batch(), leader_epoch=0, now_ms=NOW).first_offset == 1
        assert len(log.segments) == 2
    manager.shutdown()


def test_a_shutdown_reports_a_failed_flush_on_its_own_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Logs are flushed and closed by worker threads at shutdown; a failed fsync still takes its log dir
    offline, told to the listeners on the thread that called shutdown (they touch the event loop's state)."""
    manager = LogManager([str(tmp_path)], SMALL, recovery_threads=2)
    manager.startup(now_ms=NOW)
    for partition in range(8):
        manager.get_or_create_log("t", partition).append_as_leader(batch(), leader_epoch=0, now_ms=NOW)
    told: list[str] = []
    manager.dir_failure_listeners.append(lambda root, _tps: told.append(threading.current_thread().name))
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "Input/output error")))
    with pytest.raises(LogStorageError):
        manager.shutdown()
    assert told == [threading.current_thread().name]
    assert manager.online_dirs == []
