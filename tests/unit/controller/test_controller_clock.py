"""ZooKeeper mode's backoffs wait on the broker's clock (common/clock.py), as the rest of the broker's timers do,
so a test that holds time still holds them too: the controller's retry of a request to a broker that does not
answer, and a restarted broker's wait for its previous run's registration to expire (and its limit); and what it
stamps and ages by the clock: the /controller znode's timestamp, the ACL change notifications' expiry."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest
from kazoo.exceptions import NodeExistsError

from pybroker.common.clock import ManualClock
from pybroker.controller.acl_store import LITERAL_CHANGES, NOTIFICATION_EXPIRY_MS, ZkAclStore, encode_change
from pybroker.controller.acl_store import encode_entries, znode_path
from pybroker.controller.channel import RETRY_BACKOFF_S, ControllerChannel
from pybroker.controller.metadata import BrokerInfo
from pybroker.controller.zk_metadata import REGISTRATION_RETRY_S, ZkMetadata
from pybroker.controller.zk_writer import FencedZkWriter
from pybroker.protocol.messages import UpdateMetadataRequest, UpdateMetadataResponse
from pybroker.security.acl import AccessControlEntry, AclOperation, AclPermissionType, ResourcePattern, ResourceType
from pybroker.security.authorizer import Authorizer
from pybroker.zk import paths as zp
from pybroker.zk.events import ZkEvent
from tests.eventually import eventually_async


class WatchedClock(ManualClock):
    """A manual clock that also tells how long each sleep on it was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await super().sleep(seconds)


async def quiet() -> None:
    """Let every task run until each waits for the clock or a socket."""
    for _ in range(100):
        await asyncio.sleep(0)


