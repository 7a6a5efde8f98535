"""Share groups' offsets administration (KIP-932): DescribeShareGroupOffsets, AlterShareGroupOffsets and
DeleteShareGroupOffsets, answered by the group's coordinator through the share coordinator (``share_persister.py``).

- Describe reads each share-partition's summary (ReadShareGroupStateSummary): its start offset, leader epoch and
  (v1, KIP-1226) lag, the records from the start offset to the high watermark not yet acknowledged or archived;
  a share-partition with no state has start offset -1 (and lag -1). Without topics, every partition the group was
  ever assigned. The high watermark is this broker's replica's: lag is -1 where this broker holds no replica.
- Alter sets start offsets, as Kafka's does: only for an empty (or not yet existing, then created) group,
  NON_EMPTY_GROUP otherwise; the partitions are recorded as initializing, each share-partition's state is
  initialized again at the new start offset with a state epoch above the one held, which fences a partition
  leader's older copy (it reads the state again), and those initialized are recorded as initialized. A failed
  initialization is the partition's answer and stays recorded as initializing, as in Kafka (a heartbeat initializes
  it again once ``group.share.initialize.retry.interval.ms`` has passed).
- Delete deletes the state of the group's share-partitions of the topics named (DeleteShareGroupState), only for
  an existing empty group: GROUP_ID_NOT_FOUND or NON_EMPTY_GROUP otherwise; a topic without state is
  UNKNOWN_TOPIC_OR_PARTITION. The topic is recorded as deleting first and leaves it once its state is deleted; a
  failed deletion is the answer, and deleting the topic's offsets again deletes all its partitions' state. The
  partitions are read from the offset ``share.auto.offset.reset`` gives the next time the group reads them.
"""

from __future__ import annotations

import copy
import uuid
from dataclasses import dataclass

from pybroker.common.uncancellable import finishes_once_started
from pybroker.controller.metadata import ClusterMetadata
from pybroker.protocol.error_codes import ErrorCode
from pybroker.replication.manager import ReplicaManager
from pybroker.server.share_service import ShareService

NO_LAG = -1


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    partition: int
    start_offset: int = -1
    leader_epoch: int = -1
    lag: int = NO_LAG
    error: ErrorCode = ErrorCode.NONE


class ShareOffsets:
    def __init__(self, share: ShareService, metadata: ClusterMetadata, replicas: ReplicaManager) -> None:
        self._share = share
        self._metadata = metadata
        self._replicas = replicas

    def group_error(self, group_id: str, *, must_exist: bool, must_be_empty: bool) -> ErrorCode:
        """Why the group's offsets may not be described or changed: a classic or consumer group of that id, no such
        share group, or members in it."""
        if self._share.is_other_group(group_id):
            return ErrorCode.GROUP_ID_NOT_FOUND
        group = self._share.groups.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND if must_exist else ErrorCode.NONE
        return ErrorCode.NON_EMPTY_GROUP if must_be_empty and group.members else ErrorCode.NONE

    def assigned_topics(self, group_id: str) -> dict[str, list[int]]:
        """Every partition whose state the group initialized, by topic name (topics deleted since are left out), as
        Kafka describes all of a group's offsets."""
        group = self._share.groups.groups.get(group_id)
        out: dict[str, list[int]] = {}
        for topic_id, partitions in (group.state_partitions.initialized.items() if group is not None else ()):
            info = self._metadata.topic_by_id(topic_id)
            if info is not None:
                out[info.name] = sorted(partitions)
        return out

    def topic_id(self, topic: str) -> uuid.UUID | None:
        info = self._metadata.topic(topic)
        return None if info is None else info.topic_id

    async def describe(self, group_id: str, topic: str, partitions: list[int]) -> list[PartitionOffsets]:
        info = self._metadata.topic(topic)
        if info is None:
            return [PartitionOffsets(p, error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for p in partitions]
        out = []
        for index in partitions:
            if index not in info.partitions:
                out.append(PartitionOffsets(index, error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            summary = await self._share.persister.summary(group_id, info.topic_id, index)
            if isinstance(summary, ErrorCode) or summary.error_code != ErrorCode.NONE:
                error = summary if isinstance(summary, ErrorCode) else ErrorCode(summary.error_code)
                out.append(PartitionOffsets(index, error=error))
                continue
            out.append(PartitionOffsets(index, summary.start_offset, summary.leader_epoch,
                                        self._lag(topic, index, summary.start_offset,
                                                  summary.delivery_complete_count)))
        return out

    def _lag(self, topic: str, index: int, start_offset: int, complete: int) -> int:
        replica = self._replicas.hosted(topic, index)
        if start_offset < 0 or replica is None:
            return NO_LAG
        return max(replica.log.high_watermark - start_offset - max(complete, 0), 0)

    @finishes_once_started
    async def alter(self, group_id: str, topic: str, starts: dict[int, int]) -> dict[int, ErrorCode]:
        """Set the start offsets of the topic's share-partitions (the group is empty; created if missing). Runs to
        its end whatever becomes of the request (as `delete`): its changes to the group's share-partition metadata
        are written, or undone when that write fails, never left half-way."""
        info = self._metadata.topic(topic)
        if info is None:
            return {index: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION for index in starts}
        group = self._share.groups.empty_group(group_id)
        state = group.state_partitions
        wanted = {index: start for index, start in starts.items() if index in info.partitions and start >= 0}
        out: dict[int, ErrorCode] = {index: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if index not in info.partitions
                                     else ErrorCode.INVALID_REQUEST for index in starts if index not in wanted}
        if wanted:
            before = copy.deepcopy(state)
            state.initializing.setdefault(info.topic_id, set()).update(wanted)
            state.initializing_since_ms[info.topic_id] = self._share.now_ms()
            state.names[info.topic_id] = topic
            state.deleting.discard(info.topic_id)
            code = await self._share.write_state(group, before)
            if code is not ErrorCode.NONE:
                return {index: out.get(index, code) for index in starts}
            state = group.state_partitions
        for index, start in wanted.items():
            summary = await self._share.persister.summary(group_id, info.topic_id, index)
            out[index] = summary if isinstance(summary, ErrorCode) else await self._share.persister.initialize(
                group_id, info.topic_id, index, max(summary.state_epoch, 0) + 1, start)
            if out[index] is ErrorCode.NONE:
                state.initialize_done({info.topic_id: {index}})
                self._share.forget_partition(group_id, topic, index)
        written = await self._share.write_answer(group_id)
        return {index: written if out[index] is ErrorCode.NONE else out[index] for index in starts}

    @finishes_once_started
    async def delete(self, group_id: str, topic: str) -> ErrorCode:
        """Delete the state of the group's share-partitions of ``topic`` (the group exists and is empty)."""
        info = self._metadata.topic(topic)
        if info is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        group = self._share.groups.groups[group_id]
        state = group.state_partitions
        before = copy.deepcopy(state)
        partitions = state.delete_topic(info.topic_id, len(info.partitions))
        if partitions is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        code = await self._share.write_state(group, before)
        if code is not ErrorCode.NONE:
            return code
        for index in sorted(partitions):
            code = await self._share.persister.delete(group_id, info.topic_id, index)
            if code is not ErrorCode.NONE:
                return code
            self._share.forget_partition(group_id, topic, index)
        state.deleted([info.topic_id])
        return await self._share.write_answer(group_id)
