"""A Fetch that names a replica id is a follower's only when that id is a replica of the partition
other than the leader, as Kafka's Partition.followerReplicaOrThrow has it: any other id is answered
NOT_LEADER_OR_FOLLOWER with no records, so a client cannot read past the consumer byte-rate quota
by calling itself a follower, nor add entries to the leader's follower table."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    FetchRequest,
    FetchResponse,
    ProduceRequest,
    ProduceResponse,
)
from pybroker.records.record import RecordInput, build_batch
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient

TOPIC = "quota-bound"
QUOTA = 50 * 1024  # consumer_byte_rate of every client
BATCH = 256 * 1024


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("replica-id")).start()
    client = WireClient(process.bootstrap)
    try:
        created = client.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=TOPIC, num_partitions=1, replication_factor=1)]), 7, CreateTopicsResponse)
        assert created.topics[0].error_code == ErrorCode.NONE
        for _ in range(4):
            batch = build_batch([RecordInput(None, b"x" * BATCH)])
            produced = client.request(ProduceRequest(acks=1, timeout_ms=5000, topic_data=[
                ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
                    ProduceRequest.PartitionProduceData(index=0, records=batch)])]), 9, ProduceResponse)
            assert produced.responses[0].partition_responses[0].error_code == ErrorCode.NONE
        quota = client.request(AlterClientQuotasRequest(entries=[AlterClientQuotasRequest.EntryData(
            entity=[AlterClientQuotasRequest.EntityData(entity_type="client-id", entity_name=None)],
            ops=[AlterClientQuotasRequest.OpData(key="consumer_byte_rate", value=QUOTA, remove=False)])]),
            1, AlterClientQuotasResponse)
        assert quota.entries[0].error_code == ErrorCode.NONE
    finally:
        client.close()
    yield process
    process.kill()


def fetch(client: WireClient, replica_id: int) -> FetchResponse.PartitionData:
    request = FetchRequest(replica_id=replica_id, max_wait_ms=0, min_bytes=0, max_bytes=64 << 20, topics=[
        FetchRequest.FetchTopic(topic=TOPIC, partitions=[FetchRequest.FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=64 << 20)])])
    return client.request(request, 12, FetchResponse).responses[0].partitions[0]


def test_a_fetch_as_a_replica_that_is_not_one_reads_nothing(filled: BrokerProcess) -> None:
    client = WireClient(filled.bootstrap)
    try:
        for replica_id in (7, 0, 1000, 2**31 - 1):  # not replicas, or the leader itself (broker 0)
            answer = fetch(client, replica_id)
            assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, replica_id
            assert len(answer.records) == 0 and answer.high_watermark == -1
        for replica_id in range(1, 2000):  # each would have been a follower entry of its own
            assert fetch(client, replica_id).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    finally:
        client.close()
    assert "Traceback" not in filled.log_text()
