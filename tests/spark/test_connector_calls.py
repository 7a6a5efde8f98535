"""The broker serves what Spark's JVM connector sends through kafka-clients 3.9, at that client's versions
(VERSIONS.md): on the driver, admin Metadata v12 and ListOffsets v9; on executors, ListOffsets v9 and a Fetch v17
of an assigned partition by topic id; in the sink, an idempotent acks=all producer (InitProducerId v5, Produce
v11). The Python fallback makes the same calls through librdkafka, at librdkafka's versions."""

from __future__ import annotations

from pybroker.protocol.messages import (FetchRequest, FetchResponse, InitProducerIdRequest, InitProducerIdResponse,
                                        ListOffsetsRequest, ListOffsetsResponse, MetadataRequest, MetadataResponse,
                                        ProduceRequest, ProduceResponse)
from pybroker.records.batch import RecordBatch
from pybroker.records.record import RecordInput, build_batch
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.spark.support import Kafka

TOPIC = "connector-calls"
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


def test_spark_connector_requests_at_java_client_versions(kafka: Kafka, spark_broker: BrokerProcess) -> None:
    kafka.create_topic(TOPIC, partitions=2)
    client = WireClient(spark_broker.bootstrap)

    # Sink: kafka-clients 3.x producers are idempotent with acks=all by default.
    producer = client.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), 5,
                              InitProducerIdResponse)
    assert producer.error_code == 0 and producer.producer_id >= 0
    batch = build_batch([RecordInput(f"k{i}".encode(), f"v{i}".encode()) for i in range(3)],
                        producer_id=producer.producer_id, producer_epoch=producer.producer_epoch, base_sequence=0)
    produced = client.request(ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
            ProduceRequest.PartitionProduceData(index=1, records=batch)])]), 11, ProduceResponse)
    partition = produced.responses[0].partition_responses[0]
    assert (partition.error_code, partition.base_offset) == (0, 0)

    # Driver: partitions and topic ids from Metadata, then earliest and latest offsets.
    metadata = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)],
                                              allow_auto_topic_creation=False), 12, MetadataResponse)
    topic = metadata.topics[0]
    assert topic.error_code == 0 and sorted(p.partition_index for p in topic.partitions) == [0, 1]
    assert (list_offset(client, 1, EARLIEST_TIMESTAMP), list_offset(client, 1, LATEST_TIMESTAMP)) == (0, 3)

    # Executor: an assigned partition, fetched from a planned offset by topic id (Fetch 13+).
    fetched = client.request(FetchRequest(max_wait_ms=500, min_bytes=1, isolation_level=0, topics=[
        FetchRequest.FetchTopic(topic_id=topic.topic_id, partitions=[
            FetchRequest.FetchPartition(partition=1, fetch_offset=1, partition_max_bytes=1 << 20)])]),
        17, FetchResponse)
    data = fetched.responses[0].partitions[0]
    assert (data.error_code, data.high_watermark, data.log_start_offset) == (0, 3, 0)
    first = RecordBatch(bytes(data.records))
    assert (first.base_offset, first.next_offset, first.producer_id) == (0, 3, producer.producer_id)


def list_offset(client: WireClient, partition: int, timestamp: int) -> int:
    response = client.request(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=TOPIC, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, timestamp=timestamp)])]),
        9, ListOffsetsResponse)
    result = response.topics[0].partitions[0]
    assert result.error_code == 0
    return result.offset
