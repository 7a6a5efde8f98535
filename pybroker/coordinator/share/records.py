"""Share groups' ``__consumer_offsets`` records (KIP-932), in Kafka 4.2's schemas (``group-records/ShareGroup*``).

    key v10  ShareGroupMemberMetadataKey(group, member)         value: the member's subscription and client
    key v11  ShareGroupMetadataKey(group)                       value: the group epoch
    key v12  ShareGroupTargetAssignmentMetadataKey(group)       value: the assignment epoch
    key v13  ShareGroupTargetAssignmentMemberKey(group, m)      value: the member's target assignment
    key v14  ShareGroupCurrentMemberAssignmentKey(group, m)     value: its epochs, state and assigned partitions
    key v15  ShareGroupStatePartitionMetadataKey(group)         value: share-partitions being initialized, with state, deleted

Every key is ``int16 version`` + the key struct, every value ``int16 0`` + the value struct; a null value is a
tombstone. As for consumer groups, the records whose value changed since the last write are written (``changes``),
and a deleted group's are tombstoned, its metadata last (replay drops the group there). A share member has no
revocation step, so its target and current assignments are the same. The metadata hash is ``group.metadata_hash``
(pybroker's digest of the subscribed topics, not Kafka's murmur3 of them).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Any

from pybroker.coordinator.group_base import Record
from pybroker.coordinator.share.group import ShareGroup, ShareMember
from pybroker.coordinator.share.state_partitions import StatePartitions
from pybroker.protocol.messages import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupStatePartitionMetadataKey,
    ShareGroupStatePartitionMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
)

MEMBER_METADATA, METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_MEMBER, STATE_PARTITION_METADATA = range(10, 16)
KEYS: dict[int, Any] = {MEMBER_METADATA: ShareGroupMemberMetadataKey, METADATA: ShareGroupMetadataKey,
                        TARGET_METADATA: ShareGroupTargetAssignmentMetadataKey,
                        TARGET_MEMBER: ShareGroupTargetAssignmentMemberKey,
                        CURRENT_MEMBER: ShareGroupCurrentMemberAssignmentKey,
                        STATE_PARTITION_METADATA: ShareGroupStatePartitionMetadataKey}
VALUES: dict[int, Any] = {MEMBER_METADATA: ShareGroupMemberMetadataValue, METADATA: ShareGroupMetadataValue,
                          TARGET_METADATA: ShareGroupTargetAssignmentMetadataValue,
                          TARGET_MEMBER: ShareGroupTargetAssignmentMemberValue,
                          CURRENT_MEMBER: ShareGroupCurrentMemberAssignmentValue,
                          STATE_PARTITION_METADATA: ShareGroupStatePartitionMetadataValue}
STABLE = 1
"""Kafka's MemberState.STABLE code: a share member is always stable (no revocation)."""
_VERSION = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class ShareGroupEntry:
    """One decoded share-group record: its key version says which."""

    group_id: str
    key_version: int
    member_id: str | None
    value: Any  # None: tombstone


def _key(version: int, **fields: str) -> bytes:
    return _VERSION.pack(version) + KEYS[version](**fields).encode(0)


def _value(message: Any) -> bytes:
    return _VERSION.pack(0) + message.encode(0)


def group_records(group: ShareGroup) -> dict[bytes, bytes]:
    """Every record that describes ``group`` now, key -> value (group-level ones last)."""
    gid = group.group_id
    records: dict[bytes, bytes] = {}
    for m in group.members.values():
        records[_key(MEMBER_METADATA, group_id=gid, member_id=m.member_id)] = _value(ShareGroupMemberMetadataValue(
            rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed)))
        records[_key(TARGET_MEMBER, group_id=gid, member_id=m.member_id)] = _value(
            ShareGroupTargetAssignmentMemberValue(topic_partitions=[
                ShareGroupTargetAssignmentMemberValue.TopicPartition(topic_id=t, partitions=list(ps))
                for t, ps in sorted(m.assignment.items())]))
        records[_key(CURRENT_MEMBER, group_id=gid, member_id=m.member_id)] = _value(
            ShareGroupCurrentMemberAssignmentValue(
                member_epoch=m.member_epoch, previous_member_epoch=m.member_epoch, state=STABLE,
                assigned_partitions=[ShareGroupCurrentMemberAssignmentValue.TopicPartitions(topic_id=t,
                                                                                            partitions=list(ps))
                                     for t, ps in sorted(m.assignment.items())]))
    state = group.state_partitions
    info = ShareGroupStatePartitionMetadataValue.TopicPartitionsInfo
    records[_key(STATE_PARTITION_METADATA, group_id=gid)] = _value(ShareGroupStatePartitionMetadataValue(
        initializing_topics=[info(topic_id=t, topic_name=state.names.get(t, ""), partitions=sorted(ps))
                             for t, ps in sorted(state.initializing.items())],
        initialized_topics=[info(topic_id=t, topic_name=state.names.get(t, ""), partitions=sorted(ps))
                            for t, ps in sorted(state.initialized.items())],
        deleting_topics=[ShareGroupStatePartitionMetadataValue.TopicInfo(topic_id=t, topic_name=state.names.get(t, ""))
                         for t in sorted(state.deleting)]))
    records[_key(TARGET_METADATA, group_id=gid)] = _value(
        ShareGroupTargetAssignmentMetadataValue(assignment_epoch=group.assignment_epoch))
    records[_key(METADATA, group_id=gid)] = _value(ShareGroupMetadataValue(epoch=group.group_epoch,
                                                                           metadata_hash=group.metadata_hash))
    return records


