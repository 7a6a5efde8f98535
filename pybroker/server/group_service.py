"""The broker's group coordinator: the pure state machine, its runtime and ``__consumer_offsets``.

The internal topic is created on first use (FindCoordinator, or any group request), compacted,
with ``offsets.topic.num.partitions`` partitions. At start-up every partition this broker leads
is replayed into the coordinator before the broker answers requests.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Callable, Iterator

from pybroker.common.topic import TopicPartition
from pybroker.coordinator.coordinator import GroupConfig, GroupCoordinator, Outcome
from pybroker.coordinator.loader import replay
from pybroker.coordinator.records import Record
from pybroker.coordinator.runtime import CoordinatorRuntime
from pybroker.log.log import PartitionLog
from pybroker.records import RecordInput, build_batch, iter_batches

if TYPE_CHECKING:
    from pybroker.server.broker import Broker

log = logging.getLogger("pybroker.coordinator")

OFFSETS_TOPIC = "__consumer_offsets"
LOAD_CHUNK_BYTES = 1 << 20


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
        self.runtime = CoordinatorRuntime(self.coordinator, self._persist, clock)
        self._clock = clock
        self._creating: asyncio.Lock | None = None

    def start(self) -> asyncio.Task[None]:
        """Replay the internal topic, then run the coordinator's timers."""
        self._load()
        return asyncio.get_running_loop().create_task(self.runtime.run_timers(), name="group-coordinator")

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

    def _persist(self, partition: int, records: list[Record]) -> None:
        batch = build_batch([RecordInput(key, value) for key, value in records])
        self._broker.replica_manager.append(OFFSETS_TOPIC, partition, bytearray(batch), required_acks=-1,
                                            now_ms=self._clock())

    def _load(self) -> None:
        metadata = self._broker.metadata
        assert metadata is not None
        info = metadata.topic(OFFSETS_TOPIC)
        if info is None:
            return
        loaded = 0
        for index in sorted(info.partitions):
            partition_log = self._broker.log_manager.get_log(OFFSETS_TOPIC, index)
            if partition_log is None:
                continue
            self.coordinator.load(replay(_chunks(partition_log)), self._clock())
            loaded += 1
        log.info("Loaded %d group(s) from %d partition(s) of %s", len(self.coordinator.groups), loaded,
                 OFFSETS_TOPIC)


def _chunks(partition_log: PartitionLog) -> Iterator[bytes]:
    """The log's batches from its start to its end, a segment read at a time."""
    offset = partition_log.log_start_offset
    while offset < partition_log.log_end_offset:
        info = partition_log.read(offset, LOAD_CHUNK_BYTES)
        if info.slices is None:
            return
        data = info.slices.read()
        next_offset = offset
        for batch in iter_batches(data):
            next_offset = batch.next_offset
        if next_offset <= offset:
            log.warning("Stopped loading %s at offset %d: no complete batch",
                        TopicPartition(OFFSETS_TOPIC, partition_log.partition), offset)
            return
        yield data
        offset = next_offset
