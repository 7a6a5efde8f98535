"""Loopback ports a test's broker can be restarted on.

A port the kernel picked (bind to port 0) comes from the ephemeral range, where every other bind to port
0 and every outgoing connection of the machine also take theirs: once the broker that held it is killed,
a parallel test may get it before the broker comes back on it, and the restart fails or, worse, the test
talks to someone else's server. Ports here come from below that range, which the kernel never hands out
on its own, each pytest-xdist worker from a block of its own and each process from a random point in it,
so only another caller of this module could take one, and not the same worker.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from pathlib import Path

LOWEST = 10000
BLOCKS = 16  # pytest-xdist workers (gw0, gw1, ...) get one block each; more workers share blocks


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


def restartable_port() -> int:
    """A loopback port free now and outside the ephemeral range: see the module's docstring."""
    for _ in range(len(_BLOCK)):
        port = _BLOCK[next(_NEXT)]
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free loopback port in {_BLOCK.start}-{_BLOCK.stop - 1}")
