"""Produce answers as Apache Kafka gives them: a batch refused for some of its records names each one
(KIP-467 `record_errors`), so a client can tell the good records from the bad."""

from __future__ import annotations

import pytest

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import CreateTopicsRequest, CreateTopicsResponse, ProduceRequest, ProduceResponse
from pybroker.records.batch import Compression
from pybroker.records.record import RecordInput, build_batch
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient

TOPIC = "answers-compacted"
MESSAGE = f"Compacted topic cannot accept message without key in topic partition {TOPIC}-0"


def _produce(client: WireClient, records: bytes, version: int) -> ProduceResponse.PartitionProduceResponse:
    request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)])])
    return client.request(request, version, ProduceResponse).responses[0].partition_responses[0]


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.LZ4])
def test_keyless_records_on_a_compacted_topic_are_named(shared_broker: BrokerProcess,
                                                        compression: Compression) -> None:
    client = WireClient(shared_broker.bootstrap)
    client.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=TOPIC, num_partitions=1, replication_factor=1,
        configs=[CreateTopicsRequest.CreatableTopicConfig(name="cleanup.policy", value="compact")])]),
        7, CreateTopicsResponse)
    keys = [b"a", None, b"b", None, None, None, b"c"]
    batch = build_batch([RecordInput(key, b"value") for key in keys], compression=compression)
    answer = _produce(client, batch, 11)
    assert (answer.error_code, answer.base_offset) == (ErrorCode.INVALID_RECORD, -1)
    assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == [
        (1, MESSAGE), (3, MESSAGE), (4, MESSAGE), (5, MESSAGE)]
    first_three = ", ".join(f"RecordError(batchIndex={i}, message='{MESSAGE}')" for i in (1, 3, 4))
    assert answer.error_message == ("One or more records have been rejected due to 4 record errors in total, "
                                    f"and only showing the first three errors at most: [{first_three}]")
    good = _produce(client, build_batch([RecordInput(b"k", b"v")], compression=compression), 11)
    assert (good.error_code, good.record_errors, good.error_message) == (0, [], None)
    client.close()
