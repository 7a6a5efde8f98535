"""The "consumer" embedded protocol of classic groups: subscriptions, assignments, the range assignor.

Both travel as an int16 version followed by the struct at that version (Kafka's
`ConsumerProtocol`); a newer version than our codec knows is read at our latest, as Kafka does.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from typing import Mapping, Sequence

from pybroker.common.topic import TopicPartition
from pybroker.protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription

PROTOCOL_TYPE = "consumer"
RANGE_ASSIGNOR = "range"
SUBSCRIPTION_VERSION = 0
ASSIGNMENT_VERSION = 0
_VERSION = struct.Struct(">h")


def encode_subscription(topics: Sequence[str]) -> bytes:
    subscription = ConsumerProtocolSubscription(topics=sorted(topics))
    return _VERSION.pack(SUBSCRIPTION_VERSION) + subscription.encode(SUBSCRIPTION_VERSION)


def decode_subscription(data: bytes) -> list[str]:
    if len(data) < _VERSION.size:
        return []
    version = min(_VERSION.unpack_from(data)[0], ConsumerProtocolSubscription.MAX_VERSION)
    return list(ConsumerProtocolSubscription.decode(data[_VERSION.size:], version).topics)


def encode_assignment(partitions: Sequence[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        by_topic[tp.topic].append(tp.partition)
    assignment = ConsumerProtocolAssignment(assigned_partitions=[
        ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=sorted(p)) for t, p in sorted(by_topic.items())])
    return _VERSION.pack(ASSIGNMENT_VERSION) + assignment.encode(ASSIGNMENT_VERSION)


def decode_assignment(data: bytes) -> list[TopicPartition]:
    """The partitions of an assignment; an empty one (a member awaiting its first sync) has none."""
    if len(data) < _VERSION.size:
        return []
    version = min(_VERSION.unpack_from(data)[0], ConsumerProtocolAssignment.MAX_VERSION)
    decoded = ConsumerProtocolAssignment.decode(data[_VERSION.size:], version)
    return [TopicPartition(t.topic, p) for t in decoded.assigned_partitions for p in t.partitions]


def range_assign(subscriptions: Mapping[str, Sequence[str]], partition_counts: Mapping[str, int]
                 ) -> dict[str, list[TopicPartition]]:
    """Kafka's RangeAssignor: per topic, consecutive partition ranges to its subscribers in member-id order,
    the first `partitions % subscribers` members taking one extra."""
    assignment: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
    for topic, count in sorted(partition_counts.items()):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members:
            continue
        per_member, extra = divmod(count, len(members))
        start = 0
        for index, member in enumerate(members):
            length = per_member + (1 if index < extra else 0)
            assignment[member].extend(TopicPartition(topic, p) for p in range(start, start + length))
            start += length
    return assignment
