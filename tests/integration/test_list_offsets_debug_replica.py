"""ListOffsets with Kafka's debugging replica id (-2): any replica answers LATEST with its log end and
latest leader epoch, whatever its role. The controller asks this of every ISR member before it elects
the longest log (tests/cluster/test_power_loss.py covers replicas a restarted broker does not serve
yet)."""

from __future__ import annotations

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ListOffsetsRequest, ListOffsetsResponse
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient

TOPIC = "debug-replica"
LATEST = -1


def latest(client: WireClient, replica_id: int, partition: int) -> ListOffsetsResponse.ListOffsetsPartitionResponse:
    response = client.request(ListOffsetsRequest(replica_id=replica_id, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=TOPIC, partitions=[ListOffsetsRequest.ListOffsetsPartition(
            partition_index=partition, timestamp=LATEST)])]), 7, ListOffsetsResponse)
    return response.topics[0].partitions[0]


def test_the_debugging_replica_id_is_answered_the_log_end_and_latest_leader_epoch(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(7):
        producer.produce(TOPIC, b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    client = WireClient(broker.bootstrap)
    try:
        answer = latest(client, -2, 0)
        assert (answer.error_code, answer.offset, answer.leader_epoch) == (ErrorCode.NONE, 7, 0)
        assert latest(client, -2, 5).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # no such replica here
    finally:
        client.close()
