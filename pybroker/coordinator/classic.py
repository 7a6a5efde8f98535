"""Kafka's classic group protocol: JoinGroup, SyncGroup, Heartbeat and LeaveGroup as a state machine.

JoinGroup and SyncGroup answers may be delayed: the member keeps the waiter and a later call
(another member's join, the leader's sync, ``tick``) answers it. The transitions are Kafka's
(``ClassicGroup`` / ``GroupCoordinator.scala``), listed in ``group.py``'s docstring; the group table
and the offset store are shared with the consumer protocol (``table.py``, ``offsets.py``).
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from pybroker.coordinator.consumer_group import TopicImage
from pybroker.coordinator.group import Group, GroupState, Member, Waiter
from pybroker.coordinator.records import group_record
from pybroker.coordinator.table import GroupTable, Outcome
from pybroker.protocol.error_codes import ErrorCode
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

FIRST_MEMBER_ID_REQUIRED_VERSION = 4
FIRST_NULLABLE_PROTOCOL_NAME_VERSION = 7
FIRST_SKIP_ASSIGNMENT_VERSION = 9  # KIP-814: a restarted static leader is told to skip the assignment
FIRST_BATCHED_LEAVE_VERSION = 3

log = logging.getLogger("pybroker.coordinator")


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """A JoinGroup with what the connection adds: who sent it and at which version."""

    request: JoinGroupRequest
    version: int
    client_id: str
    client_host: str
    image: TopicImage | None = None
    """The cluster's topics, for a classic member joining a consumer-protocol group (``migration.py``)."""


