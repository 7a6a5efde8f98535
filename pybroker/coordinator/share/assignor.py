"""Kafka's simple share-group assignor (``SimpleAssignor``, assignor name "simple", Kafka 4.1+ / 4.2).

Any number of members may read one share-partition, so the aim is balance first and stickiness second. Each partition
wants ``ceil(members / partitions)`` readers (its "sharing"), and the ``sharing * partitions`` assignments are dealt
to the members as evenly as a running ceiling allows, so two members' counts differ by at most one. Starting from the
current assignment, the assignor (1) drops what a member no longer subscribes to, (2) trims members holding more than
their count, (3) trims partitions read by more members than the sharing, and (4) deals the partitions that want readers
to the members that want partitions, in one pass over the partitions cycling over the members. With every member
subscribed to the same topics (homogeneous) all their partitions are balanced together; otherwise (heterogeneous) each
topic is balanced over its own subscribers and the results are combined.

Where Kafka's order comes from Java hash iteration (its member map, a set of topic-partitions), this module uses
member-id order and (topic name, partition) order, so that every coordinator computes the same answer; Kafka's own tests
assert the outcome only where that order cannot matter. A member is never handed a topic it does not subscribe to
(Kafka's heterogeneous builder keeps an old assignment of a topic that no member subscribes to any more).
"""

from __future__ import annotations

import math
import uuid
from typing import Iterable, Mapping

__all__ = ["assign"]

Targets = dict[str, dict[uuid.UUID, tuple[int, ...]]]


def assign(subscriptions: Mapping[str, tuple[str, ...]],
           topics: Mapping[str, tuple[uuid.UUID, int]],
           current: Mapping[str, Mapping[uuid.UUID, Iterable[int]]] | None = None,
           assignable: Mapping[uuid.UUID, Iterable[int]] | None = None) -> Targets:
    """member id -> topic id -> partitions, for ``subscriptions`` (member id -> topic names) over ``topics`` (name ->
    (topic id, partition count)), kept as close to ``current`` (member id -> topic id -> partitions, the previous
    target) as balance allows; topics not in ``topics`` (unknown, or deleted) get no partitions. With
    ``assignable`` (topic id -> partitions), only those partitions are handed out (Kafka's
    withTopicAssignablePartitionsMap: a share group assigns only partitions whose state is initialized)."""
    members = sorted(subscriptions)
    names = {topic_id: name for name, (topic_id, _) in topics.items()}
    counts = {topic_id: count for topic_id, count in topics.values()}
    allowed = {topic_id: frozenset(p for p in (range(count) if assignable is None else assignable.get(topic_id, ()))
                                   if 0 <= p < count)
               for topic_id, count in counts.items()}
    subscribed = {m: {topics[name][0] for name in subscriptions[m] if name in topics} for m in members}
    held: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for m in members:
        for topic_id, partitions in (current or {}).get(m, {}).items():
            if topic_id in subscribed[m]:
                held[m][topic_id] = {p for p in partitions if p in allowed[topic_id]}
    if len({frozenset(subscriptions[m]) for m in members}) <= 1:
        topic_ids = sorted({t for m in members for t in subscribed[m]}, key=names.__getitem__)
        _balance_topics(members, topic_ids, allowed, held)
    else:
        for topic_id in sorted({t for m in members for t in subscribed[m]}, key=names.__getitem__):
            _balance_topics([m for m in members if topic_id in subscribed[m]], [topic_id], allowed, held)
    return {m: {t: tuple(sorted(ps)) for t, ps in sorted(held[m].items(), key=lambda tp: names[tp[0]]) if ps}
            for m in members}


def _balance_topics(readers: list[str], topic_ids: list[uuid.UUID], allowed: Mapping[uuid.UUID, frozenset[int]],
                    held: dict[str, dict[uuid.UUID, set[int]]]) -> None:
    """Balance the ``allowed`` partitions of ``topic_ids`` over ``readers`` in place in ``held``."""
    slots = [(t, p) for t in topic_ids for p in sorted(allowed[t])]
    if not readers or not slots:
        return
    index = {slot: i for i, slot in enumerate(slots)}
    owned = [{index[(t, p)] for t in topic_ids for p in held[m].get(t, ())} for m in readers]
    for m, final in zip(readers, _spread(len(slots), owned)):
        for t in topic_ids:
            held[m].pop(t, None)
        for i in sorted(final):
            held[m].setdefault(slots[i][0], set()).add(slots[i][1])


def _spread(partitions: int, owned: list[set[int]]) -> list[set[int]]:
    """Kafka's four steps over partitions 0..partitions-1 and members 0..n-1 (``owned``: what each holds now)."""
    n = len(owned)
    sharing = -(-n // partitions)
    precise = sharing * partitions / n
    desired = [math.ceil(precise * (i + 1)) - math.ceil(precise * i) for i in range(n)]
    owned = [set(held) for held in owned]
    for i in range(n):  # too many partitions: give up the lowest ones first, as Kafka's integer-set iteration does
        for partition in sorted(owned[i])[:max(0, len(owned[i]) - desired[i])]:
            owned[i].discard(partition)
    readers: list[set[int]] = [set() for _ in range(partitions)]
    for i in range(n):
        for partition in owned[i]:
            readers[partition].add(i)
    for partition in range(partitions):  # too many readers: the lowest-numbered members give it up first
        for i in sorted(readers[partition])[:max(0, len(readers[partition]) - sharing)]:
            readers[partition].discard(i)
            owned[i].discard(partition)
    _deal(readers, owned, desired, sharing)
    return owned


def _deal(readers: list[set[int]], owned: list[set[int]], desired: list[int], sharing: int) -> None:
    """One pass over the partitions, cycling over the members still short of their count (Kafka's iterator over its
    unfilled set, restarted only after a lap that assigned something; a partition's reader set is the one from before
    the pass, as in Kafka, so a lap may offer a partition again to the member just given it)."""
    unfilled = [i for i in range(len(owned)) if len(owned[i]) < desired[i]]
    position = 0
    assigned_this_lap = False
    for partition, before in enumerate(readers):
        wanted = sharing - len(before)
        while wanted > 0:
            if position >= len(unfilled):
                if not assigned_this_lap:
                    break
                position, assigned_this_lap = 0, False
            member = unfilled[position]
            if member not in before:
                owned[member].add(partition)
                wanted -= 1
                assigned_this_lap = True
                if len(owned[member]) >= desired[member]:
                    del unfilled[position]
                    continue
            position += 1
        if not unfilled:
            return
