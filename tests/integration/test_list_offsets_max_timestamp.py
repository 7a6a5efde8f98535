"""ListOffsets MAX_TIMESTAMP (KIP-734) answers only what the reader may fetch, as Kafka's
Partition.fetchOffsetForTimestamp: a record past the last stable offset (read_committed) or the high
watermark is not answered (offset -1), like any other timestamp lookup."""

from __future__ import annotations

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ListOffsetsRequest, ListOffsetsResponse
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient

TOPIC = "max-ts"
MAX_TIMESTAMP = -3
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def max_timestamp(client: WireClient, isolation_level: int) -> tuple[int, int]:
    response = client.request(ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=TOPIC, partitions=[ListOffsetsRequest.ListOffsetsPartition(
            partition_index=0, timestamp=MAX_TIMESTAMP)])]), 7, ListOffsetsResponse)
    partition = response.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.NONE
    return partition.offset, partition.timestamp


def test_the_max_timestamp_of_an_open_transaction_is_not_answered_to_read_committed(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(TOPIC, b"committed", partition=0, timestamp=1_000)
    assert plain.flush(30) == 0
    transactional = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "max-ts"})
    transactional.init_transactions(30)
    transactional.begin_transaction()
    transactional.produce(TOPIC, b"open", partition=0, timestamp=5_000)
    assert transactional.flush(30) == 0
    client = WireClient(broker.bootstrap)
    try:
        assert max_timestamp(client, READ_UNCOMMITTED) == (1, 5_000)
        assert max_timestamp(client, READ_COMMITTED) == (-1, -1)  # offset 1 is past the last stable offset
        transactional.commit_transaction(30)  # its marker (stamped now) is the newest record: both see it
        committed = max_timestamp(client, READ_COMMITTED)
        assert committed == max_timestamp(client, READ_UNCOMMITTED) and committed[0] >= 1
    finally:
        client.close()
