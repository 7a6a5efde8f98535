"""The broker's group coordinator: the pure state machine, its runtime and ``__consumer_offsets``.

The internal topic is created on first use (FindCoordinator, or any group request), compacted,
with ``offsets.topic.num.partitions`` partitions. Whenever this broker becomes the leader of one
of its partitions (at start-up, on creation, or after a failover) the partition is replayed into the
coordinator before it answers for those groups; when it stops leading, the groups are dropped and
their requests answered NOT_COORDINATOR (Kafka's GroupCoordinator.onElection/onResignation).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from pybroker.common.clock import Clock
from pybroker.common.config import BrokerConfig
from pybroker.common.io_executor import IoExecutor
from pybroker.controller.metadata import TopicInfo
from pybroker.coordinator.consumer_group import TopicImage
from pybroker.coordinator.coordinator import GroupConfig, GroupCoordinator, Outcome
from pybroker.coordinator.group_base import Record
from pybroker.coordinator.loader import replay
from pybroker.coordinator.runtime import CoordinatorRuntime
from pybroker.coordinator.topic_regex import RegexEngine
from pybroker.protocol.error_codes import ErrorCode
from pybroker.replication.manager import ReplicaManager
from pybroker.server.coordinator_loads import CoordinatorPartitions, LoadSteps, LogSource
from pybroker.server.internal_topic import InternalTopic, MetadataSource

OFFSETS_TOPIC = "__consumer_offsets"
_ASSIGNOR_NAMES = {"org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
                   "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range"}


class GroupService:
    def __init__(self, config: BrokerConfig, metadata: MetadataSource, replicas: ReplicaManager, logs: LogSource,
                 io: IoExecutor, clock: Clock) -> None:
        self._metadata = metadata
        self.coordinator = GroupCoordinator(GroupConfig(
            num_partitions=config["offsets.topic.num.partitions"],
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            max_size=config["group.max.size"],
            offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
            offsets_retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
            consumer_heartbeat_interval_ms=config["group.consumer.heartbeat.interval.ms"],
            consumer_session_timeout_ms=config["group.consumer.session.timeout.ms"],
            consumer_assignors=tuple(_ASSIGNOR_NAMES.get(a, a) for a in config["group.consumer.assignors"]),
            rebalance_protocols=tuple(config["group.coordinator.rebalance.protocols"]),
            migration_policy=config["group.consumer.migration.policy"],
            share_session_timeout_ms=config["group.share.session.timeout.ms"],
        ))
        self.topic = InternalTopic(
            metadata, replicas, OFFSETS_TOPIC, partitions=config["offsets.topic.num.partitions"],
            replication_factor=config["offsets.topic.replication.factor"],
            configs=lambda _: {"segment.bytes": str(config["offsets.topic.segment.bytes"])},
            replication_timeout_ms=config["offsets.commit.timeout.ms"], clock=clock.wall_ms)
        self.regexes = RegexEngine()
        """Checks and resolves members' topic regexes in a worker process."""
        self.runtime = CoordinatorRuntime(self.coordinator, self.topic.append, clock, self.topic.replicated,
                                          self.regexes.resolve)
        self._image: TopicImage | None = None
        self._image_version = 0
        self._clock = clock
        self.partitions = CoordinatorPartitions(OFFSETS_TOPIC, logs, io, LoadSteps(
            replay=replay, apply=self._apply, unload=self.runtime.unload, keys="group(s)", epoch="leader epoch"))
        """The partitions of the internal topic whose groups this broker coordinates or is loading."""
        self.on_leadership_change = self.partitions.on_leadership_change

    def start(self) -> asyncio.Task[None]:
        """Run the coordinator's timers (partitions are loaded as this broker becomes their leader)."""
        self._metadata().add_listener(self._on_topic_change)
        return asyncio.get_running_loop().create_task(self.runtime.run_timers(), name="group-coordinator")

    def close(self) -> None:
        self.regexes.shutdown()

    def topic_image(self) -> TopicImage:
        """The cluster's topics as the consumer protocol resolves subscriptions against them, built again
        only after a topic changed (its version then rises)."""
        if self._image is None:
            self._image = TopicImage({name: (info.topic_id, len(info.partitions))
                                      for name, info in self._metadata().topics().items()},
                                     version=self._image_version)
        return self._image

    def _on_topic_change(self, _name: str, _info: TopicInfo | None) -> None:
        self._image = None
        self._image_version += 1

    def owns(self, group_id: str) -> bool:
        return self.coordinator.partition_of(group_id) in self.partitions.loaded

    def not_owned_error(self, group_id: str) -> ErrorCode:
        """What a request for a group this broker does not serve gets: it may be loading it."""
        return self.partitions.not_owned_error(self.coordinator.partition_of(group_id))

    def _apply(self, partition: int, _leader_epoch: int, entries: list[Any]) -> int:
        self.coordinator.load(entries, self._clock.wall_ms())
        return sum(1 for g in self.coordinator.groups if self.coordinator.partition_of(g) == partition)

    async def call(self, operation: Callable[[Any, int], Outcome]) -> Any:
        return await self.runtime.call(operation)

    async def write(self, records: list[tuple[int, Record]]) -> None:
        """Append records of groups served outside the coordinator's state machine (share groups) to
        ``__consumer_offsets``, and wait for them to be replicated."""
        await self.runtime.call(lambda waiter, _now_ms: Outcome(replies=[(waiter, None)], records=records))
