"""A real cluster's transaction coordinator reports a transaction CompleteCommit only once that record is on
the ISR of its ``__transaction_state`` partition, as Kafka's pending state transition: the coordinator used to
move to CompleteCommit before appending the record, so DescribeTransactions and ListTransactions reported it
(and a retried EndTxn was told the transaction committed) with PrepareCommit all the log held.

The window is made with two paused brokers: the leader of the transaction's data partition, outside the
state partition's replicas, holds the markers back until the PrepareCommit record is on the ISR; then the
state partition's follower is paused and the markers let through, so the CompleteCommit record is appended
by the coordinator but cannot reach the ISR. Its ISR wait fails after ``request.timeout.ms``: the transaction
stays PrepareCommit and the record is appended again (the coordinator used to keep CompleteCommit in memory
and never wrote the record again) until the follower is back and takes it.

The same pause of the follower while an EndTxn waits for its PrepareCommit record shows the Prepare is a pending
change too: the transaction stays Ongoing and gets no marker when that record's ISR wait fails."""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import pytest

from pybroker.coordinator.records import partition_for
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from pybroker.records import build_batch
from tests.cluster.conftest import Cluster, running_cluster
from tests.cluster.test_cluster import create_topic, wait_for_full_isr
from tests.eventually import eventually
from tests.integration.test_bad_input import WireClient

STATE_TOPIC = "__transaction_state"
STATE_PARTITIONS = 3  # transaction.state.log.num.partitions of the cluster fixture
LATEST = -1
CONSUMER = -1  # ListOffsets' LATEST for a consumer: the high watermark
DEBUGGING_REPLICA = -2  # ... for the debugging replica id: the log end
RETRIABLE_PRODUCE = (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.CONCURRENT_TRANSACTIONS,
                     ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three brokers, ``__transaction_state`` on two of them (so a third can lead the data partition), and
    the longest session the test ZooKeeper grants (its tickTime is 500 ms): a broker paused for a moment
    keeps its session, so its partitions stay where they are. The coordinator's ISR waits give up after
    ``request.timeout.ms``, well within that session."""
    with running_cluster(tmp_path_factory.mktemp("txn-complete"), extra={
            "transaction.state.log.replication.factor": "2", "zookeeper.session.timeout.ms": "10000",
            "request.timeout.ms": "3000"}) as running:
        yield running


def log_end(wire: WireClient, partition: int, replica_id: int, topic: str = STATE_TOPIC) -> int:
    answer = wire.request(ListOffsetsRequest(replica_id=replica_id, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, timestamp=LATEST)])]),
        7, ListOffsetsResponse)
    [found] = answer.topics[0].partitions
    assert found.error_code == ErrorCode.NONE, ErrorCode(found.error_code).name
    return found.offset


def described(wire: WireClient, transactional_id: str) -> str:
    [state] = wire.request(DescribeTransactionsRequest(transactional_ids=[transactional_id]), 0,
                           DescribeTransactionsResponse).transaction_states
    assert state.error_code == ErrorCode.NONE, ErrorCode(state.error_code).name
    return state.transaction_state


def listed(wire: WireClient, state: str) -> set[str]:
    answer = wire.request(ListTransactionsRequest(state_filters=[state]), 0, ListTransactionsResponse)
    return {t.transactional_id for t in answer.transaction_states}


def init(wire: WireClient, transactional_id: str, producer: tuple[int, int] = (-1, -1)) -> InitProducerIdResponse:
    return wire.request(InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=60000,
                                              producer_id=producer[0], producer_epoch=producer[1]),
                        4, InitProducerIdResponse)


def end(bootstrap: str, transactional_id: str, producer: tuple[int, int], version: int) -> EndTxnResponse:
    """EndTxn (commit) on a connection of its own: answered once the Prepare record is on the ISR (the markers
    follow), or with the error of that record."""
    wire = WireClient(bootstrap)
    try:
        return wire.request(EndTxnRequest(transactional_id=transactional_id, producer_id=producer[0],
                                          producer_epoch=producer[1], committed=True), version, EndTxnResponse)
    finally:
        wire.close()


def state_replicas(cluster: Cluster, transactional_id: str) -> tuple[int, int, int, int]:
    """(partition of __transaction_state, its leader: the coordinator, its follower, the broker outside it)."""
    wire = WireClient(cluster.brokers[0].bootstrap)
    try:
        eventually(lambda: wire.request(FindCoordinatorRequest(key_type=1, coordinator_keys=[transactional_id]), 4,
                                        FindCoordinatorResponse).coordinators[0].error_code == ErrorCode.NONE,
                   "the transaction coordinator (__transaction_state created on first use)")
    finally:
        wire.close()
    partition = partition_for(transactional_id, STATE_PARTITIONS)
    leader, replicas, _ = wait_for_full_isr(cluster, STATE_TOPIC)[partition]
    [follower] = [r for r in replicas if r != leader]
    [outside] = [b for b in range(len(cluster.brokers)) if b not in replicas]
    return partition, leader, follower, outside


def connected(cluster: Cluster, topic: str, coordinator_id: int, outside_id: int) -> tuple[WireClient, WireClient]:
    """``topic`` created with its one partition on the broker outside the state partition's replicas; connections
    to the coordinator and to that partition's leader."""
    create_topic(cluster, topic, 1, assignment=[[outside_id]])
    wait_for_full_isr(cluster, topic)
    return WireClient(cluster.brokers[coordinator_id].bootstrap), WireClient(cluster.brokers[outside_id].bootstrap)


def open_transaction(transactional_id: str, topic: str, transaction_version: int, coordinator: WireClient,
                     leader: WireClient) -> tuple[int, int]:
    """InitProducerId, the partition added (V1: AddPartitionsToTxn; V2: by the leader, Produce v12) and one
    transactional batch written to it; the producer id and epoch. The leader is first waited for to know the
    topic: a Produce that reaches it before its metadata does is appended without the coordinator's add."""
    eventually(lambda: [p.partition_index for t in leader.request(MetadataRequest(topics=[
        MetadataRequest.MetadataRequestTopic(name=topic)]), 9, MetadataResponse).topics for p in t.partitions] == [0],
               "the leader's metadata of the new topic")
    started = eventually(lambda: (answer := init(coordinator, transactional_id)).error_code == 0 and answer,
                         "InitProducerId (the coordinator loading its partition)")
    producer = (started.producer_id, started.producer_epoch)
    if transaction_version == 1:
        added = coordinator.request(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=transactional_id, v3_and_below_producer_id=producer[0],
            v3_and_below_producer_epoch=producer[1], v3_and_below_topics=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[0])]),
            3, AddPartitionsToTxnResponse)
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    batch = build_batch([(None, b"committed")], producer_id=producer[0], producer_epoch=producer[1],
                        base_sequence=0, is_transactional=True)
    request = ProduceRequest(transactional_id=transactional_id, acks=-1, timeout_ms=10000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch)])])

    def produced() -> bool:
        code = leader.request(request, 9 if transaction_version == 1 else 12, ProduceResponse) \
            .responses[0].partition_responses[0].error_code
        assert code in (0, *RETRIABLE_PRODUCE), ErrorCode(code).name
        return code == 0

    eventually(produced, "the transactional produce")
    return producer


