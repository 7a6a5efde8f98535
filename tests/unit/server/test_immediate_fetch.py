"""The dispatcher answers a Fetch that needs no wait in the read callback itself, with no coroutine (the
handler's first step, `ApiHandler.immediate`), and hands the connection a coroutine for a Fetch that long-polls;
either way the answer is the one the handler's coroutine gives. A broker in this process, its dispatcher called as a
connection calls it."""

from __future__ import annotations

import asyncio
import types
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import uvloop

from pybroker.common.config import BrokerConfig
from pybroker.log.file_slice import FileSlice
from pybroker.protocol.api_keys import ApiKey
from pybroker.protocol.frame import decode_response_header, encode_request
from pybroker.protocol.messages import FetchRequest, FetchResponse, ProduceRequest
from pybroker.protocol.messages.request_header import RequestHeader
from pybroker.protocol.primitives import FramePart
from pybroker.records.record import build_batch
from pybroker.replication.errors import ReplicationError
from pybroker.server.broker import Broker
from pybroker.server.context import ConnectionSession
from tests.eventually import eventually_async

TOPIC = "t"
PEER = "127.0.0.1:1"


def _frame(api_key: int, version: int, request: FetchRequest | ProduceRequest) -> memoryview:
    """The request as a connection hands it to the dispatcher: after the size prefix."""
    header = RequestHeader(request_api_key=api_key, request_api_version=version, correlation_id=7, client_id="c")
    return memoryview(encode_request(header, request, version))[4:]


def _fetch(topic_id: uuid.UUID, max_wait_ms: int) -> memoryview:
    return _frame(ApiKey.FETCH, 16, FetchRequest(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, topics=[FetchRequest.FetchTopic(topic_id=topic_id, partitions=[
            FetchRequest.FetchPartition(partition=0, fetch_offset=0, log_start_offset=-1,
                                        partition_max_bytes=1 << 20)])]))


def _partition(parts: list[FramePart]) -> FetchResponse.PartitionData:
    """The one partition of a Fetch v16 answer given as parts (in-memory buffers: records read from the log are
    file ranges, read here)."""
    frame = b"".join(part.read() if isinstance(part, FileSlice) else bytes(part) for part in parts)
    _, offset = decode_response_header(memoryview(frame)[4:], ApiKey.FETCH, 16)
    answer = FetchResponse.decode(memoryview(frame)[4 + offset:], 16)
    assert answer.error_code == 0
    return answer.responses[0].partitions[0]


Scenario = Callable[[Broker, uuid.UUID], Awaitable[None]]


def _run(tmp_path: Path, scenario: Scenario) -> None:
    async def served() -> None:
        broker = Broker(BrokerConfig({"log.dirs": str(tmp_path / "logs"), "listeners": "PLAINTEXT://127.0.0.1:0"}))
        await broker.start()
        try:
            assert broker.metadata is not None
            info = await broker.metadata.create_topic(TOPIC, 1, 1, {})

            def led() -> bool:
                try:
                    broker.replica_manager.leader_partition(TOPIC, 0)
                except ReplicationError:
                    return False
                return True

            await eventually_async(led, "the partition is led here")
            await scenario(broker, info.topic_id)
        finally:
            await broker.stop()

    uvloop.run(served())


def test_a_fetch_that_needs_no_wait_is_answered_without_a_coroutine(tmp_path: Path) -> None:
    async def scenario(broker: Broker, topic_id: uuid.UUID) -> None:
        outcome = broker.dispatcher.dispatch(_fetch(topic_id, 0), PEER, ConnectionSession())
        assert type(outcome) is list, outcome
        partition = _partition(outcome)
        assert (partition.error_code, partition.high_watermark, len(partition.records or b"")) == (0, 0, 0)

    _run(tmp_path, scenario)


def test_a_fetch_that_waits_is_a_coroutine_answered_after_the_produce_it_waited_for(tmp_path: Path) -> None:
    async def scenario(broker: Broker, topic_id: uuid.UUID) -> None:
        outcome = broker.dispatcher.dispatch(_fetch(topic_id, 30_000), PEER, ConnectionSession())
        assert isinstance(outcome, types.CoroutineType), outcome
        waiting = asyncio.ensure_future(outcome)
        await asyncio.sleep(0.05)
        assert not waiting.done()
        produced = broker.dispatcher.dispatch(_frame(ApiKey.PRODUCE, 9, ProduceRequest(
            transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[ProduceRequest.TopicProduceData(
                name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(
                    index=0, records=build_batch([(None, b"x")]))])])), PEER, ConnectionSession())
        if isinstance(produced, types.CoroutineType):
            await produced
        partition = _partition(await asyncio.wait_for(waiting, 10))
        assert partition.high_watermark == 1 and partition.records

    _run(tmp_path, scenario)
