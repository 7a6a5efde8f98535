"""Kafka's simple share-group assignor: worked examples and properties from Kafka 4.2's own tests.

``SimpleAssignorTest`` (group-coordinator/src/test/java/org/apache/kafka/coordinator/group/assignor/ in Apache Kafka)
asserts exact outputs where the algorithm leaves no choice (one subscriber per topic, or a topic shared by two members
over three partitions) and, for growing and shrinking groups, that every partition keeps a reader. The stickiness
examples below are worked by hand through the algorithm's four steps (the module docstring of ``assignor.py``).
"""

from __future__ import annotations

import math
import uuid

from pybroker.coordinator.share.assignor import assign

T1, T2, T3 = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)


def _every_partition_read(targets: dict[str, dict[uuid.UUID, tuple[int, ...]]],
                          topics: dict[str, tuple[uuid.UUID, int]]) -> bool:
    read = {(t, p) for member in targets.values() for t, ps in member.items() for p in ps}
    return read == {(t, p) for t, count in topics.values() for p in range(count)}


def test_kafka_one_member_subscribed_to_nothing_gets_nothing() -> None:
    """testAssignWithOneMemberNoAssignedTopicHeterogeneous."""
    targets = assign({"A": ("topic1", "topic2"), "B": ()}, {"topic1": (T1, 3), "topic2": (T2, 2)})
    assert targets == {"A": {T1: (0, 1, 2), T2: (0, 1)}, "B": {}}


def test_kafka_heterogeneous_topics_balanced_one_by_one() -> None:
    """testAssignWithThreeMembersThreeTopicsHeterogeneousWithNonAssignableTopic: topic3 is not assignable there (its
    share state is still initializing); here it is not in the topic image, which the assignor treats the same."""
    targets = assign({"A": ("topic1", "topic2"), "B": ("topic3",), "C": ("topic2", "topic3")},
                     {"topic1": (T1, 3), "topic2": (T2, 3)})
    assert targets == {"A": {T1: (0, 1, 2), T2: (0, 2)}, "B": {}, "C": {T2: (1,)}}


def test_kafka_no_members_or_no_subscriptions() -> None:
    """testAssignWithEmptyMembers, testAssignWithNoSubscribedTopic."""
    assert assign({}, {"topic1": (T1, 3)}) == {}
    assert assign({"A": ()}, {"topic1": (T1, 3)}) == {"A": {}}
    assert assign({"A": ("gone",)}, {}) == {"A": {}}


def test_more_members_than_partitions_share_every_partition_evenly() -> None:
    """5 members, 2 partitions: each partition wants ceil(5/2) = 3 readers, dealt 2, 1, 1, 1, 1."""
    targets = assign({f"m{i}": ("t",) for i in range(5)}, {"t": (T1, 2)})
    assert targets == {"m0": {T1: (0, 1)}, "m1": {T1: (0,)}, "m2": {T1: (0,)}, "m3": {T1: (1,)}, "m4": {T1: (1,)}}


def test_more_partitions_than_members_are_dealt_round_robin() -> None:
    targets = assign({"m0": ("t",), "m1": ("t",)}, {"t": (T1, 5)})
    assert targets == {"m0": {T1: (0, 2, 4)}, "m1": {T1: (1, 3)}}


def test_a_joining_member_leaves_the_others_their_partitions() -> None:
    """a {0} and b {1} stay; c (wanting 1) takes partition 0's second seat, a (wanting 2) takes partition 1's."""
    targets = assign({"a": ("t",), "b": ("t",), "c": ("t",)}, {"t": (T1, 2)}, {"a": {T1: [0]}, "b": {T1: [1]}})
    assert targets == {"a": {T1: (0, 1)}, "b": {T1: (1,)}, "c": {T1: (0,)}}


def test_an_overfilled_member_gives_up_its_lowest_partitions_and_only_those() -> None:
    targets = assign({"a": ("t",), "b": ("t",)}, {"t": (T1, 4)}, {"a": {T1: [0, 1, 2, 3]}})
    assert targets == {"a": {T1: (2, 3)}, "b": {T1: (0, 1)}}


def test_the_same_group_gets_the_same_assignment_again() -> None:
    subscriptions = {f"m{i}": ("t", "u") for i in range(7)}
    topics = {"t": (T1, 3), "u": (T2, 2)}
    first = assign(subscriptions, topics)
    assert assign(subscriptions, topics, first) == first


def test_a_member_loses_a_topic_it_no_longer_subscribes_to_and_partitions_past_the_count() -> None:
    targets = assign({"a": ("t",), "b": ("u",)}, {"t": (T1, 2), "u": (T2, 1)},
                     {"a": {T1: [0, 1, 7], T2: [0]}, "b": {T3: [0]}})
    assert targets == {"a": {T1: (0, 1)}, "b": {T2: (0,)}}


def _grow_then_shrink(subscriptions: list[tuple[str, ...]], topics: dict[str, tuple[uuid.UUID, int]]) -> None:
    """testIncrementalAssignment{Increasing,Decreasing}Members{Homogeneous,Heterogeneous}: 101 members joining one at a
    time, then leaving one at a time, each step fed the previous target; every partition keeps a reader."""
    members: dict[str, tuple[str, ...]] = {}
    current: dict[str, dict[uuid.UUID, tuple[int, ...]]] = {}
    total = sum(count for _, count in topics.values())
    for i in range(101):
        members[f"M{i}"] = subscriptions[i % len(subscriptions)]
        current = assign(members, topics, current)
        assert _every_partition_read(current, topics)
        if len(subscriptions) == 1:
            sharing = math.ceil(len(members) / total)
            assert max(len(ps) for member in current.values() for ps in member.values()) <= math.ceil(
                sharing * total / len(members))
    for i in range(100, 0, -1):
        del members[f"M{i}"]
        current = assign(members, topics, current)
        assert _every_partition_read(current, topics)


def test_kafka_incremental_homogeneous() -> None:
    _grow_then_shrink([("t",)], {"t": (T1, 24)})


def test_kafka_incremental_heterogeneous() -> None:
    _grow_then_shrink([("t1", "t2", "t3"), ("t2",), ("t3",), ("t1", "t2")],
                      {"t1": (T1, 12), "t2": (T2, 8), "t3": (T3, 4)})


def test_only_assignable_partitions_are_handed_out() -> None:
    """A share group assigns only the partitions whose state is initialized (Kafka's assignable partitions map): the
    others, and a held partition that is not assignable, go to nobody; a topic with none assignable goes to nobody."""
    topics = {"topic1": (T1, 4), "topic2": (T2, 2)}
    current = {"A": {T1: (0, 2)}}
    targets = assign({"A": ("topic1", "topic2"), "B": ("topic1", "topic2")}, topics, current, {T1: {1, 3}})
    assert targets == {"A": {T1: (1,)}, "B": {T1: (3,)}}
    assert assign({"A": ("topic1",)}, topics, None, {T1: {0, 1, 2, 3}}) == assign({"A": ("topic1",)}, topics)
