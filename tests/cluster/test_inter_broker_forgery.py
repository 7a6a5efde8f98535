"""The outside tester's forgery against a ZooKeeper-mode broker without an authorizer: read the
controller id from Metadata, search the controller epoch and the broker epoch through the guard's
answers, then send StopReplica(delete_partition=true, leader_epoch=-2). Every guess now gets the same
answer, so the search learns nothing and the partition keeps its records. With the real identity (read
from ZooKeeper here, as only a broker can), leader epochs are checked as Kafka checks them, a deletion
is logged at WARN with its source, and a separate inter-broker listener is the only one serving these
requests."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from kazoo.client import KazooClient

from pybroker.client.connection import Connection
from pybroker.client.errors import KafkaConnectionError
from pybroker.zk import paths as zp
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    MetadataRequest,
    MetadataResponse,
    StopReplicaRequest,
    StopReplicaResponse,
)
from pybroker.protocol.schema import Message
from tests.cluster.conftest import CHROOT, broker_overrides
from tests.cluster.test_inter_broker_guard import no_op
from tests.cluster.zookeeper import ZooKeeperServer
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_confluent_kafka import create_topic

RECORDS = 100
DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
SEARCH_BUDGET = 64  # the tester's 64 requests


def stop_replica(topic: str, controller_id: int, controller_epoch: int, broker_epoch: int,
                 leader_epoch: int) -> StopReplicaRequest:
    return StopReplicaRequest(
        controller_id=controller_id, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
        topic_states=[StopReplicaRequest.StopReplicaTopicState(topic_name=topic, partition_states=[
            StopReplicaRequest.StopReplicaPartitionState(partition_index=0, leader_epoch=leader_epoch,
                                                         delete_partition=True)])])


async def send(port: int, request: Message, version: int, response_type: type) -> Message:
    """One request on a connection of its own (a refused guarded request closes its connection)."""
    connection = await Connection.open("127.0.0.1", port, client_id="forger", timeout=30)
    try:
        return await connection.send_at(request, version, response_type)
    finally:
        await connection.close()


def fill(bootstrap: str, topic: str) -> None:
    create_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(topic, f"record-{i}".encode())
    assert producer.flush(30) == 0


def records(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4()}",
                         "enable.partition.eof": True})
    count = 0
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        while True:
            message = consumer.poll(30)
            assert message is not None, "no end of partition"
            if message.error() is not None:
                return count
            count += 1
    finally:
        consumer.close()


def real_identity(zookeeper: ZooKeeperServer) -> tuple[int, int, int]:
    """(controller id, controller epoch, broker 0's epoch) as ZooKeeper has them."""
    admin = KazooClient(zookeeper.connect + CHROOT)
    admin.start(10)
    try:
        return (zp.decode_controller(admin.get(zp.CONTROLLER)[0]),
                zp.decode_controller_epoch(admin.get(zp.CONTROLLER_EPOCH)[0]), admin.get(zp.broker_path(0))[1].czxid)
    finally:
        admin.stop()
        admin.close()


@contextmanager
def victim_broker(tmp_path: Path) -> Iterator[tuple[ZooKeeperServer, BrokerProcess, int]]:
    """ZooKeeper and broker 0 (the controller), whose topic ``victim`` holds RECORDS acknowledged records."""
    zookeeper = ZooKeeperServer(tmp_path / "zookeeper").start()
    broker = BrokerProcess(tmp_path, broker_overrides(0, zookeeper.connect + CHROOT))
    try:
        broker.start()
        fill(broker.bootstrap, "victim")
        assert broker.port is not None
        yield zookeeper, broker, broker.port
    finally:
        broker.kill()
        zookeeper.stop()


def test_the_epoch_search_finds_nothing_and_the_forged_stop_replica_deletes_nothing(tmp_path: Path) -> None:
    with victim_broker(tmp_path) as (_, broker, port):
        async def attack() -> tuple[list[int], StopReplicaResponse]:
            answers: list[int] = []

            async def probe(controller_id: int, controller_epoch: int, broker_epoch: int) -> int:
                answer = await send(port, no_op(controller_id, controller_epoch, broker_epoch), 7, LeaderAndIsrResponse)
                answers.append(answer.error_code)
                return answer.error_code

            metadata = await send(port, MetadataRequest(topics=None), 12, MetadataResponse)
            controller = metadata.controller_id
            epoch = 0  # the controller epoch: the first one not answered STALE_CONTROLLER_EPOCH
            while epoch < 8 and await probe(controller, epoch, -1) == ErrorCode.STALE_CONTROLLER_EPOCH:
                epoch += 1
            low, high = 0, 2 ** 62  # the broker epoch, by bisection on STALE_BROKER_EPOCH (lower) or not
            while low < high and len(answers) < SEARCH_BUDGET:
                middle = (low + high) // 2
                code = await probe(controller, epoch, middle)
                if code == ErrorCode.NONE:
                    low = high = middle
                elif code == ErrorCode.STALE_BROKER_EPOCH:
                    low = middle + 1
                else:
                    high = middle
            forged = await send(port, stop_replica("victim", controller, epoch, low, -2), 4, StopReplicaResponse)
            return answers, forged

        answers, forged = asyncio.run(attack())
        assert set(answers) == {DENIED}, "an answer told the forger something"
        assert forged.error_code == DENIED and forged.partition_errors == []
        assert (tmp_path / "logs" / "victim-0").is_dir()
        assert records(broker.bootstrap, "victim") == RECORDS


def test_leader_epochs_fence_a_stale_stop_replica_and_a_deletion_names_its_source(tmp_path: Path) -> None:
    with victim_broker(tmp_path) as (zookeeper, broker, port):
        controller, epoch, me = real_identity(zookeeper)

        async def scenario() -> tuple[LeaderAndIsrResponse, StopReplicaResponse, StopReplicaResponse]:
            metadata = await send(port, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="victim")]),
                                  12, MetadataResponse)
            victim = metadata.topics[0]
            newer = victim.partitions[0].leader_epoch + 5
            moved = await send(port, LeaderAndIsrRequest(
                controller_id=controller, controller_epoch=epoch, broker_epoch=me, type=0,
                live_leaders=[LeaderAndIsrRequest.LeaderAndIsrLiveLeader(broker_id=0, host_name="127.0.0.1",
                                                                         port=port)],
                topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(
                    topic_name="victim", topic_id=victim.topic_id, partition_states=[
                        LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                            partition_index=0, controller_epoch=epoch, leader=0, leader_epoch=newer, isr=[0],
                            partition_epoch=1, replicas=[0], adding_replicas=[], removing_replicas=[],
                            is_new=False)])]), 7, LeaderAndIsrResponse)
            stale = await send(port, stop_replica("victim", controller, epoch, me, newer - 1), 4, StopReplicaResponse)
            deleted = await send(port, stop_replica("victim", controller, epoch, me, newer), 4, StopReplicaResponse)
            return moved, stale, deleted

        moved, stale, deleted = asyncio.run(scenario())
        assert [p.error_code for t in moved.topics for p in t.partition_errors] == [ErrorCode.NONE]
        assert [p.error_code for p in stale.partition_errors] == [ErrorCode.FENCED_LEADER_EPOCH]
        assert [p.error_code for p in deleted.partition_errors] == [ErrorCode.NONE]
        assert broker.wait_for_log(rf"WARN Deleting the log of victim-0 .*: StopReplica from controller {controller} "
                                   rf"\(epoch {epoch}\) at 127\.0\.0\.1:\d+")
        assert not (tmp_path / "logs" / "victim-0").exists()


def test_a_separate_inter_broker_listener_is_the_only_one_serving_controller_requests(tmp_path: Path) -> None:
    zookeeper = ZooKeeperServer(tmp_path / "zookeeper").start()
    overrides = {**broker_overrides(0, zookeeper.connect + CHROOT),
                 "listeners": "PLAINTEXT://127.0.0.1:0,BROKER://127.0.0.1:0",
                 "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT",
                 "inter.broker.listener.name": "BROKER"}
    broker = BrokerProcess(tmp_path, overrides)
    try:
        broker.start()
        port = broker.port  # the first listener: the clients'
        assert port is not None
        controller, epoch, me = real_identity(zookeeper)

        async def on_client_listener() -> int:
            try:
                return (await send(port, no_op(controller, epoch, me), 7, LeaderAndIsrResponse)).error_code
            except KafkaConnectionError:
                return -1

        assert asyncio.run(on_client_listener()) == DENIED
    finally:
        broker.kill()
        zookeeper.stop()
