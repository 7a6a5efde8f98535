"""Which records of a ``__share_group_state`` partition are redundant (Kafka's ShareCoordinatorOffsetsManager).

A share-partition's latest ShareSnapshot holds its whole state, so every record of that share-partition before it
is redundant; a partition's records before the *oldest* latest snapshot of its live share-partitions are redundant
for all of them, and the share coordinator deletes them (DeleteRecords) every
``share.coordinator.state.topic.prune.interval.ms``. A deleted share-partition holds nothing back: its tombstone
only forgets what the records before it built. A partition with no live share-partition is redundant up to its end.
"""

from __future__ import annotations

from pybroker.coordinator.share_state.records import SNAPSHOT_TYPE, ShareKey

__all__ = ["SnapshotOffsets"]


class SnapshotOffsets:
    """The offset of each live share-partition's latest ShareSnapshot, per ``__share_group_state`` partition."""

    def __init__(self) -> None:
        self._by_partition: dict[int, dict[ShareKey, int]] = {}

    def note(self, partition: int, key: ShareKey, record_type: int, deleted: bool, offset: int) -> None:
        """A record of ``key`` at ``offset`` (appended or replayed): a snapshot moves the key's offset, a tombstone
        forgets the key."""
        keys = self._by_partition.setdefault(partition, {})
        if deleted:
            keys.pop(key, None)
        elif record_type == SNAPSHOT_TYPE:
            keys[key] = offset

    def redundant_before(self, partition: int, end_offset: int) -> int:
        """The offset before which every record of ``partition`` is redundant (``end_offset``: all are)."""
        return min(self._by_partition.get(partition, {}).values(), default=end_offset)

    def unload(self, partition: int) -> None:
        self._by_partition.pop(partition, None)
