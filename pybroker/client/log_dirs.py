"""The Admin client's describeLogDirs: each broker's log directories and the size of every replica in them."""

from __future__ import annotations

from dataclasses import dataclass

from pybroker.client.cluster import KafkaClient
from pybroker.client.errors import ResponseError, check
from pybroker.common.topic import TopicPartition
from pybroker.protocol.messages import DescribeLogDirsRequest, DescribeLogDirsResponse


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    path: str
    error: ResponseError | None
    #: -1 when the broker does not say (versions before 4)
    total_bytes: int
    usable_bytes: int
    replica_sizes: dict[TopicPartition, int]


async def describe_log_dirs(client: KafkaClient, node_id: int) -> list[LogDirDescription]:
    """One broker's log directories (all topics); UnsupportedVersionError when the broker lacks the API."""
    connection = await client.node(node_id)
    response = await connection.send(DescribeLogDirsRequest(topics=None), DescribeLogDirsResponse)
    check(response.error_code)
    return [LogDirDescription(
        r.log_dir, ResponseError(r.error_code) if r.error_code else None, r.total_bytes, r.usable_bytes,
        {TopicPartition(t.name, p.partition_index): p.partition_size for t in r.topics for p in t.partitions})
        for r in response.results]
