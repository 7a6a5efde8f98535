"""A transactional batch for a partition the broker already leads but whose metadata has not reached it yet is not
appended behind the transaction coordinator's back.

The controller sends a new partition's LeaderAndIsr before its UpdateMetadata, and a producer may have learnt of
the partition from a broker the UpdateMetadata reached first. Apache Kafka's leader asks the coordinator about
every transactional batch of a partition it hosts (ReplicaManager's verification, KIP-890), and the coordinator
answers UNKNOWN_TOPIC_OR_PARTITION for a partition its metadata lacks; the producer retries. Appended without
asking, a V2 client's batch would sit in a partition its transaction never added: no marker ever ends it, and
read_committed consumers stop at it. The gap is opened here by sending the LeaderAndIsr alone, with the
controller's identity read from ZooKeeper (as `test_inter_broker_forgery` does).
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from confluent_kafka.admin import AdminClient, NewTopic

from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from pybroker.records import build_batch
from tests.cluster.conftest import CHROOT, broker_overrides
from tests.cluster.test_inter_broker_forgery import real_identity
from tests.cluster.zookeeper import ZooKeeperServer
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_bad_input import WireClient
from tests.integration.test_transactions_v2 import init_producer

TOPIC = "growing"


def lead_partition_one(port: int, identity: tuple[int, int, int], topic_id: uuid.UUID) -> LeaderAndIsrRequest:
    """The LeaderAndIsr a partition added to ``TOPIC`` would bring broker 0, without its UpdateMetadata."""
    controller, controller_epoch, broker_epoch = identity
    return LeaderAndIsrRequest(
        controller_id=controller, controller_epoch=controller_epoch, broker_epoch=broker_epoch, type=0,
        live_leaders=[LeaderAndIsrRequest.LeaderAndIsrLiveLeader(broker_id=0, host_name="127.0.0.1", port=port)],
        topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(topic_name=TOPIC, topic_id=topic_id, partition_states=[
            LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                partition_index=1, controller_epoch=controller_epoch, leader=0, leader_epoch=0, isr=[0],
                partition_epoch=0, replicas=[0], adding_replicas=[], removing_replicas=[], is_new=True)])])


@contextmanager
def zk_broker(tmp_path: Path, topic: str) -> Iterator[tuple[ZooKeeperServer, BrokerProcess, int]]:
    """ZooKeeper, broker 0 (the controller) with ``topic`` (one partition) created, and the broker's port."""
    zookeeper = ZooKeeperServer(tmp_path / "zookeeper").start()
    broker = BrokerProcess(tmp_path, broker_overrides(0, zookeeper.connect + CHROOT))
    try:
        broker.start()
        assert broker.port is not None
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
        yield zookeeper, broker, broker.port
    finally:
        broker.kill()
        zookeeper.stop()


def test_a_transactional_batch_for_a_led_partition_unknown_to_metadata_is_refused(tmp_path: Path) -> None:
    with zk_broker(tmp_path, TOPIC) as (zookeeper, broker, port):
        client = WireClient(broker.bootstrap)
        [topic] = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]), 12,
                                 MetadataResponse).topics
        led = client.request(lead_partition_one(port, real_identity(zookeeper), topic.topic_id), 7,
                             LeaderAndIsrResponse)
        assert [p.error_code for t in led.topics for p in t.partition_errors] == [ErrorCode.NONE]

        producer = init_producer(client, "before-metadata")
        batch = build_batch([(None, b"unverified")], producer_id=producer[0], producer_epoch=producer[1],
                            base_sequence=0, is_transactional=True)
        answer = client.request(ProduceRequest(transactional_id="before-metadata", acks=-1, timeout_ms=10000,
                                               topic_data=[ProduceRequest.TopicProduceData(name=TOPIC, partition_data=[
                                                   ProduceRequest.PartitionProduceData(index=1, records=batch)])]),
                                12, ProduceResponse)
        [result] = answer.responses[0].partition_responses
        [state] = client.request(DescribeTransactionsRequest(transactional_ids=["before-metadata"]), 0,
                                 DescribeTransactionsResponse).transaction_states
        added = {(t.topic, p) for t in state.topics for p in t.partitions}
        assert (ErrorCode(result.error_code).name, added) == ("UNKNOWN_TOPIC_OR_PARTITION", set())
        client.close()