@pytest.mark.parametrize("transaction_version", [1, 2])
def test_a_commit_is_reported_complete_only_once_its_complete_record_is_on_the_isr(
        cluster: Cluster, transaction_version: int) -> None:
    """Transactions V1 (AddPartitionsToTxn, EndTxn v4) and V2 (KIP-890: Produce v12 adds the partition, EndTxn
    v5 bumps the epoch)."""
    transactional_id = topic = f"complete-record-v{transaction_version}"
    partition, coordinator_id, follower_id, outside_id = state_replicas(cluster, transactional_id)
    coordinator, leader = connected(cluster, topic, coordinator_id, outside_id)
    outside, follower = cluster.brokers[outside_id].process, cluster.brokers[follower_id].process
    assert outside is not None and follower is not None
    pool = ThreadPoolExecutor(1)
    try:
        producer = open_transaction(transactional_id, topic, transaction_version, coordinator, leader)
        before_prepare = log_end(coordinator, partition, CONSUMER)
        end_version = 4 if transaction_version == 1 else 5
        os.kill(outside.pid, signal.SIGSTOP)  # the markers wait for it
        try:
            ending = pool.submit(end, cluster.brokers[coordinator_id].bootstrap, transactional_id, producer,
                                 end_version)
            eventually(lambda: log_end(coordinator, partition, CONSUMER) > before_prepare,
                       "the PrepareCommit record on the ISR")
            prepared = log_end(coordinator, partition, CONSUMER)
            os.kill(follower.pid, signal.SIGSTOP)  # the CompleteCommit record cannot reach the ISR
        finally:
            os.kill(outside.pid, signal.SIGCONT)
        try:
            eventually(lambda: log_end(coordinator, partition, DEBUGGING_REPLICA) > prepared,
                       "the CompleteCommit record appended by the coordinator, once the markers are written")
            assert log_end(coordinator, partition, CONSUMER) == prepared  # not on the ISR
            assert described(coordinator, transactional_id) == "PrepareCommit"
            assert transactional_id not in listed(coordinator, "CompleteCommit")
            assert transactional_id in listed(coordinator, "PrepareCommit")
            retried = end(cluster.brokers[coordinator_id].bootstrap, transactional_id, producer, end_version)
            assert retried.error_code == ErrorCode.CONCURRENT_TRANSACTIONS  # not told "committed" yet
            current = producer if transaction_version == 1 else (producer[0], producer[1] + 1)
            assert init(coordinator, transactional_id, current).error_code == ErrorCode.CONCURRENT_TRANSACTIONS
            eventually(lambda: log_end(coordinator, partition, DEBUGGING_REPLICA) > prepared + 1,
                       "the CompleteCommit record appended again once its ISR wait timed out")
            assert log_end(coordinator, partition, CONSUMER) == prepared
            assert described(coordinator, transactional_id) == "PrepareCommit"
        finally:
            os.kill(follower.pid, signal.SIGCONT)
        eventually(lambda: described(coordinator, transactional_id) == "CompleteCommit",
                   "the commit complete once the follower took the record")
        assert ending.result(30).error_code == ErrorCode.NONE
        assert log_end(coordinator, partition, CONSUMER) == log_end(coordinator, partition, DEBUGGING_REPLICA)
        retried = end(cluster.brokers[coordinator_id].bootstrap, transactional_id, producer, end_version)
        assert retried.error_code == ErrorCode.NONE  # a retry of the completed commit
    finally:
        pool.shutdown(wait=False)
        coordinator.close()
        leader.close()


