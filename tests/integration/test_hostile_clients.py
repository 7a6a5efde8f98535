"""One misbehaving client must neither exhaust the broker's memory nor stall the other clients.

Each test runs the real broker process, attacks it from raw sockets, watches its resident memory
(/proc/<pid>/status VmRSS, VmHWM) while the attack lasts, and checks throughout that a fresh client
still gets an ApiVersions answer within a second and that a well-behaved client round-trips data.
"""

from __future__ import annotations

import re
import socket
import struct
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator

import pytest

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import encode_request
from pybroker.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
    RequestHeader,
)
from pybroker.records.record import RecordInput, build_batch
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient

MB = 1 << 20
ANSWER_WITHIN_S = 1.0


def memory_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process, in MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss, hwm = (int(re.search(rf"^{key}:\s+(\d+) kB", status, re.M).group(1)) for key in ("VmRSS", "VmHWM"))
    return rss / 1024, hwm / 1024


def api_versions_latency(bootstrap: str) -> float:
    """Seconds a new connection waits for its ApiVersions answer (infinite past 5 s)."""
    started = time.monotonic()
    client = WireClient(bootstrap)
    client.sock.settimeout(5)
    try:
        assert client.request(ApiVersionsRequest(), 3, ApiVersionsResponse).error_code == ErrorCode.NONE
    except TimeoutError:
        return float("inf")
    finally:
        client.close()
    return time.monotonic() - started


def create_topic(client: WireClient, name: str) -> None:
    created = client.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1)]), 7, CreateTopicsResponse)
    assert created.topics[0].error_code == ErrorCode.NONE


def produce(client: WireClient, topic: str, records: list[RecordInput]) -> int:
    """Append one batch; return its base offset."""
    response = client.request(ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=build_batch(records))])]),
        9, ProduceResponse)
    partition = response.responses[0].partition_responses[0]
    assert partition.error_code == ErrorCode.NONE
    return partition.base_offset


def fetch_request(topic: str, offset: int, max_bytes: int) -> FetchRequest:
    return FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, topics=[FetchRequest.FetchTopic(
        topic=topic, partitions=[FetchRequest.FetchPartition(partition=0, fetch_offset=offset,
                                                             partition_max_bytes=max_bytes)])])


def round_trip(bootstrap: str, topic: str, tag: int) -> None:
    """A well-behaved client produces a record and fetches it back."""
    client = WireClient(bootstrap)
    client.sock.settimeout(5)
    try:
        value = b"round-trip-%d" % tag
        offset = produce(client, topic, [RecordInput(b"k", value)])
        partition = client.request(fetch_request(topic, offset, MB), 12, FetchResponse).responses[0].partitions[0]
        assert partition.error_code == ErrorCode.NONE
        assert value in bytes(partition.records)
    finally:
        client.close()


def raw_frame(message: FetchRequest | ApiVersionsRequest, version: int, correlation_id: int) -> bytes:
    header = RequestHeader(request_api_key=message.API_KEY, request_api_version=version,
                           correlation_id=correlation_id, client_id="hostile")
    return encode_request(header, message, version)


def non_reading_socket(bootstrap: str) -> socket.socket:
    """A connection whose owner never reads: a small receive buffer fills after a few KiB."""
    host, port = bootstrap.split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    return sock


def watch(broker: BrokerProcess, seconds: float, rss_bound_mb: float,
          checks: list[Callable[[], None]] = ()) -> float:
    """For `seconds`: keep the broker's RSS under the bound (stop at once past it), and answer
    ApiVersions within a second; run `checks` once each along the way. Returns the peak RSS."""
    assert broker.process is not None
    pid = broker.process.pid
    deadline = time.monotonic() + seconds
    peak = 0.0
    pending = list(checks)
    while time.monotonic() < deadline:
        rss, hwm = memory_mb(pid)
        peak = max(peak, hwm)
        assert hwm < rss_bound_mb, f"broker RSS high-water {hwm:.0f} MiB >= bound {rss_bound_mb} MiB"
        latency = api_versions_latency(broker.bootstrap)
        assert latency < ANSWER_WITHIN_S, f"ApiVersions took {latency:.2f} s (RSS {memory_mb(pid)[1]:.0f} MiB)"
        if pending:
            pending.pop(0)()
        time.sleep(0.05)
    return peak


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    started: list[BrokerProcess] = []

    def start(**overrides: str) -> BrokerProcess:
        broker = BrokerProcess(tmp_path / f"b{len(started)}", {**overrides})
        broker.data_dir.mkdir()
        started.append(broker.start())
        return broker

    yield start
    for broker in started:
        broker.kill()


