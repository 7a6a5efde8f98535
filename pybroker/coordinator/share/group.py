"""Share groups' membership (KIP-932): ShareGroupHeartbeat, ShareGroupDescribe, listing and deletion, as a pure
state machine (every entry point takes ``now_ms``).

A share group has no revocation step: any number of members may read a partition, so a new target assignment is
every member's current assignment at once, and a member's epoch is the group's assignment epoch from its next
heartbeat on (Kafka's ShareGroupMember reconciliation is immediate too). The group epoch rises when a member
joins, leaves, is fenced by its session timeout, changes its subscription, or a subscribed topic's partition count
changes; the assignment is then computed again by ``assignor.py``, over the partitions whose share-partition state is
initialized only (``state_partitions.py``): a partition the coordinator finishes initializing makes a new assignment at
the next heartbeat, as Kafka's initializedAssignmentPending does.

A group's records in ``__consumer_offsets`` are ``records.py``'s: the caller writes ``records.changes`` of a group
after each entry point that may have changed it, and the coordinator's load replays them (members restored with a
fresh session timeout, fenced unless they heartbeat again).
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from typing import Callable, Mapping

from pybroker.coordinator.consumer_group import TopicImage
from pybroker.coordinator.share.assignor import assign
from pybroker.coordinator.share.state_partitions import Initialization, Partitions, StatePartitions
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ListGroupsResponse,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)

__all__ = ["ShareGroup", "ShareGroups", "ShareMember", "ShareGroupSettings"]

LEAVE_EPOCH = -1
ASSIGNOR_NAME = "simple"


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    """The broker's ``group.share.*`` membership settings (a group's own configs may override the first two)."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200


@dataclass(slots=True)
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed: tuple[str, ...]
    member_epoch: int = 0
    assignment: dict[uuid.UUID, tuple[int, ...]] = field(default_factory=dict)
    deadline_ms: int = 0


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    metadata_hash: int = 0
    """``metadata_hash`` of the subscribed topics when the assignment was computed (a change makes a new one);
    written in ShareGroupMetadataValue, so a loaded group keeps its assignment while its topics stay as they were."""
    state_partitions: StatePartitions = field(default_factory=StatePartitions)
    """The share-partitions with state, being initialized or deleted (Kafka's ShareGroupStatePartitionMetadata)."""
    written: dict[bytes, bytes] = field(default_factory=dict)
    """The group's records as last written to ``__consumer_offsets`` (``records.changes``)."""

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return {topic for member in self.members.values() for topic in member.subscribed}


