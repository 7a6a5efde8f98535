"""Hostile frames against the real broker process: amplification frames and mutated requests of every API.

A request frame may be as large as socket.request.max.bytes (100 MiB); a frame whose arrays claim tens of millions
of one-byte elements must not become gigabytes of Python objects. The fuzz tests mutate a valid request of every
API key and version the broker advertises (built from the request schemas by test_null_fields.fill), truncate it,
and overwrite lengths and counts with absurd values. After each batch of attacks the broker must be alive, answer
ApiVersions on a fresh connection within LIVENESS_S (a liveness bound, not a latency target: best of three tries on
a shared machine), keep its resident memory under a stated bound, and round-trip data with confluent-kafka.

Examples per API: FUZZ_EXAMPLES (default 25 for `make test`; `make fuzz` raises it).
"""

from __future__ import annotations

import os
import re
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from pybroker.protocol.messages import ApiVersionsRequest, ApiVersionsResponse, RequestHeader
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient

MB = 1 << 20
LIVENESS_S = 0.1
FRAME_LIMIT = 100 * MB  # socket.request.max.bytes, Kafka's default


def memory_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process, in MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss, hwm = (int(re.search(rf"^{key}:\s+(\d+) kB", status, re.M).group(1)) for key in ("VmRSS", "VmHWM"))
    return rss / 1024, hwm / 1024


def api_versions_seconds(bootstrap: str) -> float:
    """Best of three: seconds from connecting to the ApiVersions answer on a fresh connection."""
    best = float("inf")
    for _ in range(3):
        started = time.monotonic()
        client = WireClient(bootstrap)
        client.sock.settimeout(5)
        try:
            assert client.request(ApiVersionsRequest(), 3, ApiVersionsResponse).error_code == 0
            best = min(best, time.monotonic() - started)
        finally:
            client.close()
        if best < LIVENESS_S:
            break
    return best


def round_trip(bootstrap: str, topic: str, tag: str) -> None:
    """confluent-kafka produces one record and reads it back."""
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000})
    value = f"fuzz-{tag}".encode()
    delivered: list[object] = []
    producer.produce(topic, value=value, on_delivery=lambda err, msg: delivered.append(err or msg))
    assert producer.flush(15) == 0, "confluent-kafka did not deliver"
    message = delivered[0]
    assert not hasattr(message, "code"), f"delivery failed: {message}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fuzz-{tag}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, message.partition(), message.offset())])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            got = consumer.poll(0.5)
            if got is not None and got.error() is None:
                assert got.value() == value
                return
        raise AssertionError("confluent-kafka did not read the record back")
    finally:
        consumer.close()


def assert_healthy(broker: BrokerProcess, rss_bound_mb: float, tag: str) -> tuple[float, float]:
    """The broker runs, answers ApiVersions within the liveness bound, stays under its RSS bound and
    round-trips a record; returns (ApiVersions seconds, VmHWM MiB)."""
    assert broker.process is not None and broker.process.poll() is None, "the broker died"
    seconds = api_versions_seconds(broker.bootstrap)
    assert seconds < LIVENESS_S, f"ApiVersions took {seconds * 1000:.0f} ms"
    _, hwm = memory_mb(broker.process.pid)
    assert hwm < rss_bound_mb, f"broker RSS high-water {hwm:.0f} MiB >= bound {rss_bound_mb:.0f} MiB"
    round_trip(broker.bootstrap, "fuzz-health", tag)
    return seconds, hwm


# --------------------------------------------------------------------------- amplification


def _header(api_key: int, version: int, flexible: bool) -> bytes:
    return RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=7,
                         client_id="amplify").encode(2 if flexible else 1)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _fill(header: bytes, head: bytes, element: bytes, tail: bytes, count_prefix) -> bytes:
    """A frame of at most FRAME_LIMIT bytes whose one array holds as many `element`s as fit."""
    room = FRAME_LIMIT - len(header) - len(head) - len(tail) - 8
    count = room // len(element)
    body = head + count_prefix(count) + element * count + tail
    return struct.pack(">i", len(header) + len(body)) + header + body


