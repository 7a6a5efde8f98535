"""A coordinator's compacted internal topic (``__consumer_offsets``, ``__transaction_state``,
``__share_group_state``).

Kafka creates these on first use, with the replication factor capped at the live brokers; the
leader of each partition is the coordinator of the keys hashed to it. Coordinator records are
appended with acks=-1 and answered only once the in-sync replicas hold them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Mapping

from pybroker.controller.errors import TopicExistsError
from pybroker.controller.metadata import ClusterMetadata
from pybroker.coordinator.records import Record
from pybroker.records import RecordInput, build_batch
from pybroker.replication.manager import ReplicaManager

log = logging.getLogger("pybroker.coordinator")

MetadataSource = Callable[[], ClusterMetadata]
"""The broker's metadata, once it has started (services are built before it is)."""

TopicConfigs = Callable[[int], Mapping[str, str]]
"""The topic's config overrides for the replication factor it is created with."""


class InternalTopic:
    def __init__(self, metadata: MetadataSource, replicas: ReplicaManager, name: str, *, partitions: int,
                 replication_factor: int, configs: TopicConfigs, replication_timeout_ms: int, clock: Callable[[], int]) -> None:
        self._metadata = metadata
        self._replicas = replicas
        self.name = name
        self._partitions = partitions
        self._replication_factor = replication_factor
        self._configs = configs
        self._timeout_s = replication_timeout_ms / 1000
        self._clock = clock
        self._creating: asyncio.Lock | None = None

    async def ensure(self) -> None:
        """Create the topic if it does not exist yet (one creation however many requests ask), without waiting for
        its leaders to be elected: in Kafka only FindCoordinator creates the topic, and answers
        COORDINATOR_NOT_AVAILABLE at once after starting the creation; a coordinator request (JoinGroup,
        OffsetCommit, OffsetFetch, InitProducerId, the transaction, share-group and share coordinator APIs) whose
        partition is not led and loaded here yet is answered NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while
        loading), as Kafka's group and transaction coordinators answer it, and clients (and the share-group state
        persister) find the coordinator again and retry. Here those requests also start the creation, so a client
        that skipped FindCoordinator gets through as well; waiting for the election held the request, and the
        connection's later ones, up to 10 s."""
        metadata = self._metadata()
        if metadata.topic(self.name) is not None:
            return
        if self._creating is None:
            self._creating = asyncio.Lock()
        async with self._creating:
            if metadata.topic(self.name) is not None:
                return
            factor = min(self._replication_factor, len(metadata.brokers()))
            try:
                await metadata.create_topic(self.name, self._partitions, factor, {
                    "cleanup.policy": "compact", "compression.type": "producer", **self._configs(factor)})
            except TopicExistsError:  # created in the cluster; this broker's metadata has not caught up yet
                return
            await self._replicas.topic_changes.settled(self.name)  # single node: its logs are made off the loop
            log.info("Created internal topic %s with %d partitions", self.name, self._partitions)

    def leader(self, partition: int) -> int | None:
        """The broker leading ``partition``, i.e. the coordinator of its keys; None when there is none."""
        metadata = self._metadata()
        info = metadata.topic(self.name)
        if info is None or partition not in info.partitions:
            return None
        leader = info.partitions[partition].leader
        return leader if leader >= 0 else None

    def append(self, partition: int, records: list[Record]) -> int:
        """Append coordinator records as one batch; returns the offset just past them."""
        batch = build_batch([RecordInput(key, value) for key, value in records])
        info = self._replicas.append(self.name, partition, bytearray(batch), required_acks=-1,
                                                   now_ms=self._clock())
        return info.last_offset + 1

    async def replicated(self, partition: int, end_offset: int) -> None:
        """Wait until the ISR of ``partition`` holds everything before ``end_offset``."""
        await self._replicas.wait_for_high_watermark(self.name, partition, end_offset,
                                                                   self._timeout_s)
