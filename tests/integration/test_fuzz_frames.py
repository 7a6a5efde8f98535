"""Hostile frames against the real broker process: amplification frames and mutated requests of every API.

A request frame may be as large as socket.request.max.bytes (100 MiB); a frame whose arrays claim tens of millions
of one-byte elements must not become gigabytes of Python objects. The fuzz tests mutate a valid request of every
API key and version the broker advertises (built from the request schemas by test_null_fields.fill), truncate it,
and overwrite lengths and counts with absurd values. After each batch of attacks the broker must be alive, answer
ApiVersions on a fresh connection within LIVENESS_S (a liveness bound, not a latency target: best of three tries on
a shared machine), keep its resident memory under a stated bound, and round-trip data with confluent-kafka.

Examples per API: FUZZ_EXAMPLES (default 50 for `make test`; `make fuzz` raises it).
"""

from __future__ import annotations

import dataclasses
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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.frame import encode_request, request_header_version
from pybroker.protocol.messages import (
    REQUEST_CLASSES,
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    RequestHeader,
)
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_null_fields import _scene as nulls_scene
from tests.integration.test_null_fields import fill

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


def create_topic(client: WireClient, name: str, configs: dict[str, str] | None = None) -> None:
    created = client.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, configs=[
            CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])]),
        7, CreateTopicsResponse)
    assert created.topics[0].error_code == 0, created


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


# --------------------------------------------------------------------------- mutated requests of every API

FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "50"))
FUZZ_RSS_MB = 400  # the broker's footprint (~65 MiB) plus what a few-KiB request may legitimately cost
CRASH_MARKERS = ("Unexpected error while handling a request", "after an unexpected error", "Traceback")
PROBE_CORRELATION = 0x7FFF0000
# Values that make a length, count or varint absurd: huge, negative, off by one, a five-byte varint.
ABSURD = [b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\xff", b"\x00\xff\xff\xff", b"\x7f\xff",
          b"\xff\xff", b"\x80\x00", b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff", b"\x00", b"\x01", b"\xfe"]


@dataclasses.dataclass(frozen=True)
class Seed:
    api_key: int
    version: int
    header: bytes  # size prefix stripped
    body: bytes


def _seeds(client: WireClient) -> dict[int, list[Seed]]:
    """A valid request (test_null_fields.fill) of every advertised API key and version."""
    scene = nulls_scene(client)
    seeds: dict[int, list[Seed]] = {}
    for key in client.request(ApiVersionsRequest(), 3, ApiVersionsResponse).api_keys:
        for version in range(key.min_version, key.max_version + 1):
            header = RequestHeader(request_api_key=key.api_key, request_api_version=version,
                                   correlation_id=1, client_id="fuzz")
            request = fill(REQUEST_CLASSES[key.api_key], version, scene)
            frame = encode_request(header, request, version)[4:]
            header_size = len(header.encode(request_header_version(key.api_key, version)))
            seeds.setdefault(key.api_key, []).append(
                Seed(key.api_key, version, frame[:header_size], frame[header_size:]))
    return seeds


def mutations(seed: Seed) -> st.SearchStrategy[bytes]:
    """The seed's frame (header and body, no size prefix) mutated: truncated, bytes flipped, absurd lengths and
    counts written over any position, bytes inserted, garbage appended; mostly in the body, sometimes the header."""
    frame = seed.header + seed.body
    start = st.integers(len(seed.header) if seed.body else 0, max(len(frame) - 1, 0)) | st.integers(0, len(frame))

    def overwrite(data: bytes, at: int, value: bytes) -> bytes:
        return data[:at] + value + data[at + len(value):]

    one = st.one_of(
        st.builds(lambda at: frame[:at], start),
        st.builds(lambda at, x: overwrite(frame, at, bytes([frame[at % len(frame)] ^ x])), start, st.integers(1, 255)),
        st.builds(lambda at, v: overwrite(frame, at, v), start, st.sampled_from(ABSURD)),
        st.builds(lambda at, v: frame[:at] + v + frame[at:], start, st.binary(min_size=1, max_size=16)),
        st.builds(lambda v: frame + v, st.binary(min_size=1, max_size=64)),
    )
    return st.lists(one, min_size=1, max_size=3).map(lambda mutated: _combine(frame, mutated))


def _combine(frame: bytes, mutated: list[bytes]) -> bytes:
    """Several mutations of one frame: the first whole, later ones contribute their differing tail."""
    out = mutated[0]
    for other in mutated[1:]:
        cut = next((i for i, (a, b) in enumerate(zip(frame, other)) if a != b), min(len(frame), len(other)))
        out = out[:cut] + other[cut:]
    return out


def _probe(bootstrap: str, payload: bytes) -> str:
    """Send one mutated frame then a valid ApiVersions on the same connection: 'answered' (the ApiVersions answer
    came, so the broker answered or skipped the mutated one), 'closed' or 'slow' (nothing within a second)."""
    client = WireClient(bootstrap)
    client.sock.settimeout(1.0)
    probe = encode_request(RequestHeader(request_api_key=18, request_api_version=0,
                                         correlation_id=PROBE_CORRELATION, client_id="fuzz"), ApiVersionsRequest(), 0)
    try:
        client.sock.sendall(struct.pack(">i", len(payload)) + payload + probe)
        while True:
            if struct.unpack_from(">i", client.read_frame())[0] == PROBE_CORRELATION:
                return "answered"
    except (ConnectionError, BrokenPipeError):
        return "closed"
    except (socket.timeout, TimeoutError):
        return "slow"
    finally:
        client.close()


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("fuzz"), {"auto.create.topics.enable": "false"}).start()
    client = WireClient(process.bootstrap)
    try:
        create_topic(client, "fuzz-health")
    finally:
        client.close()
    yield process
    process.kill()


