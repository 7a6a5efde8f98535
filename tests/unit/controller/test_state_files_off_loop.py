"""The single-node stores replace their JSON files with fsyncs in a worker thread: a slow disk must not
stall the event loop that serves every client (the guide: blocking work stays off the loop).

A slow disk cannot be had here, so fsync is replaced by one that blocks until the event loop, running
another task, releases it. Written on the loop, the fsync would wait out its timeout instead."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Awaitable, Callable

import pytest

from pybroker.common import durable_json
from pybroker.controller.client_metrics_store import FileClientMetricsStore
from pybroker.controller.embedded import EmbeddedMetadata
from pybroker.controller.metadata import BrokerInfo
from pybroker.controller.quota_store import FileQuotaStore
from pybroker.controller.scram_store import FileScramStore

RELEASE_TIMEOUT_S = 5.0
REAL_FSYNC = os.fsync  # captured once: a second patch must not wrap the first one's blocking fsync


def loop_released_every_fsync(monkeypatch: pytest.MonkeyPatch, write: Callable[[], Awaitable[object]]) -> list[bool]:
    """Run `write` beside a task that releases each fsync once it has begun; for each fsync, whether the
    loop released it (False: it waited out the timeout, so the loop was blocked)."""
    entered, released = threading.Event(), threading.Event()
    outcomes: list[bool] = []

    def blocking_fsync(fd: int) -> None:
        released.clear()
        entered.set()
        outcomes.append(released.wait(RELEASE_TIMEOUT_S))
        REAL_FSYNC(fd)

    monkeypatch.setattr(durable_json.os, "fsync", blocking_fsync)

    async def release_while_writing(done: asyncio.Task[object]) -> None:
        while not done.done():
            if entered.is_set():
                entered.clear()
                released.set()
            await asyncio.sleep(0.001)

    async def main() -> None:
        writing = asyncio.ensure_future(write())
        await asyncio.gather(writing, release_while_writing(writing))

    asyncio.run(main())
    return outcomes


def test_embedded_metadata_writes_its_file_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    metadata = EmbeddedMetadata(str(tmp_path), BrokerInfo(0, "127.0.0.1", 9092), validate_configs=lambda _: None)
    outcomes = loop_released_every_fsync(monkeypatch, lambda: metadata.create_topic("t", 2, 1, {}))
    assert outcomes and all(outcomes), outcomes
    assert "t" in (tmp_path / "pybroker-metadata.json").read_text()
    outcomes = loop_released_every_fsync(monkeypatch, metadata.allocate_producer_id)
    assert outcomes and all(outcomes), outcomes


def test_quota_scram_and_client_metrics_stores_write_off_the_event_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    quotas, scram, metrics = FileQuotaStore(str(tmp_path)), FileScramStore(str(tmp_path)), \
        FileClientMetricsStore(str(tmp_path))
    for write in (lambda: quotas.set_quotas(("alice", None), {"producer_byte_rate": "1024"}),
                  lambda: scram.set_user_config("alice", {"SCRAM-SHA-256": "salt=x,stored_key=y"}),
                  lambda: metrics.set_config("all", {"interval.ms": "60000"})):
        outcomes = loop_released_every_fsync(monkeypatch, write)
        assert outcomes and all(outcomes), outcomes
    assert FileQuotaStore(str(tmp_path)).all() == {("alice", None): quotas.all()[("alice", None)]}
    assert FileScramStore(str(tmp_path)).user_config("alice") == {"SCRAM-SHA-256": "salt=x,stored_key=y"}
    assert FileClientMetricsStore(str(tmp_path)).all() == {"all": {"interval.ms": "60000"}}


def test_concurrent_writes_to_one_store_both_reach_the_file(tmp_path: Path) -> None:
    """Off the loop, two updates could interleave; the store's lock keeps each one's read-modify-write whole."""
    quotas = FileQuotaStore(str(tmp_path))

    async def both() -> None:
        await asyncio.gather(quotas.set_quotas(("alice", None), {"producer_byte_rate": "1"}),
                             quotas.set_quotas(("bob", None), {"producer_byte_rate": "2"}))

    asyncio.run(both())
    assert set(FileQuotaStore(str(tmp_path)).all()) == {("alice", None), ("bob", None)}


async def _cancelled_mid_write(monkeypatch: pytest.MonkeyPatch, first: Callable[[], Awaitable[object]],
                               second: Callable[[], Awaitable[object]]) -> None:
    """``first`` cancelled while its thread is inside the file's fsync (its client went away), then ``second``
    started; the fsync is let go only once ``second`` had its chance to start writing too."""
    entered, release = threading.Event(), threading.Event()

    def held_fsync(fd: int) -> None:
        entered.set()
        release.wait(RELEASE_TIMEOUT_S)
        REAL_FSYNC(fd)

    monkeypatch.setattr(durable_json.os, "fsync", held_fsync)
    writing = asyncio.ensure_future(first())
    while not entered.is_set():
        await asyncio.sleep(0.001)
    writing.cancel()
    following = asyncio.ensure_future(second())
    for _ in range(20):  # passes of the loop: an unlocked second write reaches its thread in one or two
        await asyncio.sleep(0)
    release.set()
    await following


def test_a_write_whose_caller_is_cancelled_finishes_before_the_next_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CreateTopics whose client disconnects mid-write: the write goes on and its topic is created in
    memory as on disk; the next creation waits for it. CI saw the cancelled step release the lock while its
    thread still wrote ``pybroker-metadata.json.tmp``: the next write shared that file and its rename failed
    (KAFKA_STORAGE_ERROR), and the cancelled topic could be on disk but not served."""
    metadata = EmbeddedMetadata(str(tmp_path), BrokerInfo(0, "127.0.0.1", 9092), validate_configs=lambda _: None)

    asyncio.run(_cancelled_mid_write(monkeypatch, lambda: metadata.create_topic("gone", 1, 1, {}),
                                     lambda: metadata.create_topic("next", 1, 1, {})))
    assert metadata.topic("gone") is not None and metadata.topic("next") is not None
    reloaded = EmbeddedMetadata(str(tmp_path), BrokerInfo(0, "127.0.0.1", 9092), validate_configs=lambda _: None)
    assert reloaded.topic("gone") is not None and reloaded.topic("next") is not None


def test_a_store_write_whose_caller_is_cancelled_is_kept_in_memory_as_on_disk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    quotas = FileQuotaStore(str(tmp_path))
    asyncio.run(_cancelled_mid_write(monkeypatch, lambda: quotas.set_quotas(("alice", None), {"producer_byte_rate": "1"}),
                                     lambda: quotas.set_quotas(("bob", None), {"producer_byte_rate": "2"})))
    assert set(quotas.all()) == set(FileQuotaStore(str(tmp_path)).all()) == {("alice", None), ("bob", None)}
