"""What every group holds whatever its protocol: its id and its committed offsets (the offset store's part).

Kafka keeps offsets apart from membership (``OffsetMetadataManager``); here they live on the group
object, in these fields, so that the offset store (``offsets.py``) serves classic and consumer
groups alike. Each kind answers the few questions the store asks of it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Hashable

from pybroker.common.topic import TopicPartition

Waiter = Hashable
"""Opaque token for a request whose answer is delayed (JoinGroup, SyncGroup); the runtime maps it to a future."""

Record = tuple[bytes, bytes | None]
"""(key, value) of one ``__consumer_offsets`` record; a None value is a tombstone."""


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None = None


@dataclass(slots=True)
class GroupBase(ABC):
    group_id: str
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict, kw_only=True)
    pending_offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict, kw_only=True)
    """The latest OffsetCommit per partition whose records are not replicated yet (Kafka's
    pendingOffsetCommits): OffsetFetch shows ``offsets`` only, require_stable says UNSTABLE."""
    offset_positions: dict[TopicPartition, int] = field(default_factory=dict, kw_only=True)
    """Where in ``__consumer_offsets`` each value of ``offsets`` was written, so that a commit whose
    write completes late never replaces a newer one (Kafka's ``olderThan``)."""

    group_type = "classic"
    """ListGroups' and ConsumerGroupDescribe's name of the protocol (Kafka's Group.Type)."""

    @property
    def has_offsets(self) -> bool:
        """Committed or being committed: such a group is not removed."""
        return bool(self.offsets or self.pending_offsets)

    @abstractmethod
    def offsets_expirable(self) -> bool:
        """Whether retention may drop this group's offsets now (Kafka: the group is Empty)."""

    @abstractmethod
    def expiry_base_ms(self, committed: CommittedOffset) -> int:
        """The time retention counts from for ``committed``."""

    @abstractmethod
    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, or None when that cannot be known (OffsetDelete)."""

    @abstractmethod
    def tombstones(self) -> list[Record]:
        """The records that delete this group's membership (its offsets' tombstones aside)."""

    @abstractmethod
    def mark_dead(self, now_ms: int) -> None:
        """The group is gone (its offsets expired or it was deleted): move it to Dead."""
