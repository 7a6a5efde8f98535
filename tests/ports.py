"""Loopback ports a test's broker can be restarted on.

A port the kernel picked (bind to port 0) comes from the ephemeral range, where every other bind to port
0 and every outgoing connection of the machine also take theirs: once the broker that held it is killed,
a parallel test may get it before the broker comes back on it, and the restart fails or, worse, the test
talks to someone else's server. Ports here come from below that range, which the kernel never hands out
on its own, each pytest-xdist worker from a block of its own and each process from a random point in it.

Every process outside pytest-xdist (a plain pytest run, a chaos round) draws from the first block, so
another caller of this module could still take a port while the broker on it is down: chaos round 9401's
workload was acknowledged by another process's broker on a killed broker's port. So a port is also
reserved across processes, by a lock on a file named after it, which its process holds until it exits or
has reserved KEPT newer ports; a caller skips a port whose lock another process holds.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import random
import socket
import tempfile
from collections import deque
from pathlib import Path

LOWEST = 10000
BLOCKS = 16  # pytest-xdist workers (gw0, gw1, ...) get one block each; more workers share blocks
KEPT = 32  # a process's latest reservations: more than any one test or chaos round restarts brokers on
RESERVATIONS = Path(tempfile.gettempdir()) / "pybroker-test-ports"


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _block() -> range:
    size = (_ephemeral_start() - LOWEST) // BLOCKS
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) % BLOCKS if worker.isdigit() else 0
    return range(LOWEST + index * size, LOWEST + (index + 1) * size)


_BLOCK = _block()
_NEXT = itertools.cycle(itertools.chain(range(start := random.randrange(len(_BLOCK)), len(_BLOCK)),
                                        range(start)))
_held: deque[int] = deque()  # the open lock files' descriptors, oldest first


def _reserve(port: int) -> int | None:
    """The descriptor of `port`'s lock file, locked by this process; None if another process holds it."""
    RESERVATIONS.mkdir(exist_ok=True)
    fd = os.open(RESERVATIONS / str(port), os.O_CREAT | os.O_RDWR, 0o666)  # not inherited by children
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _keep(fd: int) -> None:
    _held.append(fd)
    while len(_held) > KEPT:
        os.close(_held.popleft())


def restartable_port() -> int:
    """A loopback port free now, outside the ephemeral range and reserved from this module's other
    callers: see the module's docstring."""
    for _ in range(len(_BLOCK)):
        port = _BLOCK[next(_NEXT)]
        fd = _reserve(port)
        if fd is None:
            continue
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                os.close(fd)
                continue
        _keep(fd)
        return port
    raise RuntimeError(f"no free loopback port in {_BLOCK.start}-{_BLOCK.stop - 1}")
