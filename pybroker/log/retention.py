"""Which old segments retention may delete (Kafka ``UnifiedLog.deletableSegments``), as pure functions.

Three rules run in order on each retention pass, each deleting a prefix of the segment list:

* log start breach: a segment whose successor starts at or below the log start offset holds
  only offsets that DeleteRecords/retention already made invisible;
* ``retention.ms``: the segment's largest timestamp is older than ``now - retention.ms``;
* ``retention.bytes``: the log is larger than allowed, and dropping the segment does not take
  it below the limit.

Two guards apply to all of them: a segment is deletable only when the high watermark has
reached its end (so the log start offset never passes the HW), and an empty last segment is
never deleted. The caller rolls a fresh active segment when every segment is deletable.
"""

from __future__ import annotations

from typing import Callable, Iterator, Sequence

from pybroker.log.config import LogConfig
from pybroker.log.segment import LogSegment

__all__ = ["Predicate", "deletable_segments", "log_start_breached", "retention_ms_breached", "retention_rules",
           "retention_size_breached"]

Predicate = Callable[[LogSegment, "LogSegment | None"], bool]


def deletable_segments(segments: Sequence[LogSegment], high_watermark: int, log_end_offset: int,
                       predicate: Predicate) -> list[LogSegment]:
    """The longest prefix of ``segments`` for which ``predicate`` and both guards hold."""
    doomed: list[LogSegment] = []
    for i, seg in enumerate(segments):
        nxt = segments[i + 1] if i + 1 < len(segments) else None
        upper = nxt.base_offset if nxt is not None else log_end_offset
        if nxt is None and seg.size == 0:
            break
        if high_watermark < upper or not predicate(seg, nxt):
            break
        doomed.append(seg)
    return doomed


def log_start_breached(log_start_offset: int) -> Predicate:
    """Segments entirely below the log start offset."""
    return lambda seg, nxt: nxt is not None and nxt.base_offset <= log_start_offset


def retention_ms_breached(now_ms: int, retention_ms: int) -> Predicate:
    """Segments whose newest record is older than retention.ms."""
    return lambda seg, nxt: now_ms - seg.largest_timestamp > retention_ms


def retention_size_breached(total_size: int, retention_bytes: int) -> Predicate:
    """Oldest segments while the log stays at or above retention.bytes without them."""
    excess = total_size - retention_bytes

    def predicate(seg: LogSegment, nxt: LogSegment | None) -> bool:
        nonlocal excess
        if excess - seg.size < 0:
            return False
        excess -= seg.size
        return True
    return predicate


def retention_rules(log_start_offset: int, config: LogConfig, now_ms: int,
                    size_in_bytes: Callable[[], int]) -> Iterator[Predicate]:
    """The rules of one retention pass, in order; each is made once the caller has deleted what the
    one before it chose, so the size rule sees the size that is left."""
    yield log_start_breached(log_start_offset)
    if config.delete_enabled and config.retention_ms >= 0:
        yield retention_ms_breached(now_ms, config.retention_ms)
    if config.delete_enabled and 0 <= config.retention_bytes < (size := size_in_bytes()):
        yield retention_size_breached(size, config.retention_bytes)
