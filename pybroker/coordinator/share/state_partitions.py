"""Which share-partitions of a share group have durable state, and how far (Kafka's
ShareGroupStatePartitionMetadata: initializing, initialized and deleting topics), as a pure state machine.

The group coordinator owns this lifecycle, as Kafka 4.2's does, so that a partition is never assigned before its state
exists at the share coordinator and a group's state is never forgotten while the share coordinator still holds it:

- A subscribed partition without state becomes *initializing* (written to ``__consumer_offsets`` first), then the
  share coordinator is asked to initialize it (InitializeShareGroupState), and only on its success it becomes
  *initialized*; only initialized partitions are assignable. A failed initialization leaves *initializing* at once,
  so the next heartbeat asks again; an initialization that never answered (the coordinator crashed or moved) is
  asked again by a heartbeat once ``group.share.initialize.retry.interval.ms`` has passed since it was recorded
  (or since the group was loaded).
- Deleting a group, or its offsets of a topic, moves the topics to *deleting* before DeleteShareGroupState is sent,
  and they leave it only once the share coordinator deleted their state; a deletion that failed (or was cut short by
  a crash) is carried out again by the next deletion of the group or of the topic's offsets.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

__all__ = ["Initialization", "Partitions", "StatePartitions"]

Partitions = dict[uuid.UUID, set[int]]
"""topic id -> partition indexes."""
UNINITIALIZED_START_OFFSET = -1
"""InitializeShareGroupState's start offset for "resolve ``share.auto.offset.reset`` when first read"."""
EARLIEST_START_OFFSET = 0


@dataclass(frozen=True, slots=True)
class Initialization:
    """The share-partitions to initialize, and where each starts. A topic new to the group starts where
    ``share.auto.offset.reset`` says when its partitions are first read; a partition added to a topic the group
    already had (initialized or initializing) starts at 0, as Kafka 4.2's group coordinator initializes it
    (KAFKA-20742): with "latest" the records produced to it before it is first read would be skipped."""

    partitions: Partitions
    known_topics: frozenset[uuid.UUID] = frozenset()

    def start_offset(self, topic_id: uuid.UUID) -> int:
        return EARLIEST_START_OFFSET if topic_id in self.known_topics else UNINITIALIZED_START_OFFSET


@dataclass(slots=True)
class StatePartitions:
    initializing: Partitions = field(default_factory=dict)
    initializing_since_ms: dict[uuid.UUID, int] = field(default_factory=dict)
    """When each topic's initialization was last asked for (Kafka's InitMapValue timestamp; the load time after a
    load)."""
    initialized: Partitions = field(default_factory=dict)
    deleting: set[uuid.UUID] = field(default_factory=set)
    names: dict[uuid.UUID, str] = field(default_factory=dict)
    """Topic names, as the record carries them."""

    def to_initialize(self, topics: Mapping[str, tuple[uuid.UUID, int]], now_ms: int,
                      retry_ms: int) -> Initialization:
        """The partitions of the subscribed ``topics`` (name -> (topic id, partition count)) that are neither
        initialized nor initializing since less than ``retry_ms``, now marked initializing (Kafka's
        subscribedTopicsChangeMap and addInitializingTopicsRecords); a topic initialized again leaves deleting.
        The topics known to the group are taken before that marking, as Kafka reads its initialized and
        initializing topics before replaying the heartbeat's records."""
        known = frozenset(self.initialized) | frozenset(self.initializing)
        out: Partitions = {}
        for name, (topic_id, count) in sorted(topics.items()):
            covered = set(self.initialized.get(topic_id, ()))
            if now_ms - self.initializing_since_ms.get(topic_id, now_ms - retry_ms) < retry_ms:
                covered |= self.initializing.get(topic_id, set())
            missing = set(range(count)) - covered
            if not missing:
                continue
            out[topic_id] = missing
            self.initializing.setdefault(topic_id, set()).update(missing)
            self.initializing_since_ms[topic_id] = now_ms
            self.names[topic_id] = name
            self.deleting.discard(topic_id)
        return Initialization(out, known & frozenset(out))

    def initialize_done(self, partitions: Partitions) -> None:
        """The share coordinator holds state for ``partitions``: initialized, hence assignable."""
        for topic_id, indexes in partitions.items():
            self.initialized.setdefault(topic_id, set()).update(indexes)
        self.initialize_failed(partitions)

    def initialize_failed(self, partitions: Partitions) -> None:
        """``partitions`` are no longer being initialized (the next heartbeat asks again)."""
        for topic_id, indexes in partitions.items():
            left = self.initializing.get(topic_id, set()) - indexes
            if left:
                self.initializing[topic_id] = left
            else:
                self.initializing.pop(topic_id, None)
                self.initializing_since_ms.pop(topic_id, None)

    def assignable(self) -> Partitions:
        return {topic_id: set(indexes) for topic_id, indexes in self.initialized.items() if indexes}

    def delete_all(self, partition_count: Callable[[uuid.UUID], int | None]) -> Partitions:
        """A group deletion: every initialized or initializing topic, and every topic still deleting from an earlier
        deletion (all its partitions, as far as the topic still exists), is deleting now; the partitions whose state
        is to be deleted (Kafka's shareGroupBuildPartitionDeleteRequest)."""
        out: Partitions = {}
        for held in (self.initialized, self.initializing):
            for topic_id, indexes in held.items():
                out.setdefault(topic_id, set()).update(indexes)
        for topic_id in self.deleting:
            count = partition_count(topic_id)
            if count is not None:
                out.setdefault(topic_id, set()).update(range(count))
        self.initializing, self.initializing_since_ms, self.initialized = {}, {}, {}
        self.deleting |= set(out)
        return out

    def delete_topic(self, topic_id: uuid.UUID, partition_count: int) -> set[int] | None:
        """Deleting a group's offsets of one topic: its initialized partitions, or all of them when an earlier
        deletion of it did not finish, are deleting now; None when the group has no state in the topic (Kafka's
        sharePartitionsEligibleForOffsetDeletion)."""
        if topic_id in self.initialized:
            self.deleting.add(topic_id)
            return self.initialized.pop(topic_id)
        if topic_id in self.deleting:
            return set(range(partition_count))
        return None

    def deleted(self, topic_ids: Iterable[uuid.UUID]) -> None:
        """The share coordinator deleted the state of ``topic_ids``."""
        for topic_id in topic_ids:
            self.deleting.discard(topic_id)
            if topic_id not in self.initialized and topic_id not in self.initializing:
                self.names.pop(topic_id, None)

    def topics_deleted(self, topic_ids: Iterable[uuid.UUID]) -> bool:
        """Deleted topics leave every set (their state goes with the topic, Kafka's maybeCleanupShareGroupState);
        whether any was there."""
        found = False
        for topic_id in topic_ids:
            found |= any(topic_id in held for held in (self.initializing, self.initialized, self.deleting))
            self.initializing.pop(topic_id, None)
            self.initializing_since_ms.pop(topic_id, None)
            self.initialized.pop(topic_id, None)
            self.deleting.discard(topic_id)
            self.names.pop(topic_id, None)
        return found

    def topics_with_state(self) -> Partitions:
        """Every partition whose state the share coordinator may hold (what describing offsets reports)."""
        out: Partitions = {}
        for held in (self.initialized, self.initializing):
            for topic_id, indexes in held.items():
                out.setdefault(topic_id, set()).update(indexes)
        return out
