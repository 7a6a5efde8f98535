"""What the console's share-group page shows (KIP-932), gathered over the wire with pybroker.client: the group and
its members from ShareGroupDescribe, each partition's readers and log end offset, and its start offset and lag from
DescribeShareGroupOffsets when the coordinator serves it (``offsets_served`` says whether it does)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from pybroker.client import KafkaClient
from pybroker.client.groups import GroupAdmin
from pybroker.client.share_groups import ShareGroupAdmin, ShareGroupDescription
from pybroker.client.share_offsets import share_group_offsets
from pybroker.common.topic import TopicPartition
from pybroker.console.cluster_views import log_end_offsets

__all__ = ["SharePartitionRow", "ShareGroupDetail", "share_group_detail"]


@dataclass(frozen=True, slots=True)
class SharePartitionRow:
    topic: str
    partition: int
    log_end: int | None
    start_offset: int | None
    lag: int | None
    readers: tuple[str, ...]
    """Member ids assigned the partition: with more members than partitions, several read each one."""


@dataclass(frozen=True, slots=True)
class ShareGroupDetail:
    description: ShareGroupDescription
    rows: list[SharePartitionRow]
    offsets_served: bool

    @property
    def total_lag(self) -> int | None:
        lags = [row.lag for row in self.rows if row.lag is not None]
        return sum(lags) if lags else None


async def share_group_detail(client: KafkaClient, group_id: str) -> ShareGroupDetail:
    groups = GroupAdmin(client)
    description = await ShareGroupAdmin(groups).describe(group_id)
    offsets = await share_group_offsets(groups, group_id)
    readers: dict[TopicPartition, list[str]] = defaultdict(list)
    for member in description.members:
        for tp in member.assignment:
            readers[tp].append(member.member_id)
    partitions = set(readers) | set(offsets or {})
    ends = await log_end_offsets(client, partitions)
    rows = []
    for tp in sorted(partitions, key=lambda tp: (tp.topic, tp.partition)):
        found = (offsets or {}).get(tp)
        rows.append(SharePartitionRow(tp.topic, tp.partition, ends.get(tp), found.start_offset if found else None,
                                      found.lag if found else None, tuple(sorted(readers[tp]))))
    return ShareGroupDetail(description, rows, offsets is not None)

