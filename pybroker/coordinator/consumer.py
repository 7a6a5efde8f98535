"""The consumer group protocol (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe as a state machine.

One heartbeat does everything: join (epoch 0), stay, report owned partitions, leave (epoch -1) or
leave as a static member that will return (epoch -2). The broker computes the target assignment
with a server-side assignor whenever the group epoch rises, then moves each member towards its
target incrementally (``consumer_group.py`` explains epochs and states): a partition changes owner
only after its old owner's heartbeat no longer lists it. Kafka's ``GroupMetadataManager``
(consumerGroupHeartbeat) and ``CurrentAssignmentBuilder`` are the reference for every rule here.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from dataclasses import dataclass
from typing import Any, Mapping

from pybroker.common.topic import TopicPartition
from pybroker.coordinator import consumer_records
from pybroker.coordinator.assignors import ASSIGNORS
from pybroker.coordinator.consumer_regex import Describable, RegexRefresh, maybe_refresh, regex_topics, resolved
from pybroker.coordinator.consumer_group import (
    Assignment,
    ConsumerGroup,
    ConsumerGroupState,
    ConsumerMember,
    MemberState,
    TopicImage,
)
from pybroker.coordinator.group_base import GroupBase, Waiter
from pybroker.coordinator.table import GroupTable, Outcome
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
FIRST_CLIENT_MEMBER_ID_VERSION = 1

log = logging.getLogger("pybroker.coordinator")

CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1
"""ConsumerGroupDescribe v1's MemberType: the protocol a member of a consumer group joined with."""


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat with what the connection adds: ``describable`` filters the topics a
    regex refresh it asks for may reach (None: no authorizer). Its regex was found valid already."""

    request: ConsumerGroupHeartbeatRequest
    version: int
    client_id: str
    client_host: str
    image: TopicImage
    describable: Describable | None = None


class HeartbeatError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.message)
        self.code = code
        self.message = message


class ConsumerMembership:
    """Membership of the consumer-protocol groups in ``table``."""

    def __init__(self, table: GroupTable, heartbeat_interval_ms: int, session_timeout_ms: int,
                 assignors: tuple[str, ...]) -> None:
        self.table = table
        self.groups = table.groups
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.session_timeout_ms = session_timeout_ms
        self.assignors = assignors
        self.rebalances = 0
        """Group epoch bumps so far (Kafka's consumer-group-rebalance count)."""

    def deadlines(self, group: ConsumerGroup) -> list[int]:
        deadlines = [m.heartbeat_deadline_ms for m in group.members.values()]
        deadlines.extend(m.revocation_deadline_ms for m in group.members.values()
                         if m.revocation_deadline_ms is not None)
        return deadlines

    # ------------------------------------------------------------------ ConsumerGroupHeartbeat

    def heartbeat(self, waiter: Waiter, hb: Heartbeat, now_ms: int) -> Outcome:
        out = Outcome()
        try:
            response = self._heartbeat(out, hb, now_ms)
        except HeartbeatError as exc:
            response = ConsumerGroupHeartbeatResponse(error_code=exc.code, error_message=exc.message)
        group = self.groups.get(hb.request.group_id)
        if isinstance(group, ConsumerGroup):
            self.flush(out, group)
        out.reply(waiter, response)
        return out

    def flush(self, out: Outcome, group: ConsumerGroup) -> None:
        """Persist what changed in ``group`` before any answer goes out."""
        partition = self.table.partition_of(group.group_id)
        out.records.extend((partition, record) for record in consumer_records.changes(group))

    def _heartbeat(self, out: Outcome, hb: Heartbeat, now_ms: int) -> ConsumerGroupHeartbeatResponse:
        request = hb.request
        self._validate(request, hb.version)
        group = self._group_for(request, now_ms)
        if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(group, request, now_ms)
        member, joined = self._member_for(group, request, hb, now_ms)
        before = (dict(member.assigned), member.member_epoch)
        changed = self._update_member(member, request, hb) or joined
        member.heartbeat_deadline_ms = now_ms + self.session_timeout_ms
        refresh = maybe_refresh(group, hb.image, hb.describable, now_ms)
        if refresh is not None:
            out.tasks.append(refresh)
        if self.refresh_subscriptions(group, hb.image) or changed:
            self.bump(group, hb.image)
        owned = _owned(request, hb.image)
        self.reconcile(group, member, owned, now_ms)
        response = ConsumerGroupHeartbeatResponse(member_id=member.member_id, member_epoch=member.member_epoch,
                                                  heartbeat_interval_ms=self.heartbeat_interval_ms)
        full = request.member_epoch == 0 or owned is not None
        if full or before != (member.assigned, member.member_epoch):
            response.assignment = ConsumerGroupHeartbeatResponse.Assignment(
                topic_partitions=_wire(member.assigned, hb.image, ConsumerGroupHeartbeatResponse.TopicPartitions))
        return response

    def _validate(self, request: ConsumerGroupHeartbeatRequest, version: int) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid, then the assignor check (the handler
        checked the regex, in the regex worker: `topic_regex.py`)."""
        invalid = ErrorCode.INVALID_REQUEST
        if not request.group_id:
            raise HeartbeatError(invalid, "GroupId can't be empty.")
        if request.instance_id == "":
            raise HeartbeatError(invalid, "InstanceId can't be empty.")
        if request.rack_id == "":
            raise HeartbeatError(invalid, "RackId can't be empty.")
        if request.member_epoch == 0:
            if request.rebalance_timeout_ms == -1:
                raise HeartbeatError(invalid, "RebalanceTimeoutMs must be provided in first request.")
            if request.topic_partitions is None or request.topic_partitions:
                raise HeartbeatError(invalid, "TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and not request.subscribed_topic_regex:
                raise HeartbeatError(invalid, "SubscribedTopicNames or SubscribedTopicRegex must be set in "
                                              "first request.")
            if version >= FIRST_CLIENT_MEMBER_ID_VERSION and not request.member_id:
                raise HeartbeatError(invalid, "MemberId can't be empty.")
        elif request.member_epoch == STATIC_LEAVE_EPOCH and request.instance_id is None:
            raise HeartbeatError(invalid, "InstanceId can't be null.")
        elif request.member_epoch < STATIC_LEAVE_EPOCH:
            raise HeartbeatError(invalid, f"MemberEpoch is invalid: {request.member_epoch}.")
        if request.member_epoch != 0 and not request.member_id:
            raise HeartbeatError(invalid, "MemberId can't be empty.")
        if request.server_assignor is not None and request.server_assignor not in self.assignors:
            raise HeartbeatError(ErrorCode.UNSUPPORTED_ASSIGNOR,
                                 f"ServerAssignor {request.server_assignor} is not supported. Supported assignors: "
                                 f"{', '.join(self.assignors)}.")

    def _group_for(self, request: ConsumerGroupHeartbeatRequest, now_ms: int) -> ConsumerGroup:
        group: GroupBase | None = self.groups.get(request.group_id)
        if isinstance(group, ConsumerGroup):
            return group
        if group is not None and (getattr(group, "members", None) or request.member_epoch != 0):
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {request.group_id} is not a consumer group.")
        if group is None and request.member_epoch != 0:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {request.member_id} is not a member of group {request.group_id}.")
        consumer = ConsumerGroup(request.group_id, state_timestamp_ms=now_ms)
        if group is not None:  # an empty classic group becomes a consumer group, keeping its offsets
            consumer.offsets, consumer.pending_offsets = group.offsets, group.pending_offsets
            consumer.offset_positions = group.offset_positions
            consumer.written = {key: b"" for key, _ in group.tombstones()}  # the next write deletes them
            log.info("Converted the empty classic group %s to a consumer group", request.group_id)
        self.groups[request.group_id] = consumer
        return consumer

    def _member_for(self, group: ConsumerGroup, request: ConsumerGroupHeartbeatRequest, hb: Heartbeat,
                    now_ms: int) -> tuple[ConsumerMember, bool]:
        """The member the heartbeat is for, and whether it is new to the group."""
        if request.member_epoch == 0:
            member_id = request.member_id or str(uuid.uuid4())
            if request.instance_id is not None:
                return self._static_join(group, request, member_id)
            member = group.members.get(member_id)
            if member is not None:  # rejoining after a fence or an error: it holds nothing any more
                self._release(group, member)
                member.member_epoch, member.previous_member_epoch = 0, -1
                member.state = MemberState.STABLE
                return member, False
            member = group.members[member_id] = ConsumerMember(member_id)
            log.info("Member %s joins consumer group %s", member_id, group.group_id)
            return member, True
        member = group.members.get(request.member_id)
        if member is None or member.left_static:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {request.member_id} is not a member of group {group.group_id}.")
        if request.instance_id is not None and group.static_members.get(request.instance_id) != member.member_id:
            raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID,
                                 f"Static member {request.member_id} with instance id {request.instance_id} was "
                                 "fenced by another member.")
        owned = _owned(request, hb.image)
        if request.member_epoch > member.member_epoch or (
                request.member_epoch < member.member_epoch and not (
                    request.member_epoch == member.previous_member_epoch
                    and owned is not None and _is_subset(owned, member.assigned))):
            raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH,
                                 f"The consumer group member has a member epoch ({request.member_epoch}) different "
                                 f"from the one known by the group coordinator ({member.member_epoch}). The member "
                                 "must abandon all its partitions and rejoin.")
        return member, False

    def _static_join(self, group: ConsumerGroup, request: ConsumerGroupHeartbeatRequest,
                     member_id: str) -> tuple[ConsumerMember, bool]:
        instance_id = request.instance_id
        assert instance_id is not None
        previous_id = group.static_members.get(instance_id)
        if previous_id is None:
            member = group.members[member_id] = ConsumerMember(member_id, instance_id=instance_id)
            group.static_members[instance_id] = member_id
            log.info("Static member %s (instance %s) joins consumer group %s", member_id, instance_id, group.group_id)
            return member, True
        previous = group.members[previous_id]
        if not previous.left_static and previous_id != member_id:
            raise HeartbeatError(ErrorCode.UNRELEASED_INSTANCE_ID,
                                 f"Static member {member_id} with instance id {instance_id} cannot join the group "
                                 f"because the instance id is owned by {previous_id} member.")
        # The returning instance takes its predecessor's place: assignment and epoch (Kafka's replaceMember).
        del group.members[previous_id]
        previous.member_id, previous.left_static = member_id, False
        group.members[member_id] = previous
        group.static_members[instance_id] = member_id
        for tp, holder in group.owners.items():
            if holder == previous_id:
                group.owners[tp] = member_id
        if previous_id in group.target:
            group.target[member_id] = group.target.pop(previous_id)
        return previous, False

    def _update_member(self, member: ConsumerMember, request: ConsumerGroupHeartbeatRequest, hb: Heartbeat) -> bool:
        """Apply the heartbeat's changed fields; True when the subscription or assignor changed."""
        changed = False
        member.client_id, member.client_host = hb.client_id, hb.client_host
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.subscribed_topic_names is not None and \
                sorted(request.subscribed_topic_names) != sorted(member.subscribed_topic_names):
            member.subscribed_topic_names = sorted(set(request.subscribed_topic_names))
            changed = True
        if request.subscribed_topic_regex is not None:
            regex = request.subscribed_topic_regex or None
            changed = changed or regex != member.subscribed_topic_regex
            member.subscribed_topic_regex = regex
        if request.server_assignor is not None and request.server_assignor != member.server_assignor:
            member.server_assignor = request.server_assignor
            changed = True
        return changed

    def _leave(self, group: ConsumerGroup, request: ConsumerGroupHeartbeatRequest,
               now_ms: int) -> ConsumerGroupHeartbeatResponse:
        member = group.members.get(request.member_id)
        if request.instance_id is not None:
            static_id = group.static_members.get(request.instance_id)
            if static_id is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Instance id {request.instance_id} is unknown in group {group.group_id}.")
            if static_id != request.member_id:
                raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID,
                                     f"Static member {request.member_id} with instance id {request.instance_id} was "
                                     "fenced by another member.")
        if member is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {request.member_id} is not a member of group {group.group_id}.")
        if request.member_epoch == STATIC_LEAVE_EPOCH:
            log.info("Static member %s of consumer group %s left temporarily", member.member_id, group.group_id)
            member.left_static = True
        else:
            log.info("Member %s left consumer group %s", member.member_id, group.group_id)
            self.remove_member(group, member, now_ms)
        return ConsumerGroupHeartbeatResponse(member_id=request.member_id, member_epoch=request.member_epoch,
                                              heartbeat_interval_ms=0)

    def remove_member(self, group: ConsumerGroup, member: ConsumerMember, now_ms: int) -> None:
        """A member leaves, expires or is fenced: its partitions are free, the group moves to a new epoch."""
        self._release(group, member)
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        if member.instance_id is not None and group.static_members.get(member.instance_id) == member.member_id:
            del group.static_members[member.instance_id]
        if not group.members:
            group.state_timestamp_ms = now_ms
        group.group_epoch += 1
        self.rebalances += 1
        self._assign(group, group.subscription_metadata)

    # ------------------------------------------------------------------ epochs and assignment

    @staticmethod
    def _subscriptions(group: ConsumerGroup, image: TopicImage) -> dict[str, set[str]]:
        """member id -> the existing topics it subscribes to, by name or (as resolved) regular expression."""
        return {m.member_id: ConsumerMembership._known_subscription(group, m, image.topics)
                for m in group.members.values()}

    def refresh_subscriptions(self, group: ConsumerGroup, image: TopicImage) -> bool:
        """Whether the subscribed topics' partition counts changed (topics created, deleted, grown)."""
        subscribed = {t for topics in self._subscriptions(group, image).values() for t in topics}
        group.topic_ids.update({t: image.topics[t][0] for t in subscribed})
        metadata = {t: image.topics[t][1] for t in subscribed}
        return metadata != group.subscription_metadata

    def bump(self, group: ConsumerGroup, image: TopicImage) -> None:
        group.group_epoch += 1
        self.rebalances += 1
        subscriptions = self._subscriptions(group, image)
        metadata = {t: image.topics[t][1] for topics in subscriptions.values() for t in topics}
        group.topic_ids.update({t: image.topics[t][0] for t in metadata})
        self._assign(group, metadata, subscriptions)

    def _assign(self, group: ConsumerGroup, metadata: dict[str, int],
                subscriptions: dict[str, set[str]] | None = None) -> None:
        """Compute the target assignment for the group epoch (Kafka's TargetAssignmentBuilder)."""
        if subscriptions is None:
            subscriptions = {m.member_id: self._known_subscription(group, m, metadata)
                             for m in group.members.values()}
        group.subscription_metadata = metadata
        group.assignor_name = self._preferred_assignor(group)
        assignor = ASSIGNORS[group.assignor_name]
        group.target = assignor(subscriptions, metadata, group.target) if group.members else {}
        group.assignment_epoch = group.group_epoch
        log.info("Computed a new target assignment for consumer group %s at epoch %d with the %s assignor",
                 group.group_id, group.group_epoch, group.assignor_name)

    @staticmethod
    def _known_subscription(group: ConsumerGroup, member: ConsumerMember, existing: Mapping[str, Any]) -> set[str]:
        """The topics of ``existing`` the member subscribes to, by name or regex."""
        return {t for t in member.subscribed_topic_names if t in existing} | regex_topics(group, member, existing)

    def regexes_resolved(self, refresh: RegexRefresh, matches: dict[str, list[str]] | None) -> Outcome:
        """A regex refresh finished (None: it failed): a new epoch if a regex now stands for other topics."""
        out = Outcome()
        group = self.groups.get(refresh.group_id)
        if isinstance(group, ConsumerGroup):
            if resolved(group, refresh, matches) or self.refresh_subscriptions(group, refresh.image):
                self.bump(group, refresh.image)
            self.flush(out, group)
        return out

    def _preferred_assignor(self, group: ConsumerGroup) -> str:
        """The assignor most members ask for, else the first of ``group.consumer.assignors``."""
        votes: dict[str, int] = {}
        for member in group.members.values():
            if member.server_assignor is not None:
                votes[member.server_assignor] = votes.get(member.server_assignor, 0) + 1
        if not votes:
            return self.assignors[0]
        return max(sorted(votes), key=lambda name: votes[name])

    def reconcile(self, group: ConsumerGroup, member: ConsumerMember, owned: Assignment | None,
                   now_ms: int) -> None:
        """Move ``member`` towards its target (Kafka's CurrentAssignmentBuilder)."""
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if owned is None or _overlaps(owned, member.revoking):
                return
            for topic, partitions in member.revoking.items():
                for p in partitions:
                    if group.owners.get(TopicPartition(topic, p)) == member.member_id:
                        del group.owners[TopicPartition(topic, p)]
            member.revoking = {}
            member.revocation_deadline_ms = None
        elif member.state is MemberState.STABLE and member.member_epoch == group.assignment_epoch:
            return
        target = group.target.get(member.member_id, {})
        keep = _intersect(member.assigned, target)
        revoke = _minus(member.assigned, target)
        if revoke:
            member.assigned, member.revoking = keep, revoke
            member.state = MemberState.UNREVOKED_PARTITIONS
            member.revocation_deadline_ms = now_ms + member.rebalance_timeout_ms
            return
        assigned = {t: set(ps) for t, ps in keep.items()}
        unreleased = False
        for topic, partitions in _minus(target, keep).items():
            for p in sorted(partitions):
                holder = group.owners.get(TopicPartition(topic, p))
                if holder is None or holder == member.member_id or holder not in group.members:
                    group.owners[TopicPartition(topic, p)] = member.member_id
                    assigned.setdefault(topic, set()).add(p)
                else:
                    unreleased = True
        member.assigned = {t: frozenset(ps) for t, ps in assigned.items() if ps}
        member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
        if member.member_epoch != group.assignment_epoch:
            member.previous_member_epoch, member.member_epoch = member.member_epoch, group.assignment_epoch

    @staticmethod
    def _release(group: ConsumerGroup, member: ConsumerMember) -> None:
        for tp in [tp for tp, holder in group.owners.items() if holder == member.member_id]:
            del group.owners[tp]
        member.assigned, member.revoking, member.revocation_deadline_ms = {}, {}, None

    # ------------------------------------------------------------------ timers

    def tick(self, out: Outcome, group: ConsumerGroup, now_ms: int) -> None:
        """Expire members whose session ended; fence those that did not revoke within the rebalance timeout."""
        for member in list(group.members.values()):
            if now_ms >= member.heartbeat_deadline_ms:
                log.info("Member %s in consumer group %s has failed (no heartbeat within %d ms), removing it",
                         member.member_id, group.group_id, self.session_timeout_ms)
                self.remove_member(group, member, now_ms)
            elif member.revocation_deadline_ms is not None and now_ms >= member.revocation_deadline_ms:
                log.info("Member %s in consumer group %s did not revoke its partitions within %d ms, fencing it",
                         member.member_id, group.group_id, member.rebalance_timeout_ms)
                self.remove_member(group, member, now_ms)
        if group.written:  # a group never written (just created, or failed to join) has nothing to persist
            self.flush(out, group)

    # ------------------------------------------------------------------ offsets (Kafka's validateOffsetCommit)

    @staticmethod
    def validate_commit(group: ConsumerGroup, member_id: str, member_epoch: int) -> ErrorCode:
        """OffsetCommit and TxnOffsetCommit carry the member epoch where classic clients put the generation."""
        if member_epoch < 0 and not group.members:
            return ErrorCode.NONE
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:  # a classic member's commit keeps the classic error
            return ErrorCode.ILLEGAL_GENERATION if member.classic is not None else ErrorCode.STALE_MEMBER_EPOCH
        return ErrorCode.NONE

    # ------------------------------------------------------------------ ConsumerGroupDescribe

    @staticmethod
    def describe(group: ConsumerGroup, image: TopicImage) -> ConsumerGroupDescribeResponse.DescribedGroup:
        tp = ConsumerGroupDescribeResponse.TopicPartitions
        members = [ConsumerGroupDescribeResponse.Member(
            member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
            client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=ConsumerGroupDescribeResponse.Assignment(topic_partitions=_wire(m.assigned, image, tp)),
            target_assignment=ConsumerGroupDescribeResponse.Assignment(
                topic_partitions=_wire(group.target.get(m.member_id, {}), image, tp)),
            member_type=CLASSIC_MEMBER if m.classic is not None else CONSUMER_MEMBER)  # v1 (KIP-1099)
            for m in group.members.values()]
        return ConsumerGroupDescribeResponse.DescribedGroup(
            group_id=group.group_id, group_state=group.state.value, group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch, assignor_name=group.assignor_name, members=members)


