"""`leader-epoch-checkpoint` on disk: written in Kafka's format beside the segments, and a broker that
finds it deleted or corrupt at start-up rebuilds it from the log and still answers OffsetForLeaderEpoch."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from pybroker.protocol.messages import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_confluent_kafka import create_topic

TOPIC = "epochs"
MESSAGES = 20


def produce(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(MESSAGES):
        producer.produce(TOPIC, value=b"m%d" % i, partition=0)
    assert producer.flush(10) == 0


def epoch_end_offsets(bootstrap: str, epochs: list[int]) -> list[tuple[int, int, int]]:
    """(error code, leader epoch, end offset) that OffsetForLeaderEpoch v4 answers for each epoch."""
    request = OffsetForLeaderEpochRequest(replica_id=-1, topics=[OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
        topic=TOPIC, partitions=[OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
            partition=0, current_leader_epoch=-1, leader_epoch=epoch) for epoch in epochs])])
    client = WireClient(bootstrap)
    try:
        response = client.request(request, 4, OffsetForLeaderEpochResponse)
    finally:
        client.close()
    return [(p.error_code, p.leader_epoch, p.end_offset) for p in response.topics[0].partitions]


@pytest.mark.parametrize("damage", ["deleted", "corrupt"])
def test_checkpoint_is_written_and_rebuilt_when_damaged(broker: BrokerProcess, damage: str) -> None:
    create_topic(broker.bootstrap, TOPIC, partitions=1)
    produce(broker.bootstrap)
    assert broker.stop() == 0
    checkpoint = broker.data_dir / "logs" / f"{TOPIC}-0" / "leader-epoch-checkpoint"
    assert checkpoint.read_text() == "0\n1\n0 0\n"

    if damage == "deleted":
        checkpoint.unlink()
    else:
        checkpoint.write_text("0\n3\n0 0\n")
    broker.start()
    assert broker.wait_for_log("rebuilding the leader epoch cache from the log")
    assert epoch_end_offsets(broker.bootstrap, [0, 1, -1]) == [(0, 0, MESSAGES), (0, -1, -1), (0, -1, -1)]
    assert broker.stop() == 0  # the rebuilt file is written in the background, made before the broker stops
    assert checkpoint.read_text() == "0\n1\n0 0\n"
