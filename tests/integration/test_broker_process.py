"""The harness's own promise: a restarted broker is back on its port, or the restart fails loudly."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.integration.broker_process import BrokerProcess
from tests.ports import _ephemeral_start, restartable_port


def test_ports_for_restarts_are_outside_the_ephemeral_range_and_free() -> None:
    ports = {restartable_port() for _ in range(20)}
    assert len(ports) == 20
    assert max(ports) < _ephemeral_start()
    for port in ports:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))


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
