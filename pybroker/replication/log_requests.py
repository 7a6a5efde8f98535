"""The replica manager's answers to the requests about a partition's log other than Produce and Fetch, as plain
values: Kafka's ``ReplicaManager.fetchOffsetForTimestamp`` (ListOffsets), ``lastOffsetForLeaderEpoch``
(OffsetForLeaderEpoch), ``deleteRecords`` (DeleteRecords) and ``describeLogDirs`` (DescribeLogDirs).

Their handlers decode, authorize, call these and encode; nothing here knows the request or its context. A
partition's failure is raised as its exception (``replication/errors.py``, ``log/errors.py``), which the
server maps to an error code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Container

from pybroker.common.io_executor import IoExecutor
from pybroker.log.log import PartitionLog
from pybroker.replication.errors import NotLeaderError, UnknownPartitionError
from pybroker.replication.manager import ReplicaManager
from pybroker.replication.partition import latest_epoch_on_disk

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6  # KIP-1023: without tiered storage, no offset (-1), as Kafka answers
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2
INVALID_OFFSET_LAG = -1


# ListOffsets

@dataclass(frozen=True, slots=True)
class FoundOffset:
    """A ListOffsets answer for one partition; -1 where there is none."""

    offset: int = -1
    timestamp: int = -1
    leader_epoch: int = -1


async def fetch_offset_for_timestamp(replicas: ReplicaManager, io: IoExecutor, topic: str, index: int,
                                     timestamp: int, *, replica_id: int, read_committed: bool,
                                     current_leader_epoch: int) -> FoundOffset:
    """LATEST is the high watermark for a consumer (the last stable offset for ``read_committed``), the log end
    for a follower; lookups by timestamp never answer an offset at or past that bound (taken once the lookup,
    which scans batches on the I/O executor, returned). The debugging replica id's LATEST is answered by any
    replica, with its log end and latest leader epoch."""
    if replica_id == DEBUGGING_REPLICA_ID and timestamp == LATEST_TIMESTAMP:
        epoch, end = await _replica_log_end(replicas, io, topic, index)
        return FoundOffset(offset=end, leader_epoch=epoch)
    partition = replicas.leader_partition(topic, index)
    partition.check_leader_epoch(current_leader_epoch)
    log = partition.log
    found: tuple[int, int] | None = None
    if timestamp == LATEST_TIMESTAMP:
        return FoundOffset(offset=_visible(log, replica_id, read_committed), leader_epoch=partition.leader_epoch)
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP):
        return FoundOffset(offset=log.log_start_offset, leader_epoch=partition.leader_epoch)
    if timestamp == EARLIEST_PENDING_UPLOAD_TIMESTAMP:
        return FoundOffset()  # nothing is pending upload to remote storage: there is none
    if timestamp == MAX_TIMESTAMP:
        found = log.latest_timestamp_offset()
    else:
        epoch = partition.leader_epoch
        found = await log.fetch_offset_by_timestamp_off_loop(io, timestamp)
        if replicas.leader_partition(topic, index) is not partition or partition.leader_epoch != epoch:
            raise NotLeaderError(f"leadership of {topic}-{index} changed during the lookup")
    if found is None or found[0] >= _visible(log, replica_id, read_committed):
        return FoundOffset()
    return FoundOffset(offset=found[0], timestamp=found[1], leader_epoch=partition.leader_epoch)


async def _replica_log_end(replicas: ReplicaManager, io: IoExecutor, topic: str, index: int) -> tuple[int, int]:
    """(latest leader epoch, log end offset) of this broker's replica, whatever its role. A log this broker has
    not served since it started (no LeaderAndIsr yet) is answered from disk: the controller asks every ISR
    member this before it elects the longest log among replicas that may each have lost an unflushed tail."""
    partition = replicas.hosted(topic, index)
    if partition is not None:
        return partition.epoch_cache.latest_epoch, partition.log.log_end_offset
    log = replicas.log_manager.get_log(topic, index)
    if log is None:
        raise UnknownPartitionError(f"This server has no replica of {topic}-{index}")
    epoch = await io.run(lambda: latest_epoch_on_disk(log))
    return epoch, log.log_end_offset


def _visible(log: PartitionLog, replica_id: int, read_committed: bool) -> int:
    """The bound of answers: the last stable offset or high watermark, the log end for a follower."""
    if replica_id != CONSUMER_REPLICA_ID:
        return log.log_end_offset
    return log.last_stable_offset if read_committed else log.high_watermark


# OffsetForLeaderEpoch

def last_offset_for_leader_epoch(replicas: ReplicaManager, topic: str, index: int, leader_epoch: int,
                                 current_leader_epoch: int) -> tuple[int, int]:
    """(epoch, end offset) on the leader: the largest epoch at or below ``leader_epoch`` and where it ends
    (``replication/epoch_cache.py``)."""
    partition = replicas.leader_partition(topic, index)
    partition.check_leader_epoch(current_leader_epoch)
    return partition.epoch_cache.end_offset_for(leader_epoch, partition.log.log_end_offset)


# DeleteRecords

@dataclass(frozen=True, slots=True)
class DeletedRecords:
    """The log start the leader moved to, and the low watermark it saw then; wait for the replicas while
    the low watermark is below the offset (Kafka's DelayedDeleteRecords, ``ReplicaManager.wait_for_low_watermark``)."""

    offset: int
    low_watermark: int

    @property
    def replicas_behind(self) -> bool:
        return self.low_watermark < self.offset


def delete_records_on_leader(replicas: ReplicaManager, topic: str, index: int, offset: int,
                             alive: Container[int]) -> DeletedRecords:
    """Move the leader's log start to ``offset`` (-1: the high watermark); the segments wholly below it go in
    the next retention pass. ``alive``: the live brokers, whose replicas the low watermark counts."""
    partition = replicas.leader_partition(topic, index)
    moved_to = partition.delete_records(offset)
    return DeletedRecords(moved_to, partition.low_watermark(alive))


# DescribeLogDirs

@dataclass(frozen=True, slots=True)
class ReplicaLogInfo:
    topic: str
    partition: int
    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirInfo:
    """One log dir; ``online`` False for a failed one (KAFKA_STORAGE_ERROR, no replicas)."""

    path: str
    online: bool
    replicas: list[ReplicaLogInfo] = field(default_factory=list)
    total_bytes: int = -1
    usable_bytes: int = -1


def describe_log_dirs(replicas: ReplicaManager, wanted: Container[tuple[str, int]] | None) -> list[LogDirInfo]:
    """Every configured log dir in order, with its replicas (``wanted`` only, when given) sorted by topic,
    partition and future-ness. The lag of a current log is max(its high watermark - its LEO, 0), so 0 on
    leaders and followers alike; the lag of a future log is the current log's LEO minus its own."""
    logs = replicas.log_manager
    described = []
    for status in logs.describe_dirs():
        if not status.online:
            described.append(LogDirInfo(status.path, online=False))
            continue
        chosen = sorted(((log, future) for log, future in status.logs
                         if wanted is None or (log.topic, log.partition) in wanted),
                        key=lambda item: (item[0].topic, item[0].partition, item[1]))
        described.append(LogDirInfo(status.path, True, [
            ReplicaLogInfo(log.topic, log.partition, log.size_in_bytes,
                           _offset_lag(logs.get_log(log.topic, log.partition), log, future), future)
            for log, future in chosen], status.total_bytes, status.usable_bytes))
    return described


def _offset_lag(current: PartitionLog | None, log: PartitionLog, future: bool) -> int:
    if current is None:
        return INVALID_OFFSET_LAG
    if future:
        return current.log_end_offset - log.log_end_offset
    return max(current.high_watermark - log.log_end_offset, 0)