class ShareGroups:
    """Every share group this broker coordinates; see the module doc."""

    def __init__(self, settings: ShareGroupSettings,
                 group_settings: Callable[[str], ShareGroupSettings] | None = None,
                 groups: dict[str, ShareGroup] | None = None) -> None:
        self.settings = settings
        self._group_settings = group_settings or (lambda _group_id: settings)
        self.groups: dict[str, ShareGroup] = {} if groups is None else groups
        """Shared with the group coordinator, which loads them from ``__consumer_offsets``."""

    def heartbeat(self, request: ShareGroupHeartbeatRequest, client_id: str, client_host: str, image: TopicImage,
                  now_ms: int) -> tuple[ShareGroupHeartbeatResponse, list[str]]:
        """Answer one heartbeat; also the ids of members that left (their acquired records are to be released)."""
        invalid = _invalid(request)
        if invalid is not None:
            return ShareGroupHeartbeatResponse(error_code=ErrorCode.INVALID_REQUEST, error_message=invalid), []
        group_id, member_id, epoch = request.group_id, request.member_id, request.member_epoch
        group = self.groups.get(group_id)
        settings = self._group_settings(group_id)
        if epoch == LEAVE_EPOCH:
            if group is None or member_id not in group.members:
                return _error(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}."), []
            self._remove(group, member_id)
            return ShareGroupHeartbeatResponse(member_id=member_id, member_epoch=LEAVE_EPOCH), [member_id]
        member = None if group is None else group.members.get(member_id)
        if epoch == 0:
            if group is None:
                group = self.groups[group_id] = ShareGroup(group_id)
            if member is None:
                if len(group.members) >= self.settings.max_size:
                    return _error(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                  f"The share group has reached its maximum capacity of {self.settings.max_size} "
                                  "members."), []
                member = group.members[member_id] = ShareMember(member_id, client_id, client_host, request.rack_id,
                                                                tuple(request.subscribed_topic_names or ()))
                group.group_epoch += 1
        elif member is None:
            return _error(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}."), []
        elif epoch != member.member_epoch:
            return _error(ErrorCode.FENCED_MEMBER_EPOCH,
                          f"The share group member has a smaller member epoch ({epoch}) than the one known by the "
                          f"group coordinator ({member.member_epoch}). The member must abandon all its partitions "
                          "and rejoin."), []
        assert group is not None
        if request.subscribed_topic_names is not None and tuple(request.subscribed_topic_names) != member.subscribed:
            member.subscribed = tuple(request.subscribed_topic_names)
            group.group_epoch += 1
        member.client_id, member.client_host = client_id, client_host
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        member.deadline_ms = now_ms + settings.session_timeout_ms
        self._refresh(group, image)
        return self._answer(group, member, full=epoch == 0), []

    def to_initialize(self, group_id: str, image: TopicImage, now_ms: int, retry_ms: int) -> Initialization:
        """The subscribed partitions whose state is to be initialized now, marked initializing, and their start
        offsets (Kafka's maybeCreateInitializeShareGroupStateRequest at the end of a heartbeat)."""
        group = self.groups.get(group_id)
        if group is None:
            return Initialization({})
        return group.state_partitions.to_initialize(_subscribed(group, image), now_ms, retry_ms)

    def reconcile(self, group_id: str, member_id: str, image: TopicImage,
                  full: bool) -> ShareGroupHeartbeatResponse | None:
        """The member's heartbeat answer again, after partitions were initialized while it waited; None when it is
        gone."""
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            return None
        self._refresh(group, image)
        return self._answer(group, member, full)

    def _answer(self, group: ShareGroup, member: ShareMember, full: bool) -> ShareGroupHeartbeatResponse:
        """The member at the group's assignment epoch; its assignment is sent when it joins or it changed."""
        changed = full or member.member_epoch != group.assignment_epoch
        member.member_epoch = group.assignment_epoch
        response = ShareGroupHeartbeatResponse(
            member_id=member.member_id, member_epoch=member.member_epoch,
            heartbeat_interval_ms=self._group_settings(group.group_id).heartbeat_interval_ms)
        if changed:
            response.assignment = ShareGroupHeartbeatResponse.Assignment(topic_partitions=[
                ShareGroupHeartbeatResponse.TopicPartitions(topic_id=topic_id, partitions=list(partitions))
                for topic_id, partitions in member.assignment.items()])
        return response

    def expire(self, now_ms: int) -> list[tuple[str, str]]:
        """Fence members whose session timed out; the (group, member) pairs removed."""
        removed = []
        for group in self.groups.values():
            for member in [m for m in group.members.values() if m.deadline_ms <= now_ms]:
                self._remove(group, member.member_id)
                removed.append((group.group_id, member.member_id))
        return removed

    def describe(self, group_id: str, image: TopicImage) -> ShareGroupDescribeResponse.DescribedGroup:
        group = self.groups.get(group_id)
        if group is None:
            return ShareGroupDescribeResponse.DescribedGroup(group_id=group_id, error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                                                             error_message=f"Group {group_id} not found.")
        members = [ShareGroupDescribeResponse.Member(
            member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch, client_id=m.client_id,
            client_host=m.client_host, subscribed_topic_names=list(m.subscribed),
            assignment=ShareGroupDescribeResponse.Assignment(topic_partitions=[
                ShareGroupDescribeResponse.TopicPartitions(topic_id=topic_id, topic_name=image.name_of(topic_id) or "",
                                                           partitions=list(partitions))
                for topic_id, partitions in m.assignment.items()]))
            for m in group.members.values()]
        return ShareGroupDescribeResponse.DescribedGroup(
            group_id=group_id, group_state=group.state, group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch, assignor_name=ASSIGNOR_NAME, members=members)

    def listed(self, states: list[str], types: list[str]) -> list[ListGroupsResponse.ListedGroup]:
        """ListGroups' entries, filtered as Kafka filters (case-insensitive states and types)."""
        if types and "share" not in {t.lower() for t in types}:
            return []
        wanted_states = {s.lower() for s in states}
        return [ListGroupsResponse.ListedGroup(group_id=g.group_id, protocol_type="share", group_state=g.state,
                                               group_type="share")
                for g in self.groups.values() if not wanted_states or g.state.lower() in wanted_states]

    def deletable(self, group_id: str) -> ErrorCode:
        """Whether DeleteGroups may delete the group: only an existing, empty one."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        return ErrorCode.NON_EMPTY_GROUP if group.members else ErrorCode.NONE

    def delete(self, group_id: str) -> ErrorCode:
        code = self.deletable(group_id)
        if code is ErrorCode.NONE:
            del self.groups[group_id]
        return code

    def empty_group(self, group_id: str) -> ShareGroup:
        """The group, created empty if it does not exist (AlterShareGroupOffsets creates it, as Kafka's does)."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ShareGroup(group_id)
        return group

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and member_id in group.members

    def next_deadline_ms(self) -> int | None:
        return min((m.deadline_ms for g in self.groups.values() for m in g.members.values()), default=None)

    # ------------------------------------------------------------------ internals

    def _remove(self, group: ShareGroup, member_id: str) -> None:
        del group.members[member_id]
        group.group_epoch += 1

    def _refresh(self, group: ShareGroup, image: TopicImage) -> None:
        """A new target assignment when the group epoch moved, a subscribed topic changed size, or partitions of a
        subscribed topic were initialized since the assignment (assigned only once initialized)."""
        topics = _subscribed(group, image)
        digest = metadata_hash(topics)
        assignable = group.state_partitions.assignable()
        if (digest != group.metadata_hash or _initialized_pending(group, topics, assignable)) \
                and group.assignment_epoch == group.group_epoch:
            group.group_epoch += 1
        group.metadata_hash = digest
        if group.assignment_epoch == group.group_epoch:
            return
        subscriptions = {m.member_id: m.subscribed for m in group.members.values()}
        targets = assign(subscriptions, topics, {m.member_id: m.assignment for m in group.members.values()},
                         assignable)
        for member in group.members.values():
            member.assignment = targets.get(member.member_id, {})
        group.assignment_epoch = group.group_epoch


def _subscribed(group: ShareGroup, image: TopicImage) -> dict[str, tuple[uuid.UUID, int]]:
    return {topic: image.topics[topic] for topic in sorted(group.subscribed_topics()) if topic in image.topics}


def _initialized_pending(group: ShareGroup, topics: Mapping[str, tuple[uuid.UUID, int]],
                         assignable: Partitions) -> bool:
    """Whether the assignment misses initialized partitions of a subscribed topic (Kafka's
    initializedAssignmentPending)."""
    if not group.members:
        return False
    assigned: Partitions = {}
    for member in group.members.values():
        for topic_id, partitions in member.assignment.items():
            assigned.setdefault(topic_id, set()).update(partitions)
    return any(topic_id in assignable and assigned.get(topic_id, set()) != assignable[topic_id]
               for topic_id, _count in topics.values())


def metadata_hash(topics: Mapping[str, tuple[uuid.UUID, int]]) -> int:
    """A signed 64-bit digest of the subscribed topics (name, id, partition count): pybroker's own, not Kafka's
    (which also hashes racks), used only to notice that the topics changed since the assignment."""
    digest = hashlib.blake2b(digest_size=8)
    for name, (topic_id, count) in sorted(topics.items()):
        digest.update(f"{name}\0{topic_id}\0{count}\n".encode())
    return int.from_bytes(digest.digest(), "big", signed=True)


def _invalid(request: ShareGroupHeartbeatRequest) -> str | None:
    """Kafka's throwIfShareGroupHeartbeatRequestIsInvalid, message for message."""
    if not request.group_id:
        return "GroupId can't be empty."
    if request.rack_id is not None and not request.rack_id:
        return "RackId can't be empty."
    if not request.member_id:
        return "MemberId can't be empty."
    if request.member_epoch < LEAVE_EPOCH:
        return f"MemberEpoch is {request.member_epoch}, but must be greater than or equal to -1."
    if request.member_epoch == 0 and not request.subscribed_topic_names:
        return "SubscribedTopicNames must be set in first request."
    return None


def _error(code: ErrorCode, message: str) -> ShareGroupHeartbeatResponse:
    return ShareGroupHeartbeatResponse(error_code=code, error_message=message)
