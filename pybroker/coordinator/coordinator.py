"""Kafka's classic group coordinator as a pure state machine: requests and timers in, answers out.

Rules of this module:

1. Nothing here does I/O (beyond Kafka's one log line per group event) or reads a clock. Every entry point takes ``now_ms`` and returns an
   ``Outcome``: the answers to deliver (each paired with the opaque ``Waiter`` its request came
   with) and the ``__consumer_offsets`` records to persist *before* those answers go out.
2. JoinGroup and SyncGroup answers may be delayed: the member keeps the waiter and a later call
   (another member's join, the leader's sync, ``tick``) answers it.
3. All state transitions are in this file; ``group.py`` holds data only. The transitions are
   Kafka's (``GroupCoordinator.scala``), listed in ``group.py``'s docstring.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable

from pybroker.coordinator.group import CommittedOffset, Group, GroupState, Member, Waiter
from pybroker.coordinator.records import (
    GroupEntry,
    OffsetEntry,
    PendingTxnOffset,
    Record,
    group_key,
    group_record,
    offset_key,
    offset_record,
    partition_for,
    restore_group,
    subscription_topics,
)
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    TxnOffsetCommitRequest,
)

FIRST_MEMBER_ID_REQUIRED_VERSION = 4
FIRST_NULLABLE_PROTOCOL_NAME_VERSION = 7
FIRST_BATCHED_LEAVE_VERSION = 3
FIRST_NOT_FOUND_DESCRIBE_VERSION = 6
NO_AUTHORIZED_OPERATIONS = -(2**31)
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)  # READ, DELETE, DESCRIBE: all allowed (no ACLs)
GROUP_TYPE_CLASSIC = "classic"

log = logging.getLogger("pybroker.coordinator")


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker settings the coordinator obeys (Kafka's key names in the field docs)."""

    num_partitions: int = 50  # offsets.topic.num.partitions
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1800000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    max_size: int = 2**31 - 1  # group.max.size
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600000  # offsets.retention.check.interval.ms


@dataclass(slots=True)
class Outcome:
    replies: list[tuple[Waiter, Any]] = field(default_factory=list)
    records: list[tuple[int, Record]] = field(default_factory=list)
    """(partition of __consumer_offsets, record)."""
    staged: list[OffsetEntry] = field(default_factory=list)
    """OffsetCommit values in ``records``: the runtime hands them to ``offsets_written`` once the
    records are replicated, or to ``offsets_failed`` if they are not."""

    def reply(self, waiter: Waiter, response: Any) -> None:
        self.replies.append((waiter, response))


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """A JoinGroup with what the connection adds: who sent it and at which version."""

    request: JoinGroupRequest
    version: int
    client_id: str
    client_host: str


