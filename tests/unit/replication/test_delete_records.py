"""DeleteRecords on the partition: the leader's log start, the followers taking it from their fetches
(never past their own high watermark), and the low watermark over the replicas on live brokers."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest

from pybroker.log import LogConfig, PartitionLog
from pybroker.log.errors import OffsetOutOfRangeError
from pybroker.records.record import RecordInput, build_batch
from pybroker.replication.errors import NotLeaderError, PolicyViolationError
from pybroker.replication.partition import HIGH_WATERMARK, Partition

REPLICAS = (0, 1, 2)
NOW = 1_000_000
CONFIG = LogConfig(segment_bytes=4096, file_delete_delay_ms=0, retention_ms=-1)


def replica(root: Path, broker_id: int, config: LogConfig = CONFIG) -> Partition:
    log = PartitionLog.open(str(root / f"r{broker_id}"), "t", 0, config, now_ms=NOW)
    partition = Partition("t", 0, uuid.UUID(int=1), log, broker_id, 0, 0, REPLICAS, REPLICAS, 1)
    if broker_id == 0:
        partition.make_leader(leader_epoch=0, replicas=REPLICAS, isr=REPLICAS, zk_version=0, now_ms=NOW)
    else:
        partition.make_follower(leader_id=0, leader_epoch=0, replicas=REPLICAS, isr=REPLICAS, zk_version=0)
    return partition


def replicate(leader: Partition, follower: Partition) -> None:
    """One fetch round: the leader records the follower's offsets, the follower appends the answer."""
    offset = follower.log.log_end_offset
    leader.record_follower_fetch(follower.broker_id, offset, NOW, log_start_offset=follower.log.log_start_offset)
    leader.maybe_advance_high_watermark()
    info = leader.log.read(offset, 1 << 20)
    follower.append_as_follower(info.slices.read() if info.slices is not None else b"",
                                leader_high_watermark=leader.log.high_watermark, now_ms=NOW,
                                leader_log_start_offset=leader.log.log_start_offset)


@pytest.fixture
def replicas(tmp_path: Path) -> dict[int, Partition]:
    partitions = {r: replica(tmp_path, r) for r in REPLICAS}
    for i in range(10):
        partitions[0].append_as_leader(bytearray(build_batch([RecordInput(None, b"v%d" % i)])), required_acks=-1,
                                       now_ms=NOW)
    for _ in range(3):  # the last round carries the high watermark the earlier ones established
        for r in (1, 2):
            replicate(partitions[0], partitions[r])
    assert [p.log.high_watermark for p in partitions.values()] == [10, 10, 10]
    return partitions


def test_followers_take_the_leaders_log_start_and_the_low_watermark_follows(replicas):
    leader = replicas[0]
    assert leader.delete_records(4) == 4
    assert leader.log.log_start_offset == 4
    assert leader.low_watermark(set(REPLICAS)) == 0  # the followers still report 0
    replicate(leader, replicas[1])  # follower 1 learns 4 ...
    assert replicas[1].log.log_start_offset == 4
    assert leader.low_watermark(set(REPLICAS)) == 0
    replicate(leader, replicas[1])  # ... and reports it in its next fetch
    assert leader.low_watermark(set(REPLICAS)) == 0  # follower 2 has not
    assert leader.low_watermark({0, 1}) == 4  # a dead broker's replica does not count
    replicate(leader, replicas[2])
    replicate(leader, replicas[2])
    assert leader.low_watermark(set(REPLICAS)) == 4
    assert leader.delete_records(2) == 2  # below the start: nothing moves
    assert leader.low_watermark(set(REPLICAS)) == 4


def test_a_replica_never_heard_from_holds_the_low_watermark_at_minus_one(tmp_path: Path):
    leader = replica(tmp_path, 0)
    leader.append_as_leader(bytearray(build_batch([RecordInput(None, b"v")])), required_acks=1, now_ms=NOW)
    leader.followers = {1: dataclasses.replace(leader.followers[1], log_end_offset=1), 2: leader.followers[2]}
    leader.isr = (0,)
    leader.maybe_advance_high_watermark()
    assert leader.delete_records(HIGH_WATERMARK) == 1
    assert leader.low_watermark(set(REPLICAS)) == -1
    assert leader.low_watermark({0}) == 1


def test_a_follower_never_moves_its_start_past_its_own_high_watermark(replicas):
    leader, follower = replicas[0], replicas[1]
    leader.append_as_leader(bytearray(build_batch([RecordInput(None, b"more")])), required_acks=1, now_ms=NOW)
    leader.isr = (0,)
    leader.maybe_advance_high_watermark()
    leader.delete_records(HIGH_WATERMARK)  # 11: the follower holds only 10 and knows 10 committed
    follower.append_as_follower(b"", leader_high_watermark=10, now_ms=NOW, leader_log_start_offset=11)
    assert follower.log.log_start_offset == 10


def test_offsets_and_roles_kafka_refuses(tmp_path: Path, replicas):
    leader = replicas[0]
    with pytest.raises(OffsetOutOfRangeError):
        leader.delete_records(11)
    with pytest.raises(OffsetOutOfRangeError):
        leader.delete_records(-2)
    with pytest.raises(NotLeaderError):
        replicas[1].delete_records(1)
    with pytest.raises(NotLeaderError):
        replicas[1].low_watermark(set(REPLICAS))
    compacted = replica(tmp_path / "compacted", 0, dataclasses.replace(CONFIG, cleanup_policy="compact"))
    with pytest.raises(PolicyViolationError):
        compacted.delete_records(0)
    assert leader.log.log_start_offset == 0


def test_only_replicas_are_followers_so_the_follower_table_stays_the_replica_set(replicas):
    """Kafka's followerReplicaOrThrow: a fetch naming any other id (or the leader's own) records nothing."""
    leader = replicas[0]
    for replica_id in (0, 3, 7, 2**31 - 1):
        with pytest.raises(NotLeaderError):
            leader.record_follower_fetch(replica_id, 10, NOW)
    assert set(leader.followers) == {1, 2}
    assert leader.log.high_watermark == 10
