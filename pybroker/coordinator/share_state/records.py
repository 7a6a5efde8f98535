"""``__share_group_state`` records, byte-compatible with Kafka 4.2's share coordinator.

A key is ``int16 record type`` + the key struct at version 0; a value is ``int16 version 0`` + the value struct
(flexible); a null value is a tombstone (the share-partition's state was deleted):

    type 0  ShareSnapshotKey(group, topic id, partition)   ShareSnapshotValue: the whole state
    type 1  ShareUpdateKey(group, topic id, partition)     ShareUpdateValue: state batches to merge into it

The state of a share-partition is its start offset and the state batches above it (offset ranges with a
delivery state, 0 available, 2 acknowledged, 4 archived, and a delivery count). A share-partition's coordinator
is the leader of partition ``abs(javaHashCode("group:topicId:partition")) % partitions``, the topic id in Kafka's
base64 form (``SharePartitionKey.asCoordinatorKey``).
"""

from __future__ import annotations

import binascii
import struct
import uuid
from dataclasses import dataclass, field

from pybroker.common.topic import topic_id_from_string, topic_id_to_string
from pybroker.coordinator.records import Record, partition_for
from pybroker.protocol.errors import DecodeError
from pybroker.protocol.messages import ShareSnapshotKey, ShareSnapshotValue, ShareUpdateKey, ShareUpdateValue

__all__ = ["SNAPSHOT_TYPE", "UPDATE_TYPE", "ShareKey", "ShareState", "StateBatch", "StateEntry", "combine",
           "decode_state_record", "parse_share_key", "partition_of", "record_type", "snapshot_record", "tombstones",
           "update_record"]

SNAPSHOT_TYPE = 0
UPDATE_TYPE = 1
VALUE_VERSION = 0
_SHORT = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class ShareKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """Kafka's ``SharePartitionKey.asCoordinatorKey``: what FindCoordinator(SHARE) is asked with."""
        return f"{self.group_id}:{topic_id_to_string(self.topic_id)}:{self.partition}"


def parse_share_key(text: str) -> ShareKey | None:
    """A FindCoordinator(SHARE) key, "groupId:topicId:partition" (the group id may hold colons); None if malformed."""
    parts = text.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        return None
    try:
        topic_id = topic_id_from_string(parts[1])
        partition = int(parts[2])
    except (ValueError, binascii.Error):
        return None
    return ShareKey(parts[0], topic_id, partition) if partition >= 0 else None


def partition_of(key: ShareKey, partitions: int) -> int:
    return partition_for(key.coordinator_key(), partitions)


