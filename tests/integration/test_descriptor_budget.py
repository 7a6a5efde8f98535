"""A broker whose open-files limit (RLIMIT_NOFILE) is small, as a `ulimit -n` sets it.

Creating more partitions than the limit can hold is refused, topic by topic, with POLICY_VIOLATION and
a message naming the limit, before any file of the refused topic is opened: no topic is left half
created, the log dir stays online, the broker keeps accepting connections and the topics it already
had keep serving. Connections past the limit are accepted and closed at once (shed, with a log line)
instead of waiting in the listen backlog of a broker that can no longer accept anything.
"""

from __future__ import annotations

import selectors
import socket
import time
from pathlib import Path

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from pybroker.records.record import RecordInput, build_batch
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient

OPEN_FILES = 400  # RLIMIT_NOFILE of the broker child, soft and hard: it cannot raise it


def create_topics(client: WireClient, topics: dict[str, int]) -> CreateTopicsResponse:
    request = CreateTopicsRequest(timeout_ms=60000, topics=[
        CreateTopicsRequest.CreatableTopic(name=name, num_partitions=count, replication_factor=1)
        for name, count in topics.items()])
    response: CreateTopicsResponse = client.request(request, 7, CreateTopicsResponse)
    return response


def produce(client: WireClient, topic: str, partition: int, value: bytes) -> int:
    records = bytes(build_batch([RecordInput(b"k", value)]))
    request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=records)])])
    return int(client.request(request, 9, ProduceResponse).responses[0].partition_responses[0].error_code)


def fetch(client: WireClient, topic: str, partition: int) -> tuple[int, bytes]:
    request = FetchRequest(max_wait_ms=0, min_bytes=0, topics=[FetchRequest.FetchTopic(
        topic=topic, partitions=[FetchRequest.FetchPartition(partition=partition, fetch_offset=0,
                                                              partition_max_bytes=65536)])])
    data = client.request(request, 11, FetchResponse).responses[0].partitions[0]
    return data.error_code, bytes(data.records or b"")


def partition_counts(client: WireClient) -> dict[str, int]:
    response = client.request(MetadataRequest(topics=None), 9, MetadataResponse)
    return {t.name: len(t.partitions) for t in response.topics if t.error_code == 0}


def log_dir_errors(client: WireClient) -> list[int]:
    response = client.request(DescribeLogDirsRequest(topics=None), 4, DescribeLogDirsResponse)
    return [r.error_code for r in response.results]


def connect(broker: BrokerProcess, timeout: float = 10.0) -> WireClient:
    """A connection the broker answers (a Metadata request), once the connections closed before this call
    have given their descriptors back."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            client = WireClient(broker.bootstrap)
            partition_counts(client)
            return client
        except (ConnectionError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def assert_serving(broker: BrokerProcess, topic: str, value: bytes) -> None:
    """A new connection is accepted and served: the topic created first still takes and returns records."""
    client = connect(broker)
    try:
        assert produce(client, topic, 0, value) == 0
        error, records = fetch(client, topic, 0)
        assert error == 0 and value in records
        assert log_dir_errors(client) == [0]
    finally:
        client.close()


def test_creating_partitions_past_the_open_files_limit_is_refused_cleanly(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, open_files=OPEN_FILES).start()
    try:
        client = WireClient(broker.bootstrap)
        assert create_topics(client, {"before": 1}).topics[0].error_code == 0
        assert produce(client, "before", 0, b"first") == 0

        wanted = {f"many-{i:02d}": 50 for i in range(20)}  # 1,000 partitions in one request
        results = {t.name: t for t in create_topics(client, wanted).topics}
        created = sorted(name for name, t in results.items() if t.error_code == 0)
        refused = sorted(name for name, t in results.items() if t.error_code == ErrorCode.POLICY_VIOLATION)
        assert created and refused and len(created) + len(refused) == len(wanted), \
            {name: (t.error_code, t.error_message) for name, t in results.items()}
        message = results[refused[0]].error_message or ""
        assert f"{OPEN_FILES}" in message and "open files" in message, message

        counts = partition_counts(client)
        assert {name: counts[name] for name in created} == {name: 50 for name in created}
        assert not set(refused) & set(counts), "a refused topic must not exist, not even in part"
        added = client.request(CreatePartitionsRequest(timeout_ms=60000, topics=[
            CreatePartitionsRequest.CreatePartitionsTopic(name="before", count=1000, assignments=None)]),
            3, CreatePartitionsResponse).results[0]
        assert added.error_code == ErrorCode.POLICY_VIOLATION and f"{OPEN_FILES}" in (added.error_message or "")
        assert partition_counts(client)["before"] == 1
        client.close()

        assert_serving(broker, "before", b"second")
        client = WireClient(broker.bootstrap)
        assert produce(client, created[-1], 49, b"in a created topic") == 0
        client.close()
        assert "Stopping serving logs" not in broker.log_text()
        assert "Too many open files" not in broker.log_text()
    finally:
        broker.kill()


def test_connections_past_the_open_files_limit_are_shed_and_the_listener_keeps_accepting(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, open_files=OPEN_FILES).start()
    flood: list[socket.socket] = []
    try:
        client = WireClient(broker.bootstrap)
        assert create_topics(client, {"before": 1}).topics[0].error_code == 0
        client.close()
        shed: list[socket.socket] = []
        deadline = time.monotonic() + 30
        with selectors.DefaultSelector() as selector:
            while not shed and time.monotonic() < deadline:  # more connections than the broker has descriptors
                try:
                    for _ in range(50):
                        flood.append(socket.create_connection(("127.0.0.1", broker.port), timeout=5))
                        selector.register(flood[-1], selectors.EVENT_READ)
                except TimeoutError:
                    break  # the listen backlog is full: the broker stopped accepting altogether
                readable = [key.fileobj for key, _ in selector.select(0.5)]
                shed = [s for s in readable if isinstance(s, socket.socket) and s.recv(1) == b""]
        assert shed, f"no connection was shed with {len(flood)} open"
        assert broker.wait_for_log(r"Shedding connection from 127\.0\.0\.1.*open files")
        for sock in flood:
            sock.close()
        flood.clear()
        assert_serving(broker, "before", b"after the flood")
        assert "Stopping serving logs" not in broker.log_text()
    finally:
        for sock in flood:
            sock.close()
        broker.kill()
