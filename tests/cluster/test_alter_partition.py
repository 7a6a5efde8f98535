"""ISR changes go from the leader to the controller (AlterPartition, KIP-497): the controller writes
them with its own epoch and publishes them to every broker; nothing is written under
/isr_change_notification. The controller refuses stale requests with Kafka's error codes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from pybroker.client.connection import Connection
from pybroker.zk import paths as zp
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import AlterPartitionRequest, AlterPartitionResponse
from tests.eventually import eventually
from tests.cluster.conftest import Cluster, running_cluster


class Zk:
    def __init__(self, cluster: Cluster) -> None:
        self.client = KazooClient(cluster.zk_connect)
        self.client.start(10)

    def state(self, topic: str, partition: int) -> zp.LeaderAndIsr:
        data, stat = self.client.get(zp.partition_state_path(topic, partition))
        return zp.decode_partition_state(data, stat.version)

    def close(self) -> None:
        self.client.stop()
        self.client.close()


def isr_seen_by(broker_bootstrap: str, topic: str) -> list[int]:
    metadata = AdminClient({"bootstrap.servers": broker_bootstrap}).list_topics(topic, timeout=10)
    return sorted(metadata.topics[topic].partitions[0].isrs)


def alter(port: int, request: AlterPartitionRequest) -> AlterPartitionResponse:
    async def run() -> AlterPartitionResponse:
        connection = await Connection.open("127.0.0.1", port, client_id="alter-partition-test", timeout=10)
        try:
            return await connection.send_at(request, 1, AlterPartitionResponse)
        finally:
            await connection.close()
    return asyncio.run(run())


def proposal(broker_id: int, broker_epoch: int, state: zp.LeaderAndIsr, isr: list[int],
             partition_epoch: int) -> AlterPartitionRequest:
    return AlterPartitionRequest(broker_id=broker_id, broker_epoch=broker_epoch, topics=[
        AlterPartitionRequest.TopicData(topic_name="isr", partitions=[AlterPartitionRequest.PartitionData(
            partition_index=0, leader_epoch=state.leader_epoch, new_isr=isr, partition_epoch=partition_epoch)])])


def test_isr_changes_go_through_the_controller(tmp_path: Path) -> None:
    # A paused follower falls out of the ISR by lag (1 s) long before its ZooKeeper session (10 s) ends,
    # so the leader, not the controller's broker-failure handling, changes the ISR.
    lag = {"replica.lag.time.max.ms": "1000", "zookeeper.session.timeout.ms": "10000"}
    with running_cluster(tmp_path, extra=lag) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("isr", 1, replica_assignment=[[0, 1, 2]],
                                      config={"min.insync.replicas": "2"})])["isr"].result(30)
        zk = Zk(cluster)
        try:
            eventually(lambda: zk.state("isr", 0).isr == (0, 1, 2), "the full ISR")
            producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
            producer.produce("isr", b"before")
            assert producer.flush(30) == 0

            follower = cluster.brokers[2].process
            assert follower is not None
            os.kill(follower.pid, signal.SIGSTOP)  # it stops fetching: the leader (0) shrinks the ISR
            try:
                shrunk = eventually(lambda: (s := zk.state("isr", 0)).isr == (0, 1) and s, "the ISR without 2")
                for broker in cluster.brokers[:2]:
                    eventually(lambda: isr_seen_by(broker.bootstrap, "isr") == [0, 1], "brokers to learn the ISR")
            finally:
                os.kill(follower.pid, signal.SIGCONT)
            controller = json.loads(zk.client.get(zp.CONTROLLER)[0])["brokerid"]
            assert shrunk.controller_epoch == zp.decode_controller_epoch(zk.client.get(zp.CONTROLLER_EPOCH)[0])
            assert shrunk.leader_epoch == 0  # an ISR change is not a leader change

            # it fetches again and catches up: the leader expands the ISR
            expanded = eventually(lambda: (s := zk.state("isr", 0)).isr == (0, 1, 2) and s, "2 back in the ISR")
            for broker in cluster.brokers:
                eventually(lambda: isr_seen_by(broker.bootstrap, "isr") == [0, 1, 2], "brokers to learn the ISR")
            assert zk.client.get_children(zp.ISR_CHANGES) == []

            epoch_of = {b: zk.client.get(zp.broker_path(b))[1].czxid for b in range(3)}
            controller_port = cluster.brokers[controller].port
            non_controller = cluster.brokers[next(b for b in range(3) if b != controller)].port
            refused = [
                alter(non_controller, proposal(0, epoch_of[0], expanded, [0, 1], expanded.zk_version)).error_code,
                alter(controller_port, proposal(0, epoch_of[0] - 1, expanded, [0, 1], expanded.zk_version)
                      ).error_code]
            assert refused == [ErrorCode.NOT_CONTROLLER, ErrorCode.STALE_BROKER_EPOCH]
            stale_version = alter(controller_port, proposal(0, epoch_of[0], expanded, [0, 1], expanded.zk_version - 1))
            not_leader = alter(controller_port, proposal(1, epoch_of[1], expanded, [0, 1], expanded.zk_version))
            assert [stale_version.topics[0].partitions[0].error_code,
                    not_leader.topics[0].partitions[0].error_code] == [ErrorCode.INVALID_UPDATE_VERSION,
                                                                        ErrorCode.NOT_LEADER_OR_FOLLOWER]
            repeated = alter(controller_port, proposal(0, epoch_of[0], expanded, [0, 1, 2], expanded.zk_version - 1))
            answer = repeated.topics[0].partitions[0]  # a retry of the applied expansion: the stored state
            assert (answer.error_code, answer.isr, answer.partition_epoch) == (0, [0, 1, 2], expanded.zk_version)
            assert zk.state("isr", 0) == expanded
        finally:
            zk.close()
