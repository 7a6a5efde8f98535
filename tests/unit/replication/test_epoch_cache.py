"""Leader epoch -> start offset, and the answers OffsetForLeaderEpoch builds from it."""

from __future__ import annotations

from pybroker.replication.epoch_cache import EpochCache


def cache() -> EpochCache:
    return EpochCache.from_batches([(0, 0), (0, 5), (2, 10), (2, 12), (5, 20)])


def test_built_from_batches_it_keeps_the_first_offset_of_each_epoch() -> None:
    assert cache().entries == [(0, 0), (2, 10), (5, 20)]


def test_an_old_epoch_ends_where_the_next_one_starts() -> None:
    assert cache().end_offset_for(0, 30) == (0, 10)
    assert cache().end_offset_for(2, 30) == (2, 20)


def test_the_latest_epoch_ends_at_the_log_end() -> None:
    assert cache().end_offset_for(5, 30) == (5, 30)


def test_an_epoch_the_log_never_had_answers_with_the_largest_older_one() -> None:
    assert cache().end_offset_for(3, 30) == (2, 20)


def test_epochs_after_the_latest_are_undefined() -> None:
    assert cache().end_offset_for(6, 30) == (-1, -1)
    assert cache().end_offset_for(-1, 30) == (-1, -1)


def test_an_epoch_before_the_first_ends_where_the_first_starts() -> None:
    """The log start moved past it (Kafka answers so the follower restarts from the leader's start)."""
    assert EpochCache.from_batches([(3, 7)]).end_offset_for(1, 9) == (1, 7)


def test_truncation_forgets_epochs_that_started_at_or_after_the_new_end() -> None:
    truncated = cache()
    truncated.truncate_from_end(20)
    assert truncated.entries == [(0, 0), (2, 10)]
    assert truncated.end_offset_for(5, 18) == (-1, -1)
    assert truncated.end_offset_for(2, 18) == (2, 18)


def test_assigning_an_older_or_equal_epoch_changes_nothing() -> None:
    c = cache()
    c.assign(5, 25)
    c.assign(4, 26)
    assert c.entries[-1] == (5, 20)
