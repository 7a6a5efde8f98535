"""``LogSegments``: one partition's segments in base-offset order, with the floor lookup (Kafka ``LogSegments``).

The base offsets are kept in a list beside the segments, so finding the segment that holds an offset is
one ``bisect`` and not a pass over every segment. The last segment is the active one; the list is never
empty once the log is open.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Iterable, Iterator

from pybroker.log.segment import LogSegment

__all__ = ["LogSegments"]


class LogSegments:
    """The segment list of one log; only the log that owns it changes it."""

    active: LogSegment  # the last segment, a plain attribute since every append reads it; kept by _changed

    def __init__(self, segments: Iterable[LogSegment]) -> None:
        self._segments = list(segments)
        self._bases = [s.base_offset for s in self._segments]
        self._changed()

    def _changed(self) -> None:
        """After every change of the list: the last segment is the active one (none while the list is empty, as a
        read of the last of an empty list fails, rather than a segment the list no longer holds)."""
        if self._segments:
            self.active = self._segments[-1]
        elif hasattr(self, "active"):
            del self.active

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    def __getitem__(self, index: int) -> LogSegment:
        return self._segments[index]

    def as_list(self) -> list[LogSegment]:
        """A copy, in base-offset order."""
        return list(self._segments)

    @property
    def first(self) -> LogSegment:
        return self._segments[0]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def floor_index(self, offset: int) -> int:
        """Index of the last segment whose base offset is at or below ``offset`` (0 when none is)."""
        return max(0, bisect_right(self._bases, offset) - 1)

    def floor(self, offset: int) -> LogSegment:
        return self._segments[self.floor_index(offset)]

    def from_offset(self, offset: int) -> list[LogSegment]:
        """The segment holding ``offset`` and every later one."""
        return self._segments[self.floor_index(offset):]

    def index_of(self, segment: LogSegment) -> int | None:
        """Position of this very segment object, None when it is not in the list."""
        return next((i for i, s in enumerate(self._segments) if s is segment), None)

    def after(self, base_offset: int) -> list[LogSegment]:
        return [s for s in self._segments if s.base_offset > base_offset]

    def append(self, segment: LogSegment) -> None:
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        self._changed()

    def drop_prefix(self, count: int) -> list[LogSegment]:
        """Remove and return the first ``count`` segments."""
        dropped = self._segments[:count]
        del self._segments[:count], self._bases[:count]
        self._changed()
        return dropped

    def drop_above(self, offset: int) -> list[LogSegment]:
        """Remove and return the segments whose base offset is above ``offset``."""
        keep = bisect_right(self._bases, offset)
        dropped = self._segments[keep:]
        del self._segments[keep:], self._bases[keep:]
        self._changed()
        return dropped

    def replace(self, start: int, count: int, segment: LogSegment) -> None:
        """Put ``segment`` in place of the ``count`` segments from ``start`` on."""
        self._segments[start:start + count] = [segment]
        self._bases[start:start + count] = [segment.base_offset]
        self._changed()

    def reset(self, segment: LogSegment) -> None:
        """Replace every segment by ``segment``."""
        self._segments, self._bases = [segment], [segment.base_offset]
        self._changed()
