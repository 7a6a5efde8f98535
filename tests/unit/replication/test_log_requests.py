"""ListOffsets, OffsetForLeaderEpoch, DeleteRecords and DescribeLogDirs as the replica manager answers them
(`replication/log_requests.py`), without a socket: a real log manager on a temporary directory and a real
ReplicaManager, called with plain values as the handlers call them."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from pybroker.common.clock import ManualClock
from pybroker.common.io_executor import IoExecutor
from pybroker.log import LogConfig
from pybroker.log.manager import LogManager
from pybroker.records.record import RecordInput, build_batch
from pybroker.replication.errors import FencedLeaderEpochError, NotLeaderError, UnknownPartitionError
from pybroker.replication.log_requests import (
    DEBUGGING_REPLICA_ID,
    EARLIEST_PENDING_UPLOAD_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    DeletedRecords,
    FoundOffset,
    delete_records_on_leader,
    describe_log_dirs,
    fetch_offset_for_timestamp,
    last_offset_for_leader_epoch,
)
from pybroker.replication.manager import ReplicaManager

NOW = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=1 << 20)
TOPIC_ID = uuid.UUID(int=1)


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    logs = LogManager([str(tmp_path)], CONFIG)
    logs.startup(NOW)
    yield ReplicaManager(logs, 0, ManualClock(wall_ms=NOW))
    logs.shutdown()


def lead(replicas: ReplicaManager, *, index: int = 0, epoch: int = 0, followers: tuple[int, ...] = ()) -> None:
    """Lead t-<index> at ``epoch``; ``followers`` are replicas outside the ISR, so the high watermark stays put."""
    replicas.become_leader("t", index, TOPIC_ID, leader_epoch=epoch, replicas=(0, *followers), isr=(0,),
                           config=CONFIG, min_insync_replicas=1)


def append(replicas: ReplicaManager, *timestamps: int, index: int = 0) -> None:
    for timestamp in timestamps:
        batch = build_batch([RecordInput(None, b"v", timestamp=timestamp)])
        replicas.append("t", index, bytearray(batch), required_acks=1, now_ms=NOW)


def list_offset(replicas: ReplicaManager, timestamp: int, *, replica_id: int = -1, current_leader_epoch: int = -1,
                index: int = 0) -> FoundOffset:
    async def run() -> FoundOffset:
        io = IoExecutor(1)
        try:
            return await fetch_offset_for_timestamp(replicas, io, "t", index, timestamp, replica_id=replica_id,
                                                    read_committed=False, current_leader_epoch=current_leader_epoch)
        finally:
            io.shutdown()
    return asyncio.run(run())


def test_list_offsets_answers_earliest_latest_max_and_by_timestamp(replicas: ReplicaManager) -> None:
    lead(replicas, epoch=4)
    append(replicas, NOW, NOW + 20, NOW + 10)
    assert list_offset(replicas, EARLIEST_TIMESTAMP) == FoundOffset(0, -1, 4)
    assert list_offset(replicas, LATEST_TIMESTAMP) == FoundOffset(3, -1, 4)
    assert list_offset(replicas, MAX_TIMESTAMP) == FoundOffset(1, NOW + 20, 4)
    assert list_offset(replicas, NOW + 15) == FoundOffset(1, NOW + 20, 4)  # the first at or after it
    assert list_offset(replicas, NOW + 30) == FoundOffset()
    assert list_offset(replicas, EARLIEST_PENDING_UPLOAD_TIMESTAMP) == FoundOffset()


def test_a_consumer_sees_up_to_the_high_watermark_a_follower_up_to_the_log_end(replicas: ReplicaManager) -> None:
    lead(replicas, followers=(1,))
    replicas.partition("t", 0).isr = (0, 1)  # the follower is in sync but has fetched nothing: no watermark move
    append(replicas, NOW, NOW + 10)
    assert list_offset(replicas, LATEST_TIMESTAMP) == FoundOffset(0, -1, 0)
    assert list_offset(replicas, NOW) == FoundOffset()  # at or past the high watermark
    assert list_offset(replicas, LATEST_TIMESTAMP, replica_id=1).offset == 2
    assert list_offset(replicas, NOW + 5, replica_id=1) == FoundOffset(1, NOW + 10, 0)


def test_list_offsets_checks_the_leader_epoch_and_the_debugging_id_asks_any_replica(
        replicas: ReplicaManager) -> None:
    lead(replicas, epoch=2)
    append(replicas, NOW)
    with pytest.raises(FencedLeaderEpochError):
        list_offset(replicas, LATEST_TIMESTAMP, current_leader_epoch=1)
    assert list_offset(replicas, LATEST_TIMESTAMP, replica_id=DEBUGGING_REPLICA_ID) == FoundOffset(1, -1, 2)
    with pytest.raises(UnknownPartitionError):
        list_offset(replicas, LATEST_TIMESTAMP, replica_id=DEBUGGING_REPLICA_ID, index=9)
    with pytest.raises((NotLeaderError, UnknownPartitionError)):
        list_offset(replicas, LATEST_TIMESTAMP, index=9)


def test_offset_for_leader_epoch_answers_where_each_epoch_ends(replicas: ReplicaManager) -> None:
    lead(replicas, epoch=0)
    append(replicas, NOW, NOW)
    lead(replicas, epoch=3)
    append(replicas, NOW)
    assert last_offset_for_leader_epoch(replicas, "t", 0, 0, -1) == (0, 2)
    assert last_offset_for_leader_epoch(replicas, "t", 0, 2, -1) == (0, 2)  # the largest epoch at or below
    assert last_offset_for_leader_epoch(replicas, "t", 0, 3, 3) == (3, 3)  # the current epoch: the log end
    with pytest.raises(FencedLeaderEpochError):
        last_offset_for_leader_epoch(replicas, "t", 0, 3, 2)


def test_delete_records_moves_the_log_start_and_waits_for_replicas_behind(replicas: ReplicaManager) -> None:
    lead(replicas)
    append(replicas, NOW, NOW, NOW)
    assert delete_records_on_leader(replicas, "t", 0, 2, alive={0}) == DeletedRecords(2, 2)
    assert replicas.partition("t", 0).log.log_start_offset == 2
    assert not delete_records_on_leader(replicas, "t", 0, -1, alive={0}).replicas_behind  # -1: the high watermark
    lead(replicas, index=1, followers=(1,))
    append(replicas, NOW, NOW, index=1)
    deleted = delete_records_on_leader(replicas, "t", 1, 1, alive={0, 1})
    assert deleted.offset == 1 and deleted.replicas_behind  # the follower's log still starts at 0
    assert not delete_records_on_leader(replicas, "t", 1, 1, alive={0}).replicas_behind  # a dead broker's is not counted


def test_describe_log_dirs_lists_each_replica_with_its_size_and_lag(replicas: ReplicaManager, tmp_path: Path) -> None:
    lead(replicas, index=0)
    lead(replicas, index=1)
    append(replicas, NOW, index=1)
    [described] = describe_log_dirs(replicas, None)
    assert described.path == str(tmp_path) and described.online and described.total_bytes > 0
    assert [(r.topic, r.partition, r.offset_lag, r.is_future) for r in described.replicas] == \
        [("t", 0, 0, False), ("t", 1, 0, False)]
    assert described.replicas[0].size == 0 < described.replicas[1].size
    [only] = describe_log_dirs(replicas, {("t", 1)})
    assert [(r.topic, r.partition) for r in only.replicas] == [("t", 1)]
