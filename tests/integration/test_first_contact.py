"""What a newcomer meets in the broker's log: a client too old for the served versions is answered as Kafka
answers it and named once, with its client id, the API and the versions served; a broker reachable from the
network without authentication says so once."""

from __future__ import annotations

import itertools
import re
import struct
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaError

from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import encode_request
from pybroker.protocol.messages import ApiVersionsRequest, ApiVersionsResponse, RequestHeader
from pybroker.server.handlers import ALL_HANDLERS
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient, metadata_ok

SERVED = {handler.api_key: (handler.min_version, handler.max_version) for handler in ALL_HANDLERS}


def warnings_about(broker: BrokerProcess, client_id: str) -> list[str]:
    return [line for line in broker.log_lines if " WARN " in line and f"Client {client_id!r}" in line]


def future_api_versions(bootstrap: str, client_id: str) -> ApiVersionsResponse:
    client = WireClient(bootstrap)
    header = RequestHeader(request_api_key=ApiKey.API_VERSIONS, request_api_version=99, correlation_id=7,
                           client_id=client_id)
    frame = bytearray(encode_request(header, ApiVersionsRequest(), 3))
    frame[6:8] = struct.pack(">h", 99)
    client.sock.sendall(bytes(frame))
    try:
        return ApiVersionsResponse.decode(client.read_frame()[4:], 0)
    finally:
        client.close()


_markers = itertools.count()


def logged_so_far(broker: BrokerProcess) -> None:
    """Returns once every line the broker logged until now has been read: a marker client's warning, logged
    after them, is in the lines."""
    marker = f"log-marker-{next(_markers)}"
    future_api_versions(broker.bootstrap, marker)
    eventually(lambda: warnings_about(broker, marker), "the marker's warning to be logged", timeout=10, interval=0.02)


def test_a_produce_at_an_unsupported_version_closes_the_connection_and_names_the_client_once(
        shared_broker: BrokerProcess) -> None:
    """kafka-python pinned to Kafka 0.10.0 sends Produce v2, which Kafka 4 (and pybroker) no longer serve."""
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, api_version=(0, 10, 0),
                             client_id="legacy-app", retries=2, retry_backoff_ms=50, request_timeout_ms=3000,
                             max_block_ms=5000)
    try:
        with pytest.raises(KafkaError):
            producer.send("legacy", b"v").get(timeout=10)
    finally:
        producer.close(timeout=5)
    low, high = SERVED[ApiKey.PRODUCE]
    logged_so_far(shared_broker)
    [line] = warnings_about(shared_broker, "legacy-app")  # once, though the client retried
    assert re.search(rf"sent Produce v[0-2], which this broker does not serve \(it serves Produce v{low} to "
                     rf"v{high}\): closing the connection", line), line
    assert metadata_ok(shared_broker.bootstrap)


def test_api_versions_from_the_future_is_answered_with_the_range_and_logged_once(
        shared_broker: BrokerProcess) -> None:
    for _ in range(2):
        response = future_api_versions(shared_broker.bootstrap, "future-app")
        assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == \
            [(ApiKey.API_VERSIONS, *SERVED[ApiKey.API_VERSIONS])]
    logged_so_far(shared_broker)
    [line] = warnings_about(shared_broker, "future-app")
    low, high = SERVED[ApiKey.API_VERSIONS]
    assert f"sent ApiVersions v99, which this broker does not serve (it serves ApiVersions v{low} to v{high}): " \
           "answered UNSUPPORTED_VERSION" in line


def test_a_broker_open_to_the_network_without_authentication_warns_once(tmp_path: Path) -> None:
    exposed = BrokerProcess(tmp_path / "exposed", {"listeners": "PLAINTEXT://0.0.0.0:0"})
    (tmp_path / "exposed").mkdir()
    exposed.start()
    try:
        warned = [line for line in exposed.log_lines if "without authentication" in line]
        assert len(warned) == 1 and " WARN " in warned[0] and f"PLAINTEXT://0.0.0.0:{exposed.port}" in warned[0], warned
    finally:
        exposed.kill()


def test_a_loopback_broker_does_not_warn(shared_broker: BrokerProcess) -> None:
    assert not [line for line in shared_broker.log_lines if "without authentication" in line]
