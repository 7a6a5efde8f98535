"""The controller's elections as pure functions: a partition's stored state in, the state to write out
(None: nothing changes). Every written state carries a new leader epoch and the controller's epoch."""

from __future__ import annotations

from pybroker.controller.election import (
    ElectionOutcome,
    ElectionType,
    controlled_shutdown_election,
    initial_state,
    longest_log_election,
    needs_unclean_election,
    new_leader_epoch,
    offline_election,
    preferred_election,
    reassignment_election,
    request_election,
)
from pybroker.zk.paths import NO_LEADER, LeaderAndIsr

EPOCH = 7
REPLICAS = (1, 2, 3)


def state(leader: int, isr: tuple[int, ...], leader_epoch: int = 4) -> LeaderAndIsr:
    return LeaderAndIsr(leader, leader_epoch, isr, 6, zk_version=11)


def test_a_dead_leader_is_replaced_by_the_first_live_isr_member_in_assignment_order() -> None:
    new = offline_election(state(1, (3, 2, 1)), REPLICAS, {2, 3}, EPOCH)
    assert new == LeaderAndIsr(2, 5, (3, 2), EPOCH, zk_version=11)


def test_a_dead_follower_only_leaves_the_isr() -> None:
    assert offline_election(state(1, (1, 2, 3)), REPLICAS, {1, 2}, EPOCH) == LeaderAndIsr(1, 5, (1, 2), EPOCH, 11)


def test_nothing_is_written_when_every_isr_member_lives() -> None:
    assert offline_election(state(1, (1, 2)), REPLICAS, {1, 2, 3}, EPOCH) is None


def test_without_unclean_election_a_partition_whose_isr_died_has_no_leader_and_keeps_its_last_isr() -> None:
    stored = state(1, (1,))
    assert needs_unclean_election(stored, REPLICAS, {2, 3})
    assert offline_election(stored, REPLICAS, {2, 3}, EPOCH) == LeaderAndIsr(NO_LEADER, 5, (1,), EPOCH, 11)
    # Once leaderless, nothing more changes until a replica returns.
    leaderless = LeaderAndIsr(NO_LEADER, 5, (1,), EPOCH, 12)
    assert offline_election(leaderless, REPLICAS, {2, 3}, EPOCH) is None


def test_an_isr_whose_members_all_went_waits_for_every_one_to_compare_their_logs() -> None:
    """Any member that comes back may have lost power and its unflushed tail: the first one back does
    not lead (chaos rounds 2003 and 7001)."""
    waiting = offline_election(state(1, (1, 2)), REPLICAS, {3}, EPOCH)
    assert waiting == LeaderAndIsr(NO_LEADER, 5, (1, 2), EPOCH, 11, elect_longest_log=True)
    assert offline_election(waiting, REPLICAS, {1, 3}, EPOCH) is None  # 1 is back, 2 is not
    assert offline_election(waiting, REPLICAS, {1, 2, 3}, EPOCH) is None  # longest_log_election decides
    assert needs_unclean_election(waiting, REPLICAS, {1, 3})
    assert not needs_unclean_election(waiting, REPLICAS, {1, 2})


def test_restarted_members_count_as_gone_when_the_isr_waits() -> None:
    """Leader 1 died; 2 restarted (not in ``live``): no member surely kept its log."""
    waiting = offline_election(state(1, (1, 2)), REPLICAS, {3}, EPOCH, restarted={2})
    assert waiting == LeaderAndIsr(NO_LEADER, 5, (1, 2), EPOCH, 11, elect_longest_log=True)
    # A member that did not restart is live: it leads, and the restarted one rejoins by catching up.
    assert offline_election(state(1, (1, 2, 3)), REPLICAS, {3}, EPOCH, restarted={2}) == \
        LeaderAndIsr(3, 5, (3,), EPOCH, 11)


def test_the_longest_log_leads_and_members_level_with_it_stay_in_sync() -> None:
    waiting = LeaderAndIsr(NO_LEADER, 5, (1, 2, 3), EPOCH, 12, elect_longest_log=True)
    # A later leader epoch wins over a longer log of an earlier one.
    assert longest_log_election(waiting, REPLICAS, {1: (3, 900), 2: (4, 10), 3: (4, 10)}, EPOCH) == \
        LeaderAndIsr(2, 6, (2, 3), EPOCH, 12)
    assert longest_log_election(waiting, REPLICAS, {1: (4, 11), 2: (4, 10), 3: (-1, 0)}, EPOCH) == \
        LeaderAndIsr(1, 6, (1,), EPOCH, 12)


