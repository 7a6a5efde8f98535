"""Kafka's group coordinator as a pure state machine: requests and timers in, answers out.

The group table (``table.py``, where every group kind and state is documented) holds groups of
either protocol; each protocol is a state machine of its own (``classic.py``, ``consumer.py``),
both share the offset store (``offsets.py``), and ``migration.py`` converts groups between them. This module routes each request to the right one and answers the
admin APIs that see every group. Nothing here does I/O (beyond Kafka's one log line per group
event) or reads a clock: every entry point takes ``now_ms`` and returns an ``Outcome``.
"""

from __future__ import annotations

import logging
from typing import Iterable, TypeVar

from pybroker.common.topic import TopicPartition
from pybroker.coordinator.classic import ClassicMembership, JoinRequest, join_error
from pybroker.coordinator.consumer import ConsumerLoad, ConsumerMembership, Heartbeat, TopicImage
from pybroker.coordinator.consumer_regex import RegexRefresh
from pybroker.coordinator.consumer_group import ConsumerGroup
from pybroker.coordinator.group import CommittedOffset, Group, GroupState, Waiter
from pybroker.coordinator.group_base import GroupBase
from pybroker.coordinator.migration import (
    ClassicMembersInConsumerGroups,
    downgrade,
    downgrade_allowed,
    upgrade,
    upgrade_allowed,
)
from pybroker.coordinator.offsets import OffsetStore
from pybroker.coordinator.consumer_records import ConsumerGroupEntry
from pybroker.coordinator.share.group import ShareGroup
from pybroker.coordinator.share.records import ShareGroupEntry, ShareLoad
from pybroker.coordinator.records import (
    Entry,
    OffsetEntry,
    PendingTxnOffset,
    Record,
    restore_group,
)
from pybroker.coordinator.table import GroupConfig, GroupTable, Outcome
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ConsumerGroupDescribeResponse,
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    HeartbeatRequest,
    LeaveGroupRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)

__all__ = ["GroupConfig", "GroupCoordinator", "JoinRequest", "Outcome", "join_error"]

FIRST_NOT_FOUND_DESCRIBE_VERSION = 6
NO_AUTHORIZED_OPERATIONS = -(2**31)
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)  # READ, DELETE, DESCRIBE: all allowed (no ACLs)

log = logging.getLogger("pybroker.coordinator")
G = TypeVar("G", bound=GroupBase)


def _new_classic_group(group_id: str, now_ms: int) -> Group:
    return Group(group_id, state_timestamp_ms=now_ms)


