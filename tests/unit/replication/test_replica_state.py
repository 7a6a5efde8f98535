"""The ISR and high-watermark rules of replica_state.py, as functions of `now`."""

from __future__ import annotations

from pybroker.replication import replica_state as rs

LAG_MS = 10_000


def test_a_fetch_at_the_leader_log_end_makes_the_follower_caught_up_now() -> None:
    state = rs.initial_follower(2, in_isr=False, now_ms=0)
    state = rs.on_follower_fetch(state, fetch_offset=100, leader_leo=100, now_ms=5_000)
    assert state.log_end_offset == 100 and state.last_caught_up_ms == 5_000


def test_reaching_the_previous_fetch_log_end_counts_as_caught_up_at_the_previous_fetch() -> None:
    state = rs.on_follower_fetch(rs.initial_follower(2, in_isr=True, now_ms=0),
                                 fetch_offset=50, leader_leo=100, now_ms=1_000)
    assert state.last_caught_up_ms == 0  # behind, and nothing older to credit
    state = rs.on_follower_fetch(state, fetch_offset=100, leader_leo=180, now_ms=2_000)
    assert state.last_caught_up_ms == 1_000  # it now holds what the leader had at its previous fetch


def test_a_follower_leaves_the_isr_only_after_lagging_longer_than_the_limit() -> None:
    followers = {2: rs.initial_follower(2, in_isr=True, now_ms=0), 3: rs.initial_follower(3, in_isr=True, now_ms=0)}
    followers[3] = rs.on_follower_fetch(followers[3], fetch_offset=10, leader_leo=10, now_ms=9_000)
    assert rs.out_of_sync((1, 2, 3), 1, followers, now_ms=LAG_MS, max_lag_ms=LAG_MS) == ()
    assert rs.out_of_sync((1, 2, 3), 1, followers, now_ms=LAG_MS + 1, max_lag_ms=LAG_MS) == (2,)


def test_the_leader_itself_never_leaves_the_isr() -> None:
    followers = {1: rs.initial_follower(1, in_isr=True, now_ms=0)}
    assert rs.out_of_sync((1,), 1, followers, now_ms=10 * LAG_MS, max_lag_ms=LAG_MS) == ()


def test_a_follower_joins_the_isr_at_the_high_watermark_and_the_epoch_start() -> None:
    state = rs.on_follower_fetch(rs.initial_follower(2, in_isr=False, now_ms=0),
                                 fetch_offset=40, leader_leo=60, now_ms=1)
    assert rs.may_join_isr(state, high_watermark=40, epoch_start_offset=30)
    assert not rs.may_join_isr(state, high_watermark=41, epoch_start_offset=30)
    assert not rs.may_join_isr(state, high_watermark=40, epoch_start_offset=45)


def test_high_watermark_is_the_smallest_isr_log_end_and_ignores_out_of_sync_followers() -> None:
    followers = {2: rs.FollowerState(2, log_end_offset=70), 3: rs.FollowerState(3, log_end_offset=5)}
    assert rs.high_watermark(0, 100, (1, 2), 1, followers) == 70
    assert rs.high_watermark(0, 100, (1, 2, 3), 1, followers) == 5


def test_high_watermark_never_moves_backwards() -> None:
    followers = {2: rs.FollowerState(2, log_end_offset=30)}
    assert rs.high_watermark(50, 100, (1, 2), 1, followers) == 50


def test_an_isr_member_not_heard_from_yet_holds_the_high_watermark() -> None:
    followers = {2: rs.initial_follower(2, in_isr=True, now_ms=0)}
    assert rs.high_watermark(10, 100, (1, 2), 1, followers) == 10


def test_a_leader_alone_in_the_isr_commits_its_whole_log() -> None:
    assert rs.high_watermark(0, 42, (1,), 1, {}) == 42
