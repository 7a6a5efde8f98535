"""`pybroker console` as a process: a taken port is one line and exit 1, and SIGTERM stops it in every state
(still starting, serving with the cluster away, in the middle of a request, with idle connections open)."""

from __future__ import annotations

import http.client
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.console.conftest import ConsoleProcess, free_port
from tests.integration.broker_process import REPO, BrokerProcess

STOP_S = 15.0  # the console's grace for open requests is 5 s


def closed_port() -> int:
    return free_port()  # nothing listens there: the cluster is away


def stops_on_sigterm(console: ConsoleProcess) -> int:
    console.process.send_signal(signal.SIGTERM)
    try:
        return console.process.wait(STOP_S)
    except subprocess.TimeoutExpired:
        console.process.kill()
        console.process.wait()
        pytest.fail(f"the console ignored SIGTERM: {console.log_tail()}")


def test_a_taken_port_is_one_line_and_exit_1() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "pybroker", "console", "--bootstrap-server",
                                 f"127.0.0.1:{closed_port()}", "--port", str(port)],
                                cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr == f"Error: cannot serve the console on 127.0.0.1:{port}: Address already in use\n"
    assert result.stdout == ""


def test_sigterm_while_starting(tmp_path: Path) -> None:
    console = ConsoleProcess(["--bootstrap-server", f"127.0.0.1:{closed_port()}"], tmp_path / "console.log")
    stops_on_sigterm(console)  # at once, while it is still importing and binding


def test_sigterm_while_the_cluster_is_away(tmp_path: Path) -> None:
    console = ConsoleProcess(["--bootstrap-server", f"127.0.0.1:{closed_port()}", "--sample-interval", "0.2"],
                             tmp_path / "console.log").wait_ready()
    time.sleep(0.5)  # not a synchronization: lets the sampler fail a few times, the state under test
    stops_on_sigterm(console)


def test_sigterm_in_the_middle_of_a_request(tmp_path: Path) -> None:
    """A page waiting on a cluster that never answers (command timeout 60 s) must not hold SIGTERM up."""
    with socket.socket() as silent:  # takes connections into its backlog and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        console = ConsoleProcess(["--bootstrap-server", f"127.0.0.1:{silent.getsockname()[1]}",
                                  "--command-timeout", "60000"], tmp_path / "console.log").wait_ready()
        sent = threading.Event()

        def fetch() -> None:
            connection = http.client.HTTPConnection("127.0.0.1", console.port, timeout=60)
            try:
                connection.request("GET", "/topics")
                sent.set()
                connection.getresponse().read()
            except (OSError, http.client.HTTPException):
                pass

        threading.Thread(target=fetch, daemon=True).start()
        assert sent.wait(10)
        stops_on_sigterm(console)


def test_sigterm_with_idle_connections_open(console_broker: BrokerProcess, tmp_path: Path) -> None:
    console = ConsoleProcess(["--bootstrap-server", console_broker.bootstrap], tmp_path / "console.log").wait_ready()
    idle = http.client.HTTPConnection("127.0.0.1", console.port, timeout=30)
    idle.request("GET", "/login")
    assert idle.getresponse().read()  # the connection stays open (keep-alive)
    try:
        stops_on_sigterm(console)
    finally:
        idle.close()
