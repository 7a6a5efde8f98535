"""Kafka's entity-config change notifications: ``/config/changes/config_change_<seq>`` nodes holding
``{"version":2,"entity_path":"<type>/<name>"}`` (AdminZkClient.changeConfigs' form). A writer announces
each entity it changed; every broker reads the notifications it has not seen and re-reads the
entities they name (topics, users, clients, client-metrics)."""

from __future__ import annotations

from pybroker.zk import paths as zp
from pybroker.zk.client import ZkClient

__all__ = ["ConfigChangeFeed", "announce_config_change"]


async def announce_config_change(zk: ZkClient, entity_path: str) -> None:
    """Tell every broker that the config entity at ``/config/<entity_path>`` changed."""
    await zk.create(f"{zp.CONFIG_CHANGES}/{zp.CONFIG_CHANGE_PREFIX}", zp.encode_config_change(entity_path),
                    sequence=True)


class ConfigChangeFeed:
    """One reader's position in /config/changes: the notifications it has seen, re-arming its watch."""

    def __init__(self, zk: ZkClient, watch: str) -> None:
        self._zk = zk
        self._watch = watch
        self._seen: set[str] = set()

    async def start(self) -> None:
        """Everything there now counts as seen: the reader loads the entities themselves at start."""
        self._seen = set(await self._zk.children(zp.CONFIG_CHANGES, watch=self._watch))

    async def new_changes(self) -> list[tuple[str, str]]:
        """(entity type, entity name) of each notification not seen before, oldest first."""
        changes = []
        for child in sorted(set(await self._zk.children(zp.CONFIG_CHANGES, watch=self._watch)) - self._seen):
            self._seen.add(child)
            node = await self._zk.get(f"{zp.CONFIG_CHANGES}/{child}")
            if node is not None:
                changes.append(zp.decode_config_change(node[0]))
        return changes
