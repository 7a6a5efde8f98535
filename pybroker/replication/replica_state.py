"""What a leader knows about its followers, and the ISR and high-watermark rules, as pure functions.

Every decision takes `now_ms` as an argument and returns a new value, so the rules have unit
tests without clocks or sockets (Kafka's `Replica.scala` / `Partition.scala`):

1. A follower is caught up at time T when a fetch at T asked for the leader's log end offset
   (LEO), or asked for at least the LEO the leader had at the follower's previous fetch: then it
   was caught up at the time of that previous fetch.
2. A follower leaves the ISR once it has not been caught up for longer than
   `replica.lag.time.max.ms`; it joins (again) when its LEO reaches the high watermark and the
   start of the leader's current epoch (so it holds everything the leader acknowledged).
3. The high watermark is the smallest LEO among the ISR (the leader included) and never moves
   backwards: a shrinking ISR can only raise it, a joining follower is already at it. While a
   follower's joining is being written, it already counts (the caller passes the maximal ISR), so
   the high watermark cannot pass it before it is a member.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping


@dataclass(frozen=True, slots=True)
class FollowerState:
    replica_id: int
    log_end_offset: int = -1  # unknown until its first fetch
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_caught_up_ms: int = 0
    log_start_offset: int = -1  # unknown until a fetch reports it (Kafka's UnifiedLog.UnknownOffset)


def initial_follower(replica_id: int, *, in_isr: bool, now_ms: int) -> FollowerState:
    """A follower as a new leader first sees it: ISR members get a full lag allowance from now."""
    return FollowerState(replica_id, last_caught_up_ms=now_ms if in_isr else 0)


def on_follower_fetch(state: FollowerState, *, fetch_offset: int, leader_leo: int, now_ms: int,
                      log_start_offset: int = -1) -> FollowerState:
    """Rule 1: record a follower's fetch (its fetch offset is its LEO; its log start, which
    DeleteRecords waits on, comes with it)."""
    if fetch_offset >= leader_leo:
        caught_up = now_ms
    elif fetch_offset >= state.last_fetch_leader_leo >= 0:
        caught_up = state.last_fetch_ms
    else:
        caught_up = state.last_caught_up_ms
    return replace(state, log_end_offset=fetch_offset, last_fetch_ms=now_ms, last_fetch_leader_leo=leader_leo,
                   last_caught_up_ms=max(caught_up, state.last_caught_up_ms), log_start_offset=log_start_offset)


def out_of_sync(isr: Iterable[int], leader_id: int, followers: Mapping[int, FollowerState], *,
                now_ms: int, max_lag_ms: int) -> tuple[int, ...]:
    """Rule 2, shrinking: the ISR members (never the leader) that lagged too long."""
    return tuple(r for r in isr if r != leader_id and r in followers
                 and now_ms - followers[r].last_caught_up_ms > max_lag_ms)


def may_join_isr(state: FollowerState, *, high_watermark: int, epoch_start_offset: int) -> bool:
    """Rule 2, expanding."""
    return state.log_end_offset >= high_watermark and state.log_end_offset >= epoch_start_offset


def high_watermark(current: int, leader_leo: int, isr: Iterable[int], leader_id: int,
                   followers: Mapping[int, FollowerState]) -> int:
    """Rule 3."""
    smallest = leader_leo
    for replica in isr:
        if replica == leader_id:
            continue
        follower = followers.get(replica)
        if follower is None or follower.log_end_offset < 0:
            return current  # an ISR member we have not heard from yet holds the watermark
        smallest = min(smallest, follower.log_end_offset)
    return max(current, smallest)
