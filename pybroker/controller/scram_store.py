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

Reads are from memory (the authenticator must not wait on ZooKeeper per login).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import urllib.parse
from typing import Mapping, Protocol

from pybroker.common.durable_json import write_json_durably_off_loop
from pybroker.controller import zk_paths as zp
from pybroker.controller.config_changes import ConfigChangeFeed, announce_config_change
from pybroker.controller.zk_client import ZkClient, ZkEvent

log = logging.getLogger("pybroker.metadata")

CONFIG_USERS = "/config/users"
CREDENTIALS_FILE = "pybroker-scram-credentials.json"
_WATCH = "user-config-changes"

#: user -> {mechanism name -> stored credential text}
UserConfigs = dict[str, dict[str, str]]


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: URL-encoding with ``*`` and ``~`` escaped and spaces as %20."""
    return urllib.parse.quote(name, safe="-_.").replace("~", "%7E")


def desanitize(name: str) -> str:
    return urllib.parse.unquote(name)


class ScramCredentialStore(Protocol):
    def user_config(self, user: str) -> Mapping[str, str]: ...

    def all_users(self) -> Mapping[str, Mapping[str, str]]: ...

    async def set_user_config(self, user: str, config: Mapping[str, str]) -> None:
        """Replace the user's entity config (empty: remove the user's entry)."""


class FileScramStore:
    """The single-node store."""

    def __init__(self, data_dir: str) -> None:
        self._path = os.path.join(data_dir, CREDENTIALS_FILE)
        self._users: UserConfigs = {}
        self._writes = asyncio.Lock()
        try:
            with open(self._path, encoding="utf-8") as handle:
                document = json.load(handle)
            self._users = {str(u): {str(k): str(v) for k, v in c.items()} for u, c in document["users"].items()}
        except FileNotFoundError:
            return  # no credentials stored yet

    def user_config(self, user: str) -> Mapping[str, str]:
        return self._users.get(user, {})

    def all_users(self) -> Mapping[str, Mapping[str, str]]:
        return self._users

    async def set_user_config(self, user: str, config: Mapping[str, str]) -> None:
        async with self._writes:
            users = dict(self._users)
            if config:
                users[user] = dict(config)
            else:
                users.pop(user, None)
            await write_json_durably_off_loop(self._path, {"version": 1, "users": users})
            self._users = users


class ZkScramStore:
    """The ZooKeeper store: a cache of /config/users, kept fresh by /config/changes notifications."""

    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk
        self._users: UserConfigs = {}
        self._changes = ConfigChangeFeed(zk, _WATCH)
        zk.on(_WATCH, self._on_changes)

    async def start(self) -> None:
        await self._zk.ensure_paths(CONFIG_USERS, zp.CONFIG_CHANGES)
        await self._changes.start()
        for child in await self._zk.children(CONFIG_USERS):
            await self._reload(desanitize(child))

    def user_config(self, user: str) -> Mapping[str, str]:
        return self._users.get(user, {})

    def all_users(self) -> Mapping[str, Mapping[str, str]]:
        return self._users

    async def set_user_config(self, user: str, config: Mapping[str, str]) -> None:
        path = f"{CONFIG_USERS}/{sanitize(user)}"
        data = zp.encode_topic_config(config)  # the same entity-config JSON as topics
        if await self._zk.get(path) is None:
            await self._zk.create(path, data, makepath=True)
        else:
            await self._zk.set(path, data)
        await announce_config_change(self._zk, f"users/{sanitize(user)}")
        self._store(user, dict(config))

    async def _on_changes(self, _: ZkEvent) -> None:
        for kind, entity in await self._changes.new_changes():
            if kind == "users" and "/" not in entity:  # users/<u>/clients/<c> are quotas
                await self._reload(desanitize(entity))

    async def _reload(self, user: str) -> None:
        node = await self._zk.get(f"{CONFIG_USERS}/{sanitize(user)}")
        self._store(user, zp.decode_topic_config(node[0]) if node else {})

    def _store(self, user: str, config: dict[str, str]) -> None:
        if config:
            self._users[user] = config
        else:
            self._users.pop(user, None)
