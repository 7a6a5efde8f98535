"""A real pybroker for other projects' tests: ``with EmbeddedBroker() as broker: broker.bootstrap_servers``.

The broker runs as `python -m pybroker serve` in a child process (so a test's own event loop, threads
and signals stay its own, and SIGKILL is a real crash) on an ephemeral loopback port (port 0: the kernel
picks it, so parallel test workers never collide) in a temporary directory, removed on close. The child
dies with its parent (see process.py). Kafka settings are keyword arguments with dots written as
underscores (``num_partitions=3``) or a ``config`` dict with Kafka's own names.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, TypeVar

import pybroker
from pybroker.testing.process import ChildProcess

READY = re.compile(r"listening on [^\s:]+:(\d+)")
REGISTRY_READY = re.compile(r"Schema registry listening on (https?://\S+)")
PORT_IN_USE = re.compile(r"address already in use|Errno 98", re.IGNORECASE)
#: Kafka defaults that only slow a test down; any of them can be overridden.
TESTING_DEFAULTS = {
    "group.initial.rebalance.delay.ms": "0",  # Kafka's 3 s wait for more members before a group's first rebalance
    "offsets.topic.num.partitions": "1",  # 50 partitions of __consumer_offsets to create at the first group
    "transaction.state.log.num.partitions": "1",
}
PACKAGE_ROOT = str(Path(pybroker.__file__).resolve().parents[1])
T = TypeVar("T")


_OPEN: set[BrokerNode] = set()  # strong references: a broker object the test dropped still gets closed


@atexit.register
def _close_forgotten() -> None:
    """A broker the test never closed: killed (if the parent-death signal has not already) and its
    temporary directory removed when the interpreter exits."""
    for node in list(_OPEN):
        node.close()


class EmbeddedBrokerError(RuntimeError):
    """The broker could not be started (or driven); the message says why and quotes its log."""


def kafka_config(config: Mapping[str, Any] | None, overrides: Mapping[str, Any]) -> dict[str, str]:
    """Kafka property names and string values from a dict and ``snake_case`` keyword arguments."""
    merged = {**(config or {}), **{key.replace("_", "."): value for key, value in overrides.items()}}
    return {key: _property(value) for key, value in merged.items()}


def _property(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def warm_imports() -> None:
    """Imports what creating a topic and the first requests need (our client and every message codec the
    version negotiation looks at, a few hundred ms), so that it overlaps the broker child's own start-up
    instead of following it."""
    import pybroker.client.admin  # noqa: F401
    import pybroker.client.cluster  # noqa: F401
    from pybroker.client.versions import client_versions

    client_versions()


def run_sync(factory: Callable[[], Awaitable[T]]) -> T:
    """Runs a coroutine to completion from synchronous code, also when the caller is inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_as_coroutine(factory))
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _as_coroutine(factory)).result()


async def _as_coroutine(factory: Callable[[], Awaitable[T]]) -> T:
    return await factory()


