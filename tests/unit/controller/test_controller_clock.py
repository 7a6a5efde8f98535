"""ZooKeeper mode's backoffs wait on the broker's clock (common/clock.py), as the rest of the broker's timers do,
so a test that holds time still holds them too: the controller's retry of a request to a broker that does not
answer, and a restarted broker's wait for its previous run's registration to expire (and its limit)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from kazoo.exceptions import NodeExistsError

from pybroker.common.clock import ManualClock
from pybroker.controller.channel import RETRY_BACKOFF_S, ControllerChannel
from pybroker.controller.metadata import BrokerInfo
from pybroker.controller.zk_metadata import REGISTRATION_RETRY_S, ZkMetadata
from pybroker.protocol.messages import UpdateMetadataRequest, UpdateMetadataResponse
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