@dataclass(frozen=True, slots=True)
class StateBatch:
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(slots=True)
class ShareState:
    """What the coordinator holds of one share-partition (Kafka's ShareGroupOffset)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    batches: list[StateBatch] = field(default_factory=list)
    create_ms: int = 0
    write_ms: int = 0

    def delivery_complete_count(self) -> int:
        """Offsets at or above the start offset whose delivery is done (KIP-1226)."""
        return sum(b.last_offset - b.first_offset + 1 for b in self.batches if b.delivery_state in (2, 4))


@dataclass(frozen=True, slots=True)
class StateEntry:
    """One replayed record: a whole snapshot, an update to merge, or (``state`` None) a deletion."""

    key: ShareKey
    record_type: int
    state: ShareState | None


def combine(current: list[StateBatch], new: list[StateBatch], start_offset: int) -> list[StateBatch]:
    """Kafka's PersisterStateBatchCombiner: ``new`` batches override ``current`` where they overlap (and, among
    themselves, a batch starting later overrides an earlier one); offsets below ``start_offset`` are dropped;
    adjacent batches with one state and count are merged. Linear after sorting: a write of thousands of batches
    costs no more than reading them."""
    spans = _overlay(sorted(current, key=lambda b: b.first_offset), _disjoint(new))
    out: list[StateBatch] = []
    for batch in spans:
        if batch.last_offset < start_offset:
            continue
        if batch.first_offset < start_offset:
            batch = StateBatch(start_offset, batch.last_offset, batch.delivery_state, batch.delivery_count)
        last = out[-1] if out else None
        if last is not None and last.last_offset + 1 == batch.first_offset and \
                (last.delivery_state, last.delivery_count) == (batch.delivery_state, batch.delivery_count):
            out[-1] = StateBatch(last.first_offset, batch.last_offset, last.delivery_state, last.delivery_count)
        else:
            out.append(batch)
    return out


def _part(batch: StateBatch, first: int, last: int) -> StateBatch:
    return StateBatch(first, last, batch.delivery_state, batch.delivery_count)


def _disjoint(batches: list[StateBatch]) -> list[StateBatch]:
    """``batches`` sorted by first offset, a later one cutting out what it overlaps of the earlier ones."""
    out: list[StateBatch] = []
    for batch in sorted(batches, key=lambda b: b.first_offset):
        tail: StateBatch | None = None
        while out and out[-1].last_offset >= batch.first_offset:
            prev = out.pop()
            if prev.last_offset > batch.last_offset and tail is None:
                tail = _part(prev, batch.last_offset + 1, prev.last_offset)
            if prev.first_offset < batch.first_offset:
                out.append(_part(prev, prev.first_offset, batch.first_offset - 1))
                break
        out.append(batch)
        if tail is not None:
            out.append(tail)
    return out


def _overlay(base: list[StateBatch], top: list[StateBatch]) -> list[StateBatch]:
    """Two sorted lists of disjoint batches as one, ``top`` winning where they overlap."""
    out: list[StateBatch] = []
    rest = list(base)
    i = 0
    for batch in top:
        while i < len(rest) and rest[i].last_offset < batch.first_offset:
            out.append(rest[i])
            i += 1
        while i < len(rest) and rest[i].first_offset <= batch.last_offset:
            old = rest[i]
            if old.first_offset < batch.first_offset:
                out.append(_part(old, old.first_offset, batch.first_offset - 1))
            if old.last_offset > batch.last_offset:
                rest[i] = _part(old, batch.last_offset + 1, old.last_offset)
                break
            i += 1
        out.append(batch)
    out.extend(rest[i:])
    return out


def _key(record_type: int, key: ShareKey) -> bytes:
    cls = ShareSnapshotKey if record_type == SNAPSHOT_TYPE else ShareUpdateKey
    return _SHORT.pack(record_type) + cls(group_id=key.group_id, topic_id=key.topic_id,
                                          partition=key.partition).encode(0)


def snapshot_record(key: ShareKey, state: ShareState) -> Record:
    value = ShareSnapshotValue(
        snapshot_epoch=state.snapshot_epoch, state_epoch=state.state_epoch, leader_epoch=state.leader_epoch,
        start_offset=state.start_offset, delivery_complete_count=state.delivery_complete_count(),
        create_timestamp=state.create_ms, write_timestamp=state.write_ms,
        state_batches=[ShareSnapshotValue.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                                     delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                       for b in state.batches])
    return _key(SNAPSHOT_TYPE, key), _SHORT.pack(VALUE_VERSION) + value.encode(VALUE_VERSION)


def update_record(key: ShareKey, snapshot_epoch: int, leader_epoch: int, start_offset: int,
                  batches: list[StateBatch]) -> Record:
    value = ShareUpdateValue(
        snapshot_epoch=snapshot_epoch, leader_epoch=leader_epoch, start_offset=start_offset,
        state_batches=[ShareUpdateValue.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                                   delivery_state=b.delivery_state, delivery_count=b.delivery_count)
                       for b in batches])
    return _key(UPDATE_TYPE, key), _SHORT.pack(VALUE_VERSION) + value.encode(VALUE_VERSION)


def tombstones(key: ShareKey) -> list[tuple[bytes, bytes | None]]:
    """The deletion of a share-partition's state, as Kafka writes it: a tombstone of its snapshot key."""
    return [(_key(SNAPSHOT_TYPE, key), None)]


def record_type(raw_key: bytes) -> int:
    """A record's type (snapshot or update), from the version its key starts with."""
    return int(_SHORT.unpack_from(raw_key)[0])


def decode_state_record(raw_key: bytes, raw_value: bytes | None) -> StateEntry | None:
    """A ``__share_group_state`` record; None for a record type this broker does not know."""
    if len(raw_key) < 2:
        raise DecodeError("__share_group_state key shorter than its type")
    (record_type,) = _SHORT.unpack_from(raw_key)
    if record_type not in (SNAPSHOT_TYPE, UPDATE_TYPE):
        return None
    key_cls = ShareSnapshotKey if record_type == SNAPSHOT_TYPE else ShareUpdateKey
    k = key_cls.decode(raw_key[2:], 0)
    key = ShareKey(k.group_id, k.topic_id, k.partition)
    if raw_value is None:
        return StateEntry(key, record_type, None)
    if len(raw_value) < 2:
        raise DecodeError("__share_group_state value shorter than its version")
    if record_type == SNAPSHOT_TYPE:
        s = ShareSnapshotValue.decode(raw_value[2:], VALUE_VERSION)
        return StateEntry(key, record_type, ShareState(
            s.snapshot_epoch, s.state_epoch, s.leader_epoch, s.start_offset, _batches(s.state_batches),
            s.create_timestamp, s.write_timestamp))
    u = ShareUpdateValue.decode(raw_value[2:], VALUE_VERSION)
    return StateEntry(key, record_type, ShareState(u.snapshot_epoch, -1, u.leader_epoch, u.start_offset,
                                                   _batches(u.state_batches)))


def _batches(batches: list[ShareSnapshotValue.StateBatch] | list[ShareUpdateValue.StateBatch]) -> list[StateBatch]:
    return [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in batches]
