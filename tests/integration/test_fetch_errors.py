"""Fetch answers a partition-level error code where Kafka does, and keeps the connection open.

A topic whose first segments retention deleted (tiny segment.bytes and retention.bytes, retention
checked every 100 ms) is fetched below its log start: the partition answers OFFSET_OUT_OF_RANGE
with high watermark, last stable offset and log start all -1 (Kafka's ReplicaManager answers an
out-of-range read with UnifiedLog.UnknownOffset everywhere), and consumers configured with
auto.offset.reset=earliest move to the log start.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CkTopicPartition

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    FetchRequest,
    FetchResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProduceRequest,
    ProduceResponse,
)
from pybroker.records.record import RecordInput, build_batch
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient

TOPIC = "retained"
BATCHES = 12
EARLIEST = -2
TOPIC_RESOURCE = 2


@pytest.fixture(scope="module")
def retention_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("broker"),
                            {"log.retention.check.interval.ms": "100"}).start()
    yield process
    process.kill()


@pytest.fixture(scope="module")
def log_start(retention_broker: BrokerProcess) -> int:
    """Fill TOPIC with one-batch segments, then limit its size and wait until retention deleted the first ones."""
    client = WireClient(retention_broker.bootstrap)
    try:
        created = client.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=TOPIC, num_partitions=1, replication_factor=1, configs=[
                CreateTopicsRequest.CreatableTopicConfig(name="segment.bytes", value="100")])]),
            7, CreateTopicsResponse)
        assert created.topics[0].error_code == ErrorCode.NONE
        for i in range(BATCHES):
            batch = build_batch([RecordInput(b"k", b"value-%03d" % i)])
            produced = client.request(ProduceRequest(acks=1, timeout_ms=5000, topic_data=[
                ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
                    ProduceRequest.PartitionProduceData(index=0, records=batch)])]), 9, ProduceResponse)
            assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        # Retention starts only now, so its first pass deletes all it ever will: the log start is then final.
        limit = IncrementalAlterConfigsRequest.AlterableConfig(name="retention.bytes", config_operation=0, value="300")
        altered = client.request(IncrementalAlterConfigsRequest(resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=TOPIC,
                                                                configs=[limit])]), 1, IncrementalAlterConfigsResponse)
        assert altered.responses[0].error_code == ErrorCode.NONE
        return eventually(lambda: _earliest(client), "retention to advance the log start", timeout=20)
    finally:
        client.close()


def _earliest(client: WireClient) -> int:
    response = client.request(ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=TOPIC, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=EARLIEST)])]),
        7, ListOffsetsResponse)
    partition = response.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.NONE
    return partition.offset


def _fetch(client: WireClient, offset: int, partition_max_bytes: int = 1 << 20,
           max_bytes: int = 1 << 20, replica_id: int = -1) -> FetchResponse.PartitionData:
    request = FetchRequest(replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, topics=[
        FetchRequest.FetchTopic(topic=TOPIC, partitions=[FetchRequest.FetchPartition(
            partition=0, fetch_offset=offset, partition_max_bytes=partition_max_bytes)])])
    return client.request(request, 12, FetchResponse).responses[0].partitions[0]


def test_fetch_below_the_log_start_answers_offset_out_of_range_like_kafka(retention_broker, log_start):
    client = WireClient(retention_broker.bootstrap)
    try:
        for offset in (0, log_start - 1, BATCHES + 1):
            answer = _fetch(client, offset)
            assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE, offset
            assert (answer.high_watermark, answer.last_stable_offset, answer.log_start_offset) == (-1, -1, -1)
            assert len(answer.records) == 0
        stranger = _fetch(client, 0, replica_id=1)  # not a replica: refused before any read, as in Kafka
        assert stranger.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert (stranger.high_watermark, stranger.log_start_offset) == (-1, -1)
        readable = _fetch(client, log_start)  # the same connection still serves
        assert readable.error_code == ErrorCode.NONE and readable.log_start_offset == log_start
        assert readable.high_watermark == BATCHES and len(readable.records) > 0
    finally:
        client.close()
    assert "Traceback" not in retention_broker.log_text()


def test_negative_partition_max_bytes_answers_unknown_server_error_like_kafka(retention_broker, log_start):
    """Kafka's LogSegment.read rejects a negative size (IllegalArgumentException) and ReplicaManager
    answers that partition UNKNOWN_SERVER_ERROR; the connection stays open and no traceback is logged."""
    client = WireClient(retention_broker.bootstrap)
    try:
        answer = _fetch(client, log_start, partition_max_bytes=-1)
        assert answer.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
        assert (answer.high_watermark, answer.log_start_offset, len(answer.records)) == (-1, -1, 0)
        assert _fetch(client, log_start, max_bytes=-1).error_code == ErrorCode.UNKNOWN_SERVER_ERROR
        assert _fetch(client, log_start).error_code == ErrorCode.NONE
    finally:
        client.close()
    assert "Traceback" not in retention_broker.log_text()


def test_confluent_kafka_resets_to_the_log_start_when_its_offset_was_deleted(retention_broker, log_start):
    consumer = Consumer({"bootstrap.servers": retention_broker.bootstrap, "group.id": "ck-reset",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([CkTopicPartition(TOPIC, 0, 0)])
        offsets: list[int] = []
        deadline = time.monotonic() + 20
        while len(offsets) < BATCHES - log_start and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                offsets.append(message.offset())
        assert offsets == list(range(log_start, BATCHES))
    finally:
        consumer.close()
    assert "Traceback" not in retention_broker.log_text()


def test_aiokafka_resets_to_the_log_start_when_its_offset_was_deleted(retention_broker, log_start):
    async def consume() -> list[int]:
        consumer = AIOKafkaConsumer(bootstrap_servers=retention_broker.bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            partition = AioTopicPartition(TOPIC, 0)
            consumer.assign([partition])
            consumer.seek(partition, 0)
            offsets: list[int] = []
            while len(offsets) < BATCHES - log_start:
                offsets.append((await asyncio.wait_for(consumer.getone(), 20)).offset)
            return offsets
        finally:
            await consumer.stop()

    assert asyncio.run(consume()) == list(range(log_start, BATCHES))
    assert "Traceback" not in retention_broker.log_text()