def closed_by_broker(sock: socket.socket, timeout: float) -> bool:
    """True once the broker closes `sock` (EOF or reset), within `timeout` seconds."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


IDLE_CONNECTIONS = 5000  # the figure; the test process and the broker each hold that many sockets
RSS_BOUND_MB = 400  # the broker's own footprint (~100 MiB) plus the responses' bounded buffers


def test_clients_that_never_read_their_fetch_responses_cannot_grow_memory(start_broker) -> None:
    broker = start_broker(**{"metrics.port": "0"})
    client = WireClient(broker.bootstrap)
    create_topic(client, "big")
    create_topic(client, "small")
    for n in range(8):  # an 8 MiB log
        produce(client, "big", [RecordInput(b"k%d" % n, bytes([n]) * (MB - 200))])
    client.close()
    attackers = [non_reading_socket(broker.bootstrap) for _ in range(4)]
    for sock in attackers:
        sock.sendall(b"".join(raw_frame(fetch_request("big", 0, 50 * MB), 12, i) for i in range(600)))
    peak = watch(broker, 4.0, RSS_BOUND_MB, [lambda: round_trip(broker.bootstrap, "small", i) for i in range(3)])
    print(f"peak broker RSS with 4 non-reading fetchers: {peak:.0f} MiB")
    for sock in attackers:
        sock.close()


def test_half_received_frames_are_bounded_by_the_memory_pool_and_timed_out(start_broker) -> None:
    frame_size, sent_per_connection, connections = 20 * MB, 18 * MB, 10
    broker = start_broker(**{"socket.request.max.bytes": str(frame_size),
                             "queued.max.request.bytes": str(2 * frame_size),
                             "request.receive.timeout.ms": "1500"})
    client = WireClient(broker.bootstrap)
    create_topic(client, "small")
    client.close()
    assert broker.process is not None
    baseline, _ = memory_mb(broker.process.pid)
    stalled = []
    chunk = struct.pack(">ihhi", frame_size, 0, 4, 1) + bytes(sent_per_connection - 12)
    for _ in range(connections):
        host, port = broker.bootstrap.split(":")
        sock = socket.create_connection((host, int(port)))
        sock.setblocking(False)
        stalled.append((sock, memoryview(chunk)))
    deadline = time.monotonic() + 5
    while any(len(rest) for _, rest in stalled) and time.monotonic() < deadline:
        for index, (sock, rest) in enumerate(stalled):
            try:
                sent = sock.send(rest[:MB])
            except (BlockingIOError, ConnectionError):
                continue
            stalled[index] = (sock, rest[sent:])
    # The pool admits two frames (non-strict, as Kafka's): the others wait in their socket buffers.
    peak = watch(broker, 2.0, baseline + 3 * frame_size / MB + 60,
                 [lambda: round_trip(broker.bootstrap, "small", i) for i in range(2)])
    print(f"broker RSS: {baseline:.0f} MiB before, peak {peak:.0f} MiB with {connections} half-sent frames")
    for sock, _ in stalled:
        sock.setblocking(True)
        assert closed_by_broker(sock, 10.0), "an incomplete request was not timed out"
        sock.close()
    round_trip(broker.bootstrap, "small", 99)


def scrape(broker: BrokerProcess, name: str, limit: str) -> float:
    port = re.search(r"metrics on http://[^:]+:(\d+)/metrics", broker.log_text())
    assert port is not None
    text = urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/metrics", timeout=5).read().decode()
    match = re.search(rf'^{name}{{limit="{re.escape(limit)}"}} (\S+)$', text, re.M)
    assert match is not None, text
    return float(match.group(1))


def test_a_sixth_connection_from_one_ip_is_closed_and_counted(start_broker) -> None:
    broker = start_broker(**{"max.connections.per.ip": "5", "metrics.port": "0"})
    allowed = [WireClient(broker.bootstrap) for _ in range(5)]
    for client in allowed:
        assert client.request(ApiVersionsRequest(), 3, ApiVersionsResponse).error_code == ErrorCode.NONE
    sixth = WireClient(broker.bootstrap)
    assert closed_by_broker(sixth.sock, 5.0)
    assert scrape(broker, "kafka_network_socketserver_refusedconnections_total", "max.connections.per.ip") == 1
    allowed.pop().close()
    deadline = time.monotonic() + 5
    while True:  # the freed slot is given back once the broker has seen the close
        replacement = WireClient(broker.bootstrap)
        replacement.sock.settimeout(1)
        try:
            assert replacement.request(ApiVersionsRequest(), 3, ApiVersionsResponse).error_code == ErrorCode.NONE
            break
        except (ConnectionError, TimeoutError):
            assert time.monotonic() < deadline, "the slot of a closed connection was not given back"
        finally:
            replacement.close()
    for client in allowed:
        client.close()


def test_at_max_connections_the_broker_stops_accepting_until_one_closes(start_broker) -> None:
    broker = start_broker(**{"max.connections": "3"})
    held = [WireClient(broker.bootstrap) for _ in range(3)]
    for client in held:
        assert client.request(ApiVersionsRequest(), 3, ApiVersionsResponse).error_code == ErrorCode.NONE
    waiting = WireClient(broker.bootstrap)  # connected in the listen backlog, not accepted
    waiting.sock.sendall(raw_frame(ApiVersionsRequest(), 3, 1))
    waiting.sock.settimeout(0.5)
    with pytest.raises(TimeoutError):
        waiting.sock.recv(1)
    held.pop().close()
    waiting.sock.settimeout(5)
    assert struct.unpack(">ii", waiting.read_frame()[:4].tobytes() + b"\0\0\0\0")[0] == 1
    for client in held + [waiting]:
        client.close()


def test_idle_connections_are_closed_and_busy_ones_kept(start_broker) -> None:
    broker = start_broker(**{"connections.max.idle.ms": "600", "metrics.port": "0"})
    idle, busy = WireClient(broker.bootstrap), WireClient(broker.bootstrap)
    for client in (idle, busy):
        assert client.request(ApiVersionsRequest(), 3, ApiVersionsResponse).error_code == ErrorCode.NONE
    started = time.monotonic()
    while time.monotonic() - started < 2.0:  # a request every 200 ms keeps a connection open
        assert busy.request(ApiVersionsRequest(), 3, ApiVersionsResponse).error_code == ErrorCode.NONE
        time.sleep(0.2)
    assert closed_by_broker(idle.sock, 0.1)
    assert scrape(broker, "kafka_network_socketserver_expiredconnections_total", "connections.max.idle.ms") >= 1
    for client in (idle, busy):
        client.close()


def test_a_connection_that_never_completes_its_first_request_is_closed(start_broker) -> None:
    broker = start_broker(**{"request.receive.timeout.ms": "500"})
    host, port = broker.bootstrap.split(":")
    silent = socket.create_connection((host, int(port)))
    dripping = socket.create_connection((host, int(port)))
    dripping.sendall(raw_frame(ApiVersionsRequest(), 3, 1)[:6])  # the size prefix and two bytes, then a byte a while
    started = time.monotonic()
    try:
        while time.monotonic() - started < 3.0:
            dripping.sendall(b"\0")
            time.sleep(0.1)
    except ConnectionError:
        pass
    assert time.monotonic() - started < 3.0, "a request dripping in a byte at a time was not timed out"
    assert closed_by_broker(silent, 1.0)
    assert api_versions_latency(broker.bootstrap) < ANSWER_WITHIN_S
    silent.close()
    dripping.close()


def test_five_thousand_idle_connections_cost_little_memory(start_broker) -> None:
    broker = start_broker()
    client = WireClient(broker.bootstrap)
    create_topic(client, "small")
    client.close()
    assert broker.process is not None
    baseline, _ = memory_mb(broker.process.pid)
    host, port = broker.bootstrap.split(":")
    idle = [socket.create_connection((host, int(port))) for _ in range(IDLE_CONNECTIONS)]
    try:
        fds = Path(f"/proc/{broker.process.pid}/fd")
        deadline = time.monotonic() + 30
        while len(list(fds.iterdir())) < IDLE_CONNECTIONS and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(list(fds.iterdir())) >= IDLE_CONNECTIONS, "the broker did not accept every connection"
        peak = watch(broker, 1.0, baseline + 100, [lambda: round_trip(broker.bootstrap, "small", 1)])
        print(f"broker RSS: {baseline:.0f} MiB before, peak {peak:.0f} MiB with {IDLE_CONNECTIONS:,} idle connections")
    finally:
        for sock in idle:
            sock.close()


def test_long_polling_fetches_do_not_hold_request_queue_places(start_broker) -> None:
    """queued.max.requests=2 and four consumers long-polling an empty partition for 60 s: their
    waiting fetches left the request queue (as in Kafka's purgatory), so a Metadata request and a
    produce from other connections are answered at once, and the produce wakes the consumers."""
    broker = start_broker(**{"queued.max.requests": "2"})
    admin = WireClient(broker.bootstrap)
    create_topic(admin, "polled")
    admin.close()
    waiting = FetchRequest(max_wait_ms=60_000, min_bytes=1, max_bytes=MB, topics=[FetchRequest.FetchTopic(
        topic="polled", partitions=[FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=MB)])])
    consumers = [WireClient(broker.bootstrap) for _ in range(4)]
    for index, consumer in enumerate(consumers):
        consumer.sock.sendall(raw_frame(waiting, 12, 100 + index))
    other = WireClient(broker.bootstrap)
    other.sock.settimeout(20)  # the fetches wait 60 s: an answer within 20 s did not wait for them
    try:
        topics = other.request(MetadataRequest(topics=None), 9, MetadataResponse).topics
        assert [t.name for t in topics] == ["polled"]
        produce(other, "polled", [RecordInput(b"k", b"wakes the consumers")])
        for consumer in consumers:
            consumer.sock.settimeout(20)
            frame = consumer.read_frame()
            assert struct.unpack_from(">i", frame, 0)[0] == 100 + consumers.index(consumer)
            answer = FetchResponse.decode(frame[5:], 12)  # v12 answers have a flexible header
            assert b"wakes the consumers" in bytes(answer.responses[0].partitions[0].records)
    finally:
        other.close()
        for consumer in consumers:
            consumer.close()
