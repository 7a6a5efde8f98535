"""Where group configs (GROUP config resources: a share group's ``share.*`` keys) live, as Kafka keeps them
as dynamic configs of the group: named config entities of type ``groups``.

- ZooKeeper mode: ``/config/groups/<sanitized group>`` holds the entity-config JSON ``{"version":1,"config":{...}}``
  and each change is announced by ``/config/changes/config_change_<seq>`` (``"entity_path":"groups/<group>"``),
  so every broker (each share-partition leader) applies it without a restart.
- Single node: ``pybroker-group-configs.json`` beside the embedded metadata document.
"""

from __future__ import annotations

from pybroker.controller.config_store import FileNamedConfigs, ZkNamedConfigs
from pybroker.zk.client import ZkClient

ENTITY_TYPE = "groups"
GROUP_CONFIGS_FILE = "pybroker-group-configs.json"


class FileGroupConfigStore(FileNamedConfigs):
    def __init__(self, data_dir: str) -> None:
        super().__init__(data_dir, GROUP_CONFIGS_FILE, "groups")


class ZkGroupConfigStore(ZkNamedConfigs):
    def __init__(self, zk: ZkClient) -> None:
        super().__init__(zk, ENTITY_TYPE, "group-config-changes")
