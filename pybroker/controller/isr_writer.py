"""A leader's ISR change, written to the partition state znode the way ZooKeeper-mode Kafka leaders
did before AlterPartition: conditional on the znode version the leader last saw, then announced
under /isr_change_notification so the controller re-reads it and re-publishes metadata.
"""

from __future__ import annotations

from kazoo.exceptions import BadVersionError, NoNodeError

from pybroker.controller import zk_paths as zp
from pybroker.controller.zk_client import ZkClient


class ZkIsrWriter:
    def __init__(self, zk: ZkClient):
        self._zk = zk

    async def __call__(self, topic: str, partition: int, *, leader: int, leader_epoch: int, isr: tuple[int, ...],
                       controller_epoch: int, zk_version: int) -> int | None:
        state = zp.LeaderAndIsr(leader, leader_epoch, isr, controller_epoch)
        path = zp.partition_state_path(topic, partition)
        try:
            stat = await self._zk.set(path, zp.encode_partition_state(state), zk_version)
        except (BadVersionError, NoNodeError):
            return None
        await self._zk.create(f"{zp.ISR_CHANGES}/{zp.ISR_CHANGE_PREFIX}", zp.encode_isr_change([(topic, partition)]),
                              sequence=True)
        return stat.version
