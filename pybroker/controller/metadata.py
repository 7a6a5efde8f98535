"""The cluster-metadata seam: what the broker asks of whoever owns topic metadata.

In single-node mode the owner is `EmbeddedMetadata` (a JSON document under the first log dir);
in cluster mode a ZooKeeper-backed controller implements the same `ClusterMetadata` protocol.
Nothing here knows wire error codes: failures are the exceptions in `controller.errors`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol, Sequence

from pybroker.common.ids import LeaderEpoch, ProducerId
from pybroker.common.listeners import Endpoint


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    host: str  # host and port of the inter-broker listener: where other brokers reach this one
    port: int
    rack: str | None = None
    #: Every advertised listener; a client is told the endpoints of the listener it came in on.
    endpoints: tuple[Endpoint, ...] = ()

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """Where clients of `listener` reach this broker; None when it has no such listener (Kafka
        leaves it out of that listener's answers). Without endpoints: host and port."""
        if not self.endpoints:
            return self.host, self.port
        return next(((e.host, e.port) for e in self.endpoints if e.listener == listener), None)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: LeaderEpoch
    isr: tuple[int, ...]
    #: replicas the controller reports offline on live brokers (in a failed log dir)
    offline: tuple[int, ...] = ()

    def offline_replicas(self, live: set[int]) -> list[int]:
        """Replicas on brokers that are not registered, or in a failed log dir."""
        return [r for r in self.replicas if r not in live or r in self.offline]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionInfo]
    configs: Mapping[str, str] = field(default_factory=dict)

    @property
    def replication_factor(self) -> int:
        first = self.partitions.get(0)
        return len(first.replicas) if first else 0


def has_leaders(info: TopicInfo | None, partitions: int) -> bool:
    """Whether the topic has its first ``partitions`` partitions, every one with a leader: a creation is
    done (Kafka's DelayedCreatePartitions counts the partitions still without one)."""
    return info is not None and all(p in info.partitions and info.partitions[p].leader >= 0
                                    for p in range(partitions))


TopicListener = Callable[[str, "TopicInfo | None"], None]
"""Called with (name, new info) after a topic changes, and (name, None) after it is deleted."""


class ClusterMetadata(Protocol):
    """Topic and broker metadata of the cluster, as this broker sees it."""

    @property
    def cluster_id(self) -> str: ...

    @property
    def controller_id(self) -> int: ...

    def brokers(self) -> Sequence[BrokerInfo]: ...

    def topics(self) -> Mapping[str, TopicInfo]: ...

    def topic(self, name: str) -> TopicInfo | None: ...

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None: ...

    def add_listener(self, listener: TopicListener) -> None: ...

    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                           configs: Mapping[str, str],
                           assignments: Mapping[int, Sequence[int]] | None = None,
                           *, validate_only: bool = False) -> TopicInfo:
        """Make the topic; in a cluster this returns once the controller was asked to (its leaders follow,
        see `wait_until` and `has_leaders`)."""

    async def delete_topic(self, name: str) -> None:
        """Start the topic's deletion; in a cluster it leaves this broker's view later (`wait_until`). A
        deletion started goes on whether or not anyone waits for it."""

    async def create_partitions(self, name: str, total: int,
                                assignments: Sequence[Sequence[int]] | None = None,
                                *, validate_only: bool = False) -> TopicInfo: ...

    async def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> TopicInfo: ...

    async def wait_until(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Wait, at most ``timeout_s``, until ``done()`` (whether the writes made so far are done) holds of
        this broker's view, checked after every change of it; whether it holds. The admin requests' timeout_ms
        waits here, as Kafka's delayed topic operations wait for the metadata cache. Where every write is done
        once made (a single node), there is nothing to wait for: True."""

    async def allocate_producer_id(self) -> ProducerId: ...


class TopicRegistry:
    """Topic lookups by name and id, and change listeners: the part of `ClusterMetadata` every
    implementation keeps the same way."""

    def __init__(self) -> None:
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[int, TopicInfo] = {}
        """Keyed by the id's ``int``: a UUID hashes and compares in Python code, an int in C (every Fetch v13+
        and Produce v13+ looks its topics up here). Written through `_index`, `_unindex` and `_index_all`."""
        self._listeners: list[TopicListener] = []

    def topics(self) -> Mapping[str, TopicInfo]:
        return self._topics

    def topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        return self._by_id.get(topic_id.int)

    def _index(self, info: TopicInfo) -> None:
        self._by_id[info.topic_id.int] = info

    def _unindex(self, info: TopicInfo) -> None:
        del self._by_id[info.topic_id.int]

    def _index_all(self, topics: Mapping[str, TopicInfo]) -> None:
        self._by_id = {info.topic_id.int: info for info in topics.values()}

    def add_listener(self, listener: TopicListener) -> None:
        self._listeners.append(listener)

    def _notify(self, name: str, info: TopicInfo | None) -> None:
        for listener in self._listeners:
            listener(name, info)
