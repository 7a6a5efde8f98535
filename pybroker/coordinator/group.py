"""A classic consumer group: its members, its generation and its committed offsets.

States and the transitions the coordinator makes between them (Kafka's ``GroupState``):

    Empty               no members; may hold offsets.        -> PreparingRebalance (a member joins)
                                                             -> Dead (group deleted or expired)
    PreparingRebalance  waiting for every member to (re)join -> CompletingRebalance (all joined or
                        within the rebalance timeout            timeout, with members left)
                                                             -> Empty (timeout, nobody left)
    CompletingRebalance joined; waiting for the leader's     -> Stable (leader's SyncGroup)
                        assignment in SyncGroup              -> PreparingRebalance (join/leave/expiry)
    Stable              assignment handed out; heartbeats    -> PreparingRebalance (join/leave/expiry,
                        keep members alive                      leader rejoin, protocol change)
    Dead                deleted; answers nothing             (final)

This module is data plus small queries; every decision lives in ``classic.py``.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field

import struct

from pybroker.coordinator.group_base import CommittedOffset, GroupBase, Record, Waiter
from pybroker.protocol.messages import ConsumerProtocolSubscription, GroupMetadataKey

__all__ = ["CommittedOffset", "Group", "GroupState", "Member", "Waiter"]

LATEST_SUBSCRIPTION_VERSION = 3
GROUP_KEY_VERSION = 2


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    heartbeat_deadline_ms: int = 0
    join_waiter: tuple[Waiter, int] | None = None
    """The pending JoinGroup answer and the version it must be encoded at."""
    sync_waiter: Waiter | None = None

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(protocol)

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols


@dataclass(slots=True)
class Group(GroupBase):
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending_member_deadlines: dict[str, int] = field(default_factory=dict)
    """Member ids handed out with MEMBER_ID_REQUIRED that have not joined yet, with their expiry."""
    static_members: dict[str, str] = field(default_factory=dict)
    """group.instance.id -> member id."""
    rebalance_deadline_ms: int | None = None
    initial_delay_deadline_ms: int | None = None
    initial_delay_limit_ms: int | None = None
    new_member_added: bool = False

    def transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.state_timestamp_ms = now_ms

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    @property
    def is_empty(self) -> bool:
        return not self.members

    def offsets_expirable(self) -> bool:
        return self.state is GroupState.EMPTY

    def expiry_base_ms(self, committed: CommittedOffset) -> int:
        """Kafka 2.1+: since the group emptied, or since the commit for groups that never had members."""
        return self.state_timestamp_ms if self.protocol_type else committed.commit_timestamp_ms

    def subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            try:
                topics |= subscription_topics(member.metadata_for(self.protocol_name))
            except (KeyError, ValueError):
                return None
        return topics

    def tombstones(self) -> list[Record]:
        return [(group_key(self.group_id), None)]

    def mark_dead(self, now_ms: int) -> None:
        self.transition(GroupState.DEAD, now_ms)

    def add_member(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove_member(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def member_by_instance(self, group_instance_id: str) -> Member | None:
        member_id = self.static_members.get(group_instance_id)
        return self.members.get(member_id) if member_id is not None else None

    def all_joined(self) -> bool:
        return not self.pending_member_deadlines and all(m.join_waiter is not None for m in self.members.values())

    def supports_protocols(self, protocol_type: str, protocols: list[str]) -> bool:
        """Kafka's rule: an empty group takes anything; otherwise the type must match and at
        least one offered protocol must be supported by every current member."""
        if self.is_empty:
            return bool(protocol_type) and bool(protocols)
        return protocol_type == self.protocol_type and bool(self.candidate_protocols() & set(protocols))

    def candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        candidates = set(members[0].protocol_names())
        for member in members[1:]:
            candidates &= set(member.protocol_names())
        return candidates

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol among those all members support."""
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter()
        for member in self.members.values():
            votes[next(name for name in member.protocol_names() if name in candidates)] += 1
        return max(sorted(votes), key=lambda name: votes[name])

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)


def subscription_topics(metadata: bytes) -> set[str]:
    """Topics named in a consumer-protocol subscription (int16 version prefix + struct)."""
    if len(metadata) < 2:
        raise ValueError("consumer subscription shorter than its version")
    (version,) = struct.unpack_from(">h", metadata)
    decoded = ConsumerProtocolSubscription.decode(metadata[2:], min(max(version, 0), LATEST_SUBSCRIPTION_VERSION))
    return set(decoded.topics)


def group_key(group_id: str) -> bytes:
    """The ``__consumer_offsets`` key of a classic group's metadata (records.py has the rest)."""
    return struct.pack(">h", GROUP_KEY_VERSION) + GroupMetadataKey(group=group_id).encode(GROUP_KEY_VERSION)