class BrokerNode:
    """One broker child process over its lifetimes: a data directory and, once started, a fixed port.

    The split between ``spawn`` and ``finish_start`` lets a cluster start its brokers in parallel and the
    async wrapper await readiness without blocking its loop; everything else is shared by every front end.
    """

    def __init__(self, config: Mapping[str, str], *, data_dir: str | Path | None, host: str, port: int,
                 broker_id: int, tmp_root: str | Path | None = None) -> None:
        self.host = host
        self.port = port
        self.broker_id = broker_id
        self.config = {**TESTING_DEFAULTS, **config}
        self._given_dir = Path(data_dir) if data_dir is not None else None
        self._tmp_root = tmp_root
        self.data_dir: Path | None = self._given_dir
        self.child: ChildProcess | None = None
        self._started_once = False
        self.schema_registry_url: str | None = None  # once started with schema.registry.listeners
        _OPEN.add(self)

    @property
    def bootstrap_servers(self) -> str:
        if self.child is None or self.port == 0:
            raise EmbeddedBrokerError("the broker is not running: start() it first")
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.child is not None and self.child.alive()

    @property
    def pid(self) -> int | None:
        return self.child.pid if self.child is not None else None

    def spawn(self) -> ChildProcess:
        if self.child is not None and self.child.alive():
            raise EmbeddedBrokerError(f"broker {self.broker_id} is already running (pid {self.child.pid})")
        data_dir = self._ensure_data_dir()
        properties = {"broker.id": str(self.broker_id), "listeners": f"PLAINTEXT://{self.host}:{self.port}",
                      "log.dirs": str(data_dir / "logs"), **self.config}
        config_file = data_dir / "server.properties"
        try:
            config_file.write_text("".join(f"{key}={_escape(value)}\n" for key, value in properties.items()))
        except OSError as exc:
            self._remove_own_dir()
            raise EmbeddedBrokerError(f"cannot write the broker's config in {data_dir}: {exc}") from None
        env = {**os.environ, "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))}
        self.child = ChildProcess([sys.executable, "-m", "pybroker", "serve", str(config_file)], READY,
                                  cwd=data_dir, env=env)
        return self.child

    def finish_start(self) -> None:
        """After the child's ready line or exit: pins the bound port, or cleans up and explains."""
        child = self.child
        assert child is not None
        if child.ready_match is not None:
            self.port = int(child.ready_match.group(1))  # kept: restart() comes back on the same address
            registry = next((m for m in map(REGISTRY_READY.search, list(child.lines)) if m), None)
            if registry is not None:  # its port is kept too
                self.schema_registry_url = registry.group(1)
                self.config["schema.registry.listeners"] = self.schema_registry_url
            self._started_once = True
            return
        child.kill()
        log = child.tail(30)
        if PORT_IN_USE.search(log):
            reason = f"port {self.port} on {self.host} is already in use"
        else:
            reason = "it exited" if child.process.returncode not in (None, -9) else "it did not become ready"
        if not self._started_once:  # a failed restart keeps the data it was meant to come back on
            self._remove_own_dir()
        raise EmbeddedBrokerError(f"pybroker did not start ({reason}); the last lines of its log:\n{log}")

    def start(self, timeout: float) -> None:
        child = self.spawn()
        warm_imports()  # while the child starts: a test's first call then pays no import
        child.wait_ready(timeout)
        self.finish_start()

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM: a clean shutdown (logs flushed, checkpoints written)."""
        return self.child.terminate(timeout) if self.child is not None else None

    def kill(self) -> int | None:
        """SIGKILL: a crash. What was written reached the page cache, which survives the process."""
        return self.child.kill() if self.child is not None else None

    def close(self) -> None:
        self.kill()
        self._remove_own_dir()
        _OPEN.discard(self)

    def log_tail(self, lines: int = 50) -> str:
        return self.child.tail(lines) if self.child is not None else ""

    def _ensure_data_dir(self) -> Path:
        if self.data_dir is not None:
            try:
                self.data_dir.mkdir(parents=True, exist_ok=True)
                probe = tempfile.NamedTemporaryFile(dir=self.data_dir)
                probe.close()
            except OSError as exc:
                raise EmbeddedBrokerError(f"the broker's data directory {self.data_dir} is not writable: "
                                          f"{exc}") from None
            return self.data_dir
        try:
            self.data_dir = Path(tempfile.mkdtemp(prefix="pybroker-", dir=self._tmp_root))
        except OSError as exc:
            where = self._tmp_root or tempfile.gettempdir()
            raise EmbeddedBrokerError(f"cannot create the broker's temporary directory in {where}: {exc}") from None
        return self.data_dir

    def _remove_own_dir(self) -> None:
        if self._given_dir is None and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None


def _escape(value: str) -> str:
    # .properties: a backslash escapes; values are single-line.
    return value.replace("\\", "\\\\").replace("\n", "\\n")


async def create_topic_async(bootstrap: str, name: str, partitions: int, replication_factor: int,
                             config: Mapping[str, Any] | None, *, timeout: float = 30.0) -> str:
    """Creates a topic over the wire (CreateTopics on the controller) and waits until every broker of
    ``bootstrap`` knows a leader for every partition: metadata reaches the other brokers of a cluster
    after CreateTopics answers, and the test's first produce may bootstrap from any of them."""
    from pybroker.client.admin import AdminClient, NewTopic
    from pybroker.client.cluster import KafkaClient

    async with KafkaClient(bootstrap, client_id="pybroker-testing", timeout=timeout) as client:
        topic = NewTopic(name, partitions, replication_factor,
                         configs={key: _property(value) for key, value in (config or {}).items()})
        (await AdminClient(client).create_topics([topic], timeout_ms=int(timeout * 1000)))[name].raise_error()
    deadline = time.monotonic() + timeout
    for address in bootstrap.split(","):
        async with KafkaClient(address, client_id="pybroker-testing", timeout=timeout) as client:
            while not await _has_leaders(AdminClient(client), name, partitions):
                if time.monotonic() > deadline:
                    raise EmbeddedBrokerError(f"broker {address} knows no leader for every partition of {name} "
                                              f"after {timeout} s")
                await asyncio.sleep(0.05)
    return name


async def _has_leaders(admin: Any, name: str, partitions: int) -> bool:
    from pybroker.client.errors import ResponseError

    try:
        described = (await admin.describe_topics([name]))[name]
    except ResponseError:  # this broker has not heard of the topic yet
        return False
    return len(described.partitions) == partitions and all(p.leader is not None for p in described.partitions)


async def leader_async(bootstrap: str, topic: str, partition: int, timeout: float = 30.0) -> int | None:
    from pybroker.client.admin import AdminClient
    from pybroker.client.cluster import KafkaClient

    async with KafkaClient(bootstrap, client_id="pybroker-testing", timeout=timeout) as client:
        described = (await AdminClient(client).describe_topics([topic]))[topic]
    for info in described.partitions:
        if info.partition == partition:
            return info.leader
    raise EmbeddedBrokerError(f"topic {topic} has no partition {partition}")


def unique_topic_name(prefix: str = "test") -> str:
    cleaned = re.sub(r"[^a-zA-Z0-9._-]+", "-", prefix).strip("-.")[:200] or "test"
    return f"{cleaned}-{uuid.uuid4().hex[:8]}"


class _BrokerHandle:
    """What the sync and async brokers share: one ``BrokerNode`` and the views of it."""

    def __init__(self, config: Mapping[str, Any] | None = None, *, data_dir: str | Path | None = None,
                 port: int = 0, host: str = "127.0.0.1", broker_id: int = 0, start_timeout: float = 30.0,
                 tmp_dir: str | Path | None = None, schema_registry: bool = False, **overrides: Any) -> None:
        properties = kafka_config(config, overrides)
        if schema_registry:
            properties.setdefault("schema.registry.listeners", f"http://{host}:0")
        self.node = BrokerNode(properties, data_dir=data_dir, host=host, port=port,
                               broker_id=broker_id, tmp_root=tmp_dir)
        self.start_timeout = start_timeout

    @property
    def schema_registry_url(self) -> str:
        """The schema registry's URL (``schema_registry=True``, or ``schema.registry.listeners`` set)."""
        if self.node.schema_registry_url is None:
            raise EmbeddedBrokerError("the broker serves no schema registry: start it with schema_registry=True "
                                      "(or set schema.registry.listeners)")
        return self.node.schema_registry_url

    @property
    def bootstrap_servers(self) -> str:
        return self.node.bootstrap_servers

    @property
    def port(self) -> int:
        return self.node.port

    @property
    def pid(self) -> int | None:
        return self.node.pid

    @property
    def data_dir(self) -> Path | None:
        return self.node.data_dir

    @property
    def running(self) -> bool:
        return self.node.running

    def log_tail(self, lines: int = 50) -> str:
        return self.node.log_tail(lines)


class EmbeddedBroker(_BrokerHandle):
    """A single pybroker on a loopback port, in a temporary directory (or ``data_dir``, which is kept).

    ``EmbeddedBroker(num_partitions=3, config={"log.retention.ms": "1000"})``; ``port`` pins the port
    (0: the kernel picks a free one). Use as a context manager, or call ``start()`` and ``close()``.
    """

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> EmbeddedBroker:
        self.node.start(self.start_timeout)
        return self

    def stop(self) -> None:
        """A clean shutdown (SIGTERM); the data directory stays for ``restart()``."""
        self.node.stop()

    def kill(self) -> None:
        """SIGKILL, as a crash; ``restart()`` brings the broker back on its data and port."""
        self.node.kill()

    def restart(self) -> EmbeddedBroker:
        self.node.stop()
        return self.start()

    def close(self) -> None:
        """Kills the broker and removes its temporary directory."""
        self.node.close()

    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None, *,
                     replication_factor: int = 1) -> str:
        bootstrap = self.bootstrap_servers
        return run_sync(lambda: create_topic_async(bootstrap, name, partitions, replication_factor, config))


