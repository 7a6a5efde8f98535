"""What the entity-config stores (SCRAM credentials, client quotas, client-metrics subscriptions) share: the
in-memory table that every read is answered from, its listeners, and the two places a config is kept.

- ZooKeeper mode (``ZkEntityConfigs``): ``/config/<entity type>/<sanitized name>`` holds Kafka's entity-config
  JSON ``{"version":1,"config":{...}}``, and every change is announced by ``/config/changes/config_change_<seq>``
  with ``{"version":2,"entity_path":"<entity type>/<sanitized name>"}`` (AdminZkClient.changeConfigs); every
  broker re-reads the entity a new notification names, so a change applies without a restart.
- Single node (``JsonDocument``): one JSON file beside the embedded metadata document, replaced whole (temp,
  fsync, rename) off the event loop, one write at a time.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.parse
from typing import Any, Awaitable, Callable, Generic, Mapping, TypeVar

from pybroker.common.durable_json import write_json_durably_off_loop
from pybroker.common.uncancellable import finishes_once_started
from pybroker.zk import paths as zp
from pybroker.controller.config_changes import ConfigChangeFeed, announce_config_change
from pybroker.zk.client import ZkClient, ZkEvent

__all__ = ["ConfigCache", "FileNamedConfigs", "JsonDocument", "NamedConfigs", "ZkEntityConfigs", "ZkNamedConfigs",
           "desanitize", "sanitize"]

K = TypeVar("K")


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: URL-encoding with ``*`` and ``~`` escaped and spaces as %20."""
    return urllib.parse.quote(name, safe="-_.").replace("~", "%7E")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


class ConfigCache(Generic[K]):
    """Entity -> config, the stores' answer to every read; ``listeners`` hear of each entity whose config
    changed (an empty config: it has none left)."""

    def __init__(self, configs: Mapping[K, Mapping[str, str]] | None = None) -> None:
        self.configs: dict[K, dict[str, str]] = {key: dict(config) for key, config in (configs or {}).items()}
        self.listeners: list[Callable[[K, Mapping[str, str]], None]] = []

    def get(self, key: K) -> Mapping[str, str]:
        return self.configs.get(key, {})

    def store(self, key: K, config: Mapping[str, str]) -> None:
        """Keep ``config`` as ``key``'s (none: drop it) and tell the listeners if it changed."""
        config = dict(config)
        if config == self.configs.get(key, {}):
            return
        if config:
            self.configs[key] = config
        else:
            self.configs.pop(key, None)
        for listener in self.listeners:
            listener(key, config)

    def replaced(self, key: K, config: Mapping[str, str]) -> dict[K, dict[str, str]]:
        """A copy of the table with ``key``'s config replaced (dropped when empty): what a file write holds."""
        configs = {k: c for k, c in self.configs.items() if k != key}
        if config:
            configs[key] = dict(config)
        return configs


class JsonDocument:
    """A single-node store's file in ``data_dir``; a write holds ``writes`` from reading the table it writes
    until the table is updated, so concurrent writes both reach the file."""

    def __init__(self, data_dir: str, name: str) -> None:
        self.path = os.path.join(data_dir, name)
        self.writes = asyncio.Lock()

    def load(self) -> Any | None:
        """The document, None when there is no file yet."""
        try:
            with open(self.path, encoding="utf-8") as handle:
                return json.load(handle)
        except FileNotFoundError:
            return None

    async def write(self, document: Mapping[str, Any]) -> None:
        await write_json_durably_off_loop(self.path, document)


