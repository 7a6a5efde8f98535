"""Where users' SCRAM credentials live, in Kafka's stored form (never a password).

Each user is a config entity whose keys are mechanism names and whose values are Kafka's
credential strings (``salt=...,stored_key=...,server_key=...,iterations=...``):

- ZooKeeper mode: ``/config/users/<sanitized user>`` holds ``{"version":1,"config":{"SCRAM-SHA-256":
  "..."}}`` and every change is announced by a ``/config/changes/config_change_<seq>`` node with
  ``{"version":2,"entity_path":"users/<sanitized user>"}``, as Kafka's AdminZkClient.changeConfigs
  writes them; every broker re-reads the user named by a new notification, so a credential takes
  effect cluster-wide without a restart.
- Single node: ``pybroker-scram-credentials.json`` beside the embedded metadata document,
  ``{"version":1,"users":{"<user>":{"SCRAM-SHA-256":"..."}}}``, replaced whole (temp, fsync, rename).

Reads are from memory (the authenticator must not wait on ZooKeeper per login). The cache, the file and the
znodes are ``config_store.py``'s.
"""

from __future__ import annotations

from typing import Mapping, Protocol

from pybroker.common.uncancellable import finishes_once_started
from pybroker.controller.config_store import ConfigCache, JsonDocument, ZkEntityConfigs, desanitize, sanitize
from pybroker.zk.client import ZkClient

CONFIG_USERS = "/config/users"
CREDENTIALS_FILE = "pybroker-scram-credentials.json"
_WATCH = "user-config-changes"

__all__ = ["FileScramStore", "ScramCredentialStore", "ZkScramStore", "desanitize", "sanitize"]


class ScramCredentialStore(Protocol):
    def user_config(self, user: str) -> Mapping[str, str]: ...

    def all_users(self) -> Mapping[str, Mapping[str, str]]: ...

    async def set_user_config(self, user: str, config: Mapping[str, str]) -> None:
        """Replace the user's entity config (empty: remove the user's entry)."""


class _Users:
    def __init__(self) -> None:
        self._users: ConfigCache[str] = ConfigCache()

    def user_config(self, user: str) -> Mapping[str, str]:
        return self._users.get(user)

    def all_users(self) -> Mapping[str, Mapping[str, str]]:
        return self._users.configs


class FileScramStore(_Users):
    """The single-node store: ``{"version":1,"users":{"<user>":{"SCRAM-SHA-256":"..."}}}``."""

    def __init__(self, data_dir: str) -> None:
        super().__init__()
        self._file = JsonDocument(data_dir, CREDENTIALS_FILE)
        document = self._file.load()
        if document is not None:
            self._users = ConfigCache({str(u): {str(k): str(v) for k, v in c.items()}
                                       for u, c in document["users"].items()})

    @finishes_once_started
    async def set_user_config(self, user: str, config: Mapping[str, str]) -> None:
        async with self._file.writes:
            await self._file.write({"version": 1, "users": self._users.replaced(user, config)})
            self._users.store(user, config)


class ZkScramStore(_Users):
    """The ZooKeeper store: a cache of /config/users, kept fresh by /config/changes notifications."""

    def __init__(self, zk: ZkClient) -> None:
        super().__init__()
        self._zk = ZkEntityConfigs(zk, _WATCH, self._on_change)

    async def start(self) -> None:
        await self._zk.start(CONFIG_USERS)
        for child in await self._zk.zk.children(CONFIG_USERS):
            await self._reload(desanitize(child))

    async def set_user_config(self, user: str, config: Mapping[str, str]) -> None:
        path = f"{CONFIG_USERS}/{sanitize(user)}"
        await self._zk.put(path, config, exists=await self._zk.read(path) is not None)
        await self._zk.announce(f"users/{sanitize(user)}")
        self._users.store(user, config)

    async def _on_change(self, kind: str, entity: str) -> None:
        if kind == "users" and "/" not in entity:  # users/<u>/clients/<c> are quotas
            await self._reload(desanitize(entity))

    async def _reload(self, user: str) -> None:
        self._users.store(user, await self._zk.read(f"{CONFIG_USERS}/{sanitize(user)}") or {})
