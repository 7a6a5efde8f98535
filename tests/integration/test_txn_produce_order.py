"""A producer's transactional Produce requests pipelined on one connection are appended in the order they arrived.

The leader asks the transaction coordinator to add (V2 client) or verify (V1 client) a transactional batch's
partitions before appending it (KIP-890). A request whose admission has to wait (the coordinator writes the
added partition to __transaction_state first) must not be overtaken by a later request of the same producer
whose admission is answered at once: the later batch would reach the partition before the earlier one and be
refused as OUT_OF_ORDER_SEQUENCE. Apache Kafka handles a connection's requests one at a time, so the second
request also finds the partition already added rather than an add still being written.
"""

from __future__ import annotations

import struct
import uuid

import pytest

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.frame import encode_request, response_header_version
from pybroker.protocol.messages import ProduceRequest, ProduceResponse, RequestHeader
from pybroker.records import build_batch
from tests.integration.broker_process import BrokerProcess
from tests.integration.groups_common import create_topic
from tests.integration.test_bad_input import WireClient
from tests.integration.test_transactions_v2 import end_txn, init_producer

TOPIC = "txn-order"
Batch = tuple[int, int, bytes]  # partition, base sequence, value


@pytest.fixture(scope="module")
def broker(shared_broker: BrokerProcess) -> BrokerProcess:
    create_topic(shared_broker.bootstrap, TOPIC, partitions=2)
    return shared_broker


def produce_request(transactional_id: str, producer: tuple[int, int], batches: list[Batch]) -> ProduceRequest:
    return ProduceRequest(transactional_id=transactional_id, acks=-1, timeout_ms=10000, topic_data=[
        ProduceRequest.TopicProduceData(name=TOPIC, topic_id=uuid.UUID(int=0), partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=build_batch(
                [(None, value)], producer_id=producer[0], producer_epoch=producer[1], base_sequence=sequence,
                is_transactional=True)) for partition, sequence, value in batches])])


def pipelined(client: WireClient, requests: list[tuple[ProduceRequest, int]]) -> list[dict[int, tuple[str, int]]]:
    """Send the requests in one write, as a producer with several in flight does; per request, each partition's
    (error name, base offset)."""
    frames = []
    for message, version in requests:
        client.correlation += 1
        frames.append(encode_request(RequestHeader(request_api_key=message.API_KEY, request_api_version=version,
                                                   correlation_id=client.correlation, client_id="pipelined"),
                                     message, version))
    client.sock.sendall(b"".join(frames))
    answers = []
    for position, (message, version) in enumerate(requests):
        frame = client.read_frame()
        assert struct.unpack_from(">i", frame, 0)[0] == client.correlation - len(requests) + 1 + position
        body = 4 + (1 if response_header_version(message.API_KEY, version) == 1 else 0)
        [topic] = ProduceResponse.decode(frame[body:], version).responses
        answers.append({p.index: (ErrorCode(p.error_code).name, p.base_offset) for p in topic.partition_responses})
    return answers


def test_pipelined_v2_produces_to_a_partition_not_yet_added_are_both_appended(broker: BrokerProcess) -> None:
    """The first request adds the partition (a write to __transaction_state); the second, right behind it, is
    admitted once that add stands instead of being refused while it is written."""
    client = WireClient(broker.bootstrap)
    try:
        producer = init_producer(client, "order-v2")
        first, second = pipelined(client, [(produce_request("order-v2", producer, [(0, 0, b"a")]), 12),
                                           (produce_request("order-v2", producer, [(0, 1, b"b")]), 12)])
        assert first[0][0] == second[0][0] == "NONE"
        assert second[0][1] == first[0][1] + 1
        assert end_txn(client, "order-v2", producer, commit=True).error_code == ErrorCode.NONE
    finally:
        client.close()


def test_a_request_admitted_at_once_does_not_overtake_an_earlier_one_still_being_admitted(
        broker: BrokerProcess) -> None:
    """The first request adds partition 1 to an open transaction (a write) with its next batch for partition 0;
    the second, a verification of partition 0 only (answered at once), must still be appended after it."""
    client = WireClient(broker.bootstrap)
    try:
        producer = init_producer(client, "order-mixed")
        [opened] = pipelined(client, [(produce_request("order-mixed", producer, [(0, 0, b"open")]), 12)])
        assert opened[0][0] == "NONE"
        first, second = pipelined(client, [
            (produce_request("order-mixed", producer, [(0, 1, b"p0-first"), (1, 0, b"p1-first")]), 12),
            (produce_request("order-mixed", producer, [(0, 2, b"p0-second")]), 11)])
        assert first == {0: ("NONE", opened[0][1] + 1), 1: ("NONE", first[1][1])}
        assert second == {0: ("NONE", opened[0][1] + 2)}
        assert end_txn(client, "order-mixed", producer, commit=True).error_code == ErrorCode.NONE
    finally:
        client.close()
