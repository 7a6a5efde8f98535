"""Where client-metrics subscriptions (KIP-714) live: named config entities of type ``client-metrics``.

- ZooKeeper mode: ``/config/client-metrics/<sanitized name>`` holds the entity-config JSON
  ``{"version":1,"config":{...}}`` that topics, users and clients use, and every change is announced
  by ``/config/changes/config_change_<seq>`` with ``{"version":2,"entity_path":"client-metrics/<name>"}``
  (AdminZkClient.changeConfigs' form); every broker re-reads the entity a new notification names.
  Kafka itself keeps these in KRaft metadata only: a ZooKeeper-mode Kafka refuses them.
- Single node: ``pybroker-client-metrics.json`` beside the embedded metadata document, replaced whole
  (temp, fsync, rename).

Reads are from memory; ``listeners`` hear of every subscription whose config changed (empty: removed). The
cache, the file and the znodes are ``config_store.py``'s.
"""

from __future__ import annotations

from typing import Callable, Mapping, Protocol

from pybroker.controller.config_store import ConfigCache, JsonDocument, ZkEntityConfigs, desanitize, sanitize
from pybroker.zk.client import ZkClient

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
        self._subscriptions: ConfigCache[str] = ConfigCache()
        self.listeners: list[Listener] = self._subscriptions.listeners

    def all(self) -> Mapping[str, Mapping[str, str]]:
        return self._subscriptions.configs


class FileClientMetricsStore(_Cache):
    """The single-node store: ``{"version":1,"subscriptions":{"<name>":{...}}}``."""

    def __init__(self, data_dir: str) -> None:
        super().__init__()
        self._file = JsonDocument(data_dir, SUBSCRIPTIONS_FILE)
        document = self._file.load()
        if document is not None:
            self._subscriptions.configs = {str(n): {str(k): str(v) for k, v in c.items()}
                                           for n, c in document.get("subscriptions", {}).items()}

    async def set_config(self, name: str, config: Mapping[str, str]) -> None:
        async with self._file.writes:
            await self._file.write({"version": 1, "subscriptions": self._subscriptions.replaced(name, config)})
            self._subscriptions.store(name, config)


class ZkClientMetricsStore(_Cache):
    """The ZooKeeper store: a cache of /config/client-metrics, kept fresh by /config/changes notifications."""

    def __init__(self, zk: ZkClient) -> None:
        super().__init__()
        self._zk = ZkEntityConfigs(zk, _WATCH, self._on_change)

    async def start(self) -> None:
        await self._zk.start(CONFIG_CLIENT_METRICS)
        for child in await self._zk.zk.children(CONFIG_CLIENT_METRICS):
            await self._reload(desanitize(child))

    async def set_config(self, name: str, config: Mapping[str, str]) -> None:
        path = f"{CONFIG_CLIENT_METRICS}/{sanitize(name)}"
        exists = await self._zk.read(path) is not None
        if config:
            await self._zk.put(path, config, exists=exists)
        elif exists:
            await self._zk.zk.delete(path)
        await self._zk.announce(f"{ENTITY_TYPE}/{sanitize(name)}")
        self._subscriptions.store(name, config)

    async def _on_change(self, kind: str, entity: str) -> None:
        if kind == ENTITY_TYPE:
            await self._reload(desanitize(entity))

    async def _reload(self, name: str) -> None:
        self._subscriptions.store(name, await self._zk.read(f"{CONFIG_CLIENT_METRICS}/{sanitize(name)}") or {})
