"""A broker in ZooKeeper mode refuses controller requests addressed to an earlier run of itself: their
broker epoch is older than the czxid of its current registration (KIP-380). Kafka answers them
STALE_BROKER_EPOCH; pybroker's guard answers every request it cannot verify the same way,
CLUSTER_AUTHORIZATION_FAILED, since a distinct answer for an older epoch let a forger bisect to the
current one."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path

from kazoo.client import KazooClient

from pybroker.client.connection import Connection
from pybroker.client.errors import KafkaClientError
from pybroker.zk import paths as zp
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    MetadataRequest,
    MetadataResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from tests.cluster.conftest import CHROOT, broker_overrides
from tests.cluster.zookeeper import ZooKeeperServer
from tests.integration.broker_process import BrokerProcess
from tests.ports import restartable_port


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
            codes = []
            for request, version, response_type in ((leader_and_isr, 6, LeaderAndIsrResponse),
                                                    (update_metadata, 7, UpdateMetadataResponse),
                                                    (stop_replica, 3, StopReplicaResponse)):
                # a refused request closes its connection
                connection = await Connection.open("127.0.0.1", broker.port, client_id="old-controller", timeout=10)
                try:
                    codes.append((await connection.send_at(request, version, response_type)).error_code)
                finally:
                    await connection.close()
            return codes

        # Refused as every request the guard cannot verify is, with one answer (no oracle on the epoch).
        assert asyncio.run(send()) == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED] * 3
        assert not (tmp_path / "logs" / "ghost-0").exists()
    finally:
        broker.kill()
        zookeeper.stop()


def test_a_restarted_broker_serves_no_controller_request_before_it_registered(tmp_path: Path) -> None:
    """Chaos seed 103: a restarted broker listens while its previous run's registration has not expired
    yet. A LeaderAndIsr for that registration's broker epoch must not be applied (it found follower
    fetching not started yet, failed, and left the partition at the leader epoch, so the controller's
    later request at the same epoch was skipped and the replica never fetched): it waits until this run
    registered and is refused; the same leader epoch at the new broker epoch applies."""
    zookeeper = ZooKeeperServer(tmp_path / "zookeeper").start()
    port = restartable_port()
    overrides = {**broker_overrides(0, zookeeper.connect + CHROOT), "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                 "zookeeper.session.timeout.ms": "30000"}  # the old registration is waited for, not refused
    broker = BrokerProcess(tmp_path, overrides)
    controller = KazooClient(zookeeper.connect + CHROOT)  # a controller (broker 7) and the old run of broker 0
    old_run = KazooClient(zookeeper.connect + CHROOT)
    controller.start(10)
    old_run.start(10)
    starting = threading.Thread(target=broker.start, kwargs={"timeout": 60.0}, daemon=True)
    try:
        controller.create(zp.broker_path(7), zp.encode_broker("127.0.0.1", 1, None, 0), ephemeral=True,
                          makepath=True)
        controller.create(zp.CONTROLLER_EPOCH, zp.encode_controller_epoch(3), makepath=True)
        controller.create(zp.CONTROLLER, zp.encode_controller(7, 0), ephemeral=True)
        old_run.create(zp.broker_path(0), zp.encode_broker("127.0.0.1", port, None, 0), ephemeral=True)
        old_epoch = old_run.get(zp.broker_path(0))[1].czxid
        starting.start()

        def request(broker_epoch: int) -> LeaderAndIsrRequest:
            return LeaderAndIsrRequest(
                controller_id=7, controller_epoch=3, broker_epoch=broker_epoch, type=0,
                live_leaders=[LeaderAndIsrRequest.LeaderAndIsrLiveLeader(broker_id=7, host_name="127.0.0.1",
                                                                         port=1)],
                topic_states=[LeaderAndIsrRequest.LeaderAndIsrTopicState(
                    topic_name="gap", topic_id=uuid.uuid4(), partition_states=[
                        LeaderAndIsrRequest.LeaderAndIsrPartitionState(
                            partition_index=0, controller_epoch=3, leader=7, leader_epoch=4, isr=[7, 0],
                            partition_epoch=0, replicas=[7, 0], adding_replicas=[], removing_replicas=[],
                            is_new=False)])])

        async def scenario() -> None:
            deadline = time.monotonic() + 30
            while True:  # the listener is bound before the broker registers
                try:
                    connection = await Connection.open("127.0.0.1", port, client_id="controller", timeout=30)
                    break
                except (KafkaClientError, OSError):
                    assert time.monotonic() < deadline, "the restarted broker never listened"
                    await asyncio.sleep(0.05)
            try:
                client = await Connection.open("127.0.0.1", port, client_id="client", timeout=30)
                # A client's request during start-up is held until the metadata is ready (it crashed).
                metadata = asyncio.ensure_future(client.send_at(MetadataRequest(topics=None), 12, MetadataResponse))
                early = asyncio.ensure_future(connection.send_at(request(old_epoch), 7, LeaderAndIsrResponse))
                await asyncio.to_thread(old_run.stop)  # the old session ends: this run registers
                assert (await asyncio.wait_for(early, 30)).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
                await connection.close()  # the broker closes it after a refusal
                connection = await Connection.open("127.0.0.1", port, client_id="controller", timeout=30)
                new_epoch = (await asyncio.to_thread(controller.get, zp.broker_path(0)))[1].czxid
                assert new_epoch > old_epoch
                answer = await connection.send_at(request(new_epoch), 7, LeaderAndIsrResponse)
                assert answer.error_code == ErrorCode.NONE
                assert [p.error_code for t in answer.topics for p in t.partition_errors] == [ErrorCode.NONE]
                assert 0 in [b.node_id for b in (await asyncio.wait_for(metadata, 30)).brokers]
                await client.close()
            finally:
                await connection.close()

        asyncio.run(scenario())
        assert broker.wait_for_log(r"gap-0: follower of 7 at leader epoch 4")
        starting.join(30)
    finally:
        broker.kill()
        for client in (controller, old_run):
            client.stop()
            client.close()
        zookeeper.stop()
