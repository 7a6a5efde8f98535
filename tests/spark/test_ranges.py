"""Rate limiting and range splitting, the driver's offset arithmetic (no Spark, no broker)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pybroker.spark_jobs.kafka_source.options import KafkaPartition
from pybroker.spark_jobs.kafka_source.ranges import OffsetRange, rate_limit, split_ranges

A, B, C = (KafkaPartition("t", p) for p in range(3))


def test_rate_limit_shares_the_limit_by_backlog() -> None:
    assert rate_limit({A: 0, B: 100}, {A: 300, B: 200}, 200) == {A: 150, B: 150}


def test_rate_limit_takes_everything_under_the_limit() -> None:
    assert rate_limit({A: 5, B: 0}, {A: 10, B: 3}, 100) == {A: 10, B: 3}


def test_rate_limit_hands_the_rounding_remainder_to_the_largest_fractions() -> None:
    assert rate_limit({A: 0, B: 0, C: 0}, {A: 10, B: 10, C: 20}, 5) == {A: 1, B: 1, C: 3}
    assert rate_limit({A: 0, B: 0}, {A: 10, B: 10}, 3) == {A: 2, B: 1}


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=6),
       st.integers(1, 3000))
def test_rate_limit_never_exceeds_the_limit_and_always_progresses(bounds: list[tuple[int, int]],
                                                                  limit: int) -> None:
    start = {KafkaPartition("t", i): lo for i, (lo, size) in enumerate(bounds)}
    latest = {KafkaPartition("t", i): lo + size for i, (lo, size) in enumerate(bounds)}
    end = rate_limit(start, latest, limit)
    taken = sum(end[tp] - start[tp] for tp in start)
    backlog = sum(latest[tp] - start[tp] for tp in start)
    assert taken == min(limit, backlog)
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in start)


def test_split_ranges_one_task_per_partition_by_default() -> None:
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 5), OffsetRange("t", 2, 0, 4)]
    assert split_ranges(ranges, None) == [ranges[0], ranges[2]]


def test_split_ranges_cuts_large_partitions_for_min_partitions() -> None:
    ranges = [OffsetRange("t", 0, 0, 90), OffsetRange("t", 1, 0, 10)]
    assert split_ranges(ranges, 10) == [OffsetRange("t", 0, 10 * i, 10 * (i + 1)) for i in range(9)] + [ranges[1]]


@given(st.lists(st.integers(0, 500), min_size=1, max_size=5), st.integers(1, 40))
def test_split_ranges_covers_every_offset_once(sizes: list[int], min_partitions: int) -> None:
    ranges = [OffsetRange("t", p, 100, 100 + size) for p, size in enumerate(sizes)]
    pieces = split_ranges(ranges, min_partitions)
    for r in ranges:
        covered = [o for piece in pieces if piece.partition == r.partition for o in range(piece.start, piece.end)]
        assert covered == list(range(r.start, r.end))
    assert all(piece.size > 0 for piece in pieces)
