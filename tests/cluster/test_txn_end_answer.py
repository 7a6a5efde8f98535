"""A real cluster's coordinator answers EndTxn once the PrepareCommit record is on the ISR, without waiting for
the markers, as Kafka's endTransaction answers from the append's callback and hands the markers to its marker
channel afterwards. Until the markers are written and the CompleteCommit record is on the ISR the transaction
stays PrepareCommit and its id answers CONCURRENT_TRANSACTIONS; the records become readable (read_committed)
only then.

The leader of the transaction's data partition is paused while the EndTxn is sent: the coordinator's first
WriteTxnMarkers to it waits for ``request.timeout.ms`` (60 s here). The answer used to wait for that first
attempt, longer than the test client's 10 s socket timeout; it now comes at once. The pause stays shorter than
the ZooKeeper session, so the partitions stay where they are."""

from __future__ import annotations

import os
import signal
from typing import Iterator

import pytest

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from tests.cluster.conftest import Cluster, running_cluster
from tests.cluster.test_txn_complete_record import connected, described, end, init, open_transaction, state_replicas
from tests.eventually import eventually
from tests.integration.test_bad_input import WireClient

READ_COMMITTED = 1
LATEST = -1
CONSUMER = -1


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("txn-end-answer"), extra={
            "transaction.state.log.replication.factor": "2", "zookeeper.session.timeout.ms": "10000",
            "request.timeout.ms": "60000"}) as running:
        yield running


def last_stable_offset(leader: WireClient, topic: str) -> int:
    answer = leader.request(ListOffsetsRequest(replica_id=CONSUMER, isolation_level=READ_COMMITTED, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=LATEST)])]), 7, ListOffsetsResponse)
    [found] = answer.topics[0].partitions
    assert found.error_code == ErrorCode.NONE, ErrorCode(found.error_code).name
    return found.offset


def add_partition(coordinator: WireClient, transactional_id: str, topic: str, producer: tuple[int, int]) -> int:
    added = coordinator.request(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=producer[0],
        v3_and_below_producer_epoch=producer[1], v3_and_below_topics=[
            AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[0])]),
        3, AddPartitionsToTxnResponse)
    return added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


@pytest.mark.parametrize("transaction_version", [1, 2])
def test_end_txn_is_answered_before_the_markers_are_written(cluster: Cluster, transaction_version: int) -> None:
    transactional_id = topic = f"end-answer-v{transaction_version}"
    _, coordinator_id, _, outside_id = state_replicas(cluster, transactional_id)
    coordinator, leader = connected(cluster, topic, coordinator_id, outside_id)
    outside = cluster.brokers[outside_id].process
    assert outside is not None
    end_version = 4 if transaction_version == 1 else 5
    try:
        producer = open_transaction(transactional_id, topic, transaction_version, coordinator, leader)
        assert last_stable_offset(leader, topic) == 0  # the open transaction's batch is not readable
        current = producer if transaction_version == 1 else (producer[0], producer[1] + 1)
        os.kill(outside.pid, signal.SIGSTOP)  # the markers wait for it
        try:
            ended = end(cluster.brokers[coordinator_id].bootstrap, transactional_id, producer, end_version)
            assert ended.error_code == ErrorCode.NONE, ErrorCode(ended.error_code).name
            if transaction_version == 2:
                assert (ended.producer_id, ended.producer_epoch) == current
            assert described(coordinator, transactional_id) == "PrepareCommit"
            retried = end(cluster.brokers[coordinator_id].bootstrap, transactional_id, producer, end_version)
            assert retried.error_code == ErrorCode.CONCURRENT_TRANSACTIONS
            assert init(coordinator, transactional_id, current).error_code == ErrorCode.CONCURRENT_TRANSACTIONS
            if transaction_version == 1:  # the producer's next transaction waits
                assert add_partition(coordinator, transactional_id, topic, current) == \
                    ErrorCode.CONCURRENT_TRANSACTIONS
        finally:
            os.kill(outside.pid, signal.SIGCONT)
        eventually(lambda: described(coordinator, transactional_id) == "CompleteCommit",
                   "the commit to complete once the leader took the marker")
        eventually(lambda: last_stable_offset(leader, topic) == 2, "the committed batch and its marker readable")
        if transaction_version == 1:
            assert add_partition(coordinator, transactional_id, topic, current) == ErrorCode.NONE
    finally:
        coordinator.close()
        leader.close()
