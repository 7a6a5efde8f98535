"""The offset store shared by both group protocols: OffsetCommit, TxnOffsetCommit, OffsetFetch,
OffsetDelete and retention (Kafka's ``OffsetMetadataManager``).

Membership checks are the group's protocol's (``classic.py``, ``consumer.py``): the coordinator
runs them and hands the result here. Committed offsets are staged until their records are
replicated (``offsets_written``); transactional ones wait for their transaction's marker.
"""

from __future__ import annotations

from typing import Callable, Iterable

from pybroker.common.topic import TopicPartition
from pybroker.coordinator.group_base import CommittedOffset, GroupBase, Waiter
from pybroker.coordinator.records import OffsetEntry, Record, offset_key, offset_record
from pybroker.coordinator.table import GroupTable, Outcome
from pybroker.protocol.error_codes import ErrorCode
from pybroker.protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    TxnOffsetCommitRequest,
)

NewGroup = Callable[[str, int], GroupBase]
"""Makes the group that a commit outside any membership creates (a classic one, as Kafka does)."""


class OffsetStore:
    def __init__(self, table: GroupTable, new_group: NewGroup) -> None:
        self.table = table
        self.config = table.config
        self.groups = table.groups
        self._new_group = new_group
        # producer id -> offsets committed in its open transaction, visible once it commits
        self.pending_txn_offsets: dict[int, list[OffsetEntry]] = {}

    def partition_of(self, group_id: str) -> int:
        return self.table.partition_of(group_id)

    def commit_offsets(self, waiter: Waiter, request: OffsetCommitRequest, group: GroupBase | None,
                       error: ErrorCode, now_ms: int) -> Outcome:
        """OffsetCommit into ``group`` (created when None and ``error`` is NONE), or ``error`` for every
        partition; partitions the handler found invalid (unknown topics) are not in ``request``."""
        out = Outcome()
        if group is None and error is ErrorCode.NONE:
            group = self.groups[request.group_id] = self._new_group(request.group_id, now_ms)
        topics = []
        for topic in request.topics:
            results = []
            for p in topic.partitions:
                code = error
                if code is ErrorCode.NONE and group is not None:
                    code = self._commit_one(out, group, topic.name, p, request.retention_time_ms, now_ms)
                results.append(OffsetCommitResponse.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                                                                  error_code=code))
            topics.append(OffsetCommitResponse.OffsetCommitResponseTopic(name=topic.name, partitions=results))
        out.reply(waiter, OffsetCommitResponse(topics=topics))
        return out

    def _commit_one(self, out: Outcome, group: GroupBase, topic: str,
                    partition: OffsetCommitRequest.OffsetCommitRequestPartition,
                    retention_time_ms: int, now_ms: int) -> ErrorCode:
        metadata = partition.committed_metadata or ""
        if len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
            return ErrorCode.OFFSET_METADATA_TOO_LARGE
        expire = now_ms + retention_time_ms if retention_time_ms >= 0 else None
        committed = CommittedOffset(partition.committed_offset, partition.committed_leader_epoch, metadata,
                                    now_ms, expire)
        group.pending_offsets[TopicPartition(topic, partition.partition_index)] = committed
        out.staged.append(OffsetEntry(group.group_id, topic, partition.partition_index, committed))
        out.records.append((self.partition_of(group.group_id),
                            offset_record(group.group_id, topic, partition.partition_index, committed)))
        return ErrorCode.NONE

    def offsets_written(self, entries: Iterable[OffsetEntry], ends: dict[int, int]) -> None:
        """Staged commits whose records the in-sync replicas now hold (``ends``: partition -> offset
        past the write) become visible, unless a later write already replaced them (Kafka's
        onOffsetCommitAppend). A partition with no pending commit was deleted or reloaded meanwhile."""
        for entry in entries:
            group = self.groups.get(entry.group_id)
            key = (entry.topic, entry.partition)
            if group is None or key not in group.pending_offsets or entry.committed is None:
                continue
            position = ends[self.partition_of(entry.group_id)]
            if group.offset_positions.get(key, -1) < position:
                group.offsets[key] = entry.committed
                group.offset_positions[key] = position
            if group.pending_offsets[key] is entry.committed:
                del group.pending_offsets[key]

    def offsets_failed(self, entries: Iterable[OffsetEntry]) -> None:
        """Staged commits that were not written or not replicated: the previous value stays
        (Kafka's failPendingOffsetWrite)."""
        for entry in entries:
            group = self.groups.get(entry.group_id)
            key = (entry.topic, entry.partition)
            if group is not None and group.pending_offsets.get(key) is entry.committed:
                del group.pending_offsets[key]

    def txn_offset_records(self, request: TxnOffsetCommitRequest, now_ms: int
                           ) -> tuple[list[OffsetEntry], list[Record], dict[TopicPartition, ErrorCode]]:
        """The offsets of a valid TxnOffsetCommit, their records, and per-partition errors."""
        entries: list[OffsetEntry] = []
        errors: dict[TopicPartition, ErrorCode] = {}
        for topic in request.topics:
            for p in topic.partitions:
                metadata = p.committed_metadata or ""
                if len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                    errors[TopicPartition(topic.name, p.partition_index)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                    continue
                committed = CommittedOffset(p.committed_offset, p.committed_leader_epoch, metadata, now_ms, None)
                entries.append(OffsetEntry(request.group_id, topic.name, p.partition_index, committed))
        records = [offset_record(e.group_id, e.topic, e.partition, e.committed) for e in entries
                   if e.committed is not None]
        return entries, records, errors

    def stage_txn_offsets(self, producer_id: int, entries: Iterable[OffsetEntry]) -> None:
        """Offsets written in ``producer_id``'s transaction; ``complete_txn_offsets`` applies them."""
        self.pending_txn_offsets.setdefault(producer_id, []).extend(entries)

    def complete_txn_offsets(self, producer_id: int, partition: int, *, commit: bool, now_ms: int) -> None:
        """A COMMIT/ABORT marker reached ``partition`` of __consumer_offsets for ``producer_id``."""
        pending = self.pending_txn_offsets.pop(producer_id, [])
        kept = [e for e in pending if self.partition_of(e.group_id) != partition]
        if kept:
            self.pending_txn_offsets[producer_id] = kept
        if not commit:
            return
        for entry in pending:
            if self.partition_of(entry.group_id) != partition or entry.committed is None:
                continue
            group = self.groups.get(entry.group_id)
            if group is None:
                group = self.groups[entry.group_id] = self._new_group(entry.group_id, now_ms)
            group.offsets[TopicPartition(entry.topic, entry.partition)] = entry.committed

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        """Partitions of ``group_id`` whose offset an open transaction or an unreplicated
        OffsetCommit is changing (Kafka's hasPendingOffsetCommitsForTopicPartition)."""
        group = self.groups.get(group_id)
        pending = set(group.pending_offsets) if group is not None else set()
        return pending | {TopicPartition(e.topic, e.partition)
                          for entries in self.pending_txn_offsets.values() for e in entries if e.group_id == group_id}

    def fetch_offsets(self, group_id: str, topics: Iterable[tuple[str, Iterable[int]]] | None
                      ) -> list[tuple[str, list[tuple[int, CommittedOffset | None]]]]:
        """Committed offsets per requested topic-partition (None when absent); all of them when topics is None."""
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        if topics is None:
            by_topic: dict[str, list[tuple[int, CommittedOffset | None]]] = {}
            for (topic, partition), committed in sorted(offsets.items()):
                by_topic.setdefault(topic, []).append((partition, committed))
            return list(by_topic.items())
        return [(topic, [(p, offsets.get((topic, p))) for p in partitions]) for topic, partitions in topics]

    def delete_offsets(self, waiter: Waiter, request: OffsetDeleteRequest, now_ms: int) -> Outcome:
        out = Outcome()
        group = self.groups.get(request.group_id)
        if group is None:
            out.reply(waiter, OffsetDeleteResponse(error_code=ErrorCode.GROUP_ID_NOT_FOUND))
            return out
        subscribed: set[str] = set()
        if not group.offsets_expirable():
            known = group.subscribed_topics()
            if known is None:
                out.reply(waiter, OffsetDeleteResponse(error_code=ErrorCode.NON_EMPTY_GROUP))
                return out
            subscribed = known
        partition_of_group = self.partition_of(group.group_id)
        topics = []
        for topic in request.topics:
            results = []
            for p in topic.partitions:
                code = ErrorCode.NONE
                if topic.name in subscribed:
                    code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                elif _forget_offset(group, TopicPartition(topic.name, p.partition_index)):
                    out.records.append((partition_of_group, (offset_key(group.group_id, topic.name,
                                                                        p.partition_index), None)))
                results.append(OffsetDeleteResponse.OffsetDeleteResponsePartition(
                    partition_index=p.partition_index, error_code=code))
            topics.append(OffsetDeleteResponse.OffsetDeleteResponseTopic(name=topic.name, partitions=results))
        out.reply(waiter, OffsetDeleteResponse(error_code=0, topics=topics))
        return out

    def expire_offsets(self, out: Outcome, now_ms: int) -> None:
        """Kafka 2.1+ rule: an empty group's offsets expire offsets.retention.minutes after it emptied
        (or after the commit, for groups that never had members); explicit expiry times win."""
        retention = self.config.offsets_retention_ms
        for group in list(self.groups.values()):
            if not group.offsets_expirable():
                continue
            for (topic, partition), committed in list(group.offsets.items()):
                if (topic, partition) in group.pending_offsets:
                    continue
                if committed.expire_timestamp_ms is not None:
                    expired = now_ms >= committed.expire_timestamp_ms
                else:
                    expired = now_ms - group.expiry_base_ms(committed) >= retention
                if expired:
                    del group.offsets[(topic, partition)]
                    group.offset_positions.pop((topic, partition), None)
                    out.records.append((self.partition_of(group.group_id),
                                        (offset_key(group.group_id, topic, partition), None)))
            if not group.has_offsets:
                self.table.delete_group(out, group, now_ms)

    def unload(self, partition: int) -> None:
        """Forget the open transactions' offsets of ``partition``'s groups."""
        for producer_id in list(self.pending_txn_offsets):
            kept = [e for e in self.pending_txn_offsets[producer_id] if self.partition_of(e.group_id) != partition]
            if kept:
                self.pending_txn_offsets[producer_id] = kept
            else:
                del self.pending_txn_offsets[producer_id]

    def load(self, entry: OffsetEntry, now_ms: int) -> None:
        """Replay one offset record (a None ``committed`` is a tombstone)."""
        group = self.groups.get(entry.group_id)
        if entry.committed is None:
            if group is not None:
                group.offsets.pop(TopicPartition(entry.topic, entry.partition), None)
            return
        if group is None:
            group = self.groups[entry.group_id] = self._new_group(entry.group_id, now_ms)
        group.offsets[TopicPartition(entry.topic, entry.partition)] = entry.committed


def _forget_offset(group: GroupBase, key: TopicPartition) -> bool:
    """Drop a partition's committed and pending offset (Kafka's removeOffsets); False if it had none."""
    found = group.offsets.pop(key, None) is not None
    found = group.pending_offsets.pop(key, None) is not None or found
    group.offset_positions.pop(key, None)
    return found