class GroupCoordinator:
    def __init__(self, config: GroupConfig) -> None:
        self.config = config
        self.groups: dict[str, Group] = {}
        # producer id -> offsets committed in its open transaction, visible once it commits
        self.pending_txn_offsets: dict[int, list[OffsetEntry]] = {}
        self._next_expiry_check_ms: int | None = None

    # ------------------------------------------------------------------ queries

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.config.num_partitions)

    def next_deadline_ms(self) -> int | None:
        """The earliest time at which ``tick`` has work to do."""
        deadlines = [self._next_expiry_check_ms] if self._next_expiry_check_ms is not None else []
        for group in self.groups.values():
            # Members awaiting a JoinGroup/SyncGroup answer are not expired (see ``tick``): their
            # passed heartbeat deadlines must not make the timer loop spin.
            deadlines.extend(m.heartbeat_deadline_ms for m in group.members.values()
                             if m.join_waiter is None and m.sync_waiter is None)
            deadlines.extend(group.pending_member_deadlines.values())
            if group.initial_delay_deadline_ms is not None:
                deadlines.append(group.initial_delay_deadline_ms)
            elif group.rebalance_deadline_ms is not None:
                deadlines.append(group.rebalance_deadline_ms)
        return min(deadlines, default=None)

    # ------------------------------------------------------------------ JoinGroup

    def join_group(self, waiter: Waiter, join: JoinRequest, now_ms: int) -> Outcome:
        out = Outcome()
        request = join.request
        error = self._validate_join(request)
        if error is not ErrorCode.NONE:
            out.reply(waiter, join_error(error, request.member_id, join.version))
            return out
        group = self.groups.get(request.group_id)
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
            # Same assignment stays valid: answer at once and keep the group Stable. The leader id
            # returned is the old one, so the restarted member never reassigns partitions itself.
            out.records.append((self.partition_of(group.group_id), group_record(group)))
            out.reply(waiter, JoinGroupResponse(
                error_code=0, generation_id=group.generation_id, protocol_type=group.protocol_type,
                protocol_name=group.protocol_name, leader=current_leader or "", member_id=new_member_id,
                members=[]))
            return
        old.join_waiter = (waiter, join.version)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(out, group, now_ms)
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
            self._prepare_rebalance(out, group, now_ms)
        self._maybe_complete_join(out, group, now_ms)

    def _update_member_and_rebalance(self, out: Outcome, group: Group, member: Member, waiter: Waiter,
                                     join: JoinRequest, protocols: list[tuple[str, bytes]], now_ms: int) -> None:
        _update_member(member, join, protocols, now_ms)
        member.join_waiter = (waiter, join.version)
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(out, group, now_ms)
        self._maybe_complete_join(out, group, now_ms)

    def _prepare_rebalance(self, out: Outcome, group: Group, now_ms: int) -> None:
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
        group = self.groups.get(request.group_id)
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
        group = self.groups.get(request.group_id)
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
        group = self.groups.get(request.group_id)
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
            self._prepare_rebalance(out, group, now_ms)
        self._maybe_complete_join(out, group, now_ms)

    # ------------------------------------------------------------------ timers

    def tick(self, now_ms: int) -> Outcome:
        """Expire silent members and pending member ids, end join phases, expire offsets."""
        out = Outcome()
        for group in list(self.groups.values()):
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
        if self._next_expiry_check_ms is None:
            self._next_expiry_check_ms = now_ms + self.config.offsets_retention_check_interval_ms
        elif now_ms >= self._next_expiry_check_ms:
            self._next_expiry_check_ms = now_ms + self.config.offsets_retention_check_interval_ms
            self.expire_offsets(out, now_ms)
        return out

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

    def expire_offsets(self, out: Outcome, now_ms: int) -> None:
        """Kafka 2.1+ rule: an empty group's offsets expire offsets.retention.minutes after it emptied
        (or after the commit, for groups that never had members); explicit expiry times win."""
        retention = self.config.offsets_retention_ms
        for group in list(self.groups.values()):
            if not group.is_in(GroupState.EMPTY):
                continue
            for (topic, partition), committed in list(group.offsets.items()):
                if (topic, partition) in group.pending_offsets:
                    continue
                if committed.expire_timestamp_ms is not None:
                    expired = now_ms >= committed.expire_timestamp_ms
                else:
                    base = group.state_timestamp_ms if group.protocol_type else committed.commit_timestamp_ms
                    expired = now_ms - base >= retention
                if expired:
                    del group.offsets[(topic, partition)]
                    group.offset_positions.pop((topic, partition), None)
                    out.records.append((self.partition_of(group.group_id),
                                        (offset_key(group.group_id, topic, partition), None)))
            if not group.has_offsets:
                self._delete_group(out, group, now_ms)

    def _delete_group(self, out: Outcome, group: Group, now_ms: int) -> None:
        partition = self.partition_of(group.group_id)
        for topic, index in group.offsets:
            out.records.append((partition, (offset_key(group.group_id, topic, index), None)))
        group.offsets.clear()
        group.pending_offsets.clear()
        group.offset_positions.clear()
        out.records.append((partition, (group_key(group.group_id), None)))
        group.transition(GroupState.DEAD, now_ms)
        log.info("Group %s transitioned to Dead in generation %d", group.group_id, group.generation_id)
        del self.groups[group.group_id]

    # ------------------------------------------------------------------ offsets

    def commit_offsets(self, waiter: Waiter, request: OffsetCommitRequest, now_ms: int) -> Outcome:
        """OffsetCommit; partitions the handler found invalid (unknown topics) are not in ``request``."""
        out = Outcome()
        group = self.groups.get(request.group_id)
        generation = request.generation_id_or_member_epoch
        error = ErrorCode.NONE
        if group is None:
            if generation >= 0:
                error = ErrorCode.ILLEGAL_GENERATION
            else:
                group = self.groups[request.group_id] = Group(request.group_id, state_timestamp_ms=now_ms)
        elif group.is_in(GroupState.DEAD):
            error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        elif generation < 0 and group.is_in(GroupState.EMPTY):
            pass
        elif _is_fenced(group, request.group_instance_id, request.member_id):
            error = ErrorCode.FENCED_INSTANCE_ID
        elif request.member_id not in group.members:
            # Kafka: a commit without a generation is only allowed while the group is Empty.
            error = ErrorCode.UNKNOWN_MEMBER_ID
        elif generation != group.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            error = ErrorCode.REBALANCE_IN_PROGRESS
        else:
            member = group.members[request.member_id]
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        topics = []
        for topic in request.topics:
            results = []
            for p in topic.partitions:
                code = error
                if code is ErrorCode.NONE and group is not None:
                    code = self._commit_one(out, group, topic.name, p, request.retention_time_ms, now_ms)
                results.append(OffsetCommitResponse.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                                                                  error_code=code))
            topics.append(OffsetCommitResponse.OffsetCommitResponseTopic(name=topic.name, partitions=results))
        out.reply(waiter, OffsetCommitResponse(topics=topics))
        return out

    def _commit_one(self, out: Outcome, group: Group, topic: str,
                    partition: OffsetCommitRequest.OffsetCommitRequestPartition,
                    retention_time_ms: int, now_ms: int) -> ErrorCode:
        metadata = partition.committed_metadata or ""
        if len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
            return ErrorCode.OFFSET_METADATA_TOO_LARGE
        commit_time = partition.commit_timestamp if partition.commit_timestamp >= 0 else now_ms
        expire = commit_time + retention_time_ms if retention_time_ms >= 0 else None
        committed = CommittedOffset(partition.committed_offset, partition.committed_leader_epoch, metadata,
                                    commit_time, expire)
        group.pending_offsets[(topic, partition.partition_index)] = committed
        out.staged.append(OffsetEntry(group.group_id, topic, partition.partition_index, committed))
        out.records.append((self.partition_of(group.group_id),
                            offset_record(group.group_id, topic, partition.partition_index, committed)))
        return ErrorCode.NONE

    def offsets_written(self, entries: Iterable[OffsetEntry], ends: dict[int, int]) -> None:
        """Staged commits whose records the in-sync replicas now hold (``ends``: partition -> offset
        past the write) become visible, unless a later write already replaced them (Kafka's
        onOffsetCommitAppend). A partition with no pending commit was deleted or reloaded meanwhile."""
        for entry in entries:
            group = self.groups.get(entry.group_id)
            key = (entry.topic, entry.partition)
            if group is None or key not in group.pending_offsets or entry.committed is None:
                continue
            position = ends[self.partition_of(entry.group_id)]
            if group.offset_positions.get(key, -1) < position:
                group.offsets[key] = entry.committed
                group.offset_positions[key] = position
            if group.pending_offsets[key] is entry.committed:
                del group.pending_offsets[key]

    def offsets_failed(self, entries: Iterable[OffsetEntry]) -> None:
        """Staged commits that were not written or not replicated: the previous value stays
        (Kafka's failPendingOffsetWrite)."""
        for entry in entries:
            group = self.groups.get(entry.group_id)
            key = (entry.topic, entry.partition)
            if group is not None and group.pending_offsets.get(key) is entry.committed:
                del group.pending_offsets[key]

    def validate_txn_offsets(self, request: TxnOffsetCommitRequest) -> ErrorCode:
        """TxnOffsetCommit's group checks (Kafka ``doTxnCommitOffsets``); the offsets are written by
        the caller as a transactional batch and handed to ``stage_txn_offsets`` once persisted."""
        group = self.groups.get(request.group_id)
        if group is None:
            return ErrorCode.NONE if request.generation_id < 0 else ErrorCode.ILLEGAL_GENERATION
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if _is_fenced(group, request.group_instance_id, request.member_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if request.member_id and request.member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if request.generation_id >= 0 and request.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def txn_offset_records(self, request: TxnOffsetCommitRequest, now_ms: int
                           ) -> tuple[list[OffsetEntry], list[Record], dict[tuple[str, int], ErrorCode]]:
        """The offsets of a valid TxnOffsetCommit, their records, and per-partition errors."""
        entries: list[OffsetEntry] = []
        errors: dict[tuple[str, int], ErrorCode] = {}
        for topic in request.topics:
            for p in topic.partitions:
                metadata = p.committed_metadata or ""
                if len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                    errors[(topic.name, p.partition_index)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                    continue
                committed = CommittedOffset(p.committed_offset, p.committed_leader_epoch, metadata, now_ms, None)
                entries.append(OffsetEntry(request.group_id, topic.name, p.partition_index, committed))
        records = [offset_record(e.group_id, e.topic, e.partition, e.committed) for e in entries
                   if e.committed is not None]
        return entries, records, errors

    def stage_txn_offsets(self, producer_id: int, entries: Iterable[OffsetEntry]) -> None:
        """Offsets written in ``producer_id``'s transaction; ``complete_txn_offsets`` applies them."""
        self.pending_txn_offsets.setdefault(producer_id, []).extend(entries)

    def complete_txn_offsets(self, producer_id: int, partition: int, *, commit: bool, now_ms: int) -> None:
        """A COMMIT/ABORT marker reached ``partition`` of __consumer_offsets for ``producer_id``."""
        pending = self.pending_txn_offsets.pop(producer_id, [])
        kept = [e for e in pending if self.partition_of(e.group_id) != partition]
        if kept:
            self.pending_txn_offsets[producer_id] = kept
        if not commit:
            return
        for entry in pending:
            if self.partition_of(entry.group_id) != partition or entry.committed is None:
                continue
            group = self.groups.get(entry.group_id)
            if group is None:
                group = self.groups[entry.group_id] = Group(entry.group_id, state_timestamp_ms=now_ms)
            group.offsets[(entry.topic, entry.partition)] = entry.committed

    def pending_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """Partitions of ``group_id`` whose offset an open transaction or an unreplicated
        OffsetCommit is changing (Kafka's hasPendingOffsetCommitsForTopicPartition)."""
        group = self.groups.get(group_id)
        pending = set(group.pending_offsets) if group is not None else set()
        return pending | {(e.topic, e.partition) for entries in self.pending_txn_offsets.values() for e in entries
                          if e.group_id == group_id}

    def fetch_offsets(self, group_id: str, topics: Iterable[tuple[str, Iterable[int]]] | None
                      ) -> list[tuple[str, list[tuple[int, CommittedOffset | None]]]]:
        """Committed offsets per requested topic-partition (None when absent); all of them when topics is None."""
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        if topics is None:
            by_topic: dict[str, list[tuple[int, CommittedOffset | None]]] = {}
            for (topic, partition), committed in sorted(offsets.items()):
                by_topic.setdefault(topic, []).append((partition, committed))
            return list(by_topic.items())
        return [(topic, [(p, offsets.get((topic, p))) for p in partitions]) for topic, partitions in topics]

    def delete_offsets(self, waiter: Waiter, request: OffsetDeleteRequest, now_ms: int) -> Outcome:
        out = Outcome()
        group = self.groups.get(request.group_id)
        if group is None or group.is_in(GroupState.DEAD):
            out.reply(waiter, OffsetDeleteResponse(error_code=ErrorCode.GROUP_ID_NOT_FOUND))
            return out
        subscribed: set[str] = set()
        if not group.is_in(GroupState.EMPTY):
            known = _subscribed_topics(group)
            if known is None:
                out.reply(waiter, OffsetDeleteResponse(error_code=ErrorCode.NON_EMPTY_GROUP))
                return out
            subscribed = known
        partition_of_group = self.partition_of(group.group_id)
        topics = []
        for topic in request.topics:
            results = []
            for p in topic.partitions:
                code = ErrorCode.NONE
                if topic.name in subscribed:
                    code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                elif _forget_offset(group, (topic.name, p.partition_index)):
                    out.records.append((partition_of_group, (offset_key(group.group_id, topic.name,
                                                                        p.partition_index), None)))
                results.append(OffsetDeleteResponse.OffsetDeleteResponsePartition(
                    partition_index=p.partition_index, error_code=code))
            topics.append(OffsetDeleteResponse.OffsetDeleteResponseTopic(name=topic.name, partitions=results))
        out.reply(waiter, OffsetDeleteResponse(error_code=0, topics=topics))
        return out

    # ------------------------------------------------------------------ admin

    def list_groups(self, states: Iterable[str], types: Iterable[str]) -> list[ListGroupsResponse.ListedGroup]:
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        if wanted_types and GROUP_TYPE_CLASSIC not in wanted_types:
            return []
        return [ListGroupsResponse.ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type or "",
                                               group_state=g.state.value, group_type=GROUP_TYPE_CLASSIC)
                for g in sorted(self.groups.values(), key=lambda g: g.group_id)
                if not wanted_states or g.state.value.lower() in wanted_states]

    def describe_group(self, group_id: str, version: int,
                       include_operations: bool) -> DescribeGroupsResponse.DescribedGroup:
        operations = GROUP_OPERATIONS if include_operations else NO_AUTHORIZED_OPERATIONS
        group = self.groups.get(group_id)
        if group is None:
            error = ErrorCode.GROUP_ID_NOT_FOUND if version >= FIRST_NOT_FOUND_DESCRIBE_VERSION else ErrorCode.NONE
            return DescribeGroupsResponse.DescribedGroup(error_code=error, group_id=group_id,
                                                         group_state=GroupState.DEAD.value,
                                                         authorized_operations=operations)
        stable = group.is_in(GroupState.STABLE) and group.protocol_name is not None
        members = [DescribeGroupsResponse.DescribedGroupMember(
            member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
            client_host=m.client_host,
            member_metadata=m.metadata_for(group.protocol_name) if stable and group.protocol_name else b"",
            member_assignment=m.assignment if stable else b"") for m in group.members.values()]
        return DescribeGroupsResponse.DescribedGroup(
            error_code=0, group_id=group_id, group_state=group.state.value,
            protocol_type=group.protocol_type or "", protocol_data=(group.protocol_name or "") if stable else "",
            members=members, authorized_operations=operations)

    def delete_groups(self, waiter: Waiter, group_ids: Iterable[str], now_ms: int) -> Outcome:
        out = Outcome()
        results = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None:
                error = ErrorCode.GROUP_ID_NOT_FOUND
            elif not group.is_in(GroupState.EMPTY):
                error = ErrorCode.NON_EMPTY_GROUP
            else:
                self._delete_group(out, group, now_ms)
                error = ErrorCode.NONE
            results.append(DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=error))
        out.reply(waiter, DeleteGroupsResponse(results=results))
        return out

    # ------------------------------------------------------------------ loading

    def unload(self, partition: int) -> list[Waiter]:
        """Forget the groups of ``partition`` (this broker stopped leading it, Kafka's
        onResignation); returns their pending JoinGroup/SyncGroup waiters, which must be
        answered NOT_COORDINATOR so the members find the new coordinator."""
        waiters: list[Waiter] = []
        for group_id in [g for g in self.groups if self.partition_of(g) == partition]:
            for member in self.groups.pop(group_id).members.values():
                if member.join_waiter is not None:
                    waiters.append(member.join_waiter[0])
                if member.sync_waiter is not None:
                    waiters.append(member.sync_waiter)
        for producer_id in list(self.pending_txn_offsets):
            kept = [e for e in self.pending_txn_offsets[producer_id] if self.partition_of(e.group_id) != partition]
            if kept:
                self.pending_txn_offsets[producer_id] = kept
            else:
                del self.pending_txn_offsets[producer_id]
        return waiters

    def load(self, entries: Iterable[OffsetEntry | GroupEntry | PendingTxnOffset], now_ms: int) -> None:
        """Replay ``__consumer_offsets`` (oldest first) into groups; members must heartbeat again.

        Offsets of transactions still open at the end of the log are staged, not applied."""
        for entry in entries:
            if isinstance(entry, PendingTxnOffset):
                self.stage_txn_offsets(entry.producer_id, [entry.entry])
                continue
            group = self.groups.get(entry.group_id)
            if isinstance(entry, OffsetEntry):
                if entry.committed is None:
                    if group is not None:
                        group.offsets.pop((entry.topic, entry.partition), None)
                    continue
                if group is None:
                    group = self.groups[entry.group_id] = Group(entry.group_id, state_timestamp_ms=now_ms)
                group.offsets[(entry.topic, entry.partition)] = entry.committed
            elif entry.value is None:
                if group is not None:
                    del self.groups[entry.group_id]
            else:
                if group is None:
                    group = self.groups[entry.group_id] = Group(entry.group_id)
                restore_group(group, entry.value, now_ms)
        for group_id in [g.group_id for g in self.groups.values() if g.is_empty and not g.offsets
                         and g.generation_id == 0]:
            del self.groups[group_id]


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


def _forget_offset(group: Group, key: tuple[str, int]) -> bool:
    """Drop a partition's committed and pending offset (Kafka's removeOffsets); False if it had none."""
    found = group.offsets.pop(key, None) is not None
    found = group.pending_offsets.pop(key, None) is not None or found
    group.offset_positions.pop(key, None)
    return found


def _subscribed_topics(group: Group) -> set[str] | None:
    """Topics the members subscribe to (consumer protocol), or None when that cannot be known."""
    if group.protocol_type != "consumer" or group.protocol_name is None:
        return None
    topics: set[str] = set()
    for member in group.members.values():
        try:
            topics |= subscription_topics(member.metadata_for(group.protocol_name))
        except (KeyError, ValueError):
            return None
    return topics


def join_error(error: ErrorCode, member_id: str, version: int) -> JoinGroupResponse:
    protocol_name = None if version >= FIRST_NULLABLE_PROTOCOL_NAME_VERSION else ""
    return JoinGroupResponse(error_code=error, generation_id=-1, protocol_name=protocol_name, leader="",
                             member_id=member_id, members=[])