def changes(group: ShareGroup, deleted: bool = False) -> list[Record]:
    """The records to write so that the log describes ``group`` as it is (or as deleted): changed values and
    tombstones, the group's metadata tombstone last."""
    current = {} if deleted else group_records(group)
    out: list[Record] = [(k, v) for k, v in current.items() if group.written.get(k) != v]
    out.extend((k, None) for k in group.written if k not in current)
    group.written = current
    return out


def decode(key_version: int, key: bytes, value: bytes | None) -> ShareGroupEntry:
    k = KEYS[key_version].decode(key[2:], 0)
    decoded = None if value is None else VALUES[key_version].decode(value[2:], 0)
    return ShareGroupEntry(k.group_id, key_version, getattr(k, "member_id", None), decoded)


class ShareLoad:
    """Replays one ``__consumer_offsets`` partition's share-group records into ``groups`` (group id -> group);
    member records wait until ``finish`` (a member is whole only with its metadata). Partitions found initializing
    count as asked for at ``now_ms`` (Kafka stamps them with the replay time), so they are initialized again by a
    heartbeat once the retry interval has passed."""

    def __init__(self, groups: dict[str, ShareGroup], now_ms: int) -> None:
        self.groups = groups
        self.now_ms = now_ms
        self.raw: dict[str, dict[str, dict[int, Any]]] = {}

    def apply(self, entry: ShareGroupEntry) -> None:
        value = entry.value
        if entry.key_version == METADATA and value is None:
            self.groups.pop(entry.group_id, None)
            self.raw.pop(entry.group_id, None)
            return
        group = self.groups.get(entry.group_id)
        if group is None:
            if value is None:
                return
            group = self.groups[entry.group_id] = ShareGroup(entry.group_id)
        members = self.raw.setdefault(entry.group_id, {})
        if entry.member_id is not None:
            if value is None:
                members.get(entry.member_id, {}).pop(entry.key_version, None)
            else:
                members.setdefault(entry.member_id, {})[entry.key_version] = value
        elif entry.key_version == METADATA:
            group.group_epoch, group.metadata_hash = value.epoch, value.metadata_hash
        elif entry.key_version == TARGET_METADATA and value is not None:
            group.assignment_epoch = value.assignment_epoch
        elif entry.key_version == STATE_PARTITION_METADATA:
            group.state_partitions = StatePartitions() if value is None else self._state(value)

    def _state(self, value: ShareGroupStatePartitionMetadataValue) -> StatePartitions:
        initializing = {t.topic_id: set(t.partitions) for t in value.initializing_topics}
        return StatePartitions(
            initializing=initializing, initializing_since_ms={topic_id: self.now_ms for topic_id in initializing},
            initialized={t.topic_id: set(t.partitions) for t in value.initialized_topics},
            deleting={t.topic_id for t in value.deleting_topics},
            names={**{t.topic_id: t.topic_name for t in value.deleting_topics},
                   **{t.topic_id: t.topic_name for t in [*value.initializing_topics, *value.initialized_topics]}})

    def finish(self, deadline_ms: int) -> list[ShareGroup]:
        """Rebuild the replayed groups' members, each to heartbeat before ``deadline_ms``; the groups."""
        loaded = []
        for group_id, members in self.raw.items():
            group = self.groups.get(group_id)
            if group is None:
                continue
            group.members = {}
            for member_id, records in members.items():
                metadata = records.get(MEMBER_METADATA)
                if metadata is None:
                    continue
                member = ShareMember(member_id, metadata.client_id, metadata.client_host, metadata.rack_id,
                                     tuple(metadata.subscribed_topic_names), deadline_ms=deadline_ms)
                current = records.get(CURRENT_MEMBER)
                if current is not None:
                    member.member_epoch = current.member_epoch
                    member.assignment = _assignment(current.assigned_partitions)
                group.members[member_id] = member
            group.written = group_records(group)
            loaded.append(group)
        return loaded


def _assignment(partitions: list[Any]) -> dict[uuid.UUID, tuple[int, ...]]:
    return {p.topic_id: tuple(p.partitions) for p in partitions}
