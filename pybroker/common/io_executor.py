"""The broker's blocking-I/O thread pool: fsyncs and checkpoint writes run here, not on the loop.

Kafka runs its log flusher and checkpoint writers on ``background.threads`` scheduler threads
(``kafka-scheduler-N``); pybroker serves every connection on one event loop, so any fsync left on
it stalls every client for as long as the disk takes. Work is split the same way everywhere: state
is read on the loop, only the syscalls run on a ``pybroker-io-N`` thread, and the results are applied
back on the loop. The pool is separate from asyncio's default executor, which the ZooKeeper client's
blocking calls use, so a slow disk cannot delay a session heartbeat and a slow ZooKeeper cannot delay
a flush.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Awaitable, Callable, TypeVar

__all__ = ["IoExecutor", "IO_THREAD_PREFIX"]

IO_THREAD_PREFIX = "pybroker-io"

T = TypeVar("T")


class IoExecutor:
    """A named, sized pool for blocking file I/O; ``run`` awaits one call on it."""

    def __init__(self, threads: int) -> None:
        if threads < 1:
            raise ValueError("the I/O executor needs at least one thread")
        self.threads = threads
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=IO_THREAD_PREFIX)
        # Produced batches too big to check on the loop: half the threads at most, so that flushes and cold
        # reads still find one. A pool of its own queues the rest, which the loop then need not count.
        self._checks = ThreadPoolExecutor(max_workers=max(1, threads // 2),
                                          thread_name_prefix=f"{IO_THREAD_PREFIX}-check")
        self.submitted = 0
        self.running = 0
        # Reads that found their pages out of the page cache and went to an I/O thread, per path
        # ("fetch" header walks, "response" file ranges copied into a response): /metrics shows them.
        self.cold_reads: collections.Counter[str] = collections.Counter()

    async def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on an I/O thread; the caller applies what it returns on the loop."""
        self.submitted += 1
        self.running += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn)
        finally:
            self.running -= 1

    def check(self, fn: Callable[[], T]) -> Awaitable[T]:
        """Run a big batch's check on one of the check threads (awaited: its outcome)."""
        return asyncio.wrap_future(self._checks.submit(fn))

    @staticmethod
    def on_io_thread() -> bool:
        return threading.current_thread().name.startswith(IO_THREAD_PREFIX)

    def shutdown(self) -> None:
        """Wait for the calls already submitted (their fsyncs must finish) and stop the threads."""
        self._checks.shutdown(wait=True)
        self._pool.shutdown(wait=True)
