"""Child processes that die with their parent: the embedded broker's and ZooKeeper's.

A test run that crashes, or is SIGKILLed by a CI timeout, must not leave brokers behind: on Linux each
child asks the kernel (prctl PR_SET_PDEATHSIG) for SIGKILL when the thread that forked it exits, and an
atexit hook kills whatever is still running when the interpreter ends normally. Since the kernel watches
the forking *thread*, every child is forked by one long-lived spawner thread: a broker started from a
short-lived thread (a thread pool's, ``asyncio.to_thread``) must not die when that thread ends.

The prctl call is made by a small launcher (``python -I -S -c``) that then execs the real command (the
setting survives execve), never by a ``preexec_fn``: with one, CPython runs its after-fork handling in the
forked child, which drops the other threads' states and runs their thread-locals' finalizers there. py4j's
shut down the gateway sockets the child shares with the parent, and a PySpark session in the test process
loses its JVM connection.
"""

from __future__ import annotations

import atexit
import collections
import os
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

LOG_LINES_KEPT = 2000
#: Run as ``python -I -S -c LAUNCHER parent-pid command...``: SIGKILL when the forking thread exits; exits at
#: once if the parent already died before the prctl (nobody would signal it then); execs the command.
LAUNCHER = ("import ctypes, os, sys\n"
            "ctypes.CDLL(None).prctl(1, 9)\n"  # PR_SET_PDEATHSIG, SIGKILL
            "if os.getppid() != int(sys.argv[1]):\n"
            "    os._exit(1)\n"
            "os.execvp(sys.argv[2], sys.argv[2:])\n")
_LIVE: set[subprocess.Popen[str]] = set()
_LIVE_LOCK = threading.Lock()
_SPAWNER = ThreadPoolExecutor(1, thread_name_prefix="pybroker-testing-spawner")  # its thread lives until exit


def _dying_with_us(args: Sequence[str]) -> list[str]:
    """``args`` behind the launcher on Linux; as they are elsewhere (macOS has no prctl)."""
    if not sys.platform.startswith("linux"):
        return list(args)
    return [sys.executable, "-I", "-S", "-c", LAUNCHER, str(os.getpid()), *args]


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
            subprocess.Popen, _dying_with_us(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, text=True, cwd=cwd, env=env, errors="replace").result()
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
