"""Planning the replicas of added partitions, shared by `topics --zookeeper --alter` and the ZooKeeper-mode
broker's CreatePartitions (one pure function, so both refuse bad input with the same Kafka messages)."""

from __future__ import annotations

import random

import pytest

from pybroker.controller.election import plan_added_partitions
from pybroker.controller.errors import InvalidPartitionsError, InvalidReplicaAssignmentError

BROKERS = [(0, None), (1, None), (2, None)]
CURRENT = {0: (0, 1), 1: (1, 2)}


def test_new_partitions_get_the_topics_replication_factor_after_the_existing_ones() -> None:
    added = plan_added_partitions(CURRENT, 5, None, BROKERS, rng=random.Random(3))
    assert sorted(added) == [2, 3, 4]
    assert all(len(set(replicas)) == 2 for replicas in added.values())


def test_given_replicas_are_numbered_after_the_existing_partitions() -> None:
    assert plan_added_partitions(CURRENT, 3, [[2, 0]], BROKERS) == {2: (2, 0)}


@pytest.mark.parametrize(("total", "replicas", "error", "message"), [
    (2, None, InvalidPartitionsError, "Topic currently has 2 partitions, which is higher than the requested 2."),
    (4, [[0, 1]], InvalidReplicaAssignmentError, "Increasing the number of partitions by 2 but 1 assignments provided."),
    (3, [[0, 7]], InvalidReplicaAssignmentError, r"Unknown broker\(s\) in replica assignment: \[7\]"),
    (4, [[0], [1]], InvalidReplicaAssignmentError, r"Inconsistent replication factor between partitions, "
                                                   r"partition 0 has 2 while partitions \[2, 3\] have replication "
                                                   r"factors \[1, 1\], respectively."),
])
def test_bad_requests_are_refused_with_kafkas_messages(total: int, replicas: list[list[int]] | None,
                                                       error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        plan_added_partitions(CURRENT, total, replicas, BROKERS)
