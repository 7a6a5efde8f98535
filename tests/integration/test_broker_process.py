"""The harness's own promise: a restarted broker is back on its port, or the restart fails loudly."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests import ports
from tests.integration.broker_process import REPO, BrokerProcess
from tests.ports import _ephemeral_start, restartable_port


def test_ports_for_restarts_are_outside_the_ephemeral_range_and_free() -> None:
    ports = {restartable_port() for _ in range(20)}
    assert len(ports) == 20
    assert max(ports) < _ephemeral_start()
    for port in ports:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))


def test_a_port_another_process_drew_stays_its_own_while_its_broker_is_down(monkeypatch) -> None:
    """Chaos round 9401: every process outside pytest-xdist draws from the same block, and another one's
    broker took a killed broker's port. A port drawn stays reserved until its process exits: here the other
    process has no broker on it at all, and the port is still skipped."""
    other = subprocess.Popen([sys.executable, "-c", "from tests.ports import restartable_port; "
                              "print(restartable_port(), flush=True); input()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert other.stdout is not None
        theirs = ports._BLOCK.index(int(other.stdout.readline()))
        monkeypatch.setattr(ports, "_NEXT", itertools.chain(range(theirs, len(ports._BLOCK)), range(theirs)))
        assert restartable_port() != ports._BLOCK[theirs]
    finally:
        other.communicate("\n")
    fd = ports._reserve(ports._BLOCK[theirs])  # its process gone, the port can be drawn again
    assert fd is not None
    os.close(fd)


def test_a_restart_whose_port_was_taken_meanwhile_fails_instead_of_passing_for_started(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path).start()
    port = broker.port
    broker.kill()
    with socket.socket() as squatter:  # someone else's server on the broker's port while it was down
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        with pytest.raises(RuntimeError, match="broker did not start"):
            broker.start()
    assert broker.process is None