def test_nothing_but_an_unclean_election_bypasses_the_wait() -> None:
    waiting = LeaderAndIsr(NO_LEADER, 5, (1, 2), EPOCH, 12, elect_longest_log=True)
    assert preferred_election(waiting, 1, EPOCH) is None
    assert controlled_shutdown_election(waiting, REPLICAS, 2, {1, 3}, EPOCH) is None
    assert request_election(ElectionType.PREFERRED, waiting, REPLICAS, {1, 2}, EPOCH) == \
        (ElectionOutcome.PREFERRED_NOT_AVAILABLE, None)
    # A move keeps waiting, on the members that stay.
    assert reassignment_election(waiting, (2, 3), {1, 2, 3}, EPOCH) == \
        LeaderAndIsr(NO_LEADER, 6, (2,), EPOCH, 12, elect_longest_log=True)
    # Unclean: the leader is alone in sync (the members' logs may differ).
    assert offline_election(waiting, REPLICAS, {1, 3}, EPOCH, unclean=True) == LeaderAndIsr(1, 6, (1,), EPOCH, 12)
    assert request_election(ElectionType.UNCLEAN, waiting, REPLICAS, {1}, EPOCH) == \
        (ElectionOutcome.ELECTED, LeaderAndIsr(1, 6, (1,), EPOCH, 12))


def test_an_unclean_leader_becomes_the_only_isr_member() -> None:
    assert offline_election(state(1, (1,)), REPLICAS, {3}, EPOCH, unclean=True) == LeaderAndIsr(3, 5, (3,), EPOCH, 11)


def test_no_unclean_election_is_needed_while_an_isr_member_lives() -> None:
    assert not needs_unclean_election(state(1, (1, 2)), REPLICAS, {2})
    assert not needs_unclean_election(state(1, (1,)), REPLICAS, {1})


def test_controlled_shutdown_moves_leadership_to_another_isr_member() -> None:
    new = controlled_shutdown_election(state(1, (1, 2, 3)), REPLICAS, 1, {2, 3}, EPOCH)
    assert new == LeaderAndIsr(2, 5, (2, 3), EPOCH, 11)


def test_controlled_shutdown_of_a_follower_only_shrinks_the_isr() -> None:
    assert controlled_shutdown_election(state(1, (1, 2, 3)), REPLICAS, 3, {1, 2}, EPOCH) == \
        LeaderAndIsr(1, 5, (1, 2), EPOCH, 11)


def test_controlled_shutdown_leaves_a_partition_alone_when_no_one_can_take_over() -> None:
    assert controlled_shutdown_election(state(1, (1,)), REPLICAS, 1, {2, 3}, EPOCH) is None  # last ISR member
    assert controlled_shutdown_election(state(1, (1, 2)), REPLICAS, 1, {3}, EPOCH) is None  # 2 shutting down too
    assert controlled_shutdown_election(state(1, (1, 2)), REPLICAS, 3, {1, 2}, EPOCH) is None  # not in the ISR


def test_preferred_election_needs_the_preferred_replica_in_sync() -> None:
    assert preferred_election(state(2, (1, 2)), 1, EPOCH) == LeaderAndIsr(1, 5, (1, 2), EPOCH, 11)
    assert preferred_election(state(2, (2, 3)), 1, EPOCH) is None
    assert preferred_election(state(1, (1, 2)), 1, EPOCH) is None


def test_a_finished_reassignment_keeps_only_target_replicas_in_the_isr() -> None:
    # Moving from (1, 2, 3) to (3, 4): the leader 1 goes, 3 (in sync and live) takes over.
    new = reassignment_election(state(1, (1, 2, 3, 4)), (3, 4), {1, 2, 3, 4}, EPOCH)
    assert new == LeaderAndIsr(3, 5, (3, 4), EPOCH, 11)
    # A leader among the target replicas stays.
    assert reassignment_election(state(4, (1, 4)), (3, 4), {1, 3, 4}, EPOCH).leader == 4
    # A cancelled move to replicas none of which is in sync: the ISR is the replicas, no live one leads.
    assert reassignment_election(state(5, (5,)), (1, 2), {5}, EPOCH) == LeaderAndIsr(NO_LEADER, 5, (1, 2), EPOCH, 11)


def test_request_elections_report_their_outcome() -> None:
    outcome, new = request_election(ElectionType.PREFERRED, state(2, (1, 2)), REPLICAS, {1, 2}, EPOCH)
    assert (outcome, new) == (ElectionOutcome.ELECTED, LeaderAndIsr(1, 5, (1, 2), EPOCH, 11))
    assert request_election(ElectionType.PREFERRED, state(1, (1, 2)), REPLICAS, {1, 2}, EPOCH) == \
        (ElectionOutcome.NOT_NEEDED, None)
    outcome, new = request_election(ElectionType.UNCLEAN, state(NO_LEADER, (1,)), REPLICAS, {3}, EPOCH)
    assert (outcome, new) == (ElectionOutcome.ELECTED, LeaderAndIsr(3, 5, (3,), EPOCH, 11))
    assert request_election(ElectionType.UNCLEAN, state(NO_LEADER, (1,)), REPLICAS, set(), EPOCH) == \
        (ElectionOutcome.NO_ELIGIBLE_LEADER, None)


def test_a_new_partition_is_led_by_its_first_live_replica() -> None:
    assert initial_state(REPLICAS, {2, 3}, EPOCH) == LeaderAndIsr(2, 0, (2, 3), EPOCH)
    assert initial_state(REPLICAS, set(), EPOCH) == LeaderAndIsr(NO_LEADER, 0, REPLICAS, EPOCH)


def test_a_new_leader_epoch_keeps_leader_and_isr() -> None:
    assert new_leader_epoch(state(2, (2, 3)), EPOCH) == LeaderAndIsr(2, 5, (2, 3), EPOCH, 11)
