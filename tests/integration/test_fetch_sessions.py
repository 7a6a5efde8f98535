"""Incremental fetch sessions (KIP-227) against the real broker: raw requests and kafka-python's session handler."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    FetchRequest,
    FetchResponse,
    ProduceRequest,
    ProduceResponse,
)
from pybroker.records.record import RecordInput, build_batch
from tests.integration.test_bad_input import WireClient
from tests.integration.test_kafka_python import create_topic


class _SessionClient(WireClient):
    """Sends Fetch requests of one version for one topic, named the way that version names topics."""

    def __init__(self, bootstrap: str, topic: str, version: int):
        super().__init__(bootstrap)
        self.topic, self.version = topic, version
        created = self.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=topic, num_partitions=2, replication_factor=1)]), 7, CreateTopicsResponse)
        assert created.topics[0].error_code == ErrorCode.NONE
        self.topic_id = created.topics[0].topic_id

    def produce(self, partition: int, count: int) -> None:
        batch = build_batch([RecordInput(b"k", b"v%d" % i) for i in range(count)])
        response = self.request(ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
            name=self.topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=batch)])]),
            9, ProduceResponse)
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE

    def fetch(self, session_id: int, epoch: int, offsets: dict[int, int]) -> FetchResponse:
        topics = [FetchRequest.FetchTopic(topic=self.topic, topic_id=self.topic_id, partitions=[
            FetchRequest.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
            for p, o in offsets.items()])] if offsets else []
        request = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=session_id,
                               session_epoch=epoch, topics=topics)
        return self.request(request, self.version, FetchResponse)


def _partitions(response: FetchResponse) -> dict[int, FetchResponse.PartitionData]:
    return {p.partition_index: p for topic in response.responses for p in topic.partitions}


@pytest.mark.parametrize("version", [12, 17])  # topics by name, by id
def test_incremental_fetch_returns_only_what_changed(shared_broker, version):
    client = _SessionClient(shared_broker.bootstrap, f"sessions-raw-v{version}", version)
    try:
        client.produce(0, 3)
        full = client.fetch(0, 0, {0: 3, 1: 0})
        assert full.error_code == ErrorCode.NONE and full.session_id != 0
        assert sorted(_partitions(full)) == [0, 1]

        assert client.fetch(full.session_id, 1, {}).responses == []

        client.produce(1, 2)
        changed = _partitions(client.fetch(full.session_id, 2, {}))
        assert list(changed) == [1] and changed[1].high_watermark == 2 and len(changed[1].records) > 0

        assert client.fetch(full.session_id, 2, {}).error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        assert client.fetch(full.session_id + 1, 3, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        closed = client.fetch(full.session_id, -1, {0: 0})
        assert closed.session_id == 0 and sorted(_partitions(closed)) == [0]
        assert client.fetch(full.session_id, 3, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    finally:
        client.close()


def test_kafka_python_reads_every_message_once_in_order_through_a_session(shared_broker):
    topic, partitions, rounds, per_round = "sessions-kafka-python", 4, 3, 400
    create_topic(shared_broker.bootstrap, topic, partitions)
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, batch_size=256)
    consumer = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap, group_id=None, enable_auto_commit=False,
                             max_partition_fetch_bytes=512, fetch_max_wait_ms=100)
    received: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    sent: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    try:
        for round_index in range(rounds):  # later rounds arrive while the session is established and idle
            for i in range(per_round):
                value = b"%d-%d" % (round_index, i)
                producer.send(topic, value=value, partition=i % partitions)
                sent[i % partitions].append(value)
            producer.flush(30)
            if round_index == 0:
                consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
                consumer.seek_to_beginning()
            while sum(map(len, received.values())) < (round_index + 1) * per_round:
                for tp, records in consumer.poll(timeout_ms=10_000).items():
                    received[tp.partition] += [r.value for r in records]
        assert received == sent
        session = next(iter(consumer._fetcher._session_handlers.values())).next_metadata
        assert session.session_id != 0 and session.epoch > rounds  # every round was served by this one session
    finally:
        consumer.close()
        producer.close()
