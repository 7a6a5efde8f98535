"""The Admin client's log-dir calls: describeLogDirs (DescribeLogDirs, asked of each broker) and
alterReplicaLogDirs (AlterReplicaLogDirs, sent to the broker holding the replica)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from pybroker.client.cluster import KafkaClient
from pybroker.client.errors import ResponseError, check
from pybroker.common.topic import TopicPartition
from pybroker.protocol.messages import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
)


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """One log of a partition in a log dir (Kafka's ReplicaInfo): a future log is a replica moving there."""

    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log dir of a broker; ``error`` set (KAFKA_STORAGE_ERROR) when it is offline. The volume's
    total and usable bytes are None when the broker does not say (before v4, or offline)."""

    path: str
    error: ResponseError | None
    replicas: dict[TopicPartition, ReplicaInfo] = field(default_factory=dict)
    total_bytes: int | None = None
    usable_bytes: int | None = None


async def describe_log_dirs(client: KafkaClient, broker_ids: Iterable[int] | None = None,
                            topics: Mapping[str, Sequence[int]] | None = None) -> dict[int, list[LogDirDescription]]:
    """Each broker's log dirs (``broker_ids`` None: every broker), with the partitions named in ``topics``
    (topic -> partitions; None: all). A broker refusing the request raises its ResponseError."""
    if broker_ids is None:
        await client.metadata([])
        broker_ids = sorted(client.brokers)
    request = DescribeLogDirsRequest(topics=None if topics is None else [
        DescribeLogDirsRequest.DescribableLogDirTopic(topic=name, partitions=list(partitions))
        for name, partitions in topics.items()])
    ids = list(broker_ids)
    answers = await asyncio.gather(*(_describe_one(client, broker_id, request) for broker_id in ids))
    return dict(zip(ids, answers))


async def _describe_one(client: KafkaClient, broker_id: int, request: DescribeLogDirsRequest
                        ) -> list[LogDirDescription]:
    response = await (await client.node(broker_id)).send(request, DescribeLogDirsResponse)
    check(response.error_code)
    return [LogDirDescription(
        path=result.log_dir, error=ResponseError(result.error_code) if result.error_code else None,
        replicas={TopicPartition(topic.name, p.partition_index): ReplicaInfo(p.partition_size, p.offset_lag,
                                                                              p.is_future_key)
                  for topic in result.topics for p in topic.partitions},
        total_bytes=None if result.total_bytes < 0 else result.total_bytes,
        usable_bytes=None if result.usable_bytes < 0 else result.usable_bytes) for result in response.results]


async def alter_replica_log_dirs(client: KafkaClient, moves: Mapping[tuple[TopicPartition, int], str]
                                 ) -> dict[tuple[TopicPartition, int], ResponseError | None]:
    """Move each replica, named by (partition, broker id), to the log dir given (an absolute path on that
    broker); per replica None or the broker's refusal (LOG_DIR_NOT_FOUND, KAFKA_STORAGE_ERROR,
    REPLICA_NOT_AVAILABLE). The move itself goes on in the background: DescribeLogDirs shows it."""
    by_broker: dict[int, dict[str, dict[str, list[int]]]] = {}
    for (tp, broker_id), path in moves.items():
        by_broker.setdefault(broker_id, {}).setdefault(path, {}).setdefault(tp.topic, []).append(tp.partition)
    outcomes: dict[tuple[TopicPartition, int], ResponseError | None] = {}

    async def one(broker_id: int, dirs: dict[str, dict[str, list[int]]]) -> None:
        request = AlterReplicaLogDirsRequest(dirs=[AlterReplicaLogDirsRequest.AlterReplicaLogDir(
            path=path, topics=[AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(name=name, partitions=partitions)
                               for name, partitions in topics.items()]) for path, topics in dirs.items()])
        response = await (await client.node(broker_id)).send(request, AlterReplicaLogDirsResponse)
        for topic in response.results:
            for p in topic.partitions:
                outcomes[(TopicPartition(topic.topic_name, p.partition_index), broker_id)] = \
                    ResponseError(p.error_code) if p.error_code else None

    await asyncio.gather(*(one(broker_id, dirs) for broker_id, dirs in by_broker.items()))
    return outcomes
