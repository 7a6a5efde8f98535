"""TxnOffsetCommit whose offsets cannot be written is answered as Kafka's group coordinator answers it
(GroupCoordinatorService.handleOperationException): a write refused for too few in-sync replicas is
COORDINATOR_NOT_AVAILABLE, which a producer retries, not NOT_ENOUGH_REPLICAS, which librdkafka takes for an abortable
error of the transaction (chaos seed 9401: "Failed to commit offsets to transaction ... NOT_ENOUGH_REPLICAS"). Once
the partition takes writes again the retry commits the offsets with the transaction.

The failure is a real one: ``__consumer_offsets``' ``min.insync.replicas`` raised above its one replica."""

from __future__ import annotations

from pathlib import Path

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from tests.eventually import eventually
from tests.integration.broker_process import BrokerProcess
from tests.integration.groups_common import create_topic
from tests.integration.test_bad_input import WireClient
from tests.integration.test_share_groups_lifecycle import _min_isr
from tests.integration.test_transactions_v2 import committed_offset, end_txn, init_producer, state_of

TOPIC = "consumed"
GROUP = "txn-offsets-storage"
TXN = "txn-offsets-storage"


def test_txn_offset_commit_refused_for_too_few_replicas_is_coordinator_not_available(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path).start()
    client = WireClient(broker.bootstrap)
    try:
        create_topic(broker.bootstrap, TOPIC, partitions=1)
        producer = init_producer(client, TXN)
        added = client.request(AddOffsetsToTxnRequest(transactional_id=TXN, producer_id=producer[0],
                                                      producer_epoch=producer[1], group_id=GROUP), 3,
                               AddOffsetsToTxnResponse)
        assert added.error_code == ErrorCode.NONE

        def commit_offsets() -> int:
            answer = client.request(TxnOffsetCommitRequest(
                transactional_id=TXN, group_id=GROUP, producer_id=producer[0], producer_epoch=producer[1],
                topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=TOPIC, partitions=[
                    TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=7)])]),
                3, TxnOffsetCommitResponse)
            return answer.topics[0].partitions[0].error_code

        def first_commit() -> list[int] | None:
            code = commit_offsets()
            return None if code in (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR) else [code]

        # the partition takes writes: a first commit goes through
        assert eventually(first_commit, "the group coordinator") == [ErrorCode.NONE]
        _min_isr(broker.bootstrap, "__consumer_offsets", 2)
        assert commit_offsets() == ErrorCode.COORDINATOR_NOT_AVAILABLE
        _min_isr(broker.bootstrap, "__consumer_offsets", 1)
        assert commit_offsets() == ErrorCode.NONE
        assert end_txn(client, TXN, producer, commit=True, version=3).error_code == ErrorCode.NONE
        eventually(lambda: state_of(client, TXN) == "CompleteCommit", "the commit to complete")
        assert eventually(lambda: committed_offset(client, GROUP, TOPIC), "the transaction's offsets") == 7
    finally:
        client.close()
        broker.kill()
