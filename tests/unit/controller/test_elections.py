"""The controller's elections as pure functions: a partition's stored state in, the state to write out
(None: nothing changes). Every written state carries a new leader epoch and the controller's epoch."""

from __future__ import annotations

from pybroker.controller.election import (
    ElectionOutcome,
    ElectionType,
    controlled_shutdown_election,
    initial_state,
    needs_unclean_election,
    new_leader_epoch,
    offline_election,
    preferred_election,
    reassignment_election,
    request_election,
)
from pybroker.controller.zk_paths import NO_LEADER, LeaderAndIsr

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
