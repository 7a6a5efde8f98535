"""Where client quota configs live, in Kafka's stored form.

An entity is ``(user, client-id)``, each part a sanitized name (Kafka's Sanitizer), ``<default>``
for the default entity, or None when the entity has no such part. Its config maps quota keys to
their text values. An ``ip`` entity (KIP-612) stands alone, named by an IP address or ``<default>``;
its only key is connection_creation_rate.

- ZooKeeper mode: ``/config/users/<user>``, ``/config/clients/<client-id>``,
  ``/config/users/<user>/clients/<client-id>`` and ``/config/ips/<ip>`` hold ``{"version":1,"config":{...}}`` and every change
  is announced by ``/config/changes/config_change_<seq>`` with ``{"version":2,"entity_path":
  "users/<user>/clients/<client-id>"}`` (AdminZkClient.changeConfigs). A user's node is shared with
  its SCRAM credentials (scram_store.py): a write keeps every key that is not a quota key. Every
  broker re-reads the entity a new notification names, so a change applies without a restart.
- Single node: ``pybroker-client-quotas.json`` beside the embedded metadata document, replaced
  whole (temp, fsync, rename).

Reads are from memory; ``listeners`` are told of every entity whose quotas changed. The cache, the file and the
znodes are ``config_store.py``'s.
"""

from __future__ import annotations

from typing import Callable, Mapping, Protocol

from pybroker.common.client_quotas import IP_QUOTA_KEYS, QUOTA_KEYS
from pybroker.common.uncancellable import finishes_once_started
from pybroker.controller.config_store import ConfigCache, JsonDocument, ZkEntityConfigs, desanitize, sanitize
from pybroker.zk.client import ZkClient

CONFIG_USERS = "/config/users"
CONFIG_CLIENTS = "/config/clients"
CONFIG_IPS = "/config/ips"
IPS = "ips"
QUOTAS_FILE = "pybroker-client-quotas.json"
_WATCH = "client-quota-changes"

#: (sanitized user or "<default>" or None, sanitized client id or "<default>" or None)
Entity = tuple[str | None, str | None]
Listener = Callable[[Entity, Mapping[str, str]], None]
IpListener = Callable[[str, Mapping[str, str]], None]

__all__ = ["ClientQuotaStore", "Entity", "FileQuotaStore", "ZkQuotaStore", "desanitize", "entity_path", "sanitize"]


def entity_path(entity: Entity) -> str:
    """``users/<u>``, ``clients/<c>`` or ``users/<u>/clients/<c>`` (the notification's entity_path)."""
    user, client = entity
    if user is not None and client is not None:
        return f"users/{user}/clients/{client}"
    if user is not None:
        return f"users/{user}"
    assert client is not None
    return f"clients/{client}"


def parse_entity_path(path: str) -> Entity | None:
    parts = path.split("/")
    if len(parts) == 2 and parts[0] == "users":
        return parts[1], None
    if len(parts) == 2 and parts[0] == "clients":
        return None, parts[1]
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return parts[1], parts[3]
    return None


def quota_keys_of(config: Mapping[str, str], keys: Mapping[str, str] = QUOTA_KEYS) -> dict[str, str]:
    return {k: v for k, v in config.items() if k in keys}


def parse_ip_path(path: str) -> str | None:
    """The ip of ``ips/<ip>``, else None."""
    kind, _, ip = path.partition("/")
    return ip if kind == IPS and ip and "/" not in ip else None


class ClientQuotaStore(Protocol):
    listeners: list[Listener]
    ip_listeners: list[IpListener]

    def all(self) -> Mapping[Entity, Mapping[str, str]]: ...

    def ips(self) -> Mapping[str, Mapping[str, str]]: ...

    async def set_quotas(self, entity: Entity, config: Mapping[str, str]) -> None:
        """Replace the entity's quota keys (empty: it has no quotas left)."""

    async def set_ip_quotas(self, ip: str, config: Mapping[str, str]) -> None:
        """Replace an ip entity's keys (an address or ``<default>``)."""


