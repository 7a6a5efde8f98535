"""Consumer-group administration over the wire: find the coordinator, list, describe, delete groups,
read and commit offsets.

Every group request goes to the group's coordinator, found with FindCoordinator. While a coordinator
is starting or moving (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR) the
request is retried with backoff within the client's timeout, as Kafka's AdminClient does.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Mapping, Protocol, Sequence, TypeVar

from pybroker.client.cluster import BrokerNode, KafkaClient
from pybroker.client.connection import Connection
from pybroker.client.consumer_protocol import PROTOCOL_TYPE, decode_assignment
from pybroker.client.errors import ResponseError, check
from pybroker.common.topic import TopicPartition
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)

T = TypeVar("T")


class _CommittedPartition(Protocol):
    """A partition of an OffsetFetch answer: top-level (v0-7) and per-group (v8+) ones are distinct classes."""

    partition_index: int
    committed_offset: int
    error_code: int

GROUP_KEY_TYPE = 0
RETRY_BACKOFF_S = 0.1
COORDINATOR_MOVED = frozenset({ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                               ErrorCode.NOT_COORDINATOR})
NO_OFFSET = -1


class CoordinatorMoved(ResponseError):
    """The coordinator is loading or elsewhere: find it again and retry."""


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = ""
    """"classic" or "consumer" (ListGroups v5+); empty from older brokers."""


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]
    member_epoch: int | None = None
    """Consumer-protocol members only, as the target assignment and its epoch."""
    target: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    #: the assignment strategy the group chose ("range", ...); empty while no members
    protocol: str
    members: tuple[MemberDescription, ...]
    coordinator: BrokerNode
    group_type: str = "classic"
    group_epoch: int | None = None
    """Consumer-protocol groups only, as ``assignment_epoch``."""
    assignment_epoch: int | None = None


class GroupAdmin:
    """Kafka's AdminClient group operations that kafka-consumer-groups.sh needs."""

    def __init__(self, client: KafkaClient) -> None:
        self.client = client

    async def find_coordinator(self, group_id: str) -> BrokerNode:
        connection = await self.client.connect()
        request = FindCoordinatorRequest(key=group_id, key_type=GROUP_KEY_TYPE, coordinator_keys=[group_id])
        response = await connection.send(request, FindCoordinatorResponse)
        if response.coordinators:
            found = response.coordinators[0]
            code, message, node = found.error_code, found.error_message, (found.node_id, found.host, found.port)
        else:
            code, message = response.error_code, response.error_message
            node = (response.node_id, response.host, response.port)
        if code in COORDINATOR_MOVED:
            raise CoordinatorMoved(code, message)
        check(code, message)
        return BrokerNode(*node)

    async def on_coordinator(self, group_id: str, call: Callable[[BrokerNode, Connection], Awaitable[T]]) -> T:
        """Run ``call`` with the group's coordinator, retrying while the coordinator moves or loads."""
        deadline = time.monotonic() + self.client.timeout
        while True:
            try:
                node = await self.find_coordinator(group_id)
                self.client.brokers.setdefault(node.node_id, node)
                return await call(node, await self.client.node(node.node_id))
            except CoordinatorMoved:
                if time.monotonic() + RETRY_BACKOFF_S > deadline:
                    raise
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def list_groups(self, types: Sequence[str] = ()) -> list[ListedGroup]:
        """Groups of every broker, sorted by id; only those of ``types`` ("share", ...) if given (ListGroups v5+)."""
        await self.client.metadata([])
        groups = {}
        for node_id in sorted(self.client.brokers):
            connection = await self.client.node(node_id)
            response = await connection.send(ListGroupsRequest(types_filter=list(types)), ListGroupsResponse,
                                             min_version=5 if types else 0)
            check(response.error_code)
            for g in response.groups:
                groups[g.group_id] = ListedGroup(g.group_id, g.protocol_type, g.group_state, g.group_type)
        return [groups[g] for g in sorted(groups)]

    async def describe_group(self, group_id: str) -> GroupDescription:
        """State and members; a group unknown to the coordinator comes back in state "Dead"."""
        async def describe(node: BrokerNode, connection: Connection
                           ) -> tuple[BrokerNode, DescribeGroupsResponse.DescribedGroup]:
            response = await connection.send(DescribeGroupsRequest(groups=[group_id]), DescribeGroupsResponse)
            [described] = response.groups
            if described.error_code in COORDINATOR_MOVED:
                raise CoordinatorMoved(described.error_code)
            if described.error_code != ErrorCode.GROUP_ID_NOT_FOUND:  # v6+ says so of a Dead group
                check(described.error_code)
            return node, described

        coordinator, described = await self.on_coordinator(group_id, describe)
        if described.group_state == "Dead":  # Kafka 4 describes consumer-protocol groups with their own API
            consumer = await self._describe_consumer_group(group_id)
            if consumer is not None:
                return consumer
        members = tuple(
            MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                              tuple(decode_assignment(m.member_assignment))
                              if described.protocol_type == PROTOCOL_TYPE else ())
            for m in described.members)
        return GroupDescription(described.group_id, described.group_state, described.protocol_type,
                                described.protocol_data, members, coordinator)

    async def _describe_consumer_group(self, group_id: str) -> GroupDescription | None:
        """ConsumerGroupDescribe; None when the broker lacks it or the group is not a consumer-protocol one."""
        async def describe(node: BrokerNode, connection: Connection
                           ) -> tuple[BrokerNode, ConsumerGroupDescribeResponse.DescribedGroup | None]:
            if ConsumerGroupDescribeRequest.API_KEY not in connection.versions.chosen:
                return node, None
            response = await connection.send(ConsumerGroupDescribeRequest(group_ids=[group_id]),
                                             ConsumerGroupDescribeResponse)
            [described] = response.groups
            if described.error_code in COORDINATOR_MOVED:
                raise CoordinatorMoved(described.error_code)
            if described.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                return node, None
            check(described.error_code)
            return node, described

        coordinator, described = await self.on_coordinator(group_id, describe)
        if described is None:
            return None

        def partitions(assignment: ConsumerGroupDescribeResponse.Assignment) -> tuple[TopicPartition, ...]:
            return tuple(TopicPartition(t.topic_name, p) for t in assignment.topic_partitions for p in t.partitions)

        members = tuple(MemberDescription(m.member_id, m.instance_id, m.client_id, m.client_host,
                                          partitions(m.assignment), m.member_epoch, partitions(m.target_assignment))
                        for m in described.members)
        return GroupDescription(described.group_id, described.group_state, PROTOCOL_TYPE, described.assignor_name,
                                members, coordinator, "consumer", described.group_epoch, described.assignment_epoch)

    async def committed_offsets(self, group_id: str, partitions: Sequence[TopicPartition] | None = None
                                ) -> dict[TopicPartition, int]:
        """The group's committed offsets (all of them when ``partitions`` is None); absent ones are left out."""
        topics: dict[str, list[int]] = {}
        for tp in partitions or ():
            topics.setdefault(tp.topic, []).append(tp.partition)
        request = OffsetFetchRequest(
            group_id=group_id,
            topics=None if partitions is None else [
                OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=p) for t, p in topics.items()],
            groups=[OffsetFetchRequest.OffsetFetchRequestGroup(
                group_id=group_id,
                topics=None if partitions is None else [
                    OffsetFetchRequest.OffsetFetchRequestTopics(name=t, partition_indexes=p)
                    for t, p in topics.items()])])

        async def fetch(_: BrokerNode, connection: Connection) -> dict[TopicPartition, int]:
            response = await connection.send_at(request, _by_name(connection, request), OffsetFetchResponse)
            answered: list[tuple[str, Sequence[_CommittedPartition]]]
            if response.groups:
                [group] = response.groups
                code, answered = group.error_code, [(t.name, t.partitions) for t in group.topics]
            else:
                code, answered = response.error_code, [(t.name, t.partitions) for t in response.topics]
            if code in COORDINATOR_MOVED:
                raise CoordinatorMoved(code)
            check(code)
            offsets = {}
            for name, answered_partitions in answered:
                for p in answered_partitions:
                    check(p.error_code)
                    if p.committed_offset >= 0:
                        offsets[TopicPartition(name, p.partition_index)] = p.committed_offset
            return offsets

        return await self.on_coordinator(group_id, fetch)

    async def commit_offsets(self, group_id: str, offsets: Mapping[TopicPartition, int], *,
                             generation_id: int = -1, member_id: str = "") -> None:
        """Commit; without a generation and member this is an admin commit, accepted only by an empty group."""
        topics: dict[str, list[OffsetCommitRequest.OffsetCommitRequestPartition]] = {}
        for tp, offset in offsets.items():
            topics.setdefault(tp.topic, []).append(OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=offset, committed_metadata=""))
        request = OffsetCommitRequest(
            group_id=group_id, generation_id_or_member_epoch=generation_id, member_id=member_id,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=p) for t, p in topics.items()])

        async def commit(_: BrokerNode, connection: Connection) -> None:
            response = await connection.send_at(request, _by_name(connection, request), OffsetCommitResponse)
            for topic in response.topics:
                for p in topic.partitions:
                    if p.error_code in COORDINATOR_MOVED:
                        raise CoordinatorMoved(p.error_code)
                    check(p.error_code)

        await self.on_coordinator(group_id, commit)

    async def delete_group(self, group_id: str) -> None:
        """Delete an empty group and its offsets; ResponseError (e.g. NON_EMPTY_GROUP) otherwise."""
        async def delete(_: BrokerNode, connection: Connection) -> None:
            response = await connection.send(DeleteGroupsRequest(groups_names=[group_id]), DeleteGroupsResponse)
            [result] = response.results
            if result.error_code in COORDINATOR_MOVED:
                raise CoordinatorMoved(result.error_code)
            check(result.error_code)

        await self.on_coordinator(group_id, delete)


LAST_TOPIC_NAME_OFFSETS_VERSION = 9
"""OffsetCommit/OffsetFetch v10 name topics by id only (KIP-848); these calls name them, as the Java client does
when it does not know every topic's id."""


def _by_name(connection: Connection, request: OffsetCommitRequest | OffsetFetchRequest) -> int:
    return min(connection.versions.version_for(request.API_KEY), LAST_TOPIC_NAME_OFFSETS_VERSION)
