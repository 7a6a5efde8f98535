"""A broker's registration survives a connection lost in the middle of it (chaos round 5012): a create
whose answer was lost made the node of this very session, which the broker recognises as its own (as
Kafka's checkedEphemeralCreate does) instead of waiting for it to expire and giving up; another
session's node is still waited for and refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from pybroker.zk import paths as zp
from pybroker.controller.metadata import BrokerInfo
from pybroker.zk.client import ZkClient
from pybroker.controller.zk_metadata import ZkMetadata
from tests.cluster.zookeeper import ZooKeeperServer

SESSION_MS = 4000


def metadata_of(zk: ZkClient, broker_id: int) -> ZkMetadata:
    return ZkMetadata(zk, BrokerInfo(broker_id, "127.0.0.1", 9092), validate_configs=lambda _: None)


def test_a_registration_whose_answer_was_lost_is_this_sessions_own(tmp_path: Path) -> None:
    zookeeper = ZooKeeperServer(tmp_path / "zookeeper").start()
    try:
        async def scenario() -> None:
            zk = ZkClient(zookeeper.connect + "/reg", session_timeout_ms=SESSION_MS, connection_timeout_ms=SESSION_MS)
            await zk.start()
            try:
                # The create that reached ZooKeeper before the connection dropped: this session's node.
                await zk.create(zp.broker_path(5), b"{}", ephemeral=True, makepath=True)
                metadata = metadata_of(zk, 5)
                await asyncio.wait_for(metadata.register(wait_s=30), 5)  # before: 30 s, then "already registered"
                node = await zk.get(zp.broker_path(5))
                assert node is not None and metadata.broker_epoch == node[1].czxid

                other = KazooClient(zookeeper.connect + "/reg")  # another session holds broker 6's node
                other.start(10)
                try:
                    other.create(zp.broker_path(6), b"{}", ephemeral=True)
                    with pytest.raises(RuntimeError, match="already registered"):
                        await metadata_of(zk, 6).register(wait_s=1)
                finally:
                    other.stop()
                    other.close()
            finally:
                await zk.stop()

        asyncio.run(scenario())
    finally:
        zookeeper.stop()


def test_a_registration_again_carries_the_first_broker_epoch_of_its_process(tmp_path: Path) -> None:
    """A broker that registers again (after its session expired) says which broker epoch its process
    first registered with, so a controller can tell it from a restarted broker (chaos round 6009)."""
    zookeeper = ZooKeeperServer(tmp_path / "zookeeper").start()
    try:
        async def scenario() -> None:
            zk = ZkClient(zookeeper.connect + "/again", session_timeout_ms=SESSION_MS,
                          connection_timeout_ms=SESSION_MS)
            await zk.start()
            try:
                await zk.ensure_paths(*zp.PERSISTENT_PATHS)
                metadata = metadata_of(zk, 3)
                await metadata.register(wait_s=5)
                first = metadata.broker_epoch
                node = await zk.get(zp.broker_path(3))
                assert node is not None
                registration = zp.decode_broker(3, node[0], node[1].czxid)
                assert registration.process_epoch == first == registration.epoch

                await zk.delete(zp.broker_path(3))  # as the expiry of the session that held it
                await metadata.register(wait_s=5)
                node = await zk.get(zp.broker_path(3))
                assert node is not None
                again = zp.decode_broker(3, node[0], node[1].czxid)
                assert again.epoch == metadata.broker_epoch > first
                assert again.process_epoch == first

                restarted = metadata_of(zk, 4)  # another process: its own first epoch
                await restarted.register(wait_s=5)
                node = await zk.get(zp.broker_path(4))
                assert node is not None and zp.decode_broker(4, node[0], node[1].czxid).process_epoch > first
            finally:
                await zk.stop()

        asyncio.run(scenario())
    finally:
        zookeeper.stop()
