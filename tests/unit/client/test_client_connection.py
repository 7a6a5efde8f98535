"""Connection against a scripted in-process broker: version fallback, timeouts, lost connections."""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine

import pytest

from pybroker.client import (BrokerAddress, Connection, KafkaClient, KafkaConnectionError, KafkaTimeoutError,
                             parse_bootstrap)
from pybroker.protocol.frame import FrameDecoder, decode_request_header, encode_response
from pybroker.protocol.messages import ApiVersionsResponse, MetadataRequest, MetadataResponse


class ScriptedBroker:
    """Answers ApiVersions up to `max_api_versions` (older ones refused the KIP-511 way) and Metadata."""

    def __init__(self, max_api_versions: int, answer_metadata: bool = True) -> None:
        self.max_api_versions = max_api_versions
        self.answer_metadata = answer_metadata
        self.api_versions_seen: list[int] = []

    def body(self, key: int, version: int) -> tuple[int, bytes] | None:
        if key == 18:
            self.api_versions_seen.append(version)
            keys = [ApiVersionsResponse.ApiVersion(18, 0, self.max_api_versions),
                    ApiVersionsResponse.ApiVersion(3, 1, 9)]
            if version > self.max_api_versions:
                return 0, ApiVersionsResponse(error_code=35, api_keys=keys[:1]).encode(0)
            return version, ApiVersionsResponse(error_code=0, api_keys=keys).encode(version)
        if key == 3 and self.answer_metadata:
            return version, MetadataResponse(cluster_id="scripted").encode(version)
        return None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder(1 << 20)
        while data := await reader.read(65536):
            for frame in decoder.feed(data):
                header, _ = decode_request_header(frame)
                answer = self.body(header.request_api_key, header.request_api_version)
                if answer is not None:
                    writer.write(encode_response(header.correlation_id, header.request_api_key, *answer))
        writer.close()


def run(scenario: Coroutine[Any, Any, None]) -> None:
    asyncio.run(scenario)


def test_negotiates_with_v3_and_picks_the_lower_maximum() -> None:
    async def scenario() -> None:
        broker = ScriptedBroker(max_api_versions=4)
        server = await asyncio.start_server(broker.serve, "127.0.0.1", 0)
        async with server:
            connection = await Connection.open("127.0.0.1", server.sockets[0].getsockname()[1], timeout=5)
            assert broker.api_versions_seen == [3]
            assert connection.versions.chosen[3] == 9
            response = await connection.send(MetadataRequest(topics=[]), MetadataResponse)
            assert response.cluster_id == "scripted"
            await connection.close()

    run(scenario())


def test_falls_back_when_the_broker_refuses_api_versions_v3() -> None:
    async def scenario() -> None:
        broker = ScriptedBroker(max_api_versions=0)
        server = await asyncio.start_server(broker.serve, "127.0.0.1", 0)
        async with server:
            connection = await Connection.open("127.0.0.1", server.sockets[0].getsockname()[1], timeout=5)
            assert broker.api_versions_seen == [3, 0]
            assert connection.versions.chosen == {18: 0, 3: 9}
            await connection.close()

    run(scenario())


def test_unanswered_request_times_out_with_a_clear_error() -> None:
    async def scenario() -> None:
        broker = ScriptedBroker(max_api_versions=4, answer_metadata=False)
        server = await asyncio.start_server(broker.serve, "127.0.0.1", 0)
        async with server:
            connection = await Connection.open("127.0.0.1", server.sockets[0].getsockname()[1], timeout=5)
            with pytest.raises(KafkaTimeoutError, match=r"Timed out after 200 ms waiting for a response to "
                                                        r"Metadata v9 from 127\.0\.0\.1:\d+"):
                await connection.send(MetadataRequest(topics=[]), MetadataResponse, timeout=0.2)
            await connection.close()

    run(scenario())


def test_requests_fail_once_the_broker_closes_the_connection() -> None:
    async def scenario() -> None:
        broker = ScriptedBroker(max_api_versions=4, answer_metadata=False)
        server = await asyncio.start_server(broker.serve, "127.0.0.1", 0)
        async with server:
            connection = await Connection.open("127.0.0.1", server.sockets[0].getsockname()[1], timeout=5)
            connection._writer.transport.abort()  # what a broker crash looks like from here
            with pytest.raises(KafkaConnectionError):
                await connection.send(MetadataRequest(topics=[]), MetadataResponse, timeout=5)
            await connection.close()

    run(scenario())


def test_unreachable_bootstrap_gives_up_at_the_timeout() -> None:
    async def scenario() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        client = KafkaClient(f"127.0.0.1:{port}", timeout=0.3)
        with pytest.raises(KafkaTimeoutError, match=f"Timed out after 300 ms .*127.0.0.1:{port}: Connection refused"):
            await client.connect()

    run(scenario())


def test_parse_bootstrap_rejects_entries_without_a_port() -> None:
    assert parse_bootstrap("a:1, b:2") == [BrokerAddress("a", 1), BrokerAddress("b", 2)]
    assert parse_bootstrap("[::1]:9092") == [BrokerAddress("::1", 9092)]
    with pytest.raises(ValueError, match="Invalid url in bootstrap.servers: nohost"):
        parse_bootstrap("nohost")
