"""Creating topics and partitions within this broker's descriptor budget (``pybroker.common.open_files``).

CreateTopics, CreatePartitions and the auto-creation of a topic first plan the new partitions (the
metadata's ``validate_only`` pass: every check, and in a cluster the replica placement), then admit the
ones placed on this broker against the budget, and only then create them, with the very placement that
was admitted. A refusal therefore leaves nothing behind: no metadata, no partition directory, no log.
On a single node the new partitions' logs are made off the event loop (`replication/topic_changes.py`):
the answer waits for them, so it still comes after every new partition's files are durable.
In a cluster the controller elects the new partitions' leaders after the write, and nothing here waits for them:
CreateTopics and CreatePartitions wait up to their timeout_ms (`handlers/topics.py`); a topic a Metadata request
auto-creates is answered LEADER_NOT_AVAILABLE at once, as Kafka's AutoTopicCreationManager answers it (creating with
timeout 0), and clients ask again.
In a cluster the budget checked is that of the broker handling the request; another broker that would run
out of descriptors answers the LeaderAndIsr of the replicas it cannot open with KAFKA_STORAGE_ERROR, so the
controller treats them as offline replicas (and elects other leaders), and its log dir stays online.
"""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence

from pybroker.common.open_files import DescriptorBudget
from pybroker.controller.metadata import ClusterMetadata, TopicInfo, has_leaders
from pybroker.replication.manager import ReplicaManager

__all__ = ["create_topic", "create_partitions"]


class TopicHost(Protocol):
    """What topic creation needs of the broker: its id, metadata, descriptor budget and replicas
    (`services.Services`)."""

    @property
    def broker_id(self) -> int: ...

    @property
    def metadata(self) -> ClusterMetadata | None: ...

    @property
    def open_files(self) -> DescriptorBudget: ...

    @property
    def replica_manager(self) -> ReplicaManager: ...


def _hosted_here(broker: TopicHost, info: TopicInfo, partitions: Sequence[int]) -> int:
    return sum(1 for p in partitions if broker.broker_id in info.partitions[p].replicas)


async def create_topic(broker: TopicHost, name: str, partitions: int, factor: int, configs: Mapping[str, str],
                       assignments: Mapping[int, Sequence[int]] | None = None, *,
                       validate_only: bool = False) -> TopicInfo:
    """``metadata.create_topic``, refused with OpenFilesLimitError when its partitions would not fit here; the
    topic as this broker sees it once written and led (in a cluster, as created until then)."""
    assert broker.metadata is not None
    planned = await broker.metadata.create_topic(name, partitions, factor, configs, assignments, validate_only=True)
    broker.open_files.admit(_hosted_here(broker, planned, list(planned.partitions)), f"topic '{name}'",
                            count_in=not validate_only)
    if validate_only:
        return planned
    plan = {p: partition.replicas for p, partition in planned.partitions.items()}
    created = await broker.metadata.create_topic(name, len(plan), factor, configs, plan)
    await broker.replica_manager.topic_changes.settled(name)
    return _as_seen(broker.metadata, created)


async def create_partitions(broker: TopicHost, name: str, total: int, assignments: Sequence[Sequence[int]] | None, *,
                            validate_only: bool = False) -> TopicInfo:
    """``metadata.create_partitions``, refused with OpenFilesLimitError when the new partitions would not fit;
    the topic as this broker sees it once written and led (in a cluster, as grown until then)."""
    assert broker.metadata is not None
    current = broker.metadata.topic(name)
    planned = await broker.metadata.create_partitions(name, total, assignments, validate_only=True)
    added = sorted(set(planned.partitions) - set(current.partitions if current is not None else ()))
    broker.open_files.admit(_hosted_here(broker, planned, added), f"{len(added)} new partition(s) of topic '{name}'",
                            count_in=not validate_only)
    if validate_only:
        return planned
    created = await broker.metadata.create_partitions(name, total, [planned.partitions[p].replicas for p in added])
    await broker.replica_manager.topic_changes.settled(name)
    return _as_seen(broker.metadata, created)


def _as_seen(metadata: ClusterMetadata, created: TopicInfo) -> TopicInfo:
    """The topic as this broker sees it if every partition written has a leader there (always on a single node),
    else as written."""
    seen = metadata.topic(created.name)
    return seen if seen is not None and has_leaders(seen, len(created.partitions)) else created
