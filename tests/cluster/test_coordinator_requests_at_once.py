"""ZooKeeper mode: a coordinator request that starts the creation of its internal topic (__consumer_offsets,
__transaction_state) is answered at once: NOT_COORDINATOR, the answer of Kafka's group and transaction coordinators
for a partition they do not lead (in Kafka only FindCoordinator creates these topics, and it answers
COORDINATOR_NOT_AVAILABLE at once). The clients find the coordinator again, retry, and get through once the
controller has elected the leaders.

Before this change such a request waited up to 10 s for the new topic's leaders, holding its answer (and the
connection's later requests), then answered NOT_COORDINATOR anyway. The leaders not elected are those of topics
created while the controller is frozen (SIGSTOP); each case is the first request of its kind to reach a cluster
without the internal topics, since only the request that writes the topic waited."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import pytest
from confluent_kafka import Consumer, Producer

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from tests.cluster.conftest import running_cluster
from tests.cluster.test_admin_timeouts import SESSION_TIMEOUT_MS
from tests.cluster.test_auto_create_at_once import controller_frozen
from tests.integration.admin_wire import SOCKET_TIMEOUT_S
from tests.integration.test_bad_input import WireClient

TOPIC = "present"
GROUP = "a-group"
TXN = "a-txn"
AT_ONCE_S = 5.0
"""Well under the 10 s the request used to wait for leaders nobody elects; a ZooKeeper write takes milliseconds."""


def join_group(client: WireClient) -> ErrorCode:
    return ErrorCode(client.request(JoinGroupRequest(
        group_id=GROUP, session_timeout_ms=30000, rebalance_timeout_ms=30000, member_id="", protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]),
        5, JoinGroupResponse).error_code)


def offset_commit(client: WireClient) -> ErrorCode:
    answer = client.request(OffsetCommitRequest(group_id=GROUP, generation_id_or_member_epoch=-1, topics=[
        OffsetCommitRequest.OffsetCommitRequestTopic(name=TOPIC, partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])]),
        2, OffsetCommitResponse)
    return ErrorCode(answer.topics[0].partitions[0].error_code)


def offset_fetch(client: WireClient) -> ErrorCode:
    return ErrorCode(client.request(OffsetFetchRequest(group_id=GROUP, topics=None), 5, OffsetFetchResponse).error_code)


def init_producer_id(client: WireClient) -> ErrorCode:
    return ErrorCode(client.request(InitProducerIdRequest(transactional_id=TXN, transaction_timeout_ms=60000),
                                    1, InitProducerIdResponse).error_code)


def end_txn(client: WireClient) -> ErrorCode:
    return ErrorCode(client.request(EndTxnRequest(transactional_id=TXN, producer_id=1, producer_epoch=0,
                                                  committed=True), 3, EndTxnResponse).error_code)


def add_partitions(client: WireClient) -> ErrorCode:
    answer = client.request(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TXN, v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=TOPIC, partitions=[0])]),
        3, AddPartitionsToTxnResponse)
    return ErrorCode(answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)


Request = Callable[[WireClient], ErrorCode]


def timed(bootstrap: str, request: Request) -> tuple[ErrorCode, float]:
    client = WireClient(bootstrap)
    client.sock.settimeout(SOCKET_TIMEOUT_S)
    try:
        started = time.monotonic()
        code = request(client)
        return code, time.monotonic() - started
    finally:
        client.close()


def commit_as_a_consumer(bootstrap: str) -> None:
    """A confluent-kafka consumer of GROUP reads one record and commits its offset."""
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(TOPIC, b"value", partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 60
        message = None
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(1)
        assert message is not None and message.error() is None
        [committed] = consumer.commit(message=message, asynchronous=False)
        assert committed.error is None and committed.offset == message.offset() + 1
    finally:
        consumer.close()


def commit_a_transaction(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(TOPIC, b"in a transaction", partition=0)
    producer.commit_transaction(60)


@pytest.mark.parametrize("groups_request, txn_request", [(join_group, init_producer_id), (offset_commit, end_txn),
                                                         (offset_fetch, add_partitions)],
                         ids=["JoinGroup+InitProducerId", "OffsetCommit+EndTxn", "OffsetFetch+AddPartitionsToTxn"])
def test_a_request_that_creates_its_coordinators_topic_is_answered_at_once_and_a_retry_gets_through(
        tmp_path: Path, groups_request: Request, txn_request: Request) -> None:
    with running_cluster(tmp_path, brokers=2, extra={"zookeeper.session.timeout.ms": SESSION_TIMEOUT_MS}) as cluster:
        with controller_frozen(cluster, TOPIC) as (_, at_other):  # nobody elects the new topics' leaders
            answers = [timed(at_other, groups_request), timed(at_other, txn_request)]
        for code, elapsed in answers:
            assert code == ErrorCode.NOT_COORDINATOR
            assert elapsed < AT_ONCE_S
        commit_as_a_consumer(at_other)
        commit_a_transaction(at_other)
