"""Partitions added to a topic a share group already consumes (KAFKA-20742, Kafka 4.2's group coordinator).

The group coordinator initializes a topic new to the group without a start offset, so each share-partition starts
where ``share.auto.offset.reset`` says when it is first read ("latest" by default: the log's end then). A partition
added later to that topic (CreatePartitions) is initialized at offset 0 instead: with "latest" the records produced
to it before any member reads it would be skipped, though the group consumed the topic all along.
"""

from __future__ import annotations

import uuid

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import ProduceRequest, ProduceResponse, ShareFetchRequest, ShareFetchResponse
from pybroker.records.record import RecordInput, build_batch
from tests.eventually import eventually
from tests.integration.admin_wire import create_partitions
from tests.integration.test_bad_input import WireClient
from tests.integration.test_share_groups_wire import _beat, _join, _topic

GROUP, TOPIC = "grown-group", "grown"


def _produce(client: WireClient, partition: int, count: int) -> None:
    request = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=TOPIC, partition_data=[ProduceRequest.PartitionProduceData(
            index=partition, records=build_batch([RecordInput(None, b"v%d" % i) for i in range(count)]))])])
    assert client.request(request, 9, ProduceResponse).responses[0].partition_responses[0].error_code == 0


def _acquired(answer: ShareFetchResponse) -> dict[int, list[tuple[int, int]]]:
    assert answer.error_code == ErrorCode.NONE, answer
    return {p.partition_index: [(a.first_offset, a.last_offset) for a in p.acquired_records]
            for t in answer.responses for p in t.partitions if p.acquired_records}


def test_records_produced_to_a_new_partition_before_the_group_reads_it_are_delivered(shared_broker) -> None:
    client = WireClient(shared_broker.bootstrap)
    topic_id: uuid.UUID = _topic(client, TOPIC)
    joined = _join(client, GROUP, "m1", [TOPIC])
    assert [list(t.partitions) for t in joined.assignment.topic_partitions] == [[0]]

    assert create_partitions(shared_broker.bootstrap, TOPIC, 2, [[0]], 30000) == ErrorCode.NONE
    _produce(client, 1, 3)  # before the group has initialized partition 1, let alone read it
    epoch = joined.member_epoch

    def assigned_both() -> bool:
        nonlocal epoch
        answer = _beat(client, GROUP, "m1", epoch)
        assert answer.error_code == ErrorCode.NONE, answer
        epoch = answer.member_epoch
        return answer.assignment is not None and \
            sorted(p for t in answer.assignment.topic_partitions for p in t.partitions) == [0, 1]

    eventually(assigned_both, "m1 to be assigned partition 1 too")
    session_epoch = 0

    def fetched() -> dict[int, list[tuple[int, int]]] | None:
        nonlocal session_epoch
        answer = client.request(ShareFetchRequest(
            group_id=GROUP, member_id="m1", share_session_epoch=session_epoch, max_wait_ms=0, min_bytes=1,
            max_records=100, topics=[ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[
                ShareFetchRequest.FetchPartition(partition_index=p) for p in (0, 1)])]), 1, ShareFetchResponse)
        session_epoch += 1
        return _acquired(answer) or None

    assert eventually(fetched, "the records of partition 1") == {1: [(0, 2)]}  # not started at its end (3)
    client.close()
