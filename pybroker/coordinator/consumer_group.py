"""A consumer-protocol group (KIP-848): members, epochs, the target assignment and who owns what.

Epochs: the *group epoch* rises whenever the group changes (a member joins, leaves or changes its
subscription or assignor; a subscribed topic appears, disappears or gains partitions). The target
assignment is recomputed for it at once, so the *assignment epoch* catches up in the same step.
Each member then reconciles towards its target at its own pace; its *member epoch* reaches the
assignment epoch once it holds everything it can (Kafka's ``CurrentAssignmentBuilder``).

Group states (Kafka's ``ConsumerGroup.ConsumerGroupState``), derived, never stored:

    Empty        no members; may hold offsets
    Assigning    group epoch > assignment epoch (never seen here: assignment is synchronous)
    Reconciling  some member is not yet at the assignment epoch, or is revoking/awaiting partitions
    Stable       every member holds its target at the assignment epoch
    Dead         deleted

Member states (Kafka's ``MemberState``):

    Stable                 holds its target (as far as this epoch goes)
    UnrevokedPartitions    must give partitions up first; its epoch stays until its heartbeat's
                           owned partitions show they are gone (bounded by the rebalance timeout)
    UnreleasedPartitions   at the new epoch, waiting for partitions another member still revokes

A partition has at most one owner among assigned and revoking partitions (``owners``): it is handed
to its new member only once the old one has acknowledged the revocation.

Data plus small queries; every decision is in ``consumer.py``.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import Mapping

from pybroker.common.topic import TopicPartition
from pybroker.coordinator.group_base import CommittedOffset, GroupBase, Record

Assignment = dict[str, frozenset[int]]
"""topic name -> partitions (names inside the coordinator, topic ids on the wire)."""


@dataclass(frozen=True, slots=True)
class TopicImage:
    """The cluster's topics when a request arrived: name -> (topic id, partition count); ``version``
    changes whenever a topic does (regex resolutions remember the version they saw)."""

    topics: Mapping[str, tuple[uuid.UUID, int]]
    by_id: Mapping[uuid.UUID, str] = field(default_factory=dict)
    version: int = 0

    def __post_init__(self) -> None:
        if not self.by_id:
            object.__setattr__(self, "by_id", {tid: name for name, (tid, _) in self.topics.items()})

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        return self.by_id.get(topic_id)


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 0
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    revoking: Assignment = field(default_factory=dict)
    heartbeat_deadline_ms: int = 0
    revocation_deadline_ms: int | None = None
    """Set while the member must revoke partitions: past it, the member is fenced."""
    left_static: bool = False
    """A static member that left with epoch -2: its assignment waits for its instance to return."""
    classic: ClassicMemberInfo | None = None
    """Set for a member using the classic protocol (JoinGroup/SyncGroup) in this group (``migration.py``)."""


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    """The topics a subscribed regex matched, at a version of the topic image (``consumer_regex.py``)."""

    topics: frozenset[str]
    image_version: int


@dataclass(slots=True)
class ClassicMemberInfo:
    """What a classic member told JoinGroup that the consumer protocol has no field for."""

    session_timeout_ms: int
    protocols: list[tuple[str, bytes]]


@dataclass(slots=True)
class ConsumerGroup(GroupBase):
    state_timestamp_ms: int = 0
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    """group.instance.id -> member id."""
    target: dict[str, Assignment] = field(default_factory=dict)
    """member id -> its target assignment at ``assignment_epoch``."""
    owners: dict[TopicPartition, str] = field(default_factory=dict)
    """(topic, partition) -> the member that holds it, assigned or still revoking."""
    subscription_metadata: dict[str, int] = field(default_factory=dict)
    """Partition counts of the subscribed topics the target was computed for."""
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    """Ids of the topics the group has seen: the records name topics by id."""
    resolved_regexes: dict[str, ResolvedRegex] = field(default_factory=dict)
    """Subscribed regex -> the topics it was last resolved to (``consumer_regex.py``)."""
    regex_refresh_pending: bool = False
    regex_refreshed_ms: int = 0
    written: dict[bytes, bytes] = field(default_factory=dict)
    """The group's records as last written to ``__consumer_offsets`` (key -> value)."""
    dead: bool = False

    group_type = "consumer"

    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    @property
    def is_empty(self) -> bool:
        return not self.members

    def offsets_expirable(self) -> bool:
        return not self.members

    def expiry_base_ms(self, committed: CommittedOffset) -> int:
        return self.state_timestamp_ms

    def subscribed_topics(self) -> set[str] | None:
        return set(self.subscription_metadata)

    def tombstones(self) -> list[Record]:
        return [(key, None) for key in self.written]

    def mark_dead(self, now_ms: int) -> None:
        self.dead = True
        self.state_timestamp_ms = now_ms
