"""Where client-metrics subscriptions (KIP-714) live: named config entities of type ``client-metrics``.

- ZooKeeper mode: ``/config/client-metrics/<sanitized name>`` holds the entity-config JSON
  ``{"version":1,"config":{...}}`` that topics, users and clients use, and every change is announced
  by ``/config/changes/config_change_<seq>`` with ``{"version":2,"entity_path":"client-metrics/<name>"}``
  (AdminZkClient.changeConfigs' form); every broker re-reads the entity a new notification names.
  Kafka itself keeps these in KRaft metadata only: a ZooKeeper-mode Kafka refuses them.
- Single node: ``pybroker-client-metrics.json`` beside the embedded metadata document, replaced whole
  (temp, fsync, rename).

Reads are from memory; ``listeners`` hear of every subscription whose config changed (empty: removed).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Callable, Mapping, Protocol

from pybroker.common.durable_json import write_json_durably_off_loop
from pybroker.controller import zk_paths as zp
from pybroker.controller.config_changes import ConfigChangeFeed, announce_config_change
from pybroker.controller.scram_store import desanitize, sanitize
from pybroker.controller.zk_client import ZkClient, ZkEvent

CONFIG_CLIENT_METRICS = "/config/client-metrics"
ENTITY_TYPE = "client-metrics"
SUBSCRIPTIONS_FILE = "pybroker-client-metrics.json"
_WATCH = "client-metrics-changes"

Listener = Callable[[str, Mapping[str, str]], None]


class ClientMetricsStore(Protocol):
    listeners: list[Listener]

    def all(self) -> Mapping[str, Mapping[str, str]]: ...

    async def set_config(self, name: str, config: Mapping[str, str]) -> None:
        """Replace the subscription's config (empty: remove it)."""


class _Cache:
    def __init__(self) -> None:
        self.subscriptions: dict[str, dict[str, str]] = {}
        self.listeners: list[Listener] = []

    def all(self) -> Mapping[str, Mapping[str, str]]:
        return self.subscriptions

    def _store(self, name: str, config: Mapping[str, str]) -> None:
        if dict(config) == self.subscriptions.get(name, {}):
            return
        if config:
            self.subscriptions[name] = dict(config)
        else:
            self.subscriptions.pop(name, None)
        for listener in self.listeners:
            listener(name, config)


class FileClientMetricsStore(_Cache):
    """The single-node store."""

    def __init__(self, data_dir: str) -> None:
        super().__init__()
        self._path = os.path.join(data_dir, SUBSCRIPTIONS_FILE)
        self._writes = asyncio.Lock()
        try:
            with open(self._path, encoding="utf-8") as handle:
                document = json.load(handle)
        except FileNotFoundError:
            return
        self.subscriptions = {str(n): {str(k): str(v) for k, v in c.items()}
                              for n, c in document.get("subscriptions", {}).items()}

    async def set_config(self, name: str, config: Mapping[str, str]) -> None:
        async with self._writes:
            subscriptions = {n: c for n, c in self.subscriptions.items() if n != name}
            if config:
                subscriptions[name] = dict(config)
            await write_json_durably_off_loop(self._path, {"version": 1, "subscriptions": subscriptions})
            self._store(name, config)


class ZkClientMetricsStore(_Cache):
    """The ZooKeeper store: a cache of /config/client-metrics, kept fresh by /config/changes notifications."""

    def __init__(self, zk: ZkClient) -> None:
        super().__init__()
        self._zk = zk
        self._changes = ConfigChangeFeed(zk, _WATCH)
        zk.on(_WATCH, self._on_changes)

    async def start(self) -> None:
        await self._zk.ensure_paths(CONFIG_CLIENT_METRICS, zp.CONFIG_CHANGES)
        await self._changes.start()
        for child in await self._zk.children(CONFIG_CLIENT_METRICS):
            await self._reload(desanitize(child))

    async def set_config(self, name: str, config: Mapping[str, str]) -> None:
        path = f"{CONFIG_CLIENT_METRICS}/{sanitize(name)}"
        exists = await self._zk.get(path) is not None
        if config:
            data = zp.encode_topic_config(config)
            if exists:
                await self._zk.set(path, data)
            else:
                await self._zk.create(path, data, makepath=True)
        elif exists:
            await self._zk.delete(path)
        await announce_config_change(self._zk, f"{ENTITY_TYPE}/{sanitize(name)}")
        self._store(name, config)

    async def _on_changes(self, _: ZkEvent) -> None:
        for kind, entity in await self._changes.new_changes():
            if kind == ENTITY_TYPE:
                await self._reload(desanitize(entity))

    async def _reload(self, name: str) -> None:
        node = await self._zk.get(f"{CONFIG_CLIENT_METRICS}/{sanitize(name)}")
        self._store(name, zp.decode_topic_config(node[0]) if node else {})
