"""A replica manager whose one I/O thread is held on a gate: the off-loop tests see each step while the work
it queued (a new log's files, a leader epoch's checkpoint) still waits, without timing."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Awaitable, Callable, TypeVar

from pybroker.common.clock import SystemClock
from pybroker.common.ids import BrokerId
from pybroker.common.io_executor import IoExecutor
from pybroker.log import LogConfig
from pybroker.log.manager import LogManager
from pybroker.replication.manager import ReplicaManager

T = TypeVar("T", LogManager, IoExecutor)


async def with_held_io(tmp_path: Path, config: LogConfig, pick: Callable[[LogManager, IoExecutor], T],
                       scenario: Callable[[ReplicaManager, T, threading.Event], Awaitable[None]]) -> None:
    """Run ``scenario(replicas, pick(logs, io), gate)`` while the I/O thread waits for ``gate``; releases it and
    shuts everything down after."""
    logs = LogManager([str(tmp_path)], config)
    logs.startup(0)
    io = IoExecutor(1)
    logs.attach_executor(io)
    replicas = ReplicaManager(logs, BrokerId(0), SystemClock(), io=io)
    gate = threading.Event()
    held = asyncio.ensure_future(io.run(gate.wait))
    await asyncio.sleep(0)  # the thread is taken before the scenario begins
    try:
        await scenario(replicas, pick(logs, io), gate)
    finally:
        gate.set()
        await held
        io.shutdown()
        logs.shutdown()


async def turns_until(condition: Callable[[], bool], what: str) -> None:
    """Turns of the loop until ``condition``: for steps the loop alone takes, with no thread or I/O in between."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never: {what}")
