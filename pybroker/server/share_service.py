"""The broker's share groups (KIP-932): the coordinator side (membership, group configs) and the partition side
(each share-partition's in-flight state, share sessions), assembled for the handlers.

State is in memory: a restart, or a partition's leadership moving, loses the share-partitions' delivery state
(the next leader starts again from ``share.auto.offset.reset``), and share groups are not written to
``__consumer_offsets``. Kafka's share coordinator and ``__share_group_state`` (keys 83-87) are not implemented.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from pybroker.common.clock import SYSTEM_CLOCK, Clock
from pybroker.common.config import BrokerConfig
from pybroker.controller.metadata import ClusterMetadata, TopicInfo
from pybroker.coordinator.coordinator import GroupCoordinator
from pybroker.coordinator.share.configs import GroupConfigStore, ShareConfigs, ShareLimits
from pybroker.coordinator.share.group import ShareGroups
from pybroker.log import PartitionLog
from pybroker.protocol.error_codes import ErrorCode
from pybroker.replication.share.partition import SharePartition
from pybroker.server.share_sessions import ShareSessionCache


log = logging.getLogger("pybroker.share")

SharePartitionKey = tuple[str, str, int]
"""(group id, topic name, partition index)."""
TICK_S = 1.0


class ShareService:
    def __init__(self, config: BrokerConfig, metadata: Callable[[], ClusterMetadata], groups: GroupCoordinator,
                 group_configs: GroupConfigStore, clock: Clock = SYSTEM_CLOCK) -> None:
        self._metadata = metadata
        self._groups = groups
        self.clock = clock
        self.limits = ShareLimits.from_config(config)
        self.configs = ShareConfigs(self.limits, group_configs)
        self.groups = ShareGroups(self.configs.settings(""), self.configs.settings)
        self.sessions = ShareSessionCache(self.limits.max_share_sessions)
        self.partitions: dict[SharePartitionKey, SharePartition] = {}

    def now_ms(self) -> int:
        return self.clock.wall_ms()

    def start(self) -> asyncio.Task[None]:
        """Forget the share-partitions of deleted topics; once a second, fence members whose session timed out and
        drop share sessions idle as long."""
        self._metadata().add_listener(self._on_topic_change)
        return asyncio.get_running_loop().create_task(self._expire_members(), name="share-groups")

    def _on_topic_change(self, name: str, info: TopicInfo | None) -> None:
        if info is None:
            for key in [key for key in self.partitions if key[1] == name]:
                del self.partitions[key]

    async def _expire_members(self) -> None:
        while True:
            await self.clock.sleep(TICK_S)
            now = self.now_ms()
            for group_id, member_id in self.groups.expire(now):
                log.info("Member %s of share group %s left: its session timed out", member_id, group_id)
                self.member_left(group_id, member_id)
            for session in self.sessions.idle(now, lambda group: self.configs.settings(group).session_timeout_ms):
                self.member_left(session.group_id, session.member_id)

    def is_other_group(self, group_id: str) -> bool:
        """Whether ``group_id`` is a classic or consumer group on this coordinator."""
        return group_id in self._groups.groups

    def member_left(self, group_id: str, member_id: str) -> None:
        """Close the member's share session and release every record it holds on this broker."""
        self.sessions.remove(group_id, member_id)
        for (group, _, _), share in self.partitions.items():
            if group == group_id:
                share.release_member(member_id)

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a share group: only an empty one, with its configs and share-partition state."""
        code = self.groups.delete(group_id)
        if code is ErrorCode.NONE:
            await self.configs.forget(group_id)
            for key in [key for key in self.partitions if key[0] == group_id]:
                del self.partitions[key]
        return code

    def share_partition(self, group_id: str, topic: str, index: int, partition_log: PartitionLog) -> SharePartition:
        """The group's state of a partition this broker leads, started from ``share.auto.offset.reset``."""
        key = (group_id, topic, index)
        share = self.partitions.get(key)
        if share is None:
            share = self.partitions[key] = SharePartition(
                self._start_offset(group_id, partition_log), delivery_count_limit=self.limits.delivery_count_limit,
                max_record_locks=self.limits.partition_max_record_locks)
        return share

    def on_leadership_change(self, topic: str, partition: int, _leader_epoch: int, is_leader: bool) -> None:
        """A partition this broker stops leading (or leads anew) forgets its share-partitions: their state is in
        memory only (see the module doc)."""
        for key in [key for key in self.partitions if key[1] == topic and key[2] == partition]:
            del self.partitions[key]

    def _start_offset(self, group_id: str, partition_log: PartitionLog) -> int:
        strategy, duration_ms = self.configs.auto_offset_reset(group_id)
        if strategy == "earliest":
            return partition_log.log_start_offset
        if strategy == "by_duration":
            found = partition_log.fetch_offset_by_timestamp(self.now_ms() - duration_ms)
            if found is not None:
                return min(found[0], partition_log.high_watermark)
        return partition_log.high_watermark
