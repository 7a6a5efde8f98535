"""Share-group administration over the wire (KIP-932): list share groups and describe them with
ShareGroupDescribe at their coordinator; deletion is DeleteGroups, as for any group (``GroupAdmin``); their
share-partitions' start offsets with DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from pybroker.client.cluster import BrokerNode
from pybroker.client.connection import Connection
from pybroker.client.errors import check
from pybroker.client.groups import COORDINATOR_MOVED, CoordinatorMoved, GroupAdmin, ListedGroup
from pybroker.common.topic import TopicPartition
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)

SHARE = "share"


@dataclass(frozen=True, slots=True)
class ShareMember:
    member_id: str
    client_id: str
    host: str
    member_epoch: int
    assignment: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    members: tuple[ShareMember, ...]
    coordinator: BrokerNode


@dataclass(frozen=True, slots=True)
class ShareOffset:
    """A share-partition's start offset (-1: no state yet), leader epoch and lag (-1: unknown)."""

    partition: TopicPartition
    start_offset: int
    leader_epoch: int
    lag: int


class ShareGroupAdmin:
    def __init__(self, groups: GroupAdmin) -> None:
        self.groups = groups

    async def list_groups(self) -> list[ListedGroup]:
        """Share groups of every broker, sorted by id."""
        return await self.groups.list_groups([SHARE])

    async def describe(self, group_id: str) -> ShareGroupDescription:
        """ShareGroupDescribe at the coordinator; ResponseError GROUP_ID_NOT_FOUND for no such share group."""
        async def describe(node: BrokerNode, connection: Connection
                           ) -> tuple[BrokerNode, ShareGroupDescribeResponse.DescribedGroup]:
            response = await connection.send(ShareGroupDescribeRequest(group_ids=[group_id]),
                                             ShareGroupDescribeResponse, min_version=1)
            [described] = response.groups
            if described.error_code in COORDINATOR_MOVED:
                raise CoordinatorMoved(described.error_code)
            check(described.error_code, described.error_message)
            return node, described

        coordinator, described = await self.groups.on_coordinator(group_id, describe)
        members = tuple(ShareMember(m.member_id, m.client_id, m.client_host, m.member_epoch, tuple(
            TopicPartition(t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions))
            for m in described.members)
        return ShareGroupDescription(described.group_id, described.group_state, described.group_epoch,
                                     described.assignment_epoch, members, coordinator)

    async def describe_offsets(self, group_id: str, topics: Mapping[str, list[int]] | None = None
                               ) -> list[ShareOffset]:
        """DescribeShareGroupOffsets: the partitions of ``topics``, or every partition the group was assigned."""
        D = DescribeShareGroupOffsetsRequest
        request = D(groups=[D.DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=None if topics is None
                    else [D.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=p)
                          for t, p in topics.items()])])

        async def describe(_: BrokerNode, connection: Connection) -> DescribeShareGroupOffsetsResponse:
            response = await connection.send(request, DescribeShareGroupOffsetsResponse)
            [group] = response.groups
            if group.error_code in COORDINATOR_MOVED:
                raise CoordinatorMoved(group.error_code)
            check(group.error_code, group.error_message)
            return response

        [group] = (await self.groups.on_coordinator(group_id, describe)).groups
        out = []
        for topic in group.topics:
            for p in topic.partitions:
                check(p.error_code, p.error_message)
                out.append(ShareOffset(TopicPartition(topic.topic_name, p.partition_index), p.start_offset,
                                       p.leader_epoch, p.lag))
        return sorted(out, key=lambda o: (o.partition.topic, o.partition.partition))

    async def alter_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        """AlterShareGroupOffsets: ResponseError (NON_EMPTY_GROUP, ...) for the first refusal."""
        A = AlterShareGroupOffsetsRequest
        by_topic: dict[str, list[AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestPartition]] = {}
        for tp, offset in offsets.items():
            by_topic.setdefault(tp.topic, []).append(A.AlterShareGroupOffsetsRequestPartition(
                partition_index=tp.partition, start_offset=offset))
        request = A(group_id=group_id, topics=[A.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=p)
                                               for t, p in by_topic.items()])

        async def alter(_: BrokerNode, connection: Connection) -> None:
            response = await connection.send(request, AlterShareGroupOffsetsResponse)
            if response.error_code in COORDINATOR_MOVED:
                raise CoordinatorMoved(response.error_code)
            check(response.error_code, response.error_message)
            for topic in response.responses:
                for p in topic.partitions:
                    check(p.error_code, p.error_message)

        await self.groups.on_coordinator(group_id, alter)

    async def delete_offsets(self, group_id: str, topics: list[str]) -> dict[str, ErrorCode]:
        """DeleteShareGroupOffsets: each topic's answer; ResponseError for a refusal of the whole group."""
        X = DeleteShareGroupOffsetsRequest
        request = X(group_id=group_id, topics=[X.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in topics])

        async def delete(_: BrokerNode, connection: Connection) -> dict[str, ErrorCode]:
            response = await connection.send(request, DeleteShareGroupOffsetsResponse)
            if response.error_code in COORDINATOR_MOVED:
                raise CoordinatorMoved(response.error_code)
            check(response.error_code, response.error_message)
            return {t.topic_name: ErrorCode(t.error_code) for t in response.responses}

        return await self.groups.on_coordinator(group_id, delete)
