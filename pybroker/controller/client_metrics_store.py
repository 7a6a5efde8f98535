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

from pybroker.controller.config_store import FileNamedConfigs, ZkNamedConfigs
from pybroker.zk.client import ZkClient

ENTITY_TYPE = "client-metrics"
SUBSCRIPTIONS_FILE = "pybroker-client-metrics.json"
_WATCH = "client-metrics-changes"

Listener = Callable[[str, Mapping[str, str]], None]


class ClientMetricsStore(Protocol):
    listeners: list[Listener]

    def all(self) -> Mapping[str, Mapping[str, str]]: ...

    async def set_config(self, name: str, config: Mapping[str, str]) -> None:
        """Replace the subscription's config (empty: remove it)."""


class FileClientMetricsStore(FileNamedConfigs):
    """The single-node store: ``{"version":1,"subscriptions":{"<name>":{...}}}``."""

    def __init__(self, data_dir: str) -> None:
        super().__init__(data_dir, SUBSCRIPTIONS_FILE, "subscriptions")


class ZkClientMetricsStore(ZkNamedConfigs):
    """The ZooKeeper store: a cache of /config/client-metrics, kept fresh by /config/changes notifications."""

    def __init__(self, zk: ZkClient) -> None:
        super().__init__(zk, ENTITY_TYPE, _WATCH)