class ClassicMembership:
    """Membership of the classic groups in ``table``."""

    def __init__(self, table: GroupTable) -> None:
        self.table = table
        self.config = table.config
        self.groups = table.groups

    def partition_of(self, group_id: str) -> int:
        return self.table.partition_of(group_id)

    def _classic(self, group_id: str) -> Group | None:
        """The classic group ``group_id``; a consumer-protocol group of that id is none of these APIs' business."""
        group = self.groups.get(group_id)
        return group if isinstance(group, Group) else None

    def deadlines(self, group: Group) -> list[int]:
        """When ``tick`` has work to do for ``group``."""
        # Members awaiting a JoinGroup/SyncGroup answer are not expired (see ``tick``): their
        # passed heartbeat deadlines must not make the timer loop spin.
        deadlines = [m.heartbeat_deadline_ms for m in group.members.values()
                     if m.join_waiter is None and m.sync_waiter is None]
        deadlines.extend(group.pending_member_deadlines.values())
        if group.initial_delay_deadline_ms is not None:
            deadlines.append(group.initial_delay_deadline_ms)
        elif group.rebalance_deadline_ms is not None:
            deadlines.append(group.rebalance_deadline_ms)
        return deadlines

    # ------------------------------------------------------------------ JoinGroup

    def join_group(self, waiter: Waiter, join: JoinRequest, now_ms: int) -> Outcome:
        out = Outcome()
        request = join.request
        error = self._validate_join(request)
        if error is not ErrorCode.NONE:
            out.reply(waiter, join_error(error, request.member_id, join.version))
            return out
        group = self._classic(request.group_id)
        if group is None:
            if request.member_id:
                out.reply(waiter, join_error(ErrorCode.UNKNOWN_MEMBER_ID, request.member_id, join.version))
                return out
            group = self.groups[request.group_id] = Group(request.group_id, state_timestamp_ms=now_ms)
        protocols = [(p.name, bytes(p.metadata)) for p in request.protocols]
        if not group.supports_protocols(request.protocol_type, [name for name, _ in protocols]):
            out.reply(waiter, join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, request.member_id, join.version))
        elif not request.member_id:
            self._join_unknown_member(out, group, waiter, join, protocols, now_ms)
        else:
            self._join_known_member(out, group, waiter, join, protocols, now_ms)
        if group.is_empty and group.is_in(GroupState.EMPTY) and not group.has_offsets \
                and not group.pending_member_deadlines and group.generation_id == 0:
            del self.groups[group.group_id]
        return out

    def _validate_join(self, request: JoinGroupRequest) -> ErrorCode:
        if not request.group_id:
            return ErrorCode.INVALID_GROUP_ID
        if not self.config.min_session_timeout_ms <= request.session_timeout_ms <= self.config.max_session_timeout_ms:
            return ErrorCode.INVALID_SESSION_TIMEOUT
        return ErrorCode.NONE

    def _join_unknown_member(self, out: Outcome, group: Group, waiter: Waiter, join: JoinRequest,
                             protocols: list[tuple[str, bytes]], now_ms: int) -> None:
        request = join.request
        instance_id = request.group_instance_id
        prefix = instance_id if instance_id is not None else join.client_id
        new_member_id = f"{prefix}-{uuid.uuid4()}"
        if instance_id is not None and group.member_by_instance(instance_id) is not None:
            self._replace_static_member(out, group, waiter, join, protocols, new_member_id, now_ms)
            return
        if len(group.members) >= self.config.max_size:
            out.reply(waiter, join_error(ErrorCode.GROUP_MAX_SIZE_REACHED, "", join.version))
            return
        if instance_id is None and join.version >= FIRST_MEMBER_ID_REQUIRED_VERSION:
            group.pending_member_deadlines[new_member_id] = now_ms + request.session_timeout_ms
            out.reply(waiter, join_error(ErrorCode.MEMBER_ID_REQUIRED, new_member_id, join.version))
            return
        self._add_member_and_rebalance(out, group, waiter, join, protocols, new_member_id, now_ms)

    def _join_known_member(self, out: Outcome, group: Group, waiter: Waiter, join: JoinRequest,
                           protocols: list[tuple[str, bytes]], now_ms: int) -> None:
        request = join.request
        member_id = request.member_id
        if member_id in group.pending_member_deadlines:
            if member_id not in group.members and len(group.members) >= self.config.max_size:
                del group.pending_member_deadlines[member_id]
                out.reply(waiter, join_error(ErrorCode.GROUP_MAX_SIZE_REACHED, member_id, join.version))
                return
            del group.pending_member_deadlines[member_id]
            self._add_member_and_rebalance(out, group, waiter, join, protocols, member_id, now_ms)
            return
        if _is_fenced(group, request.group_instance_id, member_id):
            out.reply(waiter, join_error(ErrorCode.FENCED_INSTANCE_ID, member_id, join.version))
            return
        member = group.members.get(member_id)
        instance_unknown = request.group_instance_id is not None and \
            group.member_by_instance(request.group_instance_id) is None
        if member is None or instance_unknown or group.is_in(GroupState.EMPTY, GroupState.DEAD):
            out.reply(waiter, join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id, join.version))
            return
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(out, group, member, waiter, join, protocols, now_ms)
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            if member.same_protocols(protocols):
                out.reply(waiter, self._join_response(group, member, join.version))
            else:
                self._update_member_and_rebalance(out, group, member, waiter, join, protocols, now_ms)
        elif member.member_id == group.leader_id or not member.same_protocols(protocols):
            self._update_member_and_rebalance(out, group, member, waiter, join, protocols, now_ms)
        else:
            out.reply(waiter, self._join_response(group, member, join.version))

    def _replace_static_member(self, out: Outcome, group: Group, waiter: Waiter, join: JoinRequest,
                               protocols: list[tuple[str, bytes]], new_member_id: str, now_ms: int) -> None:
        """A static member restarted: it takes over its old slot under a new member id, fencing the old one."""
        request = join.request
        assert request.group_instance_id is not None
        old = group.member_by_instance(request.group_instance_id)
        assert old is not None
        current_leader = group.leader_id
        if old.join_waiter is not None:
            out.reply(old.join_waiter[0], join_error(ErrorCode.FENCED_INSTANCE_ID, old.member_id, old.join_waiter[1]))
            old.join_waiter = None
        if old.sync_waiter is not None:
            out.reply(old.sync_waiter, SyncGroupResponse(error_code=ErrorCode.FENCED_INSTANCE_ID))
            old.sync_waiter = None
        del group.members[old.member_id]
        old.member_id = new_member_id
        group.members[new_member_id] = old
        group.static_members[request.group_instance_id] = new_member_id
        if group.leader_id == current_leader and current_leader not in group.members:
            group.leader_id = new_member_id
        _update_member(old, join, protocols, now_ms)
        if group.is_in(GroupState.STABLE) and group.protocol_name == _selected_after_update(group):
            # Same assignment stays valid: answer at once and keep the group Stable. The restarted member never
            # reassigns partitions itself: from v9 a restarted leader is told it leads, with the members (it
            # watches their topics' metadata and rejoins when it changes) and SkipAssignment (KIP-814); before,
            # the leader id returned is the old one, so it acts as a follower.
            out.records.append((self.partition_of(group.group_id), group_record(group)))
            if join.version >= FIRST_SKIP_ASSIGNMENT_VERSION:
                response = self._join_response(group, old, join.version)
                response.skip_assignment = group.leader_id == new_member_id
            else:
                response = JoinGroupResponse(
                    error_code=0, generation_id=group.generation_id, protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name, leader=current_leader or "", member_id=new_member_id,
                    members=[])
            out.reply(waiter, response)
            return
        old.join_waiter = (waiter, join.version)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare_rebalance(out, group, now_ms)
        self._maybe_complete_join(out, group, now_ms)

    def _add_member_and_rebalance(self, out: Outcome, group: Group, waiter: Waiter, join: JoinRequest,
                                  protocols: list[tuple[str, bytes]], member_id: str, now_ms: int) -> None:
        request = join.request
        member = Member(member_id=member_id, group_instance_id=request.group_instance_id,
                        client_id=join.client_id, client_host=join.client_host,
                        rebalance_timeout_ms=_rebalance_timeout(request), session_timeout_ms=request.session_timeout_ms,
                        protocol_type=request.protocol_type, protocols=protocols,
                        heartbeat_deadline_ms=now_ms + request.session_timeout_ms,
                        join_waiter=(waiter, join.version))
        group.add_member(member)
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.initial_delay_deadline_ms is not None:
            group.new_member_added = True
        if group.is_in(GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare_rebalance(out, group, now_ms)
        self._maybe_complete_join(out, group, now_ms)

    def _update_member_and_rebalance(self, out: Outcome, group: Group, member: Member, waiter: Waiter,
                                     join: JoinRequest, protocols: list[tuple[str, bytes]], now_ms: int) -> None:
        _update_member(member, join, protocols, now_ms)
        member.join_waiter = (waiter, join.version)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare_rebalance(out, group, now_ms)
        self._maybe_complete_join(out, group, now_ms)

    def prepare_rebalance(self, out: Outcome, group: Group, now_ms: int) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            for member in group.members.values():
                member.assignment = b""
                if member.sync_waiter is not None:
                    out.reply(member.sync_waiter, SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS))
                    member.sync_waiter = None
        timeout = group.max_rebalance_timeout_ms()
        delay = self.config.initial_rebalance_delay_ms
        if group.is_in(GroupState.EMPTY) and delay > 0:
            group.initial_delay_deadline_ms = now_ms + min(delay, timeout)
            group.initial_delay_limit_ms = now_ms + timeout
            group.new_member_added = False
            group.rebalance_deadline_ms = None
        else:
            group.initial_delay_deadline_ms = None
            group.rebalance_deadline_ms = now_ms + timeout
        log.info("Preparing to rebalance group %s in state PreparingRebalance with old generation %d",
                 group.group_id, group.generation_id)
        group.transition(GroupState.PREPARING_REBALANCE, now_ms)

    def _maybe_complete_join(self, out: Outcome, group: Group, now_ms: int) -> None:
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.initial_delay_deadline_ms is None \
                and group.all_joined():
            self._complete_join(out, group, now_ms)

    def _complete_join(self, out: Outcome, group: Group, now_ms: int) -> None:
        """End of the join phase: drop dynamic members that did not rejoin, start the next generation.

        Static members that did not rejoin stay (Kafka keeps them until their session expires); if
        only such members are left, the join phase is extended by another rebalance timeout."""
        for member in [m for m in group.members.values() if m.join_waiter is None and m.group_instance_id is None]:
            group.remove_member(member.member_id)
        joined = [m.member_id for m in group.members.values() if m.join_waiter is not None]
        if group.members and not joined:
            group.initial_delay_deadline_ms = group.initial_delay_limit_ms = None
            group.rebalance_deadline_ms = now_ms + group.max_rebalance_timeout_ms()
            return
        if group.leader_id is not None and group.leader_id not in joined:
            group.leader_id = joined[0]
        group.rebalance_deadline_ms = group.initial_delay_deadline_ms = group.initial_delay_limit_ms = None
        group.generation_id += 1
        if group.is_empty:
            group.protocol_name = None
            group.transition(GroupState.EMPTY, now_ms)
            log.info("Group %s with generation %d is now empty", group.group_id, group.generation_id)
            out.records.append((self.partition_of(group.group_id), group_record(group)))
            return
        group.protocol_name = group.select_protocol()
        group.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        log.info("Stabilized group %s generation %d with %d members", group.group_id, group.generation_id,
                 len(group.members))
        for member in group.members.values():
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            if member.join_waiter is not None:
                waiter, version = member.join_waiter
                member.join_waiter = None
                out.reply(waiter, self._join_response(group, member, version))

    def _join_response(self, group: Group, member: Member, version: int) -> JoinGroupResponse:
        members = []
        if member.member_id == group.leader_id:
            assert group.protocol_name is not None
            members = [JoinGroupResponse.JoinGroupResponseMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id,
                metadata=m.metadata_for(group.protocol_name)) for m in group.members.values()]
        return JoinGroupResponse(error_code=0, generation_id=group.generation_id, protocol_type=group.protocol_type,
                                 protocol_name=group.protocol_name, leader=group.leader_id or "",
                                 member_id=member.member_id, members=members)

    # ------------------------------------------------------------------ SyncGroup

    def sync_group(self, waiter: Waiter, request: SyncGroupRequest, now_ms: int) -> Outcome:
        out = Outcome()
        group = self._classic(request.group_id)
        error = self._check_member(group, request.member_id, request.group_instance_id, request.generation_id)
        if error is ErrorCode.NONE and group is not None and (
                (request.protocol_type is not None and request.protocol_type != group.protocol_type)
                or (request.protocol_name is not None and request.protocol_name != group.protocol_name)):
            error = ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if error is not ErrorCode.NONE or group is None:
            out.reply(waiter, SyncGroupResponse(error_code=error))
            return out
        member = group.members[request.member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if group.is_in(GroupState.PREPARING_REBALANCE):
            out.reply(waiter, SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.is_in(GroupState.STABLE):
            out.reply(waiter, self._sync_response(group, member))
        else:
            member.sync_waiter = waiter
            if member.member_id == group.leader_id:
                assignments = {a.member_id: bytes(a.assignment) for a in request.assignments}
                for m in group.members.values():
                    m.assignment = assignments.get(m.member_id, b"")
                out.records.append((self.partition_of(group.group_id), group_record(group)))
                group.transition(GroupState.STABLE, now_ms)
                log.info("Assignment received from leader %s for group %s for generation %d. The group has %d "
                         "members", member.member_id, group.group_id, group.generation_id, len(group.members))
                for m in group.members.values():
                    if m.sync_waiter is not None:
                        out.reply(m.sync_waiter, self._sync_response(group, m))
                        m.sync_waiter = None
        return out

    @staticmethod
    def _sync_response(group: Group, member: Member) -> SyncGroupResponse:
        return SyncGroupResponse(error_code=0, protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                                 assignment=member.assignment)

    def _check_member(self, group: Group | None, member_id: str, instance_id: str | None,
                      generation_id: int) -> ErrorCode:
        """The checks SyncGroup and Heartbeat share, in Kafka's order."""
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if _is_fenced(group, instance_id, member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in group.members or group.is_in(GroupState.EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    # ------------------------------------------------------------------ Heartbeat and LeaveGroup

    def heartbeat(self, waiter: Waiter, request: HeartbeatRequest, now_ms: int) -> Outcome:
        out = Outcome()
        group = self._classic(request.group_id)
        error = self._check_member(group, request.member_id, request.group_instance_id, request.generation_id)
        if error is ErrorCode.NONE and group is not None:
            member = group.members[request.member_id]
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
            if group.is_in(GroupState.PREPARING_REBALANCE):
                error = ErrorCode.REBALANCE_IN_PROGRESS
        out.reply(waiter, HeartbeatResponse(error_code=error))
        return out

    def leave_group(self, waiter: Waiter, request: LeaveGroupRequest, version: int, now_ms: int) -> Outcome:
        out = Outcome()
        if version < FIRST_BATCHED_LEAVE_VERSION:
            leaving = [LeaveGroupRequest.MemberIdentity(member_id=request.member_id)]
        else:
            leaving = request.members
        group = self._classic(request.group_id)
        results = []
        for identity in leaving:
            if group is None:
                error = ErrorCode.UNKNOWN_MEMBER_ID
            elif group.is_in(GroupState.DEAD):
                error = ErrorCode.COORDINATOR_NOT_AVAILABLE
            else:
                error = self._leave_one(out, group, identity, now_ms)
            results.append(LeaveGroupResponse.MemberResponse(member_id=identity.member_id,
                                                             group_instance_id=identity.group_instance_id,
                                                             error_code=error))
        if version < FIRST_BATCHED_LEAVE_VERSION:
            out.reply(waiter, LeaveGroupResponse(error_code=results[0].error_code))
        else:
            out.reply(waiter, LeaveGroupResponse(error_code=0, members=results))
        return out

    def _leave_one(self, out: Outcome, group: Group, identity: LeaveGroupRequest.MemberIdentity,
                   now_ms: int) -> ErrorCode:
        if identity.group_instance_id is not None:
            member = group.member_by_instance(identity.group_instance_id)
            if member is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if identity.member_id and identity.member_id != member.member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        elif identity.member_id in group.pending_member_deadlines:
            del group.pending_member_deadlines[identity.member_id]
            self._maybe_complete_join(out, group, now_ms)
            return ErrorCode.NONE
        else:
            member = group.members.get(identity.member_id)
            if member is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
        log.info("Member %s has left group %s through explicit LeaveGroup", member.member_id, group.group_id)
        self._remove_member(out, group, member, now_ms)
        return ErrorCode.NONE

    def _remove_member(self, out: Outcome, group: Group, member: Member, now_ms: int) -> None:
        group.remove_member(member.member_id)
        if member.join_waiter is not None:
            waiter, version = member.join_waiter
            out.reply(waiter, join_error(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id, version))
        if member.sync_waiter is not None:
            out.reply(member.sync_waiter, SyncGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID))
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare_rebalance(out, group, now_ms)
        self._maybe_complete_join(out, group, now_ms)

    # ------------------------------------------------------------------ timers

    def tick(self, out: Outcome, group: Group, now_ms: int) -> None:
        """Expire silent members and pending member ids, end join phases."""
        for member_id, deadline in list(group.pending_member_deadlines.items()):
            if now_ms >= deadline:
                del group.pending_member_deadlines[member_id]
                self._maybe_complete_join(out, group, now_ms)
        for member in list(group.members.values()):
            # A member waiting for its JoinGroup or SyncGroup answer cannot heartbeat on most
            # clients; the rebalance timeout bounds that wait instead.
            waiting = member.sync_waiter is not None or member.join_waiter is not None
            if now_ms >= member.heartbeat_deadline_ms and not waiting and member.member_id in group.members:
                log.info("Member %s in group %s has failed (no heartbeat within %d ms), removing it from "
                         "the group", member.member_id, group.group_id, member.session_timeout_ms)
                self._remove_member(out, group, member, now_ms)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._tick_join_phase(out, group, now_ms)

    def _tick_join_phase(self, out: Outcome, group: Group, now_ms: int) -> None:
        if group.initial_delay_deadline_ms is not None:
            if now_ms < group.initial_delay_deadline_ms:
                return
            assert group.initial_delay_limit_ms is not None
            remaining = group.initial_delay_limit_ms - now_ms
            if group.new_member_added and remaining > 0:
                # Kafka's InitialDelayedJoin: each newcomer buys another delay, up to the rebalance timeout.
                group.new_member_added = False
                group.initial_delay_deadline_ms = now_ms + min(self.config.initial_rebalance_delay_ms, remaining)
                return
            group.initial_delay_deadline_ms = None
            self._complete_join(out, group, now_ms)
        elif group.all_joined() or (group.rebalance_deadline_ms is not None and now_ms >= group.rebalance_deadline_ms):
            self._complete_join(out, group, now_ms)


    # ------------------------------------------------------------------ offsets (Kafka's validateOffsetCommit)

    def validate_commit(self, group: Group, member_id: str, instance_id: str | None, generation: int,
                        now_ms: int) -> ErrorCode:
        """OffsetCommit's membership checks; a valid commit counts as the member's heartbeat."""
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.is_in(GroupState.EMPTY):
            return ErrorCode.NONE
        if _is_fenced(group, instance_id, member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in group.members:
            # Kafka: a commit without a generation is only allowed while the group is Empty.
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        member = group.members[member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        return ErrorCode.NONE

    @staticmethod
    def validate_txn_commit(group: Group, member_id: str, instance_id: str | None, generation: int) -> ErrorCode:
        """TxnOffsetCommit's group checks (Kafka ``doTxnCommitOffsets``)."""
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if _is_fenced(group, instance_id, member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id and member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation >= 0 and generation != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE


def _update_member(member: Member, join: JoinRequest, protocols: list[tuple[str, bytes]], now_ms: int) -> None:
    member.protocols = protocols
    member.rebalance_timeout_ms = _rebalance_timeout(join.request)
    member.session_timeout_ms = join.request.session_timeout_ms
    member.client_id = join.client_id
    member.client_host = join.client_host
    member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms


def _rebalance_timeout(request: JoinGroupRequest) -> int:
    """JoinGroup v0 has no rebalance timeout: Kafka uses the session timeout."""
    return request.rebalance_timeout_ms if request.rebalance_timeout_ms >= 0 else request.session_timeout_ms


def _selected_after_update(group: Group) -> str | None:
    candidates = group.candidate_protocols()
    return group.select_protocol() if candidates else None


def _is_fenced(group: Group, instance_id: str | None, member_id: str) -> bool:
    if instance_id is None:
        return False
    current = group.static_members.get(instance_id)
    return current is not None and current != member_id




def join_error(error: ErrorCode, member_id: str, version: int) -> JoinGroupResponse:
    protocol_name = None if version >= FIRST_NULLABLE_PROTOCOL_NAME_VERSION else ""
    return JoinGroupResponse(error_code=error, generation_id=-1, protocol_name=protocol_name, leader="",
                             member_id=member_id, members=[])
