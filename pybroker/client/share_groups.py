"""Share-group administration over the wire (KIP-932): list share groups and describe them with
ShareGroupDescribe at their coordinator; deletion is DeleteGroups, as for any group (``GroupAdmin``)."""

from __future__ import annotations

from dataclasses import dataclass

from pybroker.client.cluster import BrokerNode
from pybroker.client.connection import Connection
from pybroker.client.errors import check
from pybroker.client.groups import COORDINATOR_MOVED, CoordinatorMoved, GroupAdmin, ListedGroup
from pybroker.common.topic import TopicPartition
from pybroker.protocol.messages import ShareGroupDescribeRequest, ShareGroupDescribeResponse

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
