"""UpdateMetadata requests from two controllers, handled on two connections at once, leave the broker's
metadata cache as if they had been applied one after the other, as Kafka's cache applies them under
its lock. Applying one reads the configs of topics new to this broker from ZooKeeper; an update from
the deposed controller (epoch 1) that waited there must not then overwrite what the new controller's
update (epoch 2) applied meanwhile."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from pybroker.controller.metadata import BrokerInfo
from pybroker.zk.client import ZkClient
from pybroker.controller.zk_metadata import ZkMetadata
from pybroker.protocol.messages import UpdateMetadataRequest
from tests.cluster.zookeeper import ZooKeeperServer

SESSION_MS = 4000
Update = UpdateMetadataRequest


def update(controller_epoch: int, topic: str, leader: int) -> UpdateMetadataRequest:
    """One partition of `topic` led by `leader`, brokers 0 and 1 live."""
    return Update(controller_id=leader, controller_epoch=controller_epoch, broker_epoch=-1, live_brokers=[
        Update.UpdateMetadataBroker(id=b, rack=None, endpoints=[Update.UpdateMetadataEndpoint(
            port=9092 + b, host="127.0.0.1", listener="PLAINTEXT", security_protocol=0)]) for b in (0, 1)],
        topic_states=[Update.UpdateMetadataTopicState(topic_name=topic, topic_id=uuid.uuid4(), partition_states=[
            Update.UpdateMetadataPartitionState(partition_index=0, controller_epoch=controller_epoch, leader=leader,
                                                leader_epoch=controller_epoch, isr=[0, 1], replicas=[0, 1])])])


def test_an_older_controllers_update_that_waited_on_zookeeper_does_not_undo_a_newer_one(tmp_path: Path) -> None:
    zookeeper = ZooKeeperServer(tmp_path / "zookeeper").start()
    try:
        async def scenario() -> None:
            zk = ZkClient(zookeeper.connect + "/updates", session_timeout_ms=SESSION_MS,
                          connection_timeout_ms=SESSION_MS)
            await zk.start()
            try:
                metadata = ZkMetadata(zk, BrokerInfo(0, "127.0.0.1", 9092), validate_configs=lambda _: None)
                await metadata.configs_for("known")  # its configs cached: the newer update never waits
                # The older update starts first and waits for the configs of "unseen"; the newer one
                # runs to its end in the meantime.
                await asyncio.gather(metadata.apply_update(update(1, "unseen", 0)),
                                     metadata.apply_update(update(2, "known", 1)))
                known = metadata.topic("known")
                assert known is not None and known.partitions[0].leader == 1
                assert metadata.controller_epoch == 2 and metadata.controller_id == 1
            finally:
                await zk.stop()

        asyncio.run(scenario())
    finally:
        zookeeper.stop()
