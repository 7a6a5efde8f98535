"""Offset arithmetic the driver does between micro-batches: rate limits and splitting ranges into tasks.

Pure functions, so their rules (which mirror Spark's KafkaOffsetRangeCalculator and rate limiting) are
tested without Spark or a broker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from pybroker.spark_jobs.kafka_source.options import KafkaPartition


@dataclass(frozen=True)
class OffsetRange:
    """Offsets [start, end) of one partition, read by one Spark task."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def rate_limit(start: Mapping[KafkaPartition, int], latest: Mapping[KafkaPartition, int],
               limit: int) -> dict[KafkaPartition, int]:
    """End offsets that take at most `limit` offsets in total, shared in proportion to each partition's backlog.

    `start` has an offset for every partition in `latest` (new partitions start at their earliest).

    Shares are rounded down and the remainder goes to the largest fractions, so the sum never exceeds the
    limit (Spark's own rounding can overshoot by one per partition) and a backlog always makes progress.
    """
    backlog = {tp: max(0, latest[tp] - start[tp]) for tp in latest}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    shares = {tp: limit * size // total for tp, size in backlog.items()}
    remainders = sorted(backlog, key=lambda tp: (-(limit * backlog[tp] % total), tp))
    for tp in remainders[:limit - sum(shares.values())]:
        shares[tp] += 1
    return {tp: start[tp] + shares[tp] for tp in latest}


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """One range per Kafka partition, or more when minPartitions asks for more tasks than partitions.

    Each range gets a number of pieces in proportion to its size (at least one), then is cut evenly.
    """
    non_empty = [r for r in ranges if r.size > 0]
    if min_partitions is None or min_partitions <= len(non_empty):
        return non_empty
    total = sum(r.size for r in non_empty)
    result: list[OffsetRange] = []
    for r in non_empty:
        pieces = min(r.size, max(1, round(r.size / total * min_partitions)))
        bounds = [r.start + r.size * i // pieces for i in range(pieces + 1)]
        result += [OffsetRange(r.topic, r.partition, lo, hi) for lo, hi in zip(bounds, bounds[1:])]
    return result
