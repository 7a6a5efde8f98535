"""Leader epoch -> first offset written in it (Kafka's LeaderEpochFileCache), for OffsetForLeaderEpoch
and follower truncation (KIP-101, KIP-279).

Pure: every change returns whether the entries changed, and the owner (`Partition`) then writes
them to the partition's `leader-epoch-checkpoint` (see `log/checkpoint.py`). At start-up the cache
comes from that file; only when it is missing or corrupt is it rebuilt from the batch headers of
the log (each batch carries the epoch of the leader that wrote it).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Iterable

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


@dataclass(slots=True)
class EpochCache:
    entries: list[tuple[int, int]] = field(default_factory=list)  # (epoch, start offset), both increasing

    @classmethod
    def from_batches(cls, batches: Iterable[tuple[int, int]]) -> EpochCache:
        """From (leader epoch, start offset) pairs in offset order: every batch of a log, or the
        entries of a checkpoint (out-of-order ones are dropped, as Kafka's assign does)."""
        cache = cls()
        for epoch, start_offset in batches:
            cache.assign(epoch, start_offset)
        return cache

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def start_offset_of_latest(self) -> int:
        return self.entries[-1][1] if self.entries else 0

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; older or equal epochs are ignored. An epoch
        that wrote nothing is replaced by the next one starting at the same offset (as Kafka does).
        True when the entries changed."""
        if epoch < 0 or epoch <= self.latest_epoch:
            return False
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """The log was cut at `end_offset`: forget epochs that start at or after it."""
        before = len(self.entries)
        while self.entries and self.entries[-1][1] >= end_offset:
            self.entries.pop()
        return len(self.entries) != before

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at `start_offset`: drop the epochs starting at or before it but keep the
        last of them, moved to `start_offset`, since it covers the new first offset (Kafka's
        truncateFromStart)."""
        if not self.entries or self.entries[0][1] >= start_offset:
            return False
        covering = bisect_right([start for _, start in self.entries], start_offset)
        self.entries[:covering] = [(self.entries[covering - 1][0], start_offset)]
        return True

    def clear(self) -> bool:
        """The log was emptied and restarted at a new offset: no epoch is known any more."""
        changed = bool(self.entries)
        self.entries.clear()
        return changed

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch <= `epoch`, the offset where it ends): the start of the next epoch, or the
        LEO for the latest epoch. An epoch older than every entry (the log start moved past it) ends
        where the first known epoch starts; (-1, -1) when `epoch` is undefined or newer than any the
        log has (Kafka's LeaderEpochFileCache.endOffsetFor)."""
        if epoch < 0 or epoch > self.latest_epoch:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        index = bisect_right(self.entries, (epoch, 2**63))
        if index == 0:
            return epoch, self.entries[0][1]
        found = self.entries[index - 1][0]
        if index == len(self.entries):
            return found, log_end_offset
        return found, self.entries[index][1]
