"""Creating a topic does not stall the event loop: the fsyncs of each new partition's log (its directory,
``partition.metadata``, ``leader-epoch-checkpoint``) run on the I/O threads, so other clients are answered
while CreateTopics waits for them, and CreateTopics still answers only once every partition is served.

The stall is observed by ordering alone: while one connection's CreateTopics of many partitions is
outstanding, another connection's ApiVersions requests, sent one after another, are answered many times
before the CreateTopics answer arrives. With the fsyncs on the loop (before this change) only those sent
while the metadata file was written were: 2 to 6 in runs here, against hundreds with the change."""

from __future__ import annotations

import select
from pathlib import Path

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import RequestHeader, encode_request
from pybroker.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ProduceRequest,
    ProduceResponse,
)
from pybroker.records.record import RecordInput, build_batch
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient

PARTITIONS = 250
ANSWERED_WHILE_CREATING = 50
"""Far more than the requests answered while the metadata file is written (before the partitions' logs)."""
NOT_READY = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def _send_create(client: WireClient, topic: str, partitions: int) -> None:
    client.correlation += 1
    header = RequestHeader(request_api_key=CreateTopicsRequest.API_KEY, request_api_version=7,
                           correlation_id=client.correlation, client_id="creator")
    client.sock.sendall(encode_request(header, CreateTopicsRequest(
        topics=[CreateTopicsRequest.CreatableTopic(name=topic, num_partitions=partitions, replication_factor=1)],
        timeout_ms=120_000), 7))


def _create_answer(client: WireClient) -> CreateTopicsResponse.CreatableTopicResult:
    return CreateTopicsResponse.decode(client.read_frame()[5:], 7).topics[0]  # v7: flexible header, one tag byte


def _answered(client: WireClient) -> bool:
    return bool(client.frames) or bool(select.select([client.sock], [], [], 0)[0])


def _produce(client: WireClient, topic: str, partition: int) -> ProduceResponse.PartitionProduceResponse:
    request = ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(
            index=partition, records=build_batch([RecordInput(b"k", b"v")]))])])
    return client.request(request, 9, ProduceResponse).responses[0].partition_responses[0]


def _partition_dirs(broker: BrokerProcess, topic: str) -> list[Path]:
    return [path for path in Path(broker.data_dir, "logs").iterdir() if path.name.startswith(f"{topic}-")]


def test_other_clients_are_answered_while_a_topic_is_created(shared_broker: BrokerProcess) -> None:
    creator, other = WireClient(shared_broker.bootstrap), WireClient(shared_broker.bootstrap)
    _send_create(creator, "many-partitions", PARTITIONS)
    answered = 0
    produce_answers = set()
    while not _answered(creator):
        version = other.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3,
                                ApiVersionsResponse)
        assert version.error_code == ErrorCode.NONE
        answered += 1
        if answered % 10 == 0:  # a partition being created is not ready: a retriable error, never a failure
            produce_answers.add(_produce(other, "many-partitions", PARTITIONS - 1).error_code)
    result = _create_answer(creator)
    assert result.error_code == ErrorCode.NONE, result
    assert answered >= ANSWERED_WHILE_CREATING, f"only {answered} ApiVersions answered while the topic was created"
    assert produce_answers and produce_answers <= NOT_READY | {ErrorCode.NONE}, produce_answers
    # Answered once every partition is served: the last one takes an acks=all produce at once.
    assert _produce(other, "many-partitions", PARTITIONS - 1).error_code == ErrorCode.NONE
    assert len(_partition_dirs(shared_broker, "many-partitions")) == PARTITIONS
    creator.close()
    other.close()


def test_a_topic_deleted_while_it_is_created_leaves_no_log_behind(shared_broker: BrokerProcess) -> None:
    creator, deleter = WireClient(shared_broker.bootstrap), WireClient(shared_broker.bootstrap)
    _send_create(creator, "deleted-early", PARTITIONS // 5)
    deleted = eventually(lambda: (answer := deleter.request(DeleteTopicsRequest(
        topic_names=["deleted-early"], timeout_ms=30_000), 4, DeleteTopicsResponse).responses[0]).error_code
        != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and answer, "the topic in the metadata, to delete it")
    assert deleted.error_code == ErrorCode.NONE, deleted
    assert _create_answer(creator).error_code == ErrorCode.NONE  # created, then deleted: in that order
    eventually(lambda: not _partition_dirs(shared_broker, "deleted-early"), "the deleted topic's logs removed")
    # Created again from scratch: the new logs come after the old ones were deleted.
    _send_create(creator, "deleted-early", 3)
    assert _create_answer(creator).error_code == ErrorCode.NONE
    assert _produce(deleter, "deleted-early", 2).error_code == ErrorCode.NONE
    assert not [line for line in shared_broker.log_lines if "Traceback" in line or " ERROR " in line]
    creator.close()
    deleter.close()
