"""A broker in ZooKeeper mode serves controller requests only when they name the controller and
epoch registered in ZooKeeper, this broker's own registration, and come from the controller's
registered host; whatever fails, the answer is the same (no oracle) and the connection closes; a
forged epoch is refused and not remembered, so the real controller keeps working. Topic names of
requests that pass are still checked before they become paths."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from kazoo.client import KazooClient

from pybroker.client.connection import Connection
from pybroker.zk import paths as zp
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from pybroker.protocol.schema import Message
from tests.cluster.conftest import CHROOT, broker_overrides
from tests.cluster.zookeeper import ZooKeeperServer
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_confluent_kafka import create_topic
from tests.integration.test_inter_broker_guard import leader_and_isr, stop_replica

DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


async def connect(port: int, source: str) -> Connection:
    """A connection from ``source`` (127.0.0.2 is another host as far as the broker can tell)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    return Connection("127.0.0.1", port, reader, writer, "forger", 10)


def no_op(controller_id: int, controller_epoch: int, broker_epoch: int) -> LeaderAndIsrRequest:
    return LeaderAndIsrRequest(controller_id=controller_id, controller_epoch=controller_epoch,
                               broker_epoch=broker_epoch, type=0, live_leaders=[], topic_states=[])


def test_only_the_registered_controller_is_obeyed(tmp_path: Path) -> None:
    zookeeper = ZooKeeperServer(tmp_path / "zookeeper").start()
    broker = BrokerProcess(tmp_path, broker_overrides(0, zookeeper.connect + CHROOT))
    try:
        broker.start()
        admin = KazooClient(zookeeper.connect + CHROOT)
        admin.start(10)
        try:
            me = admin.get(zp.broker_path(0))[1].czxid
            epoch = zp.decode_controller_epoch(admin.get(zp.CONTROLLER_EPOCH)[0])
            assert zp.decode_controller(admin.get(zp.CONTROLLER)[0]) == 0
        finally:
            admin.stop()
            admin.close()
        assert broker.port is not None
        port = broker.port

        async def scenario() -> None:
            async def send(request: Message, version: int, response_type: type, source: str = "127.0.0.1") -> Any:
                """On a connection of its own: a refused request closes its connection."""
                connection = await connect(port, source)
                try:
                    return await connection.send_at(request, version, response_type)
                finally:
                    await connection.close()

            async def leader(request: LeaderAndIsrRequest, source: str = "127.0.0.1") -> LeaderAndIsrResponse:
                return await send(request, 7, LeaderAndIsrResponse, source)

            # (a) a controller epoch above or below ZooKeeper's, or a broker that is not the controller
            for controller_epoch in (epoch + 10 ** 6, epoch - 1):
                forged = await leader(leader_and_isr("ghost", controller_epoch=controller_epoch, broker_epoch=me,
                                                     leader_port=port))
                assert forged.error_code == DENIED
            assert (await leader(leader_and_isr("ghost", controller_id=5, controller_epoch=epoch,
                                                broker_epoch=me, leader_port=port))).error_code == DENIED
            # (b) a broker epoch that is not this broker's registration, older or newer: one answer for all
            for broker_epoch in (-1, me + 10 ** 6, me - 1):
                answer = await send(UpdateMetadataRequest(
                    controller_id=0, controller_epoch=epoch, broker_epoch=broker_epoch, live_brokers=[],
                    topic_states=[]), 8, UpdateMetadataResponse)
                assert answer.error_code == DENIED
            # (c) everything right but sent from another host than the controller's registered one
            assert (await leader(no_op(0, epoch, me), "127.0.0.2")).error_code == DENIED
            for source, broker_epoch in (("127.0.0.2", me), ("127.0.0.1", -1), ("127.0.0.1", me - 1)):
                shutdown = await send(ControlledShutdownRequest(broker_id=0, broker_epoch=broker_epoch), 3,
                                      ControlledShutdownResponse, source)
                assert shutdown.error_code == DENIED
            # The real identity from the controller's host passes (the limit of the address check on one
            # host), but names that are not topic names never become paths.
            assert (await leader(no_op(0, epoch, me))).error_code == ErrorCode.NONE
            escape = await leader(leader_and_isr("../escape", controller_epoch=epoch, broker_epoch=me,
                                                 leader_port=port))
            assert escape.error_code == ErrorCode.NONE
            assert escape.topics[0].partition_errors[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
            stopped = await send(stop_replica("../../etc", controller_epoch=epoch, broker_epoch=me), 4,
                                 StopReplicaResponse)
            assert stopped.partition_errors[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION

        asyncio.run(scenario())
        assert not (tmp_path / "logs" / "ghost-0").exists()
        assert not (tmp_path / "escape-0").exists()
        # The forged epoch was not adopted: the real controller's LeaderAndIsr for a new topic is obeyed.
        create_topic(broker.bootstrap, "after", 1)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 20000})
        producer.produce("after", b"still led")
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "after"})
        try:
            consumer.assign([TopicPartition("after", 0, 0)])
            message = consumer.poll(30)
            assert message is not None and message.error() is None and message.value() == b"still led"
        finally:
            consumer.close()
    finally:
        broker.kill()
        zookeeper.stop()
