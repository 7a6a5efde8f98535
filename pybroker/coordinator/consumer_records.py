"""The consumer protocol's ``__consumer_offsets`` records, byte-compatible with Kafka's group coordinator.

    key v3  ConsumerGroupMetadataKey(group)                     value: the group epoch
    key v4  ConsumerGroupPartitionMetadataKey(group)            value: subscribed topics (id, name, partitions)
    key v5  ConsumerGroupMemberMetadataKey(group, member)       value: the member's subscription and client
    key v6  ConsumerGroupTargetAssignmentMetadataKey(group)     value: the assignment epoch
    key v7  ConsumerGroupTargetAssignmentMemberKey(group, m)    value: the member's target assignment
    key v8  ConsumerGroupCurrentMemberAssignmentKey(group, m)   value: its epochs, state, assigned and revoking

Every key is ``int16 version`` + the key struct at that version, every value ``int16 0`` + the value
struct. The coordinator writes the records whose value changed since the last write (``changes``);
a null value is a tombstone. Assignments name topics by id; the partition metadata maps them back.
A static member that left with epoch -2 is stored as Kafka does, with member epoch -2.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Any

from pybroker.common.topic import TopicPartition
from pybroker.coordinator.consumer_group import (
    Assignment,
    ClassicMemberInfo,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
)
from pybroker.coordinator.group_base import Record
from pybroker.protocol.messages import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)

METADATA, PARTITION_METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_MEMBER = range(3, 9)
KEYS: dict[int, Any] = {METADATA: ConsumerGroupMetadataKey, PARTITION_METADATA: ConsumerGroupPartitionMetadataKey,
                        MEMBER_METADATA: ConsumerGroupMemberMetadataKey, TARGET_METADATA:
                        ConsumerGroupTargetAssignmentMetadataKey, TARGET_MEMBER: ConsumerGroupTargetAssignmentMemberKey,
                        CURRENT_MEMBER: ConsumerGroupCurrentMemberAssignmentKey}
VALUES: dict[int, Any] = {METADATA: ConsumerGroupMetadataValue, PARTITION_METADATA: ConsumerGroupPartitionMetadataValue,
                          MEMBER_METADATA: ConsumerGroupMemberMetadataValue,
                          TARGET_METADATA: ConsumerGroupTargetAssignmentMetadataValue,
                          TARGET_MEMBER: ConsumerGroupTargetAssignmentMemberValue,
                          CURRENT_MEMBER: ConsumerGroupCurrentMemberAssignmentValue}
STATE_CODES = {MemberState.STABLE: 1, MemberState.UNREVOKED_PARTITIONS: 2, MemberState.UNRELEASED_PARTITIONS: 3}
STATIC_LEFT_EPOCH = -2
_VERSION = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class ConsumerGroupEntry:
    """One decoded consumer-protocol record: its key version says which."""

    group_id: str
    key_version: int
    member_id: str | None
    value: Any  # None: tombstone


def _key(version: int, **fields: str) -> bytes:
    return _VERSION.pack(version) + KEYS[version](**fields).encode(version)


def _value(message: Any) -> bytes:
    return _VERSION.pack(0) + message.encode(0)


def _partitions(assignment: Assignment, ids: dict[str, uuid.UUID], cls: Any) -> list[Any]:
    return [cls(topic_id=ids[t], partitions=sorted(ps)) for t, ps in sorted(assignment.items()) if t in ids and ps]


def group_records(group: ConsumerGroup) -> dict[bytes, bytes]:
    """Every record that describes ``group`` now, key -> value."""
    gid = group.group_id
    ids = group.topic_ids
    records = {
        _key(METADATA, group_id=gid): _value(ConsumerGroupMetadataValue(epoch=group.group_epoch)),
        _key(PARTITION_METADATA, group_id=gid): _value(ConsumerGroupPartitionMetadataValue(topics=[
            ConsumerGroupPartitionMetadataValue.TopicMetadata(topic_id=ids[t], topic_name=t, num_partitions=n)
            for t, n in sorted(group.subscription_metadata.items()) if t in ids])),
        _key(TARGET_METADATA, group_id=gid): _value(
            ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=group.assignment_epoch)),
    }
    for m in group.members.values():
        records[_key(MEMBER_METADATA, group_id=gid, member_id=m.member_id)] = _value(ConsumerGroupMemberMetadataValue(
            instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names), subscribed_topic_regex=m.subscribed_topic_regex,
            rebalance_timeout_ms=m.rebalance_timeout_ms, server_assignor=m.server_assignor,
            classic_member_metadata=None if m.classic is None else ConsumerGroupMemberMetadataValue.ClassicMemberMetadata(
                session_timeout_ms=m.classic.session_timeout_ms, supported_protocols=[
                    ConsumerGroupMemberMetadataValue.ClassicProtocol(name=name, metadata=metadata)
                    for name, metadata in m.classic.protocols])))
        records[_key(TARGET_MEMBER, group_id=gid, member_id=m.member_id)] = _value(
            ConsumerGroupTargetAssignmentMemberValue(topic_partitions=_partitions(
                group.target.get(m.member_id, {}), ids, ConsumerGroupTargetAssignmentMemberValue.TopicPartition)))
        tp = ConsumerGroupCurrentMemberAssignmentValue.TopicPartitions
        epoch, previous = (STATIC_LEFT_EPOCH, m.member_epoch) if m.left_static else \
            (m.member_epoch, m.previous_member_epoch)
        records[_key(CURRENT_MEMBER, group_id=gid, member_id=m.member_id)] = _value(
            ConsumerGroupCurrentMemberAssignmentValue(
                member_epoch=epoch, previous_member_epoch=previous, state=STATE_CODES[m.state],
                assigned_partitions=_partitions(m.assigned, ids, tp),
                partitions_pending_revocation=_partitions(m.revoking, ids, tp)))
    return records


def changes(group: ConsumerGroup) -> list[Record]:
    """The records to write so that the log describes ``group`` as it is: changed values and tombstones."""
    current = group_records(group)
    out: list[Record] = [(k, v) for k, v in current.items() if group.written.get(k) != v]
    out.extend((k, None) for k in group.written if k not in current)
    group.written = current
    return out


def decode(key_version: int, key: bytes, value: bytes | None) -> ConsumerGroupEntry:
    k = KEYS[key_version].decode(key[2:], key_version)
    decoded = None if value is None else VALUES[key_version].decode(value[2:], 0)
    return ConsumerGroupEntry(k.group_id, key_version, getattr(k, "member_id", None), decoded)


def apply(group: ConsumerGroup, entry: ConsumerGroupEntry, raw: dict[str, dict[int, Any]]) -> None:
    """Replay one record into ``group``; member records wait in ``raw`` (member id -> key version -> value)
    until ``finish`` can name their topics."""
    value = entry.value
    if entry.key_version == METADATA:
        group.group_epoch = value.epoch
    elif entry.key_version == PARTITION_METADATA:
        group.subscription_metadata = {t.topic_name: t.num_partitions for t in value.topics}
        group.topic_ids.update({t.topic_name: t.topic_id for t in value.topics})
    elif entry.key_version == TARGET_METADATA:
        group.assignment_epoch = value.assignment_epoch
    elif entry.member_id is not None:
        if value is None:
            raw.get(entry.member_id, {}).pop(entry.key_version, None)
        else:
            raw.setdefault(entry.member_id, {})[entry.key_version] = value


def finish(group: ConsumerGroup, raw: dict[str, dict[int, Any]], deadline_ms: int) -> None:
    """Rebuild the members of a replayed group; each must heartbeat before ``deadline_ms``."""
    names = {tid: name for name, tid in group.topic_ids.items()}

    def named(partitions: list[Any]) -> Assignment:
        return {names[p.topic_id]: frozenset(p.partitions) for p in partitions if p.topic_id in names}

    codes = {code: state for state, code in STATE_CODES.items()}
    for member_id, records in raw.items():
        metadata = records.get(MEMBER_METADATA)
        if metadata is None:
            continue
        member = ConsumerMember(member_id, instance_id=metadata.instance_id, rack_id=metadata.rack_id,
                                client_id=metadata.client_id, client_host=metadata.client_host,
                                rebalance_timeout_ms=metadata.rebalance_timeout_ms,
                                subscribed_topic_names=list(metadata.subscribed_topic_names),
                                subscribed_topic_regex=metadata.subscribed_topic_regex,
                                server_assignor=metadata.server_assignor, heartbeat_deadline_ms=deadline_ms)
        classic = metadata.classic_member_metadata
        if classic is not None:
            member.classic = ClassicMemberInfo(classic.session_timeout_ms,
                                               [(p.name, bytes(p.metadata)) for p in classic.supported_protocols])
        current = records.get(CURRENT_MEMBER)
        if current is not None:
            member.member_epoch, member.previous_member_epoch = current.member_epoch, current.previous_member_epoch
            if current.member_epoch == STATIC_LEFT_EPOCH:
                member.left_static, member.member_epoch = True, current.previous_member_epoch
            member.state = codes.get(current.state, MemberState.STABLE)
            member.assigned = named(current.assigned_partitions)
            member.revoking = named(current.partitions_pending_revocation)
            if member.revoking:
                member.revocation_deadline_ms = deadline_ms
        target = records.get(TARGET_MEMBER)
        if target is not None:
            group.target[member_id] = named(target.topic_partitions)
        group.members[member_id] = member
        if member.instance_id is not None:
            group.static_members[member.instance_id] = member_id
        for held in (member.assigned, member.revoking):
            for topic, partitions in held.items():
                group.owners.update({TopicPartition(topic, p): member_id for p in partitions})
    group.written = group_records(group)