class GroupCoordinator:
    def __init__(self, config: GroupConfig) -> None:
        self.config = config
        self.table = GroupTable(config)
        self.groups = self.table.groups
        self.classic = ClassicMembership(self.table)
        self.consumer = ConsumerMembership(self.table, config.consumer_heartbeat_interval_ms,
                                           config.consumer_session_timeout_ms, config.consumer_assignors)
        self.classic_in_consumer = ClassicMembersInConsumerGroups(self.consumer, config.min_session_timeout_ms,
                                                                  config.max_session_timeout_ms)
        self.offsets = OffsetStore(self.table, _new_classic_group)
        self.share_groups: dict[str, ShareGroup] = {}
        """Share groups (KIP-932), served by the share service's ``ShareGroups``; here to be loaded and unloaded
        with their partition of ``__consumer_offsets``."""
        self._next_expiry_check_ms: int | None = None

    # ------------------------------------------------------------------ queries

    def partition_of(self, group_id: str) -> int:
        return self.table.partition_of(group_id)

    @property
    def pending_txn_offsets(self) -> dict[int, list[OffsetEntry]]:
        return self.offsets.pending_txn_offsets

    def next_deadline_ms(self) -> int | None:
        """The earliest time at which ``tick`` has work to do."""
        deadlines = [self._next_expiry_check_ms] if self._next_expiry_check_ms is not None else []
        for group in self.groups.values():
            if isinstance(group, ConsumerGroup):
                deadlines.extend(self.consumer.deadlines(group))
            else:
                deadlines.extend(self.classic.deadlines(group))
        return min(deadlines, default=None)

    # ------------------------------------------------------------------ classic membership

    def join_group(self, waiter: Waiter, join: JoinRequest, now_ms: int) -> Outcome:
        group = self.groups.get(join.request.group_id)
        if isinstance(group, ConsumerGroup):
            if group.members:
                out = Outcome()
                if join.image is None or not upgrade_allowed(self.config.migration_policy):
                    out.reply(waiter, join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, join.request.member_id,
                                                 join.version))
                else:
                    self.classic_in_consumer.join(out, waiter, group, join, join.image, now_ms)
                return out
            # An empty consumer group becomes a classic one, keeping its offsets (Kafka does the same).
            self.groups[group.group_id] = _converted(group, Group(group.group_id, state_timestamp_ms=now_ms))
            out = self.classic.join_group(waiter, join, now_ms)
            partition = self.partition_of(group.group_id)
            out.records[:0] = [(partition, record) for record in group.tombstones()]
            return out
        return self.classic.join_group(waiter, join, now_ms)

    def sync_group(self, waiter: Waiter, request: SyncGroupRequest, now_ms: int) -> Outcome:
        group = self.groups.get(request.group_id)
        if isinstance(group, ConsumerGroup):
            out = Outcome()
            self.classic_in_consumer.sync(out, waiter, group, request, now_ms)
            return out
        return self.classic.sync_group(waiter, request, now_ms)

    def heartbeat(self, waiter: Waiter, request: HeartbeatRequest, now_ms: int) -> Outcome:
        group = self.groups.get(request.group_id)
        if isinstance(group, ConsumerGroup):
            out = Outcome()
            self.classic_in_consumer.heartbeat(out, waiter, group, request, now_ms)
            return out
        return self.classic.heartbeat(waiter, request, now_ms)

    def leave_group(self, waiter: Waiter, request: LeaveGroupRequest, version: int, now_ms: int) -> Outcome:
        group = self.groups.get(request.group_id)
        if isinstance(group, ConsumerGroup):
            out = Outcome()
            self.classic_in_consumer.leave(out, waiter, group, request, version, now_ms)
            self._maybe_downgrade(out, group, now_ms)
            return out
        return self.classic.leave_group(waiter, request, version, now_ms)

    # ------------------------------------------------------------------ consumer protocol

    def consumer_group_heartbeat(self, waiter: Waiter, heartbeat: Heartbeat, now_ms: int) -> Outcome:
        group = self.groups.get(heartbeat.request.group_id)
        if isinstance(group, Group) and group.members and heartbeat.request.member_epoch == 0 and \
                upgrade_allowed(self.config.migration_policy):
            converted = upgrade(group, now_ms)
            if converted is not None:
                log.info("Converted the classic group %s to a consumer group with %d classic members",
                         group.group_id, len(group.members))
                self.groups[group.group_id] = converted
        out = self.consumer.heartbeat(waiter, heartbeat, now_ms)
        group = self.groups.get(heartbeat.request.group_id)
        if isinstance(group, ConsumerGroup):
            self._maybe_downgrade(out, group, now_ms)
        return out

    def regexes_resolved(self, refresh: RegexRefresh, matches: dict[str, list[str]] | None) -> Outcome:
        return self.consumer.regexes_resolved(refresh, matches)

    def _maybe_downgrade(self, out: Outcome, group: ConsumerGroup, now_ms: int) -> None:
        """The last consumer-protocol member left: the classic members are left in a classic group."""
        if not group.members or any(m.classic is None for m in group.members.values()) or \
                not downgrade_allowed(self.config.migration_policy):
            return
        classic = self.groups[group.group_id] = downgrade(group, now_ms)
        out.records.extend((self.partition_of(group.group_id), record) for record in group.tombstones())
        log.info("Converted the consumer group %s back to a classic group with %d members", group.group_id,
                 len(classic.members))
        self.classic.prepare_rebalance(out, classic, now_ms)

    def consumer_group_describe(self, group_id: str, image: TopicImage) -> ConsumerGroupDescribeResponse.DescribedGroup:
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            return self.consumer.describe(group, image)
        message = f"Group {group_id} is not a consumer group." if group is not None else \
            f"Group {group_id} not found."
        return ConsumerGroupDescribeResponse.DescribedGroup(error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                                                           error_message=message, group_id=group_id)

    # ------------------------------------------------------------------ timers

    def tick(self, now_ms: int) -> Outcome:
        """Expire silent members and pending member ids, end join phases, expire offsets."""
        out = Outcome()
        for group in list(self.groups.values()):
            if isinstance(group, ConsumerGroup):
                self.consumer.tick(out, group, now_ms)
                self._maybe_downgrade(out, group, now_ms)
            else:
                self.classic.tick(out, group, now_ms)
        if self._next_expiry_check_ms is None:
            self._next_expiry_check_ms = now_ms + self.config.offsets_retention_check_interval_ms
        elif now_ms >= self._next_expiry_check_ms:
            self._next_expiry_check_ms = now_ms + self.config.offsets_retention_check_interval_ms
            self.expire_offsets(out, now_ms)
        return out

    def expire_offsets(self, out: Outcome, now_ms: int) -> None:
        self.offsets.expire_offsets(out, now_ms)

    # ------------------------------------------------------------------ offsets

    def commit_offsets(self, waiter: Waiter, request: OffsetCommitRequest, now_ms: int) -> Outcome:
        """OffsetCommit; partitions the handler found invalid (unknown topics) are not in ``request``."""
        group = self.groups.get(request.group_id)
        generation = request.generation_id_or_member_epoch
        if group is None:
            error = ErrorCode.ILLEGAL_GENERATION if generation >= 0 else ErrorCode.NONE
        elif isinstance(group, ConsumerGroup):
            error = self.consumer.validate_commit(group, request.member_id, generation)
        else:
            error = self.classic.validate_commit(group, request.member_id, request.group_instance_id, generation,
                                                 now_ms)
        return self.offsets.commit_offsets(waiter, request, group, error, now_ms)

    def offsets_written(self, entries: Iterable[OffsetEntry], ends: dict[int, int]) -> None:
        self.offsets.offsets_written(entries, ends)

    def offsets_failed(self, entries: Iterable[OffsetEntry]) -> None:
        self.offsets.offsets_failed(entries)

    def validate_txn_offsets(self, request: TxnOffsetCommitRequest) -> ErrorCode:
        """TxnOffsetCommit's group checks; the offsets are written by the caller as a transactional
        batch and handed to ``stage_txn_offsets`` once persisted."""
        group = self.groups.get(request.group_id)
        if group is None:
            return ErrorCode.NONE if request.generation_id < 0 else ErrorCode.ILLEGAL_GENERATION
        if isinstance(group, ConsumerGroup):
            return self.consumer.validate_commit(group, request.member_id, request.generation_id)
        return self.classic.validate_txn_commit(group, request.member_id, request.group_instance_id,
                                                request.generation_id)

    def txn_offset_records(self, request: TxnOffsetCommitRequest, now_ms: int
                           ) -> tuple[list[OffsetEntry], list[Record], dict[TopicPartition, ErrorCode]]:
        return self.offsets.txn_offset_records(request, now_ms)

    def stage_txn_offsets(self, producer_id: int, entries: Iterable[OffsetEntry]) -> None:
        self.offsets.stage_txn_offsets(producer_id, entries)

    def complete_txn_offsets(self, producer_id: int, partition: int, *, commit: bool, now_ms: int) -> None:
        self.offsets.complete_txn_offsets(producer_id, partition, commit=commit, now_ms=now_ms)

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        return self.offsets.pending_partitions(group_id)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        """Kafka's Group.validateOffsetFetch: consumer groups check the member; classic groups and
        unknown groups (whose offsets answer as absent) do not."""
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            return self.consumer.validate_fetch(group, member_id, member_epoch)
        return ErrorCode.NONE

    def fetch_offsets(self, group_id: str, topics: Iterable[tuple[str, Iterable[int]]] | None
                      ) -> list[tuple[str, list[tuple[int, CommittedOffset | None]]]]:
        return self.offsets.fetch_offsets(group_id, topics)

    def delete_offsets(self, waiter: Waiter, request: OffsetDeleteRequest, now_ms: int) -> Outcome:
        return self.offsets.delete_offsets(waiter, request, now_ms)

    # ------------------------------------------------------------------ admin

    def list_groups(self, states: Iterable[str], types: Iterable[str]) -> list[ListGroupsResponse.ListedGroup]:
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        return [ListGroupsResponse.ListedGroup(group_id=g.group_id, protocol_type=_protocol_type(g),
                                               group_state=g.state.value, group_type=g.group_type)
                for g in sorted(self.groups.values(), key=lambda g: g.group_id)
                if (not wanted_states or g.state.value.lower() in wanted_states)
                and (not wanted_types or g.group_type in wanted_types)]

    def describe_group(self, group_id: str, version: int,
                       include_operations: bool) -> DescribeGroupsResponse.DescribedGroup:
        operations = GROUP_OPERATIONS if include_operations else NO_AUTHORIZED_OPERATIONS
        group = self.groups.get(group_id)
        if not isinstance(group, Group):
            # Kafka 4 describes only classic groups here; consumer groups answer ConsumerGroupDescribe.
            not_found = version >= FIRST_NOT_FOUND_DESCRIBE_VERSION
            return DescribeGroupsResponse.DescribedGroup(
                error_code=ErrorCode.GROUP_ID_NOT_FOUND if not_found else ErrorCode.NONE,
                error_message=f"Group {group_id} not found." if not_found else None, group_id=group_id,
                group_state=GroupState.DEAD.value, authorized_operations=operations)
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
            elif group.members if isinstance(group, ConsumerGroup) else not group.is_in(GroupState.EMPTY):
                error = ErrorCode.NON_EMPTY_GROUP
            else:
                self.table.delete_group(out, group, now_ms)
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
            group = self.groups.pop(group_id)
            if not isinstance(group, Group):
                continue
            for member in group.members.values():
                if member.join_waiter is not None:
                    waiters.append(member.join_waiter[0])
                if member.sync_waiter is not None:
                    waiters.append(member.sync_waiter)
        for group_id in [g for g in self.share_groups if self.partition_of(g) == partition]:
            del self.share_groups[group_id]
        self.offsets.unload(partition)
        return waiters

    def load(self, entries: Iterable[Entry | PendingTxnOffset], now_ms: int) -> None:
        """Replay a partition of ``__consumer_offsets`` (oldest first) into groups; members must heartbeat again.

        Offsets of transactions still open at the end of the log are staged, not applied. Only the replayed
        groups are tidied up: the other partitions' groups are being served, and a new one whose first commit
        is not replicated yet has no committed offset but must stay."""
        loading = ConsumerLoad(self.consumer)
        share_loading = ShareLoad(self.share_groups, now_ms)
        replayed: set[str] = set()
        for entry in entries:
            if isinstance(entry, PendingTxnOffset):
                self.stage_txn_offsets(entry.producer_id, [entry.entry])
                continue
            replayed.add(entry.group_id)
            if isinstance(entry, OffsetEntry):
                self.offsets.load(entry, now_ms)
                continue
            if isinstance(entry, ConsumerGroupEntry):
                loading.apply(entry, now_ms)
                continue
            if isinstance(entry, ShareGroupEntry):
                share_loading.apply(entry)
                continue
            group = self.groups.get(entry.group_id)
            if entry.value is None:
                if isinstance(group, Group):
                    del self.groups[entry.group_id]
            else:
                if not isinstance(group, Group):
                    group = self.groups[entry.group_id] = _converted(group, Group(entry.group_id))
                restore_group(group, entry.value, now_ms)
        loading.finish(now_ms)
        for share_group in share_loading.finish(now_ms + self.config.share_session_timeout_ms):
            log.info("Loaded share group %s at epoch %d with %d members", share_group.group_id,
                     share_group.group_epoch, len(share_group.members))
        for group_id in replayed:
            group = self.groups.get(group_id)
            if isinstance(group, Group) and group.is_empty and not group.offsets and group.generation_id == 0:
                del self.groups[group_id]


def _protocol_type(group: GroupBase) -> str:
    """ListGroups' protocol type: the classic members' one; "consumer" for consumer-protocol groups."""
    if isinstance(group, Group):
        return group.protocol_type or ""
    return "consumer"


def _converted(old: GroupBase | None, new: G) -> G:
    """``new`` takes over ``old``'s offsets: a group changing protocol keeps them."""
    if old is not None:
        new.offsets, new.pending_offsets, new.offset_positions = old.offsets, old.pending_offsets, old.offset_positions
    return new