class ZkEntityConfigs:
    """Entity-config znodes and the change feed that names the ones to re-read: ``on_change(entity type,
    rest of the entity path)`` is awaited for each new notification, on the ZooKeeper event task."""

    def __init__(self, zk: ZkClient, watch: str, on_change: Callable[[str, str], Awaitable[None]]) -> None:
        self.zk = zk
        self._changes = ConfigChangeFeed(zk, watch)
        self._on_change = on_change
        zk.on(watch, self._on_changes)

    async def start(self, *roots: str) -> None:
        """Create ``roots`` (and /config/changes) if missing and start following the notifications."""
        await self.zk.ensure_paths(*roots, zp.CONFIG_CHANGES)
        await self._changes.start()

    async def _on_changes(self, _: ZkEvent) -> None:
        for kind, rest in await self._changes.new_changes():
            await self._on_change(kind, rest)

    async def read(self, path: str) -> dict[str, str] | None:
        """The config at ``path``, None when there is no znode."""
        node = await self.zk.get(path)
        return zp.decode_topic_config(node[0]) if node is not None else None

    async def put(self, path: str, config: Mapping[str, str], *, exists: bool) -> None:
        """Write ``config`` (the same entity-config JSON as topics') to ``path``, created when it does not exist."""
        data = zp.encode_topic_config(config)
        if exists:
            await self.zk.set(path, data)
        else:
            await self.zk.create(path, data, makepath=True)

    async def announce(self, entity_path: str) -> None:
        await announce_config_change(self.zk, entity_path)


class NamedConfigs:
    """Configs of the named entities of one type (client-metrics subscriptions, groups), read from memory;
    ``listeners`` hear of every entity whose config changed (empty: removed)."""

    def __init__(self) -> None:
        self._cache: ConfigCache[str] = ConfigCache()
        self.listeners: list[Callable[[str, Mapping[str, str]], None]] = self._cache.listeners

    def all(self) -> Mapping[str, Mapping[str, str]]:
        return self._cache.configs

    def get(self, name: str) -> Mapping[str, str]:
        return self._cache.get(name)


class FileNamedConfigs(NamedConfigs):
    """The single-node store: ``{"version":1,"<section>":{"<name>":{...}}}`` in ``data_dir``."""

    def __init__(self, data_dir: str, file_name: str, section: str) -> None:
        super().__init__()
        self._file = JsonDocument(data_dir, file_name)
        self._section = section
        document = self._file.load()
        if document is not None:
            self._cache.configs = {str(n): {str(k): str(v) for k, v in c.items()}
                                   for n, c in document.get(section, {}).items()}

    @finishes_once_started
    async def set_config(self, name: str, config: Mapping[str, str]) -> None:
        """Replace ``name``'s config (empty: remove it), on disk before in memory."""
        async with self._file.writes:
            await self._file.write({"version": 1, self._section: self._cache.replaced(name, config)})
            self._cache.store(name, config)


class ZkNamedConfigs(NamedConfigs):
    """The ZooKeeper store: a cache of ``/config/<entity type>``, kept fresh by /config/changes notifications."""

    def __init__(self, zk: ZkClient, entity_type: str, watch: str) -> None:
        super().__init__()
        self._entity_type = entity_type
        self._root = f"/config/{entity_type}"
        self._zk = ZkEntityConfigs(zk, watch, self._on_change)

    async def start(self) -> None:
        await self._zk.start(self._root)
        for child in await self._zk.zk.children(self._root):
            await self._reload(desanitize(child))

    async def set_config(self, name: str, config: Mapping[str, str]) -> None:
        """Replace ``name``'s znode (empty: delete it) and announce the change to every broker."""
        path = f"{self._root}/{sanitize(name)}"
        exists = await self._zk.read(path) is not None
        if config:
            await self._zk.put(path, config, exists=exists)
        elif exists:
            await self._zk.zk.delete(path)
        await self._zk.announce(f"{self._entity_type}/{sanitize(name)}")
        self._cache.store(name, config)

    async def _on_change(self, kind: str, entity: str) -> None:
        if kind == self._entity_type:
            await self._reload(desanitize(entity))

    async def _reload(self, name: str) -> None:
        self._cache.store(name, await self._zk.read(f"{self._root}/{sanitize(name)}") or {})
