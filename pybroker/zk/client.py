"""kazoo behind an asyncio face: blocking calls run in worker threads, watches become queue events.

Concurrency notes:
1. kazoo runs watch callbacks and session-state listeners on its own threads. They never touch
   broker state: they `post` a `ZkEvent` into the one `EventQueue` (events.py) drained by ONE task
   (`run_events`), so every state change happens on the loop, in order.
2. Watches are one-shot (ZooKeeper semantics): a handler re-reads the znode with `watch=` set
   again, which both re-arms the watch and sees any change that raced with the notification.
3. `zookeeper.connect` may end in a chroot (`host:port/kafka`); it is created if missing, as Kafka does.
4. The session's timers are kazoo's, not the broker's injected clock (common/clock.py): the session and connection
   timeouts, kazoo's reconnect backoff and this module's waits for kazoo's start and stop run on real time, as
   ZooKeeper, another process, measures the session on its own; a ManualClock does not hold them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Callable

from kazoo.exceptions import NoNodeError, RolledBackError
from kazoo.protocol.states import KazooState, ZnodeStat

from pybroker.zk import paths as zp
from pybroker.zk.events import SESSION_LOST, SESSION_RECONNECTED, EventHandler, EventQueue, Work, ZkEvent

if TYPE_CHECKING:
    from kazoo.client import KazooClient

log = logging.getLogger("pybroker.zookeeper")

__all__ = ["SESSION_LOST", "SESSION_RECONNECTED", "ZkClient", "ZkEvent", "split_chroot"]


def _kazoo_client(hosts: str, timeout_s: float) -> KazooClient:
    """kazoo.client (and its recipes, ~0.8 MiB of a running broker) loads only here: a broker on embedded metadata
    never builds one."""
    from kazoo.client import KazooClient

    return KazooClient(hosts=hosts, timeout=timeout_s)


def split_chroot(connect: str) -> tuple[str, str]:
    """('h1:2181,h2:2181', '/kafka') from 'h1:2181,h2:2181/kafka'; chroot '' when there is none."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, (slash + chroot).rstrip("/") if slash else ""


class ZkClient:
    def __init__(self, connect: str, *, session_timeout_ms: int, connection_timeout_ms: int):
        self._hosts, self._chroot = split_chroot(connect)
        self._session_timeout_s = session_timeout_ms / 1000
        self._connection_timeout_s = connection_timeout_ms / 1000
        self._kazoo: KazooClient | None = None
        self.events = EventQueue()
        self._lost = False
        #: sessions lost so far: what was done in one session can tell, when a loss is handled later,
        #: whether that loss was its own or came before it
        self.session_generation = 0

    async def start(self) -> None:
        self.events.bind(asyncio.get_running_loop())
        if self._chroot:
            await asyncio.to_thread(self._create_chroot)
        self._kazoo = _kazoo_client(self._hosts + self._chroot, self._session_timeout_s)
        self._kazoo.add_listener(self._on_state)
        await asyncio.to_thread(self._kazoo.start, self._connection_timeout_s)

    def _create_chroot(self) -> None:
        client = _kazoo_client(self._hosts, self._session_timeout_s)
        client.start(self._connection_timeout_s)
        try:
            client.ensure_path(self._chroot)
        finally:
            client.stop()
            client.close()

    async def stop(self) -> None:
        """Close the session (its ephemeral znodes go at once); bounded, as ZooKeeper may be gone."""
        if self._kazoo is not None:
            kazoo, self._kazoo = self._kazoo, None
            try:
                await asyncio.wait_for(asyncio.to_thread(kazoo.stop), self._connection_timeout_s)
            except asyncio.TimeoutError:
                log.warning("Timed out closing the ZooKeeper session")
            kazoo.close()

    @property
    def session_id(self) -> int:
        assert self._kazoo is not None
        return self._kazoo.client_id[0] if self._kazoo.client_id else 0

    # Events

    def on(self, kind: str, handler: EventHandler) -> None:
        self.events.on(kind, handler)

    async def run_events(self) -> None:
        await self.events.run()

    def submit(self, work: Work) -> None:
        self.events.submit(work)

    def post(self, event: ZkEvent) -> None:
        self.events.post(event)

    def _watcher(self, kind: str) -> Callable[[object], None]:
        return lambda watched: self.post(ZkEvent(kind, getattr(watched, "path", "")))

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:
            if self._kazoo is not None:  # not our own stop()
                log.warning("ZooKeeper session lost")
                self.session_generation += 1
                self.post(ZkEvent(SESSION_LOST))
            self._lost = True
        elif state == KazooState.CONNECTED and self._lost:
            self._lost = False
            self.post(ZkEvent(SESSION_RECONNECTED))

    # Reads (a `watch` kind re-arms a one-shot watch that posts that event)

    async def get(self, path: str, watch: str | None = None) -> tuple[bytes, ZnodeStat] | None:
        """Data and stat of `path`, or None when it does not exist."""
        try:
            return await asyncio.to_thread(self._client.get, path, self._watcher(watch) if watch else None)
        except NoNodeError:
            if watch:  # watch for its creation instead
                await asyncio.to_thread(self._client.exists, path, self._watcher(watch))
            return None

    async def children(self, path: str, watch: str | None = None) -> list[str]:
        try:
            return await asyncio.to_thread(self._client.get_children, path, self._watcher(watch) if watch else None)
        except NoNodeError:
            return []

    async def broker_registrations(self, listener: str | None = None, *,
                                   watch: str | None = None) -> dict[int, zp.BrokerRegistration]:
        """Every broker registered under /brokers/ids now, with the host and port of `listener`;
        `watch` is put on the children, to hear of brokers coming and going."""
        registrations = {}
        for child in await self.children(zp.BROKER_IDS, watch):
            node = await self.get(zp.broker_path(int(child)))
            if node is not None:
                registrations[int(child)] = zp.decode_broker(int(child), node[0], node[1].czxid, listener)
        return registrations

    async def sync(self, path: str) -> None:
        """Catch this session's server up with the leader, so the next read of `path` sees every
        write committed before now (a read may otherwise come from a lagging follower)."""
        await asyncio.to_thread(self._client.sync, path)

    # Writes

    async def ensure_paths(self, *paths: str) -> None:
        for path in paths:
            await asyncio.to_thread(self._client.ensure_path, path)

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False,
                     makepath: bool = False) -> str:
        return await asyncio.to_thread(self._client.create, path, data, ephemeral=ephemeral, sequence=sequence,
                                       makepath=makepath)

    async def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        return await asyncio.to_thread(self._client.set, path, data, version)

    async def delete(self, path: str, *, recursive: bool = False) -> None:
        with contextlib.suppress(NoNodeError):
            await asyncio.to_thread(self._client.delete, path, recursive=recursive)

    def transaction(self):  # type: ignore[no-untyped-def]
        """A kazoo transaction; commit it with `commit`."""
        return self._client.transaction()

    async def commit(self, transaction) -> list[object]:  # type: ignore[no-untyped-def]
        """Commit a transaction; raise the first failure (kazoo returns failures as values)."""
        results = await asyncio.to_thread(transaction.commit)
        failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if failures:
            raise failures[0]
        return results

    @property
    def _client(self) -> KazooClient:
        if self._kazoo is None:
            raise RuntimeError("ZooKeeper client is not started")
        return self._kazoo

