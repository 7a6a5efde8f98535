"""The pure decisions behind ElectLeaders and partition reassignment, and the reassignment znode."""

from __future__ import annotations

import pytest

from pybroker.zk import paths as zp
from pybroker.controller.election import ElectionOutcome, ElectionType, Reassignment, elect_on_request

PREFERRED, UNCLEAN = ElectionType.PREFERRED, ElectionType.UNCLEAN


@pytest.mark.parametrize("election, leader, isr, live, expected", [
    (PREFERRED, 2, (1, 2), {1, 2}, (ElectionOutcome.ELECTED, 1)),
    (PREFERRED, 1, (1, 2), {1, 2}, (ElectionOutcome.NOT_NEEDED, None)),
    (PREFERRED, 2, (2,), {1, 2}, (ElectionOutcome.PREFERRED_NOT_AVAILABLE, None)),  # not in sync
    (PREFERRED, 2, (1, 2), {2}, (ElectionOutcome.PREFERRED_NOT_AVAILABLE, None)),  # not live
    (UNCLEAN, 2, (1, 2), {1, 2}, (ElectionOutcome.NOT_NEEDED, None)),
    (UNCLEAN, -1, (3,), {1, 2}, (ElectionOutcome.ELECTED, 1)),  # the ISR is gone: any live replica
    (UNCLEAN, -1, (2,), {1, 2}, (ElectionOutcome.ELECTED, 2)),  # an ISR member first
    (UNCLEAN, -1, (1,), set(), (ElectionOutcome.NO_ELIGIBLE_LEADER, None)),
])
def test_elect_on_request(election: ElectionType, leader: int, isr: tuple[int, ...], live: set[int],
                          expected: tuple[ElectionOutcome, int | None]) -> None:
    assert elect_on_request(election, (1, 2, 3), leader, isr, live) == expected


def test_a_reassignment_keeps_the_old_replicas_until_the_target_is_in_sync() -> None:
    move = Reassignment(target=(1, 2), original=(0, 1))
    assert (move.replicas, move.adding, move.removing) == ((1, 2, 0), (2,), (0,))
    assert not move.caught_up((0, 1))
    assert move.caught_up((0, 1, 2))


def test_the_topic_znode_carries_adding_and_removing_replicas_as_kafka_writes_them() -> None:
    data = zp.encode_topic({0: (1, 2, 0), 1: (2, 0)}, "id", adding={0: (2,)}, removing={0: (0,)})
    assert b'"adding_replicas":{"0":[2]},"removing_replicas":{"0":[0]}' in data
    decoded = zp.decode_topic(data)
    assert (decoded.partitions[0], decoded.adding, decoded.removing) == ((1, 2, 0), {0: (2,)}, {0: (0,)})
    assert zp.decode_topic(zp.encode_topic({0: (1,)}, "id")).adding == {}


def test_the_znodes_of_zookeeper_tooling_round_trip() -> None:
    targets = {("orders", 0): (2, 3)}
    assert zp.encode_reassignment(targets) == \
        b'{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[2,3]}]}'
    assert zp.decode_reassignment(zp.encode_reassignment(targets)) == targets
    assert zp.decode_preferred_election(zp.encode_preferred_election([("orders", 1)])) == [("orders", 1)]
