"""The server-side assignors of the consumer protocol: ``uniform`` and ``range`` (``group.consumer.assignors``).

Each maps the members' subscriptions and the subscribed topics' partition counts to a target
assignment. ``uniform`` is Kafka's default: as balanced as the subscriptions allow (no two members
subscribed to the same partitions differ by more than one) and sticky, keeping each partition where
the previous target had it unless balance requires a move, so a member joining or leaving moves as
few partitions as possible. ``range`` gives each member, per topic, a contiguous range (the first
``partitions % members`` members, in member-id order, one more), as Kafka's RangeAssignor.
"""

from __future__ import annotations

from typing import Callable, Mapping

from pybroker.common.topic import TopicPartition
from pybroker.coordinator.consumer_group import Assignment

Subscriptions = Mapping[str, set[str]]
"""member id -> the topics it subscribes to (existing ones only)."""
Assignor = Callable[[Subscriptions, Mapping[str, int], Mapping[str, Assignment]], dict[str, Assignment]]


def uniform(subscriptions: Subscriptions, topics: Mapping[str, int],
            current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    members = sorted(subscriptions)
    owned: dict[str, set[TopicPartition]] = {m: set() for m in members}
    owner: dict[TopicPartition, str] = {}
    for member in members:  # stickiness: keep what the previous target gave, if still valid
        for topic, partitions in sorted(current.get(member, {}).items()):
            if topic not in subscriptions[member] or topic not in topics:
                continue
            for p in sorted(partitions):
                if p < topics[topic] and (topic, p) not in owner:
                    owned[member].add(TopicPartition(topic, p))
                    owner[TopicPartition(topic, p)] = member
    wanted = sorted({t for subscribed in subscriptions.values() for t in subscribed if t in topics})
    for tp in (TopicPartition(t, p) for t in wanted for p in range(topics[t])):
        if tp in owner:
            continue
        eligible = [m for m in members if tp[0] in subscriptions[m]]
        chosen = min(eligible, key=lambda m: (len(owned[m]), m))
        owned[chosen].add(tp)
        owner[tp] = chosen
    while _move_one(members, subscriptions, owned):
        pass
    return {m: _grouped(owned[m]) for m in members}


def _move_one(members: list[str], subscriptions: Subscriptions, owned: dict[str, set[TopicPartition]]) -> bool:
    """Move one partition from a most-loaded member to a least-loaded one that may take it."""
    by_load = sorted(members, key=lambda m: (len(owned[m]), m))
    for donor in reversed(by_load):
        for receiver in by_load:
            if len(owned[donor]) - len(owned[receiver]) <= 1:
                break
            movable = sorted(tp for tp in owned[donor] if tp[0] in subscriptions[receiver])
            if movable:
                tp = movable[-1]
                owned[donor].remove(tp)
                owned[receiver].add(tp)
                return True
    return False


def range_assignor(subscriptions: Subscriptions, topics: Mapping[str, int],
                   current: Mapping[str, Assignment]) -> dict[str, Assignment]:
    owned: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    for topic in sorted({t for subscribed in subscriptions.values() for t in subscribed if t in topics}):
        consumers = sorted(m for m, subscribed in subscriptions.items() if topic in subscribed)
        share, extra = divmod(topics[topic], len(consumers))
        start = 0
        for index, member in enumerate(consumers):
            count = share + (1 if index < extra else 0)
            owned[member].update(TopicPartition(topic, p) for p in range(start, start + count))
            start += count
    return {m: _grouped(tps) for m, tps in owned.items()}


def _grouped(partitions: set[TopicPartition]) -> Assignment:
    by_topic: dict[str, set[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, set()).add(p)
    return {topic: frozenset(ps) for topic, ps in by_topic.items()}


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_assignor}