class _Cache:
    def __init__(self) -> None:
        self._entities: ConfigCache[Entity] = ConfigCache()
        self._ips: ConfigCache[str] = ConfigCache()
        self.listeners: list[Listener] = self._entities.listeners
        self.ip_listeners: list[IpListener] = self._ips.listeners

    def all(self) -> Mapping[Entity, Mapping[str, str]]:
        return self._entities.configs

    def ips(self) -> Mapping[str, Mapping[str, str]]:
        return self._ips.configs

    def _store_ip(self, ip: str, config: Mapping[str, str]) -> None:
        self._ips.store(ip, quota_keys_of(config, IP_QUOTA_KEYS))

    def _store(self, entity: Entity, config: Mapping[str, str]) -> None:
        self._entities.store(entity, quota_keys_of(config))


class FileQuotaStore(_Cache):
    """The single-node store: ``{"version":1,"entities":{"<entity path>":{...}}}``."""

    def __init__(self, data_dir: str) -> None:
        super().__init__()
        self._file = JsonDocument(data_dir, QUOTAS_FILE)
        document = self._file.load()
        if document is None:
            return
        for path, config in document.get("entities", {}).items():
            entity, ip = parse_entity_path(path), parse_ip_path(path)
            if entity is not None:
                self._entities.configs[entity] = quota_keys_of({str(k): str(v) for k, v in config.items()})
            elif ip is not None:
                self._ips.configs[ip] = quota_keys_of({str(k): str(v) for k, v in config.items()}, IP_QUOTA_KEYS)

    @finishes_once_started
    async def set_quotas(self, entity: Entity, config: Mapping[str, str]) -> None:
        async with self._file.writes:
            await self._write(entity_path(entity), config)
            self._store(entity, config)

    @finishes_once_started
    async def set_ip_quotas(self, ip: str, config: Mapping[str, str]) -> None:
        async with self._file.writes:
            await self._write(f"{IPS}/{ip}", config)
            self._store_ip(ip, config)

    async def _write(self, path: str, config: Mapping[str, str]) -> None:
        """The document with the entity at ``path`` replaced (or dropped when ``config`` is empty)."""
        entities = {entity_path(e): c for e, c in self._entities.configs.items()}
        entities.update((f"{IPS}/{ip}", c) for ip, c in self._ips.configs.items())
        entities.pop(path, None)
        if config:
            entities[path] = dict(config)
        await self._file.write({"version": 1, "entities": entities})


class ZkQuotaStore(_Cache):
    """The ZooKeeper store: a cache of the quota keys under /config/users and /config/clients."""

    def __init__(self, zk: ZkClient) -> None:
        super().__init__()
        self._zk = ZkEntityConfigs(zk, _WATCH, self._on_change)

    async def start(self) -> None:
        await self._zk.start(CONFIG_USERS, CONFIG_CLIENTS, CONFIG_IPS)
        zk = self._zk.zk
        for ip in await zk.children(CONFIG_IPS):
            await self._reload_ip(ip)
        for client in await zk.children(CONFIG_CLIENTS):
            await self._reload((None, client))
        for user in await zk.children(CONFIG_USERS):
            await self._reload((user, None))
            for client in await zk.children(f"{CONFIG_USERS}/{user}/clients"):
                await self._reload((user, client))

    async def set_quotas(self, entity: Entity, config: Mapping[str, str]) -> None:
        await self._write(entity_path(entity), config, QUOTA_KEYS)
        self._store(entity, config)

    async def set_ip_quotas(self, ip: str, config: Mapping[str, str]) -> None:
        await self._write(f"{IPS}/{ip}", config, IP_QUOTA_KEYS)
        self._store_ip(ip, config)

    async def _write(self, path: str, config: Mapping[str, str], keys: Mapping[str, str]) -> None:
        """``/config/<path>`` with its quota keys replaced (other keys, SCRAM's, kept), then announced."""
        current = await self._zk.read(f"/config/{path}")
        merged = {k: v for k, v in (current or {}).items() if k not in keys}
        merged.update(config)
        await self._zk.put(f"/config/{path}", merged, exists=current is not None)
        await self._zk.announce(path)

    async def _on_change(self, kind: str, rest: str) -> None:
        entity, ip = parse_entity_path(f"{kind}/{rest}"), parse_ip_path(f"{kind}/{rest}")
        if entity is not None:
            await self._reload(entity)
        elif ip is not None:
            await self._reload_ip(ip)

    async def _reload_ip(self, ip: str) -> None:
        self._store_ip(ip, await self._zk.read(f"{CONFIG_IPS}/{ip}") or {})

    async def _reload(self, entity: Entity) -> None:
        self._store(entity, await self._zk.read(f"/config/{entity_path(entity)}") or {})
