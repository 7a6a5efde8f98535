"""Garbage on the wire closes only the offending connection; the broker keeps serving everyone else."""

from __future__ import annotations

import socket
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import FrameDecoder, encode_request, response_header_version
from pybroker.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
    RequestHeader,
)
from pybroker.records.record import RecordInput, build_batch


class WireClient:
    """A bare socket speaking our own codecs, to send exactly the bytes a test wants."""

    def __init__(self, bootstrap: str):
        host, port = bootstrap.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.decoder = FrameDecoder(100 * 1024 * 1024)
        self.correlation = 0
        self.frames: list[memoryview] = []

    def request(self, message, version: int, response_class):
        self.correlation += 1
        header = RequestHeader(request_api_key=message.API_KEY, request_api_version=version,
                               correlation_id=self.correlation, client_id="wire-test")
        self.sock.sendall(encode_request(header, message, version))
        frame = self.read_frame()
        body_offset = 4 + (1 if response_header_version(message.API_KEY, version) == 1 else 0)
        assert struct.unpack_from(">i", frame, 0)[0] == self.correlation
        return response_class.decode(frame[body_offset:], version)

    def read_frame(self) -> memoryview:
        while not self.frames:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by broker")
            self.frames.extend(self.decoder.feed(data))
        return self.frames.pop(0)

    def is_closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, socket.timeout):
            return True

    def close(self) -> None:
        self.sock.close()


def metadata_ok(bootstrap: str) -> bool:
    client = WireClient(bootstrap)
    try:
        response = client.request(MetadataRequest(topics=[]), 12, MetadataResponse)
        return len(response.brokers) == 1
    finally:
        client.close()


def test_api_versions_at_an_unknown_version_gets_a_v0_unsupported_answer(shared_broker):
    client = WireClient(shared_broker.bootstrap)
    header = RequestHeader(request_api_key=18, request_api_version=99, correlation_id=5, client_id="x")
    frame = bytearray(encode_request(header, ApiVersionsRequest(), 3))
    frame[6:8] = struct.pack(">h", 99)  # a version from the future, past what encode_request would write
    client.sock.sendall(bytes(frame))
    frame = client.read_frame()
    response = ApiVersionsResponse.decode(frame[4:], 0)
    assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [(18, 0, 4)]
    client.close()


def test_unknown_api_key_closes_only_that_connection(shared_broker):
    client = WireClient(shared_broker.bootstrap)
    client.sock.sendall(struct.pack(">ihhih", 10, 999, 0, 1, -1))
    assert client.is_closed_by_peer()
    assert metadata_ok(shared_broker.bootstrap)


def test_oversized_frame_is_refused_before_it_is_read(shared_broker):
    client = WireClient(shared_broker.bootstrap)
    client.sock.sendall(struct.pack(">i", 2**31 - 1) + b"\x00" * 100)
    assert client.is_closed_by_peer()
    assert metadata_ok(shared_broker.bootstrap)


def test_corrupt_batch_and_oversized_batch_get_kafka_error_codes(shared_broker):
    client = WireClient(shared_broker.bootstrap)
    created = client.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name="bad-input", num_partitions=1, replication_factor=1,
        configs=[CreateTopicsRequest.CreatableTopicConfig(name="max.message.bytes", value="2000")])]),
        7, CreateTopicsResponse)
    assert created.topics[0].error_code == 0
    good = bytearray(build_batch([RecordInput(b"k", b"v" * 100)]))
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    too_large = build_batch([RecordInput(b"k", bytes(range(256)) * 20)])

    def produce(records: bytes, topic: str = "bad-input") -> int:
        request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
            name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)])])
        response = client.request(request, 9, ProduceResponse)
        return response.responses[0].partition_responses[0].error_code

    assert produce(bytes(corrupt)) == ErrorCode.CORRUPT_MESSAGE
    assert produce(too_large) == ErrorCode.MESSAGE_TOO_LARGE
    assert produce(bytes(good), topic="no-such-topic") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(bytes(good)) == ErrorCode.NONE
    client.close()


def test_invalid_topic_requests_get_kafka_error_codes(shared_broker):
    client = WireClient(shared_broker.bootstrap)

    def create(name: str, partitions: int = 1, factor: int = 1, configs: dict | None = None) -> int:
        topic = CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=factor,
            configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])
        return client.request(CreateTopicsRequest(topics=[topic]), 7, CreateTopicsResponse).topics[0].error_code

    assert create("bad name!") == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert create("fine", partitions=0) == ErrorCode.INVALID_PARTITIONS
    assert create("fine", factor=3) == ErrorCode.INVALID_REPLICATION_FACTOR
    assert create("fine", configs={"retention.ms": "soon"}) == ErrorCode.INVALID_CONFIG
    assert create("fine", configs={"no.such.config": "1"}) == ErrorCode.INVALID_CONFIG
    assert create("fine") == ErrorCode.NONE
    assert create("fine") == ErrorCode.TOPIC_ALREADY_EXISTS
    client.close()


def test_null_topic_configs_are_refused_all_named_as_kafka_does(shared_broker):
    """Kafka's ZkAdminManager names every null-valued config in one INVALID_CONFIG, before creating."""
    client = WireClient(shared_broker.bootstrap)
    nulls = [CreateTopicsRequest.CreatableTopicConfig(name=k, value=None) for k in ("retention.ms", "cleanup.policy")]
    topic = CreateTopicsRequest.CreatableTopic(name="null-configs", num_partitions=1, replication_factor=1,
                                               configs=nulls)
    [result] = client.request(CreateTopicsRequest(topics=[topic]), 7, CreateTopicsResponse).topics
    assert (result.error_code, result.error_message) == (
        ErrorCode.INVALID_CONFIG, "Null value not supported for topic configs: retention.ms,cleanup.policy")
    client.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=st.one_of(
    st.binary(max_size=300),
    st.builds(lambda key, version, body: struct.pack(">ihhi", len(body) + 8, key, version, 1) + body,
              st.integers(-5, 100), st.integers(-2, 20), st.binary(max_size=200)),
))
def test_random_frames_never_take_the_broker_down(shared_broker, payload):
    client = WireClient(shared_broker.bootstrap)
    client.sock.settimeout(0.3)
    try:
        client.sock.sendall(payload)
        try:
            client.sock.recv(65536)
        except (socket.timeout, ConnectionResetError):
            pass
    finally:
        client.close()
    assert metadata_ok(shared_broker.bootstrap)
