"""The broker's group coordinator: the pure state machine, its runtime and ``__consumer_offsets``.

The internal topic is created on first use (FindCoordinator, or any group request), compacted,
with ``offsets.topic.num.partitions`` partitions. Whenever this broker becomes the leader of one
of its partitions (at start-up, on creation, or after a failover) the partition is replayed into the
coordinator before it answers for those groups; when it stops leading, the groups are dropped and
their requests answered NOT_COORDINATOR (Kafka's GroupCoordinator.onElection/onResignation).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Callable

from pybroker.coordinator.coordinator import GroupConfig, GroupCoordinator, Outcome
from pybroker.coordinator.loader import replay
from pybroker.coordinator.records import Record
from pybroker.coordinator.runtime import CoordinatorRuntime
from pybroker.records import RecordInput, build_batch

if TYPE_CHECKING:
    from pybroker.server.broker import Broker

log = logging.getLogger("pybroker.coordinator")

OFFSETS_TOPIC = "__consumer_offsets"


class GroupService:
    def __init__(self, broker: "Broker", clock: Callable[[], int]) -> None:
        config = broker.config
        self._broker = broker
        self.coordinator = GroupCoordinator(GroupConfig(
            num_partitions=config["offsets.topic.num.partitions"],
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            max_size=config["group.max.size"],
            offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
            offsets_retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
        ))
        self.runtime = CoordinatorRuntime(self.coordinator, self._persist, clock, self._replicated)
        self._clock = clock
        self._commit_timeout_s = config["offsets.commit.timeout.ms"] / 1000
        self._creating: asyncio.Lock | None = None
        self.loaded: set[int] = set()
        """Partitions of the internal topic whose groups this broker coordinates."""

    def start(self) -> asyncio.Task[None]:
        """Run the coordinator's timers (partitions are loaded as this broker becomes their leader)."""
        return asyncio.get_running_loop().create_task(self.runtime.run_timers(), name="group-coordinator")

    def owns(self, group_id: str) -> bool:
        return self.coordinator.partition_of(group_id) in self.loaded

    def on_leadership_change(self, topic: str, partition: int, leader_epoch: int, is_leader: bool) -> None:
        """The replica manager's listener: load or unload a partition of ``__consumer_offsets``."""
        if topic != OFFSETS_TOPIC:
            return
        if not is_leader:
            self.loaded.discard(partition)
            self.runtime.unload(partition)
            log.info("Unloaded the groups of %s-%d", OFFSETS_TOPIC, partition)
            return
        partition_log = self._broker.log_manager.get_log(OFFSETS_TOPIC, partition)
        if partition_log is not None:
            self.runtime.unload(partition)  # a stale copy from an earlier term
            self.coordinator.load(replay(partition_log.read_from_start()), self._clock())
        self.loaded.add(partition)
        count = sum(1 for g in self.coordinator.groups if self.coordinator.partition_of(g) == partition)
        log.log(logging.INFO if count else logging.DEBUG, "Loaded %d group(s) from %s-%d at leader epoch %d", count,
                OFFSETS_TOPIC, partition, leader_epoch)

    async def call(self, operation: Callable[[Any, int], Outcome]) -> Any:
        return await self.runtime.call(operation)

    async def ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` if it does not exist yet (Kafka does this on first use)."""
        metadata = self._broker.metadata
        assert metadata is not None
        if metadata.topic(OFFSETS_TOPIC) is not None:
            return
        if self._creating is None:
            self._creating = asyncio.Lock()
        async with self._creating:
            if metadata.topic(OFFSETS_TOPIC) is not None:
                return
            config = self._broker.config
            factor = min(config["offsets.topic.replication.factor"], len(metadata.brokers()))
            await metadata.create_topic(OFFSETS_TOPIC, config["offsets.topic.num.partitions"], factor, {
                "cleanup.policy": "compact",
                "segment.bytes": str(config["offsets.topic.segment.bytes"]),
                "compression.type": "producer",
            })
            log.info("Created internal topic %s with %d partitions", OFFSETS_TOPIC,
                     config["offsets.topic.num.partitions"])

    def coordinator_node(self, partition: int) -> int | None:
        """The broker leading the internal-topic partition, i.e. the coordinator for its groups."""
        metadata = self._broker.metadata
        assert metadata is not None
        info = metadata.topic(OFFSETS_TOPIC)
        if info is None or partition not in info.partitions:
            return None
        leader = info.partitions[partition].leader
        return leader if leader >= 0 else None

    def _persist(self, partition: int, records: list[Record]) -> int:
        batch = build_batch([RecordInput(key, value) for key, value in records])
        info = self._broker.replica_manager.append(OFFSETS_TOPIC, partition, bytearray(batch), required_acks=-1,
                                                   now_ms=self._clock())
        return info.last_offset + 1

    async def _replicated(self, partition: int, end_offset: int) -> None:
        await self._broker.replica_manager.wait_for_high_watermark(OFFSETS_TOPIC, partition, end_offset,
                                                                   self._commit_timeout_s)
