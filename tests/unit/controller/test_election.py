"""Replica assignment and leader election: pure functions with pinned randomness."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from pybroker.controller.election import assign_replicas, elect_leader
from pybroker.controller.errors import InvalidReplicationFactorError

BROKERS = [(0, None), (1, None), (2, None)]


def test_assignment_spreads_leaders_and_replicas_evenly() -> None:
    plan = assign_replicas(BROKERS, 6, 3, rng=random.Random(7))
    assert sorted(plan) == list(range(6))
    assert all(sorted(replicas) == [0, 1, 2] for replicas in plan.values())
    assert Counter(replicas[0] for replicas in plan.values()) == {0: 2, 1: 2, 2: 2}


def test_new_partitions_are_numbered_after_the_existing_ones() -> None:
    plan = assign_replicas(BROKERS, 2, 2, first_partition=3, rng=random.Random(1))
    assert sorted(plan) == [3, 4] and all(len(set(r)) == 2 for r in plan.values())


def test_a_replication_factor_above_the_broker_count_is_refused_with_kafkas_message() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="only 3 broker"):
        assign_replicas(BROKERS, 1, 4)


def test_with_racks_each_partition_spans_as_many_racks_as_it_can() -> None:
    brokers = [(0, "a"), (1, "a"), (2, "b"), (3, "b"), (4, "c"), (5, "c")]
    rack = dict(brokers)
    for seed in range(20):
        plan = assign_replicas(brokers, 12, 3, rng=random.Random(seed))
        assert all(len({rack[b] for b in replicas}) == 3 for replicas in plan.values()), seed


def test_election_prefers_the_first_live_in_sync_replica_in_assignment_order() -> None:
    assert elect_leader((2, 0, 1), (0, 1, 2), {0, 1, 2}) == 2
    assert elect_leader((2, 0, 1), (0, 1), {0, 1, 2}) == 0
    assert elect_leader((2, 0, 1), (0, 1, 2), {1}) == 1


def test_without_a_live_isr_member_only_unclean_election_finds_a_leader() -> None:
    assert elect_leader((2, 0, 1), (2,), {0, 1}) is None
    assert elect_leader((2, 0, 1), (2,), {0, 1}, unclean=True) == 0