# Each frame fills 100 MiB with the smallest elements an array of that request can hold.
AMPLIFIERS = {
    # Metadata v4 Topics: 52M topics named "" (2 bytes each)
    "metadata-v4-topics": lambda: _fill(_header(3, 4, False), b"", b"\0\0", b"\0",
                                        lambda n: struct.pack(">i", n)),
    # OffsetFetch v8 Groups: 35M groups "" with null Topics (3 bytes each)
    "offset-fetch-v8-groups": lambda: _fill(_header(9, 8, True), b"", b"\x01\x00\x00", b"\0\0",
                                            lambda n: _uvarint(n + 1)),
    # DescribeConfigs v1 Resources: 15M resources with null ConfigurationKeys (7 bytes each)
    "describe-configs-v1-resources": lambda: _fill(_header(32, 1, False), b"", b"\x02\0\0\xff\xff\xff\xff",
                                                   b"\0", lambda n: struct.pack(">i", n)),
    # OffsetFetch v1 PartitionIndexes: 26M int32 partitions of one topic (4 bytes each)
    "offset-fetch-v1-partition-indexes": lambda: _fill(
        _header(9, 1, False), b"\0\x01g" + struct.pack(">i", 1) + b"\0\x01t", struct.pack(">i", 100_000), b"",
        lambda n: struct.pack(">i", n)),
}

# The broker's own footprint plus the 100 MiB frame it buffers, the frame's copy into one buffer, and the bounded
# Python objects a request may decode into (schema.DECODE_BUDGET, 64 MiB estimated).
AMPLIFICATION_RSS_MB = 2 * FRAME_LIMIT / MB + 150


@pytest.fixture(scope="module")
def amplified_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("amplified"), {"auto.create.topics.enable": "true"}).start()
    yield process
    process.kill()


def _attack(broker: BrokerProcess, frame: bytes, bound_mb: float, seconds: float) -> float:
    """Send `frame` and watch the broker until it answers or closes the connection; returns its peak VmHWM."""
    assert broker.process is not None
    host, port = broker.bootstrap.split(":")
    sock = socket.create_connection((host, int(port)))
    sender = threading.Thread(target=lambda: _send_quietly(sock, frame), daemon=True)
    sender.start()
    sock.settimeout(0.02)
    deadline = time.monotonic() + seconds
    peak = 0.0
    try:
        while True:
            _, hwm = memory_mb(broker.process.pid)
            peak = max(peak, hwm)
            assert hwm < bound_mb, f"broker RSS high-water {hwm:.0f} MiB >= bound {bound_mb:.0f} MiB"
            assert time.monotonic() < deadline, f"no answer in {seconds} s (RSS high-water {hwm:.0f} MiB)"
            try:
                if not sock.recv(65536) or not sender.is_alive():
                    break  # an answer, or closed
            except socket.timeout:
                continue
            except ConnectionError:
                break
    finally:
        sock.close()
        sender.join(10)
    return peak


def _send_quietly(sock: socket.socket, frame: bytes) -> None:
    try:
        sock.sendall(frame)
    except OSError:
        pass  # closed by the broker before the whole frame was read


@pytest.mark.parametrize("attack", list(AMPLIFIERS))
def test_a_frame_of_millions_of_tiny_elements_stays_small_in_memory(amplified_broker: BrokerProcess,
                                                                    attack: str) -> None:
    assert amplified_broker.process is not None
    round_trip(amplified_broker.bootstrap, "fuzz-health", "warm-up")
    baseline, _ = memory_mb(amplified_broker.process.pid)
    bound = baseline + AMPLIFICATION_RSS_MB
    frame = AMPLIFIERS[attack]()
    peak = _attack(amplified_broker, frame, bound, 60.0)
    del frame
    print(f"{attack}: broker RSS {baseline:.0f} MiB before, high-water {peak:.0f} MiB (bound {bound:.0f})")
    assert_healthy(amplified_broker, bound, attack)
