"""A client that sends bad frames over and over cannot grow the broker's log without bound."""

from __future__ import annotations

import socket
import struct
import time

from pybroker.common.log_limit import DEFAULT_INTERVAL_S
from tests.integration.broker_process import BrokerProcess

BAD_FRAMES = 2_000


def send_and_wait_close(bootstrap: str, frame: bytes) -> None:
    host, port = bootstrap.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(frame)
        assert sock.recv(1) == b""  # the broker closed the connection: the frame was rejected


def closing_lines(broker: BrokerProcess) -> list[str]:
    return [line for line in broker.log_lines if "Closing connection from" in line]


def test_many_bad_frames_log_a_bounded_number_of_lines(broker: BrokerProcess) -> None:
    unknown_api_key = struct.pack(">ihhih", 10, 999, 0, 1, -1)
    oversized = struct.pack(">i", 2**31 - 1)
    started = time.monotonic()
    for n in range(BAD_FRAMES):
        send_and_wait_close(broker.bootstrap, unknown_api_key if n % 2 else oversized)
    elapsed = time.monotonic() - started
    assert broker.wait_for_log("unsupported API key 999") and broker.wait_for_log("exceeds")
    # Two reasons, each at most one line per interval (plus the first): 2,000 frames must not give 2,000 lines.
    bound = 2 * (int(elapsed / DEFAULT_INTERVAL_S) + 1)
    lines = closing_lines(broker)
    assert 2 <= len(lines) <= bound, (len(lines), bound, lines[:5])
