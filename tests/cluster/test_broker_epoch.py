"""A broker in ZooKeeper mode refuses controller requests addressed to an earlier run of itself: their
broker epoch is older than the czxid of its current registration (KIP-380, Kafka's KafkaApis)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from kazoo.client import KazooClient

from pybroker.client.connection import Connection
from pybroker.controller import zk_paths as zp
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from tests.cluster.conftest import CHROOT, broker_overrides
from tests.cluster.zookeeper import ZooKeeperServer
from tests.integration.broker_process import BrokerProcess


def test_requests_for_an_older_broker_epoch_are_refused(tmp_path: Path) -> None:
    zookeeper = ZooKeeperServer(tmp_path / "zookeeper").start()
    broker = BrokerProcess(tmp_path, broker_overrides(0, zookeeper.connect + CHROOT))
    try:
        broker.start()
        admin = KazooClient(zookeeper.connect + CHROOT)
        admin.start(10)
        try:
            epoch = admin.get(zp.broker_path(0))[1].czxid
            controller_epoch = zp.decode_controller_epoch(admin.get(zp.CONTROLLER_EPOCH)[0])
        finally:
            admin.stop()
            admin.close()
        assert broker.port is not None
        stale = epoch - 1
        # The partition this LeaderAndIsr would create must not appear: it is refused before anything applies.
        leader_and_isr = LeaderAndIsrRequest(
            controller_id=0, controller_epoch=controller_epoch, broker_epoch=stale, type=0,
            live_leaders=[LeaderAndIsrRequest.LeaderAndIsrLiveLeader(broker_id=0, host_name="127.0.0.1",
                                                                     port=broker.port)],
            topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(
                topic_name="ghost", topic_id=uuid.uuid4(), partition_states=[
                    LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                        partition_index=0, controller_epoch=controller_epoch, leader=0, leader_epoch=7, isr=[0],
                        partition_epoch=0, replicas=[0], adding_replicas=[], removing_replicas=[],
                        is_new=True)])])
        update_metadata = UpdateMetadataRequest(controller_id=0, controller_epoch=controller_epoch,
                                                broker_epoch=stale, live_brokers=[], topic_states=[])
        stop_replica = StopReplicaRequest(controller_id=0, controller_epoch=controller_epoch, broker_epoch=stale,
                                          topic_states=[])

        async def send() -> list[int]:
            connection = await Connection.open("127.0.0.1", broker.port, client_id="old-controller", timeout=10)
            try:
                return [(await connection.send_at(request, version, response_type)).error_code
                        for request, version, response_type in ((leader_and_isr, 6, LeaderAndIsrResponse),
                                                                (update_metadata, 7, UpdateMetadataResponse),
                                                                (stop_replica, 3, StopReplicaResponse))]
            finally:
                await connection.close()

        assert asyncio.run(send()) == [ErrorCode.STALE_BROKER_EPOCH] * 3
        assert not (tmp_path / "logs" / "ghost-0").exists()
    finally:
        broker.kill()
        zookeeper.stop()