@pytest.mark.parametrize("transaction_version", [1, 2])
def test_a_prepare_record_the_isr_did_not_take_leaves_the_transaction_ongoing_without_markers(
        cluster: Cluster, transaction_version: int) -> None:
    """Kafka's endTransaction keeps the metadata Ongoing until the PrepareCommit record is replicated and sends
    the markers only then; a failed append is the EndTxn's answer (a timeout: COORDINATOR_NOT_AVAILABLE) and
    the transaction stays Ongoing. The coordinator used to set PrepareCommit at once and, the ISR wait failed,
    went on waiting and wrote the markers once the follower was back, with the producer told the commit failed.
    Here the state partition's follower is paused while the EndTxn waits."""
    transactional_id = topic = f"prepare-record-v{transaction_version}"
    partition, coordinator_id, follower_id, outside_id = state_replicas(cluster, transactional_id)
    coordinator, leader = connected(cluster, topic, coordinator_id, outside_id)
    follower = cluster.brokers[follower_id].process
    assert follower is not None
    end_version = 4 if transaction_version == 1 else 5
    try:
        producer = open_transaction(transactional_id, topic, transaction_version, coordinator, leader)
        written = log_end(leader, 0, DEBUGGING_REPLICA, topic)
        replicated = log_end(coordinator, partition, CONSUMER)
        os.kill(follower.pid, signal.SIGSTOP)  # the PrepareCommit record cannot reach the ISR
        try:
            ended = end(cluster.brokers[coordinator_id].bootstrap, transactional_id, producer, end_version)
            assert ended.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode(ended.error_code).name
            assert log_end(coordinator, partition, DEBUGGING_REPLICA) > replicated  # appended, not replicated
            assert described(coordinator, transactional_id) == "Ongoing"
        finally:
            os.kill(follower.pid, signal.SIGCONT)
        eventually(lambda: log_end(coordinator, partition, CONSUMER) == log_end(coordinator, partition,
                                                                                DEBUGGING_REPLICA),
                   "the follower back in step")
        assert described(coordinator, transactional_id) == "Ongoing"
        assert log_end(leader, 0, DEBUGGING_REPLICA, topic) == written  # no marker
        retried = eventually(lambda: (answer := end(cluster.brokers[coordinator_id].bootstrap, transactional_id,
                                                    producer, end_version)).error_code == 0 and answer,
                             "the producer's retried EndTxn")
        if transaction_version == 2:
            assert (retried.producer_id, retried.producer_epoch) == (producer[0], producer[1] + 1)
        eventually(lambda: described(coordinator, transactional_id) == "CompleteCommit", "the commit to complete")
        assert log_end(leader, 0, DEBUGGING_REPLICA, topic) == written + 1  # its one marker
    finally:
        coordinator.close()
        leader.close()
