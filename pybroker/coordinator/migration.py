"""Online migration between the group protocols (Kafka 4's ``group.consumer.migration.policy``).

Upgrade: a consumer-protocol member joining a Stable classic group turns it into a consumer group;
each classic member keeps its id, its assignment (now its target) and the generation as its member
epoch. Classic members of a consumer group go on with JoinGroup/SyncGroup/Heartbeat/LeaveGroup,
which this module maps onto the consumer protocol: JoinGroup carries the subscription (and, for
cooperative clients, the owned partitions), the broker assigns, SyncGroup hands the member its
current assignment, and a Heartbeat answers REBALANCE_IN_PROGRESS while the member is behind its
target, so that it rejoins. A classic member that rejoins has given up what it no longer lists as
owned (all of it, for eager clients).

Downgrade: when the last consumer-protocol member leaves and classic members remain, the group
becomes a classic group again at the group epoch as its generation, preparing a rebalance.
"""

from __future__ import annotations

import struct
import uuid
from typing import Mapping

from pybroker.common.topic import TopicPartition
from pybroker.coordinator.classic import JoinRequest, join_error
from pybroker.coordinator.consumer import ConsumerMembership
from pybroker.coordinator.consumer_group import (
    Assignment,
    ClassicMemberInfo,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    TopicImage,
)
from pybroker.coordinator.group import Group, GroupState, Member, Waiter
from pybroker.coordinator.table import Outcome
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.errors import DecodeError
from pybroker.protocol.messages import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

POLICIES = ("disabled", "downgrade", "upgrade", "bidirectional")
PROTOCOL_TYPE = "consumer"
FIRST_MEMBER_ID_REQUIRED_VERSION = 4
FIRST_BATCHED_LEAVE_VERSION = 3
ASSIGNMENT_VERSION = 0
_VERSION = struct.Struct(">h")


def upgrade_allowed(policy: str) -> bool:
    return policy in ("upgrade", "bidirectional")


def downgrade_allowed(policy: str) -> bool:
    return policy in ("downgrade", "bidirectional")


# ---------------------------------------------------------------------------- conversions


def upgrade(classic: Group, now_ms: int) -> ConsumerGroup | None:
    """The consumer group a Stable classic group of consumers becomes; None when it cannot (Kafka
    converts only groups whose members all speak the consumer protocol's embedded format)."""
    if classic.protocol_type != PROTOCOL_TYPE or classic.protocol_name is None or \
            not classic.is_in(GroupState.STABLE):
        return None
    group = ConsumerGroup(classic.group_id, state_timestamp_ms=now_ms, group_epoch=classic.generation_id,
                          assignment_epoch=classic.generation_id)
    group.offsets, group.pending_offsets, group.offset_positions = \
        classic.offsets, classic.pending_offsets, classic.offset_positions
    for old in classic.members.values():
        subscription = _subscription(old.metadata_for(classic.protocol_name))
        assignment = _assignment(old.assignment)
        if subscription is None or assignment is None:
            return None
        member = ConsumerMember(old.member_id, instance_id=old.group_instance_id, client_id=old.client_id,
                                client_host=old.client_host, rebalance_timeout_ms=old.rebalance_timeout_ms,
                                subscribed_topic_names=sorted(set(subscription.topics)),
                                member_epoch=classic.generation_id, assigned=assignment,
                                heartbeat_deadline_ms=now_ms + old.session_timeout_ms,
                                classic=ClassicMemberInfo(old.session_timeout_ms, list(old.protocols)))
        group.members[member.member_id] = member
        group.target[member.member_id] = assignment
        if member.instance_id is not None:
            group.static_members[member.instance_id] = member.member_id
        group.owners.update({TopicPartition(t, p): member.member_id for t, ps in assignment.items() for p in ps})
    group.written = {key: b"" for key, _ in classic.tombstones()}  # the next write deletes the classic record
    return group