class ConsumerLoad:
    """Replays the consumer protocol's records of a partition into its groups (``consumer_records.py``)."""

    def __init__(self, membership: ConsumerMembership) -> None:
        self.membership = membership
        self.raw: dict[str, dict[str, dict[int, Any]]] = {}

    def apply(self, entry: consumer_records.ConsumerGroupEntry, now_ms: int) -> None:
        groups = self.membership.groups
        group = groups.get(entry.group_id)
        if entry.key_version == consumer_records.METADATA and entry.value is None:
            self.raw.pop(entry.group_id, None)
            if isinstance(group, ConsumerGroup):
                del groups[entry.group_id]
            return
        if not isinstance(group, ConsumerGroup):
            if entry.value is None:
                return
            replacement = ConsumerGroup(entry.group_id, state_timestamp_ms=now_ms)
            if group is not None:
                replacement.offsets, replacement.pending_offsets = group.offsets, group.pending_offsets
                replacement.offset_positions = group.offset_positions
            group = groups[entry.group_id] = replacement
            self.raw[entry.group_id] = {}
        consumer_records.apply(group, entry, self.raw.setdefault(entry.group_id, {}))

    def finish(self, now_ms: int) -> None:
        """Rebuild the replayed groups' members; each must heartbeat within a session timeout."""
        for group_id, raw in self.raw.items():
            group = self.membership.groups.get(group_id)
            if isinstance(group, ConsumerGroup):
                consumer_records.finish(group, raw, now_ms + self.membership.session_timeout_ms)
                log.info("Loaded consumer group %s at epoch %d with %d members", group_id, group.group_epoch,
                         len(group.members))