@pytest.fixture(scope="module")
def fuzz_seeds(fuzz_broker: BrokerProcess) -> dict[int, list[Seed]]:
    client = WireClient(fuzz_broker.bootstrap)
    try:
        return _seeds(client)
    finally:
        client.close()


def test_mutated_requests_of_every_advertised_api_leave_the_broker_healthy(
        fuzz_broker: BrokerProcess, fuzz_seeds: dict[int, list[Seed]]) -> None:
    seeds = fuzz_seeds
    outcomes: dict[str, dict[str, int]] = {}
    crashes: list[str] = []
    seen_lines = len(fuzz_broker.log_lines)
    for api_key, api_seeds in sorted(seeds.items()):
        name = ApiKey(api_key).name
        counts = outcomes.setdefault(name, {"answered": 0, "closed": 0, "slow": 0})
        # The strategies are built once per API: hypothesis validates a new strategy object at its first draw,
        # which, built anew for each example, took three quarters of the test's time.
        choose = st.sampled_from(api_seeds)
        mutated = {seed: mutations(seed) for seed in api_seeds}

        @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(data=st.data())
        def attack(data: st.DataObject) -> None:
            seed = data.draw(choose)
            counts[_probe(fuzz_broker.bootstrap, data.draw(mutated[seed]))] += 1

        attack()
        seconds, hwm = assert_healthy(fuzz_broker, FUZZ_RSS_MB, name.lower())
        new_lines = fuzz_broker.log_lines[seen_lines:]
        seen_lines += len(new_lines)
        crashes += [f"{name}: {line}" for line in new_lines if any(m in line for m in CRASH_MARKERS)]
        print(f"{name}: {sum(counts.values())} frames {counts}, ApiVersions {seconds * 1000:.1f} ms, "
              f"RSS high-water {hwm:.0f} MiB")
    print(f"{sum(sum(c.values()) for c in outcomes.values())} mutated frames over {len(outcomes)} APIs")
    assert crashes == [], "\n".join(crashes)


# --------------------------------------------------------------------------- bombs and forged controller requests

BOMB_BYTES = 96 * MB  # past the 64 MiB a produced batch may decompress to (records.validation)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_a_compression_bomb_from_kafka_python_is_refused_and_costs_little(fuzz_broker: BrokerProcess,
                                                                           codec: str) -> None:
    """kafka-python's own producer path compresses one 96 MiB record of zeros (well under 1 MB on the wire)."""
    from kafka import KafkaProducer
    from kafka.errors import MessageSizeTooLargeError, RecordListTooLargeError

    assert fuzz_broker.process is not None
    topic = f"bomb-{codec}"
    client = WireClient(fuzz_broker.bootstrap)
    try:
        create_topic(client, topic)
    finally:
        client.close()
    baseline, _ = memory_mb(fuzz_broker.process.pid)
    producer = KafkaProducer(bootstrap_servers=fuzz_broker.bootstrap, compression_type=codec, retries=0,
                             max_request_size=2 * BOMB_BYTES)
    try:
        with pytest.raises((RecordListTooLargeError, MessageSizeTooLargeError)):
            producer.send(topic, bytes(BOMB_BYTES)).get(timeout=60)
        producer.send(topic, b"small").get(timeout=30)  # the partition still takes ordinary records
    finally:
        producer.close()
    bound = baseline + 3 * 64 + 60  # the bounded output (64 MiB) while it grows, and the request itself
    seconds, hwm = assert_healthy(fuzz_broker, bound, f"bomb-{codec}")
    print(f"{codec} bomb: RSS {baseline:.0f} MiB before, high-water {hwm:.0f} MiB (bound {bound:.0f}), "
          f"ApiVersions {seconds * 1000:.1f} ms")


INTER_BROKER = [ApiKey.LEADER_AND_ISR, ApiKey.UPDATE_METADATA, ApiKey.STOP_REPLICA, ApiKey.CONTROLLED_SHUTDOWN,
                ApiKey.WRITE_TXN_MARKERS]


def test_forged_controller_requests_leave_the_broker_healthy(fuzz_broker: BrokerProcess,
                                                            fuzz_seeds: dict[int, list[Seed]]) -> None:
    """Requests only brokers send, from a client claiming the highest controller and broker epochs."""
    seeds = fuzz_seeds
    sent = 0
    for api_key in INTER_BROKER:
        for seed in seeds.get(api_key, []):
            request = REQUEST_CLASSES[api_key].decode(seed.body, seed.version)
            for field in ("controller_epoch", "broker_epoch", "controller_id", "broker_id", "leader_epoch"):
                if hasattr(request, field):
                    setattr(request, field, 0x7FFFFFFF if field != "broker_epoch" else (1 << 63) - 1)
            body = request.encode(seed.version)
            assert _probe(fuzz_broker.bootstrap, seed.header + body) in ("answered", "closed")
            sent += 1
    assert sent >= len(INTER_BROKER)
    assert_healthy(fuzz_broker, FUZZ_RSS_MB, "forged")