def downgrade(group: ConsumerGroup, now_ms: int) -> Group:
    """The classic group that ``group``'s classic members are left in; the caller prepares a rebalance."""
    classic = Group(group.group_id, state_timestamp_ms=now_ms, protocol_type=PROTOCOL_TYPE,
                    generation_id=group.group_epoch)
    classic.offsets, classic.pending_offsets, classic.offset_positions = \
        group.offsets, group.pending_offsets, group.offset_positions
    for m in group.members.values():
        assert m.classic is not None
        classic.add_member(Member(
            member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
            client_host=m.client_host, rebalance_timeout_ms=m.rebalance_timeout_ms,
            session_timeout_ms=m.classic.session_timeout_ms, protocol_type=PROTOCOL_TYPE,
            protocols=list(m.classic.protocols), assignment=encode_assignment(m.assigned),
            heartbeat_deadline_ms=m.heartbeat_deadline_ms))
    classic.protocol_name = classic.select_protocol()
    classic.transition(GroupState.STABLE, now_ms)
    return classic


# ---------------------------------------------------------------------------- classic members


class ClassicMembersInConsumerGroups:
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup of classic members of consumer groups."""

    def __init__(self, consumer: ConsumerMembership, min_session_timeout_ms: int,
                 max_session_timeout_ms: int) -> None:
        self.consumer = consumer
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms

    def join(self, out: Outcome, waiter: Waiter, group: ConsumerGroup, join: JoinRequest, image: TopicImage,
             now_ms: int) -> None:
        request = join.request
        protocols = [(p.name, bytes(p.metadata)) for p in request.protocols]
        subscription = next((s for s in (_subscription(m) for _, m in protocols) if s is not None), None)
        if not request.group_id:
            out.reply(waiter, join_error(ErrorCode.INVALID_GROUP_ID, request.member_id, join.version))
            return
        if not self.min_session_timeout_ms <= request.session_timeout_ms <= self.max_session_timeout_ms:
            out.reply(waiter, join_error(ErrorCode.INVALID_SESSION_TIMEOUT, request.member_id, join.version))
            return
        if request.protocol_type != PROTOCOL_TYPE or subscription is None:
            out.reply(waiter, join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, request.member_id, join.version))
            return
        member_id = request.member_id
        if not member_id:
            member_id = f"{request.group_instance_id or join.client_id}-{uuid.uuid4()}"
            if request.group_instance_id is None and join.version >= FIRST_MEMBER_ID_REQUIRED_VERSION:
                out.reply(waiter, join_error(ErrorCode.MEMBER_ID_REQUIRED, member_id, join.version))
                return
        member = group.members.get(member_id)
        changed = member is None
        if member is None:
            member = group.members[member_id] = ConsumerMember(member_id, instance_id=request.group_instance_id)
            if member.instance_id is not None:
                group.static_members[member.instance_id] = member_id
        elif member.classic is None:
            out.reply(waiter, join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id, join.version))
            return
        topics = sorted(set(subscription.topics))
        changed = changed or topics != member.subscribed_topic_names
        member.subscribed_topic_names = topics
        member.client_id, member.client_host = join.client_id, join.client_host
        member.rebalance_timeout_ms = request.rebalance_timeout_ms if request.rebalance_timeout_ms >= 0 \
            else request.session_timeout_ms
        member.classic = ClassicMemberInfo(request.session_timeout_ms, protocols)
        member.heartbeat_deadline_ms = now_ms + request.session_timeout_ms
        if self.consumer.refresh_subscriptions(group, image) or changed:
            self.consumer.bump(group, image)
        owned: Assignment = {}
        for tp in subscription.owned_partitions:  # cooperative clients list what they still hold
            owned[tp.topic] = frozenset(tp.partitions)
        for _ in range(3):  # what it no longer lists is revoked already: reconcile past that at once
            before = (member.state, member.member_epoch, dict(member.assigned))
            self.consumer.reconcile(group, member, owned, now_ms)
            if (member.state, member.member_epoch, member.assigned) == before:
                break
        self.consumer.flush(out, group)
        out.reply(waiter, JoinGroupResponse(error_code=0, generation_id=member.member_epoch,
                                            protocol_type=PROTOCOL_TYPE, protocol_name=protocols[0][0],
                                            leader="", member_id=member_id, members=[]))

    def sync(self, out: Outcome, waiter: Waiter, group: ConsumerGroup, request: SyncGroupRequest,
             now_ms: int) -> None:
        member = group.members.get(request.member_id)
        if member is None or member.classic is None:
            out.reply(waiter, SyncGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID))
            return
        if request.generation_id != member.member_epoch:
            out.reply(waiter, SyncGroupResponse(error_code=ErrorCode.ILLEGAL_GENERATION))
            return
        member.heartbeat_deadline_ms = now_ms + member.classic.session_timeout_ms
        name = request.protocol_name or member.classic.protocols[0][0]
        out.reply(waiter, SyncGroupResponse(error_code=0, protocol_type=PROTOCOL_TYPE, protocol_name=name,
                                            assignment=encode_assignment(member.assigned)))

    def heartbeat(self, out: Outcome, waiter: Waiter, group: ConsumerGroup, request: HeartbeatRequest,
                  now_ms: int) -> None:
        member = group.members.get(request.member_id)
        if member is None or member.classic is None:
            error = ErrorCode.UNKNOWN_MEMBER_ID
        elif request.generation_id != member.member_epoch:
            error = ErrorCode.ILLEGAL_GENERATION
        else:
            member.heartbeat_deadline_ms = now_ms + member.classic.session_timeout_ms
            behind = member.member_epoch != group.assignment_epoch or member.state is not MemberState.STABLE
            error = ErrorCode.REBALANCE_IN_PROGRESS if behind else ErrorCode.NONE
        out.reply(waiter, HeartbeatResponse(error_code=error))

    def leave(self, out: Outcome, waiter: Waiter, group: ConsumerGroup, request: LeaveGroupRequest, version: int,
              now_ms: int) -> None:
        identities = request.members if version >= FIRST_BATCHED_LEAVE_VERSION else \
            [LeaveGroupRequest.MemberIdentity(member_id=request.member_id)]
        results = []
        for identity in identities:
            member_id = identity.member_id or group.static_members.get(identity.group_instance_id or "", "")
            member = group.members.get(member_id)
            error = ErrorCode.NONE
            if member is None or member.classic is None:
                error = ErrorCode.UNKNOWN_MEMBER_ID
            else:
                self.consumer.remove_member(group, member, now_ms)
            results.append(LeaveGroupResponse.MemberResponse(member_id=identity.member_id,
                                                             group_instance_id=identity.group_instance_id,
                                                             error_code=error))
        self.consumer.flush(out, group)
        if version >= FIRST_BATCHED_LEAVE_VERSION:
            out.reply(waiter, LeaveGroupResponse(error_code=0, members=results))
        else:
            out.reply(waiter, LeaveGroupResponse(error_code=results[0].error_code))


def encode_assignment(assignment: Mapping[str, frozenset[int]]) -> bytes:
    value = ConsumerProtocolAssignment(assigned_partitions=[
        ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=sorted(ps))
        for t, ps in sorted(assignment.items()) if ps])
    return _VERSION.pack(ASSIGNMENT_VERSION) + value.encode(ASSIGNMENT_VERSION)


def _subscription(metadata: bytes) -> ConsumerProtocolSubscription | None:
    if len(metadata) < _VERSION.size:
        return None
    version = min(max(_VERSION.unpack_from(metadata)[0], 0), ConsumerProtocolSubscription.MAX_VERSION)
    try:
        return ConsumerProtocolSubscription.decode(metadata[_VERSION.size:], version)
    except (DecodeError, ValueError):
        return None


def _assignment(data: bytes) -> Assignment | None:
    if not data:
        return {}
    if len(data) < _VERSION.size:
        return None
    version = min(max(_VERSION.unpack_from(data)[0], 0), ConsumerProtocolAssignment.MAX_VERSION)
    try:
        decoded = ConsumerProtocolAssignment.decode(data[_VERSION.size:], version)
    except (DecodeError, ValueError):
        return None
    return {t.topic: frozenset(t.partitions) for t in decoded.assigned_partitions if t.partitions}