def test_a_failed_controller_request_is_retried_after_the_backoff_on_the_clock() -> None:
    async def scenario() -> None:
        clock = WatchedClock()
        accepted = 0

        def hang_up(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal accepted
            accepted += 1
            writer.close()

        server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        channel = ControllerChannel(5000, clock=clock)
        try:
            channel.add_broker(1, "127.0.0.1", port)
            channel.send(1, UpdateMetadataRequest(), 7, UpdateMetadataResponse)
            await eventually_async(lambda: clock.sleeps == [RETRY_BACKOFF_S], "the retry backoff, on the clock")
            clock.advance(RETRY_BACKOFF_S / 2)
            await quiet()
            assert (accepted, clock.sleeps) == (1, [RETRY_BACKOFF_S])  # held while the clock stands short of it
            clock.advance(RETRY_BACKOFF_S / 2 + 1e-6)
            await eventually_async(lambda: accepted == 2 and len(clock.sleeps) == 2, "the retry and its backoff")
        finally:
            await channel.close()
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


class LingeringRegistration:
    """The ZooKeeper calls of a registration, as ZooKeeper answers them: the previous run's ephemeral node
    (another session's) is in place until `expire` removes it; a create while a node is there is refused."""

    session_id = 2

    def __init__(self) -> None:
        self.owner: int | None = 1
        self.reads = 0

    def on(self, _kind: str, _handler: Any) -> None:
        """No session event (connection loss, expiry) comes in these tests."""

    async def create(self, _path: str, _data: bytes, **_options: Any) -> None:
        if self.owner is not None:
            raise NodeExistsError()
        self.owner = self.session_id

    async def get(self, _path: str) -> tuple[bytes, Any] | None:
        self.reads += 1
        return None if self.owner is None else (b"{}", SimpleNamespace(ephemeralOwner=self.owner, czxid=7))

    def expire(self) -> None:
        self.owner = None


def _metadata(clock: ManualClock) -> tuple[ZkMetadata, LingeringRegistration]:
    zk = LingeringRegistration()
    me = BrokerInfo(0, "127.0.0.1", 9092)
    return ZkMetadata(zk, me, validate_configs=lambda _configs: None, clock=clock), zk  # type: ignore[arg-type]


def test_the_registration_waits_for_the_previous_runs_node_on_the_clock() -> None:
    async def scenario() -> None:
        clock = WatchedClock()
        metadata, zk = _metadata(clock)
        registering = asyncio.create_task(metadata.register(6.0))
        await eventually_async(lambda: clock.sleeps == [REGISTRATION_RETRY_S], "the registration's retry backoff")
        assert zk.reads == 1
        zk.expire()
        clock.advance(REGISTRATION_RETRY_S)
        await asyncio.wait_for(registering, 5)
        assert (zk.reads, metadata.broker_epoch) == (2, 7)

    asyncio.run(scenario())


def test_the_registration_gives_up_once_the_clock_passes_its_wait() -> None:
    async def scenario() -> None:
        clock = WatchedClock()
        metadata, zk = _metadata(clock)
        registering = asyncio.create_task(metadata.register(6.0))
        await eventually_async(lambda: clock.sleeps, "the registration's retry backoff")
        clock.advance(6.0)
        with pytest.raises(RuntimeError, match="already registered"):
            await asyncio.wait_for(registering, 5)
        assert zk.reads == 2  # once at the start, once past the deadline

    asyncio.run(scenario())


class Znodes:
    """The ZooKeeper calls of an election and of the ACL change notifications, on znodes in a dict: a create of a
    znode that exists is refused, a set or a delete with a version checks it, and ZooKeeper stamps each new znode's
    ctime from `server_ms` (its own clock, not the broker's)."""

    def __init__(self, server_ms: int) -> None:
        self.server_ms = server_ms
        self.nodes: dict[str, tuple[bytes, int, int]] = {}  # path -> data, version, ctime

    def on(self, _kind: str, _handler: Any) -> None:
        """Watches fire only when a test calls the handler."""

    async def get(self, path: str) -> tuple[bytes, Any] | None:
        if path not in self.nodes:
            return None
        data, version, ctime = self.nodes[path]
        return data, SimpleNamespace(version=version, ctime=ctime)

    async def children(self, path: str, **_options: Any) -> list[str]:
        return sorted({p[len(path) + 1:].split("/")[0] for p in self.nodes if p.startswith(path + "/")})

    async def ensure_paths(self, *paths: str) -> None:
        for path in paths:
            self.nodes.setdefault(path, (b"", 0, self.server_ms))

    async def create(self, path: str, data: bytes = b"", **_options: Any) -> None:
        if path in self.nodes:
            raise NodeExistsError()
        self.nodes[path] = (data, 0, self.server_ms)

    async def delete(self, path: str) -> None:
        del self.nodes[path]

    def transaction(self) -> list[tuple[str, tuple[Any, ...]]]:
        class Ops(list):  # type: ignore[type-arg]
            def create(self, *args: Any, **_options: Any) -> None:
                self.append(("create", args))

            def set_data(self, *args: Any) -> None:
                self.append(("set_data", args))
        return Ops()

    async def commit(self, transaction: list[tuple[str, tuple[Any, ...]]]) -> None:
        for op, args in transaction:
            if op == "create":
                await self.create(*args)
            else:
                path, data, version = args
                assert self.nodes[path][1] == version
                self.nodes[path] = (data, version + 1, self.nodes[path][2])


def test_the_controller_znode_is_stamped_by_the_clock() -> None:
    """Kafka's KafkaZkClient writes /controller's timestamp from its `Time`: the broker's clock, not the wall's."""
    async def scenario() -> None:
        clock = ManualClock(wall_ms=1_000_000_000_000)  # 2001: far from any wall clock this test runs on
        zk = Znodes(server_ms=clock.wall_ms())

        async def on_fenced() -> None:
            raise AssertionError("not fenced in this test")

        writer = FencedZkWriter(zk, 4, on_fenced, clock)  # type: ignore[arg-type]
        clock.advance(2.5)
        assert await writer.elect() and writer.epoch == 1
        controller = json.loads(zk.nodes[zp.CONTROLLER][0])
        assert (controller["brokerid"], controller["timestamp"]) == (4, "1000000002500")

    asyncio.run(scenario())


def test_acl_change_notifications_expire_by_the_clock() -> None:
    """A change notification read is deleted once older than 15 minutes on the broker's clock (Kafka's
    ZkNodeChangeNotificationListener: its `Time` less the znode's ctime), at the next notification's reading."""
    async def scenario() -> None:
        clock = ManualClock(wall_ms=1_000_000_000_000)
        zk = Znodes(server_ms=clock.wall_ms())
        authorizer = Authorizer()
        store = ZkAclStore(zk, authorizer, clock)  # type: ignore[arg-type]
        await store.start()
        topic = ResourcePattern(ResourceType.TOPIC, "orders")
        read = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
        await zk.create(znode_path(topic), encode_entries([read]))
        root, data = encode_change(topic)
        first = f"{root}/acl_changes_0000000000"
        await zk.create(first, data)
        await store._on_changes(ZkEvent("acl-changes"))
        assert authorizer.entries(topic) == {read}
        later = f"{root}/acl_changes_0000000001"
        for step_ms, name in ((NOTIFICATION_EXPIRY_MS, later), (1, f"{root}/acl_changes_0000000002")):
            clock.advance(step_ms / 1000)
            zk.server_ms = clock.wall_ms()
            await zk.create(name, data)
            await store._on_changes(ZkEvent("acl-changes"))
            if step_ms > 1:  # exactly 15 minutes old: kept, as Kafka keeps it
                assert first in zk.nodes
        assert root == LITERAL_CHANGES and first not in zk.nodes and later in zk.nodes

    asyncio.run(scenario())
