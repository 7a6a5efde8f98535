"""pybroker.testing's ChildProcess: no Python code runs in the forked child, and the child dies with its parent."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from pybroker.testing.process import ChildProcess

REPO = Path(__file__).resolve().parents[2]


class ShutsDownOnFinalize:
    """Like py4j's thread-local connection: its finalizer shuts down a socket (shutdown acts on the socket itself,
    so a copy of it in a forked child that runs the finalizer would cut the parent's connection too)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def __del__(self) -> None:
        self.sock.shutdown(socket.SHUT_RDWR)


def test_starting_a_child_runs_no_finalizer_of_another_threads_locals_in_the_child() -> None:
    ours, theirs = socket.socketpair()
    ours.set_inheritable(True)  # as good as shared: a forked child holds the same socket until it execs
    held, release = threading.Event(), threading.Event()
    local = threading.local()

    def hold() -> None:
        local.connection = ShutsDownOnFinalize(ours)
        held.set()
        release.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    try:
        child = ChildProcess([sys.executable, "-c", "print('up')"], re.compile("up"))
        assert child.wait_ready(30) and child.process.wait(30) == 0
        ours.sendall(b"ping")
        assert theirs.recv(4) == b"ping"
    finally:
        release.set()
        holder.join()
        local.__dict__.clear()
        theirs.close()
        ours.close()


def test_the_child_dies_when_its_parent_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import re, sys, time
        from pybroker.testing.process import ChildProcess
        child = ChildProcess([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)"],
                             re.compile("up"))
        assert child.wait_ready(30)
        print(child.pid, flush=True)
        time.sleep(120)
    """)], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        os.kill(pid, 0)  # alive while its parent is
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"the child {pid} outlived its SIGKILLed parent")
