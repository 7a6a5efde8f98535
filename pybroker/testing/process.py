"""Child processes that die with their parent: the embedded broker's and ZooKeeper's.

A test run that crashes, or is SIGKILLed by a CI timeout, must not leave brokers behind: on Linux each
child asks the kernel (prctl PR_SET_PDEATHSIG) for SIGKILL when the thread that forked it exits, and an
atexit hook kills whatever is still running when the interpreter ends normally. Since the kernel watches
the forking *thread*, every child is forked by one long-lived spawner thread: a broker started from a
short-lived thread (a thread pool's, ``asyncio.to_thread``) must not die when that thread ends.
"""

from __future__ import annotations

import atexit
import collections
import ctypes
import ctypes.util
import os
import re
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

PR_SET_PDEATHSIG = 1
LOG_LINES_KEPT = 2000


def _load_prctl() -> Callable[..., int] | None:
    # Looked up before any fork: the child may only make the bare C call (other threads may hold locks).
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()
_LIVE: set[subprocess.Popen[str]] = set()
_LIVE_LOCK = threading.Lock()
_SPAWNER = ThreadPoolExecutor(1, thread_name_prefix="pybroker-testing-spawner")  # its thread lives until exit


def _dies_with(parent: int) -> Callable[[], None]:
    def preexec() -> None:
        if _PRCTL is not None:
            _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died between fork and prctl: nobody would signal us
            os._exit(1)

    return preexec


@atexit.register
def _kill_survivors() -> None:
    with _LIVE_LOCK:
        survivors = list(_LIVE)
    for process in survivors:
        if process.poll() is None:
            process.kill()
            process.wait()


class ChildProcess:
    """One child with its stderr+stdout kept (the last lines) and watched line by line for ``ready``."""

    def __init__(self, args: Sequence[str], ready: re.Pattern[str] | None, *, cwd: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=LOG_LINES_KEPT)
        self.lines_seen = 0  # total lines ever read, so callers can take "the lines since" a point
        self.ready_match: re.Match[str] | None = None
        self._ready = ready
        self._done = threading.Event()  # ready matched, or the output ended (the child exited)
        self._callbacks: list[Callable[[], object]] = []
        self.process: subprocess.Popen[str] = _SPAWNER.submit(
            subprocess.Popen, list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True, cwd=cwd, env=env, preexec_fn=_dies_with(os.getpid()), errors="replace").result()
        with _LIVE_LOCK:
            _LIVE.add(self.process)
        threading.Thread(target=self._pump, name=f"pybroker-child-{self.process.pid}", daemon=True).start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))
            self.lines_seen += 1
            if self.ready_match is None and self._ready is not None:
                match = self._ready.search(line)
                if match:
                    self.ready_match = match
                    self._finish()
        self._finish()

    def _finish(self) -> None:
        if self._done.is_set():
            return
        self._done.set()
        for callback in self._callbacks:
            callback()

    def on_done(self, callback: Callable[[], object]) -> None:
        """Calls ``callback`` (from the reader thread) once ready matched or the child's output ended."""
        self._callbacks.append(callback)
        if self._done.is_set():
            callback()

    def wait_ready(self, timeout: float) -> bool:
        """True once the ready line was seen; False if the child exited or ``timeout`` passed first."""
        self._done.wait(timeout)
        return self.ready_match is not None

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self, count: int = 50) -> str:
        return "\n".join(list(self.lines)[-count:])

    def since(self, seen: int) -> list[str]:
        """The lines read after the first ``seen`` (as many as are still kept)."""
        kept = list(self.lines)
        return kept[max(0, len(kept) - (self.lines_seen - seen)):]

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout``."""
        if self.alive():
            self.process.terminate()
            try:
                return self._reap(timeout)
            except subprocess.TimeoutExpired:
                pass
        return self.kill()

    def kill(self) -> int:
        if self.alive():
            self.process.kill()
        return self._reap(30.0)

    def _reap(self, timeout: float) -> int:
        code = self.process.wait(timeout)
        with _LIVE_LOCK:
            _LIVE.discard(self.process)
        self._done.wait(5.0)  # the reader thread has the last lines once the pipe closed
        return code