def _owned(request: ConsumerGroupHeartbeatRequest, image: TopicImage) -> Assignment | None:
    if request.topic_partitions is None:
        return None
    owned: Assignment = {}
    for topic in request.topic_partitions:
        name = image.name_of(topic.topic_id)
        if name is not None and topic.partitions:
            owned[name] = frozenset(topic.partitions)
    return owned


def _wire(assignment: Assignment, image: TopicImage, cls: Any) -> list[Any]:
    """An assignment with topic ids, as both APIs send it; topics deleted meanwhile are left out."""
    named = any(f.name == "topic_name" for f in dataclasses.fields(cls))
    result = []
    for topic in sorted(assignment):
        if topic in image.topics and assignment[topic]:
            fields: dict[str, Any] = {"topic_id": image.topics[topic][0], "partitions": sorted(assignment[topic])}
            if named:
                fields["topic_name"] = topic
            result.append(cls(**fields))
    return result


def _intersect(a: Assignment, b: Assignment) -> Assignment:
    return {t: a[t] & b[t] for t in a if t in b and a[t] & b[t]}


def _minus(a: Assignment, b: Assignment) -> Assignment:
    return {t: a[t] - b.get(t, frozenset()) for t in a if a[t] - b.get(t, frozenset())}


def _overlaps(a: Assignment, b: Assignment) -> bool:
    return any(a[t] & b[t] for t in a if t in b)


def _is_subset(a: Assignment, b: Assignment) -> bool:
    return all(ps <= b.get(t, frozenset()) for t, ps in a.items())


__all__ = ["ConsumerGroupState", "ConsumerMembership", "Heartbeat", "TopicImage"]
