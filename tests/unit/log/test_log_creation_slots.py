"""`LogManager.create_log` makes new logs on at most half the I/O threads (docs/architecture.md): a topic's
thousand new partitions leave the other threads free for flushes and cold reads. The creations are held
inside their work on the threads by a gate, so what runs at once is seen without timing."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from logtest_util import NOW
from pybroker.common.io_executor import IoExecutor
from pybroker.log import LogConfig, PartitionLog
from pybroker.log.manager import LogManager


def test_new_logs_are_made_on_at_most_half_the_io_threads(tmp_path: Path) -> None:
    async def scenario() -> None:
        logs = LogManager([str(tmp_path)], LogConfig())
        logs.startup(NOW)
        io = IoExecutor(4)
        logs.attach_executor(io)
        gate, lock = threading.Event(), threading.Lock()
        making: list[int] = []

        def held(log: PartitionLog) -> None:  # the last step of a creation's work on its I/O thread
            with lock:
                making.append(log.partition)
            gate.wait()

        submitted = io.submitted
        creations = [asyncio.ensure_future(logs.create_log("t", partition, prepare=held)) for partition in range(4)]
        try:
            while len(making) < 2:
                await asyncio.sleep(0.01)
            assert io.submitted == submitted + 2  # the other two creations wait for a slot, not for a thread
            assert await io.run(lambda: "a flush finds a thread") == "a flush finds a thread"
            assert sorted(making) == [0, 1]
        finally:
            gate.set()
            made = await asyncio.gather(*creations)
            io.shutdown()
            logs.shutdown()
        assert sorted(making) == [0, 1, 2, 3]
        assert [log.partition for log in made] == [0, 1, 2, 3]

    asyncio.run(scenario())
