"""A share group's start offset and lag per partition (DescribeShareGroupOffsets, key 90, KIP-932/KIP-1226), as
Kafka's ``Admin.listShareGroupOffsets`` reads them from the group's coordinator."""

from __future__ import annotations

from dataclasses import dataclass

from pybroker.client.cluster import BrokerNode
from pybroker.client.connection import Connection
from pybroker.client.errors import UnsupportedVersionError, check
from pybroker.client.groups import COORDINATOR_MOVED, CoordinatorMoved, GroupAdmin
from pybroker.common.topic import TopicPartition
from pybroker.protocol.messages import DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse

__all__ = ["ShareOffset", "share_group_offsets"]


@dataclass(frozen=True, slots=True)
class ShareOffset:
    start_offset: int
    """The share-partition start offset: every record below it is acknowledged or archived."""
    lag: int | None
    """Records from the start offset on not yet acknowledged or archived; None before v1 (or unknown, -1)."""


async def share_group_offsets(groups: GroupAdmin, group_id: str) -> dict[TopicPartition, ShareOffset] | None:
    """Every partition the group has state for; None when the coordinator does not serve DescribeShareGroupOffsets."""
    async def describe(_: BrokerNode, connection: Connection) -> dict[TopicPartition, ShareOffset] | None:
        request = DescribeShareGroupOffsetsRequest(groups=[
            DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=None)])
        try:
            response = await connection.send(request, DescribeShareGroupOffsetsResponse)
        except UnsupportedVersionError:
            return None
        [group] = response.groups
        if group.error_code in COORDINATOR_MOVED:
            raise CoordinatorMoved(group.error_code)
        check(group.error_code, group.error_message)
        offsets = {}
        for topic in group.topics:
            for partition in topic.partitions:
                check(partition.error_code, partition.error_message)
                if partition.start_offset < 0:  # no state yet: the group has not read this partition
                    continue
                offsets[TopicPartition(topic.topic_name, partition.partition_index)] = ShareOffset(
                    partition.start_offset, partition.lag if partition.lag >= 0 else None)
        return offsets

    return await groups.on_coordinator(group_id, describe)
