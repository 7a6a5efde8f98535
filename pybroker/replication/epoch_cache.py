"""Leader epoch -> first offset written in it (Kafka's LeaderEpochFileCache), for OffsetForLeaderEpoch
and follower truncation (KIP-101, KIP-279).

The entries are rebuilt from the batch headers of the log (each batch carries the epoch of the
leader that wrote it) when a partition is first hosted, then kept up to date by appends and
truncations. They are not written to `leader-epoch-checkpoint` yet, hence the rebuild.
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
        """From (leader epoch, base offset) of every batch in log order."""
        cache = cls()
        for epoch, base_offset in batches:
            cache.assign(epoch, base_offset)
        return cache

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def start_offset_of_latest(self) -> int:
        return self.entries[-1][1] if self.entries else 0

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset`; older or equal epochs are ignored. An epoch
        that wrote nothing is replaced by the next one starting at the same offset (as Kafka does)."""
        if epoch < 0 or epoch <= self.latest_epoch:
            return
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was cut at `end_offset`: forget epochs that start at or after it."""
        while self.entries and self.entries[-1][1] >= end_offset:
            self.entries.pop()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch <= `epoch`, the offset where it ends): the start of the next epoch, or the
        LEO for the latest epoch; (-1, -1) when the log has no epoch at or below `epoch`, or when
        `epoch` is newer than any it has (Kafka's LeaderEpochFileCache.endOffsetFor)."""
        index = bisect_right(self.entries, (epoch, 2**63))
        if index == 0 or epoch > self.latest_epoch:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        found = self.entries[index - 1][0]
        if index == len(self.entries):
            return found, log_end_offset
        return found, self.entries[index][1]
