"""The controller's one ZooKeeper writer against a real ZooKeeper: election, writes fenced by the
/controller_epoch check, and no write at all once another controller took over."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import AsyncIterator, Awaitable, Callable, Iterator

import pytest
from kazoo.client import KazooClient

from pybroker.zk import paths as zp
from pybroker.controller.errors import NotControllerError
from pybroker.zk.client import ZkClient
from pybroker.controller.zk_writer import FencedZkWriter, StateConflict
from tests.cluster.zookeeper import ZooKeeperServer

SESSION_MS = 4000
KEY = ("t", 0)
_chroots = itertools.count()


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    try:
        yield server
    finally:
        server.stop()


class Setup:
    """A chroot with the persistent paths and topic t; an admin session; writers that count fencings."""

    def __init__(self, connect: str):
        self.connect = connect
        self.admin = KazooClient(connect)
        self.clients: list[ZkClient] = []
        self.fenced: list[int] = []

    async def writer(self, broker_id: int) -> FencedZkWriter:
        zk = ZkClient(self.connect, session_timeout_ms=SESSION_MS, connection_timeout_ms=SESSION_MS)
        await zk.start()
        self.clients.append(zk)

        async def on_fenced() -> None:
            self.fenced.append(broker_id)

        return FencedZkWriter(zk, broker_id, on_fenced)

    async def bump_epoch(self) -> None:
        """What another controller's election does to /controller_epoch."""
        data, stat = await asyncio.to_thread(self.admin.get, zp.CONTROLLER_EPOCH)
        await asyncio.to_thread(self.admin.set, zp.CONTROLLER_EPOCH,
                                zp.encode_controller_epoch(zp.decode_controller_epoch(data) + 1), stat.version)

    async def exists(self, path: str) -> bool:
        return await asyncio.to_thread(self.admin.exists, path) is not None


@contextlib.asynccontextmanager
async def setup(zookeeper: ZooKeeperServer) -> AsyncIterator[Setup]:
    chroot = f"/writer{next(_chroots)}"
    root = KazooClient(zookeeper.connect)
    await asyncio.to_thread(root.start, 10)
    await asyncio.to_thread(root.ensure_path, chroot)
    await asyncio.to_thread(root.stop)
    root.close()
    s = Setup(zookeeper.connect + chroot)
    await asyncio.to_thread(s.admin.start, 10)
    await asyncio.to_thread(s.admin.ensure_path, zp.BROKER_TOPICS)
    await asyncio.to_thread(s.admin.create, zp.topic_path("t"), zp.encode_topic({0: (1, 2)}, ""))
    try:
        yield s
    finally:
        for zk in s.clients:
            await zk.stop()
        await asyncio.to_thread(s.admin.stop)
        s.admin.close()


def run(zookeeper: ZooKeeperServer, scenario: Callable[[Setup], Awaitable[None]]) -> None:
    async def main() -> None:
        async with setup(zookeeper) as s:
            await scenario(s)

    asyncio.run(main())


def test_only_one_of_two_contenders_is_elected_and_the_epoch_moves_on(zookeeper: ZooKeeperServer) -> None:
    async def scenario(s: Setup) -> None:
        first, second = await s.writer(1), await s.writer(2)
        assert await first.elect() and first.active and first.epoch == 1
        assert not await second.elect() and not second.active
        data, _ = await asyncio.to_thread(s.admin.get, zp.CONTROLLER)
        assert zp.decode_controller(data) == 1

    run(zookeeper, scenario)


def test_writes_of_the_elected_controller_reach_zookeeper(zookeeper: ZooKeeperServer) -> None:
    async def scenario(s: Setup) -> None:
        writer = await s.writer(1)
        assert await writer.elect()
        created = await writer.create_partition_state(KEY, zp.LeaderAndIsr(1, 0, (1, 2), writer.epoch))
        assert created == zp.LeaderAndIsr(1, 0, (1, 2), writer.epoch, 0)
        # Created again (another writer got there first): what is stored is adopted.
        assert await writer.create_partition_state(KEY, zp.LeaderAndIsr(2, 0, (2,), writer.epoch)) == created
        written = await writer.set_partition_state(KEY, zp.LeaderAndIsr(2, 1, (2,), writer.epoch, 0))
        assert written.zk_version == 1 and await writer.read_partition_state(KEY) == written
        await writer.delete(zp.topic_path("t"), "/no/such/path")
        assert not await s.exists(zp.topic_path("t"))

    run(zookeeper, scenario)


def test_a_leaders_isr_change_is_a_state_conflict_not_a_fencing(zookeeper: ZooKeeperServer) -> None:
    async def scenario(s: Setup) -> None:
        writer = await s.writer(1)
        assert await writer.elect()
        await writer.create_partition_state(KEY, zp.LeaderAndIsr(1, 0, (1, 2), writer.epoch))
        leaders = zp.LeaderAndIsr(1, 0, (1,), writer.epoch)
        await asyncio.to_thread(s.admin.set, zp.partition_state_path(*KEY), zp.encode_partition_state(leaders), 0)
        with pytest.raises(StateConflict) as conflict:
            await writer.set_partition_state(KEY, zp.LeaderAndIsr(2, 1, (2,), writer.epoch, 0))
        assert conflict.value.current == zp.LeaderAndIsr(1, 0, (1,), writer.epoch, 1)
        assert writer.active and s.fenced == []

    run(zookeeper, scenario)


def test_a_fenced_writer_resigns_and_refuses_every_later_write(zookeeper: ZooKeeperServer) -> None:
    async def scenario(s: Setup) -> None:
        writer = await s.writer(1)
        assert await writer.elect()
        stored = await writer.create_partition_state(KEY, zp.LeaderAndIsr(1, 0, (1, 2), writer.epoch))
        assert stored is not None
        await s.bump_epoch()
        with pytest.raises(NotControllerError):
            await writer.set_partition_state(KEY, zp.LeaderAndIsr(2, 1, (2,), writer.epoch, stored.zk_version))
        assert s.fenced == [1] and not writer.active
        assert await writer.read_partition_state(KEY) == stored
        # Later writes never reach ZooKeeper, whichever kind they are.
        with pytest.raises(NotControllerError):
            await writer.delete(zp.topic_path("t"))
        with pytest.raises(NotControllerError):
            await writer.create_partition_state(("t", 1), zp.LeaderAndIsr(1, 0, (1,), writer.epoch))
        with pytest.raises(NotControllerError):
            await writer.set_topic("t", zp.encode_topic({0: (3,)}, ""))
        assert await s.exists(zp.topic_path("t")) and not await s.exists(zp.partition_path("t", 1))
        assert s.fenced == [1]

    run(zookeeper, scenario)


def test_a_fenced_delete_removes_nothing(zookeeper: ZooKeeperServer) -> None:
    async def scenario(s: Setup) -> None:
        writer = await s.writer(1)
        assert await writer.elect()
        await writer.create_partition_state(KEY, zp.LeaderAndIsr(1, 0, (1, 2), writer.epoch))
        await s.bump_epoch()
        with pytest.raises(NotControllerError):
            await writer.delete(zp.topic_path("t"))
        assert await s.exists(zp.partition_state_path(*KEY)) and s.fenced == [1]

    run(zookeeper, scenario)
