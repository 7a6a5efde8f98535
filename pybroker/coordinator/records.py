"""Keys and values of ``__consumer_offsets``, byte-compatible with Kafka's group coordinator.

Every key and value is ``int16 version`` + the struct of ``coordinator-records/`` at that version:

    key v0/v1  OffsetCommitKey(group, topic, partition)   value OffsetCommitValue v1 (with expiry) or v3
    key v2     GroupMetadataKey(group)                    value GroupMetadataValue v3
    null value = tombstone: the offset, or the whole group, is gone.

Key versions 3 to 8 are the consumer protocol's (KIP-848, ``consumer_records.py``), 10 to 15 the share
groups' (KIP-932, ``share/records.py``); others (streams groups) are skipped when replaying. A group's partition is ``abs(javaHashCode(group)) % partitions`` with Kafka's rule
that ``Integer.MIN_VALUE`` maps to 0 (``Utils.abs``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pybroker.coordinator import consumer_records
from pybroker.coordinator.group import GROUP_KEY_VERSION, CommittedOffset, Group, GroupState, Member, group_key
from pybroker.coordinator.group_base import Record
from pybroker.coordinator.share import records as share_records
from pybroker.protocol.errors import DecodeError
from pybroker.protocol.messages import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)

OFFSET_KEY_VERSION = 1
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_WITH_EXPIRY_VERSION = 1
GROUP_VALUE_VERSION = 3
_VERSION = struct.Struct(">h")



def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: 31*h + c over UTF-16 code units, as a signed int32."""
    h = 0
    data = text.encode("utf-16-be")
    for (unit,) in struct.iter_unpack(">H", data):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h >= 0x8000_0000 else h


def partition_for(key: str, partitions: int) -> int:
    """The internal-topic partition of a group id or transactional id."""
    h = java_string_hash(key)
    return (0 if h == -(2**31) else abs(h)) % partitions


def _prefixed(version: int, payload: bytes) -> bytes:
    return _VERSION.pack(version) + payload


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return _prefixed(OFFSET_KEY_VERSION, OffsetCommitKey(group=group_id, topic=topic, partition=partition)
                     .encode(OFFSET_KEY_VERSION))


def offset_record(group_id: str, topic: str, partition: int, committed: CommittedOffset) -> Record:
    if committed.expire_timestamp_ms is not None:
        version = OFFSET_VALUE_WITH_EXPIRY_VERSION
        value = OffsetCommitValue(offset=committed.offset, metadata=committed.metadata,
                                  commit_timestamp=committed.commit_timestamp_ms,
                                  expire_timestamp=committed.expire_timestamp_ms)
    else:
        version = OFFSET_VALUE_VERSION
        value = OffsetCommitValue(offset=committed.offset, leader_epoch=committed.leader_epoch,
                                  metadata=committed.metadata, commit_timestamp=committed.commit_timestamp_ms)
    return offset_key(group_id, topic, partition), _prefixed(version, value.encode(version))


def group_record(group: Group) -> Record:
    """The group's metadata as Kafka stores it after each generation (and when it empties)."""
    members = [
        GroupMetadataValue.MemberMetadata(
            member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
            client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
            session_timeout=m.session_timeout_ms,
            subscription=m.metadata_for(group.protocol_name) if group.protocol_name else b"",
            assignment=m.assignment)
        for m in group.members.values()
    ]
    value = GroupMetadataValue(protocol_type=group.protocol_type or "", generation=group.generation_id,
                               protocol=group.protocol_name, leader=group.leader_id,
                               current_state_timestamp=group.state_timestamp_ms, members=members)
    return group_key(group.group_id), _prefixed(GROUP_VALUE_VERSION, value.encode(GROUP_VALUE_VERSION))


@dataclass(frozen=True, slots=True)
class OffsetEntry:
    group_id: str
    topic: str
    partition: int
    committed: CommittedOffset | None  # None: tombstone


@dataclass(frozen=True, slots=True)
class PendingTxnOffset:
    """An offset written in a transaction that had no marker yet when the log was replayed."""

    producer_id: int
    entry: OffsetEntry


@dataclass(frozen=True, slots=True)
class GroupEntry:
    group_id: str
    value: GroupMetadataValue | None  # None: tombstone


Entry = OffsetEntry | GroupEntry | consumer_records.ConsumerGroupEntry | share_records.ShareGroupEntry
"""A decoded ``__consumer_offsets`` record."""


def decode_record(key: bytes, value: bytes | None) -> Entry | None:
    """Decode one record of the internal topic; None for record types this broker does not use."""
    if len(key) < 2:
        raise DecodeError("__consumer_offsets key shorter than its version")
    (key_version,) = _VERSION.unpack_from(key)
    if key_version in (0, 1):
        k = OffsetCommitKey.decode(key[2:], key_version)
        if value is None:
            return OffsetEntry(k.group, k.topic, k.partition, None)
        (value_version,) = _VERSION.unpack_from(value)
        v = OffsetCommitValue.decode(value[2:], min(value_version, OffsetCommitValue.MAX_VERSION))
        expire = v.expire_timestamp if value_version == 1 and v.expire_timestamp >= 0 else None
        return OffsetEntry(k.group, k.topic, k.partition,
                           CommittedOffset(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, expire))
    if key_version == GROUP_KEY_VERSION:
        group = GroupMetadataKey.decode(key[2:], key_version).group
        if value is None:
            return GroupEntry(group, None)
        (value_version,) = _VERSION.unpack_from(value)
        return GroupEntry(group, GroupMetadataValue.decode(value[2:],
                                                             min(value_version, GroupMetadataValue.MAX_VERSION)))
    if key_version in consumer_records.KEYS:
        return consumer_records.decode(key_version, key, value)
    if key_version in share_records.KEYS:
        return share_records.decode(key_version, key, value)
    return None


def restore_group(group: Group, value: GroupMetadataValue, now_ms: int) -> None:
    """Rebuild membership from a stored GroupMetadataValue; members must heartbeat again to stay."""
    group.members.clear()
    group.static_members.clear()
    group.protocol_type = value.protocol_type or None
    group.protocol_name = value.protocol
    group.generation_id = value.generation
    group.leader_id = None
    for stored in value.members:
        protocols = [(value.protocol, stored.subscription)] if value.protocol else []
        member = Member(member_id=stored.member_id, group_instance_id=stored.group_instance_id,
                        client_id=stored.client_id, client_host=stored.client_host,
                        rebalance_timeout_ms=stored.rebalance_timeout, session_timeout_ms=stored.session_timeout,
                        protocol_type=value.protocol_type, protocols=protocols, assignment=stored.assignment,
                        heartbeat_deadline_ms=now_ms + stored.session_timeout)
        group.add_member(member)
    group.leader_id = value.leader if value.leader in group.members else next(iter(group.members), None)
    state = GroupState.STABLE if group.members else GroupState.EMPTY
    timestamp = value.current_state_timestamp if value.current_state_timestamp >= 0 else now_ms
    group.transition(state, timestamp)

