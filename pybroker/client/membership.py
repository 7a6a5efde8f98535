"""Membership of a classic consumer group: JoinGroup/SyncGroup with the range assignor, heartbeats,
offset commits under the member's generation, and LeaveGroup.

The owner drives it from its own loop (no background task): it calls :meth:`heartbeat` at least every
``heartbeat_interval_ms`` and :meth:`join` again whenever a heartbeat says the group is rebalancing.
When this member is the leader it assigns every member's subscription with :func:`range_assign`,
so it cooperates with Kafka consumers in the same group that also use the range assignor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence, TypeVar

from pybroker.client.cluster import BrokerNode
from pybroker.client.connection import Connection
from pybroker.client.consumer_protocol import (
    PROTOCOL_TYPE,
    RANGE_ASSIGNOR,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
)
from pybroker.client.errors import ResponseError, check
from pybroker.client.groups import COORDINATOR_MOVED, CoordinatorMoved, GroupAdmin
from pybroker.client.metadata import topic_layouts
from pybroker.common.topic import TopicPartition
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.schema import Message
from pybroker.protocol.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

R = TypeVar("R", SyncGroupResponse, HeartbeatResponse, LeaveGroupResponse)
REJOIN = frozenset({ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID})
MAX_JOIN_ATTEMPTS = 20
LEAVE_REASON = "the consumer is being closed"


@dataclass(frozen=True, slots=True)
class MembershipSettings:
    session_timeout_ms: int = 45000  # Kafka's session.timeout.ms default
    rebalance_timeout_ms: int = 300000  # max.poll.interval.ms default
    heartbeat_interval_ms: int = 3000


class GroupMember:
    """This process as one member of ``group_id`` subscribed to ``topics``."""

    def __init__(self, groups: GroupAdmin, group_id: str, topics: Sequence[str],
                 settings: MembershipSettings = MembershipSettings()) -> None:
        self.groups = groups
        self.group_id = group_id
        self.topics = sorted(topics)
        self.settings = settings
        self.member_id = ""
        self.generation_id = -1
        self.assignment: list[TopicPartition] = []

    async def join(self) -> list[TopicPartition]:
        """(Re)join and sync until the group is stable; return this member's partitions."""
        for _ in range(MAX_JOIN_ATTEMPTS):
            joined = await self._join_group()
            if joined is None:
                continue
            assignment = await self._sync_group(joined)
            if assignment is not None:
                self.assignment = assignment
                return assignment
        raise ResponseError(ErrorCode.REBALANCE_IN_PROGRESS,
                            f"Could not join group {self.group_id} after {MAX_JOIN_ATTEMPTS} attempts")

    async def _join_group(self) -> JoinGroupResponse | None:
        """One JoinGroup round trip; None when it must be sent again (new member id, rebalance)."""
        request = JoinGroupRequest(
            group_id=self.group_id, session_timeout_ms=self.settings.session_timeout_ms,
            rebalance_timeout_ms=self.settings.rebalance_timeout_ms, member_id=self.member_id,
            protocol_type=PROTOCOL_TYPE,
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=RANGE_ASSIGNOR,
                                                                 metadata=encode_subscription(self.topics))])
        timeout = self.settings.rebalance_timeout_ms / 1000 + self.groups.client.timeout

        async def send(_: BrokerNode, connection: Connection) -> JoinGroupResponse:
            response = await connection.send(request, JoinGroupResponse, timeout=timeout)
            if response.error_code in COORDINATOR_MOVED:
                raise CoordinatorMoved(response.error_code)
            return response

        response = await self.groups.on_coordinator(self.group_id, send)
        if response.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            return None
        if response.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
            return None
        if response.error_code == ErrorCode.REBALANCE_IN_PROGRESS:
            return None
        check(response.error_code)
        self.member_id = response.member_id
        self.generation_id = response.generation_id
        return response

    async def _sync_group(self, joined: JoinGroupResponse) -> list[TopicPartition] | None:
        assignments = []
        if joined.leader == self.member_id:
            subscriptions = {m.member_id: decode_subscription(m.metadata) for m in joined.members}
            topics = sorted({t for subscribed in subscriptions.values() for t in subscribed})
            counts = {name: len(layout.leaders)
                      for name, layout in (await topic_layouts(self.groups.client, topics)).items()}
            assignments = [SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=encode_assignment(p))
                           for m, p in range_assign(subscriptions, counts).items()]
        request = SyncGroupRequest(group_id=self.group_id, generation_id=self.generation_id, member_id=self.member_id,
                                   protocol_type=PROTOCOL_TYPE, protocol_name=joined.protocol_name or RANGE_ASSIGNOR,
                                   assignments=assignments)
        response = await self._send(request, SyncGroupResponse)
        if response.error_code in REJOIN:
            return None
        check(response.error_code)
        return decode_assignment(response.assignment)

    async def heartbeat(self) -> bool:
        """Tell the coordinator we are alive; False when the group rebalances and :meth:`join` is due."""
        response = await self._send(HeartbeatRequest(group_id=self.group_id, generation_id=self.generation_id,
                                                     member_id=self.member_id), HeartbeatResponse)
        if response.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if response.error_code in REJOIN:
            return False
        check(response.error_code)
        return True

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if offsets:
            await self.groups.commit_offsets(self.group_id, offsets, generation_id=self.generation_id,
                                             member_id=self.member_id)

    async def leave(self) -> None:
        if not self.member_id:
            return
        request = LeaveGroupRequest(group_id=self.group_id, member_id=self.member_id, members=[
            LeaveGroupRequest.MemberIdentity(member_id=self.member_id, reason=LEAVE_REASON)])
        await self._send(request, LeaveGroupResponse)
        self.member_id = ""
        self.generation_id = -1

    async def _send(self, request: Message, response_type: type[R]) -> R:
        """Send to the coordinator; the caller reads the top-level error code (all these responses have one)."""
        async def send(_: BrokerNode, connection: Connection) -> R:
            response = await connection.send(request, response_type)
            if response.error_code in COORDINATOR_MOVED:
                raise CoordinatorMoved(response.error_code)
            return response

        return await self.groups.on_coordinator(self.group_id, send)

