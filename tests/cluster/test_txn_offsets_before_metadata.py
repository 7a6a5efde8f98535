"""TxnOffsetCommit v5 (transactions V2) adds the group's partition of __consumer_offsets to the transaction; when
this broker is also the transaction coordinator, that add is checked as another leader's AddPartitionsToTxn is.

Apache Kafka's group coordinator asks the transaction coordinator through AddPartitionsToTxnManager, which sends
AddPartitionsToTxn v5 even to its own broker; the coordinator answers UNKNOWN_TOPIC_OR_PARTITION for a partition
its metadata lacks (KafkaApis.handleAddPartitionsToTxnRequest) and the group coordinator answers the client
COORDINATOR_NOT_AVAILABLE (GroupCoordinatorService.handleOperationException), which it retries. pybroker called its
own coordinator directly and skipped that check, so the partition joined the transaction. The gap is opened here
with an UpdateMetadata, as the controller sends it, that takes the group's partition out of the broker's metadata
while the broker still leads it (the controller's identity read from ZooKeeper, as `test_inter_broker_forgery`)."""

from __future__ import annotations

from pathlib import Path

from pybroker.controller.requests import UPDATE_METADATA_VERSION
from pybroker.coordinator.records import partition_for
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    MetadataRequest,
    MetadataResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from pybroker.zk import paths as zp
from tests.cluster.test_inter_broker_forgery import real_identity
from tests.cluster.test_txn_produce_before_metadata import zk_broker
from tests.eventually import eventually
from tests.integration.test_bad_input import WireClient
from tests.integration.test_transactions_v2 import init_producer

TOPIC = "consumed"
GROUP = "offsets-before-metadata"
TXN = "offsets-before-metadata"
OFFSETS_PARTITIONS = 3  # offsets.topic.num.partitions of the cluster tests' brokers


def forget_partition(port: int, identity: tuple[int, int, int], partition: int) -> UpdateMetadataRequest:
    """The UpdateMetadata that tells broker 0 the group's partition of __consumer_offsets is gone."""
    controller, controller_epoch, broker_epoch = identity
    return UpdateMetadataRequest(
        controller_id=controller, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
        live_brokers=[UpdateMetadataRequest.UpdateMetadataBroker(id=0, rack=None, endpoints=[
            UpdateMetadataRequest.UpdateMetadataEndpoint(port=port, host="127.0.0.1", listener="PLAINTEXT",
                                                         security_protocol=0)])],
        topic_states=[UpdateMetadataRequest.UpdateMetadataTopicState(topic_name="__consumer_offsets", partition_states=[
            UpdateMetadataRequest.UpdateMetadataPartitionState(
                partition_index=partition, controller_epoch=controller_epoch, leader=zp.LEADER_DURING_DELETE,
                leader_epoch=-1, isr=[], zk_version=-1, replicas=[], offline_replicas=[])])])


def offsets_partitions(client: WireClient) -> set[int]:
    """The partitions of __consumer_offsets the broker's metadata knows."""
    [topic] = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="__consumer_offsets")]),
                             9, MetadataResponse).topics
    return {p.partition_index for p in topic.partitions}


def state(client: WireClient) -> str:
    [described] = client.request(DescribeTransactionsRequest(transactional_ids=[TXN]), 0,
                                 DescribeTransactionsResponse).transaction_states
    return described.transaction_state


def test_txn_offset_commit_v5_for_an_offsets_partition_unknown_to_metadata_adds_nothing(tmp_path: Path) -> None:
    with zk_broker(tmp_path, TOPIC) as (zookeeper, broker, port):
        client = WireClient(broker.bootstrap)
        producer = init_producer(client, TXN)

        def commit_offsets() -> list[int]:
            answer = client.request(TxnOffsetCommitRequest(
                transactional_id=TXN, group_id=GROUP, producer_id=producer[0], producer_epoch=producer[1],
                topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(name=TOPIC, partitions=[
                    TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=5)])]),
                5, TxnOffsetCommitResponse)
            return [p.error_code for t in answer.topics for p in t.partitions]

        def loaded() -> bool:  # __consumer_offsets created and the group's partition loaded
            return commit_offsets() not in ([ErrorCode.COORDINATOR_LOAD_IN_PROGRESS], [ErrorCode.NOT_COORDINATOR],
                                            [ErrorCode.COORDINATOR_NOT_AVAILABLE])

        # A first transaction, committed, shows the path works; the next one meets the gap.
        eventually(loaded, "the group coordinator")
        assert offsets_partitions(client) == set(range(OFFSETS_PARTITIONS))
        ended = client.request(EndTxnRequest(transactional_id=TXN, producer_id=producer[0],
                                             producer_epoch=producer[1], committed=True), 5, EndTxnResponse)
        assert ended.error_code == ErrorCode.NONE
        producer = (producer[0], producer[1] + 1)
        eventually(lambda: state(client) == "CompleteCommit", "the first transaction to complete")
        updated = client.request(forget_partition(port, real_identity(zookeeper),
                                                  partition_for(GROUP, OFFSETS_PARTITIONS)),
                                 UPDATE_METADATA_VERSION, UpdateMetadataResponse)
        assert updated.error_code == ErrorCode.NONE
        assert offsets_partitions(client) == set(range(OFFSETS_PARTITIONS)) - {partition_for(GROUP, OFFSETS_PARTITIONS)}
        assert commit_offsets() == [ErrorCode.COORDINATOR_NOT_AVAILABLE]
        assert state(client) == "CompleteCommit"  # no partition joined a new transaction
        client.close()
