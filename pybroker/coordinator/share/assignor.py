"""Kafka's simple share-group assignor, in its homogeneous form applied topic by topic.

Any number of members may read one share-partition, so the assignor's aim is that every member has work and every
partition has a reader: with at least as many partitions as subscribed members, partitions are dealt round-robin
over the members (each partition read by one member); with more members than partitions, members are dealt
round-robin over the partitions (each member reads one partition, each partition is read by several). Members are
taken in member-id order so that the same group gets the same answer on every coordinator.
"""

from __future__ import annotations

import uuid
from typing import Mapping

__all__ = ["assign"]


def assign(subscriptions: Mapping[str, tuple[str, ...]],
           topics: Mapping[str, tuple[uuid.UUID, int]]) -> dict[str, dict[uuid.UUID, tuple[int, ...]]]:
    """member id -> topic id -> partitions, for ``subscriptions`` (member id -> topic names) over ``topics`` (name ->
    (topic id, partition count)); topics not in ``topics`` (unknown, or deleted) get no partitions."""
    targets: dict[str, dict[uuid.UUID, list[int]]] = {member: {} for member in subscriptions}
    for topic, (topic_id, count) in sorted(topics.items()):
        readers = sorted(member for member, names in subscriptions.items() if topic in names)
        if not readers or count <= 0:
            continue
        if count >= len(readers):
            for partition in range(count):
                targets[readers[partition % len(readers)]].setdefault(topic_id, []).append(partition)
        else:
            for index, member in enumerate(readers):
                targets[member].setdefault(topic_id, []).append(index % count)
    return {member: {topic_id: tuple(parts) for topic_id, parts in assigned.items()}
            for member, assigned in targets.items()}