class AsyncEmbeddedBroker(_BrokerHandle):
    """``EmbeddedBroker`` for asyncio test suites: ``async with AsyncEmbeddedBroker() as broker``; waiting
    for the broker never blocks the running loop."""

    async def __aenter__(self) -> AsyncEmbeddedBroker:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> AsyncEmbeddedBroker:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        child = self.node.spawn()  # quick (a fork); the wait for its ready line does not block the loop
        await asyncio.to_thread(warm_imports)
        def settle() -> None:
            if not done.done():
                done.set_result(None)

        child.on_done(lambda: loop.call_soon_threadsafe(settle))
        with contextlib.suppress(asyncio.TimeoutError):  # finish_start explains a broker that never got ready
            await asyncio.wait_for(done, self.start_timeout)
        self.node.finish_start()
        return self

    async def stop(self) -> None:
        await asyncio.to_thread(self.node.stop)

    async def kill(self) -> None:
        await asyncio.to_thread(self.node.kill)

    async def restart(self) -> AsyncEmbeddedBroker:
        await self.stop()
        return await self.start()

    async def close(self) -> None:
        await asyncio.to_thread(self.node.close)

    async def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None, *,
                           replication_factor: int = 1) -> str:
        return await create_topic_async(self.bootstrap_servers, name, partitions, replication_factor, config)
