"""`leader-epoch-checkpoint`: Kafka's file format, written by `Partition` on every change of its epoch
cache and read back at start-up instead of rescanning the log (rebuilt when missing or corrupt)."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from pybroker.log import LogConfig, PartitionLog
from pybroker.records.record import RecordInput, build_batch
from pybroker.replication.epoch_cache import EpochCache
from pybroker.replication.partition import Partition, epoch_cache_of

NOW = 1_000_000
CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=64, segment_index_bytes=4096, file_delete_delay_ms=0,
                   retention_ms=-1)


def open_partition(path: Path) -> Partition:
    log = PartitionLog.open(str(path), "t", 0, CONFIG, now_ms=NOW)
    return Partition("t", 0, uuid.UUID(int=1), log, 0, -1, 0, (0,), (0,), epoch_cache=epoch_cache_of(log))


def lead(partition: Partition, epoch: int, records: int) -> None:
    partition.make_leader(leader_epoch=epoch, replicas=(0,), isr=(0,), zk_version=0, now_ms=NOW)
    for n in range(records):
        partition.append_as_leader(bytearray(build_batch([RecordInput(None, b"v%d" % n)])), required_acks=1,
                                   now_ms=NOW)


def checkpoint_text(path: Path) -> str:
    return (path / "leader-epoch-checkpoint").read_text()


def test_each_new_leader_epoch_is_written_in_kafkas_format(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    lead(partition, 0, 3)
    assert checkpoint_text(tmp_path) == "0\n1\n0 0\n"
    lead(partition, 4, 2)
    assert checkpoint_text(tmp_path) == "0\n2\n0 0\n4 3\n"
    assert not (tmp_path / "leader-epoch-checkpoint.tmp").exists()


def test_restart_reads_the_file_rather_than_the_batch_headers(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    lead(partition, 2, 3)
    partition.log.close()
    # Only the file says epoch 1 started at 1, so finding it proves the headers were not rescanned.
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n1 1\n")
    assert open_partition(tmp_path).epoch_cache.entries == [(0, 0), (1, 1)]


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
def test_a_missing_or_corrupt_file_is_rebuilt_from_the_log_and_rewritten(
        tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture) -> None:
    partition = open_partition(tmp_path)
    lead(partition, 0, 2)
    lead(partition, 3, 2)
    partition.log.close()
    if damage == "missing":
        (tmp_path / "leader-epoch-checkpoint").unlink()
    else:
        (tmp_path / "leader-epoch-checkpoint").write_text("0\n5\n0 zero\n")
    with caplog.at_level(logging.WARNING, logger="pybroker.replication"):
        reopened = open_partition(tmp_path)
    assert reopened.epoch_cache.entries == [(0, 0), (3, 2)]
    assert checkpoint_text(tmp_path) == "0\n2\n0 0\n3 2\n"
    assert len([r for r in caplog.records if "rebuilding the leader epoch cache" in r.getMessage()]) == 1


def test_a_new_empty_log_gets_its_file_with_its_first_epoch_without_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="pybroker.replication"):
        partition = open_partition(tmp_path)
        assert not (tmp_path / "leader-epoch-checkpoint").exists()  # one fsync fewer per created partition
        lead(partition, 0, 1)
    assert checkpoint_text(tmp_path) == "0\n1\n0 0\n"
    assert not caplog.records


def test_truncation_from_the_end_is_written(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    lead(partition, 0, 2)
    lead(partition, 1, 2)
    partition.truncate_to(2)
    assert checkpoint_text(tmp_path) == "0\n1\n0 0\n"


def test_entries_beyond_the_recovered_log_end_are_dropped_at_start_up(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    lead(partition, 0, 2)
    partition.log.close()
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n7 9\n")
    assert open_partition(tmp_path).epoch_cache.entries == [(0, 0)]
    assert checkpoint_text(tmp_path) == "0\n1\n0 0\n"


def test_a_moved_log_start_keeps_the_epoch_covering_it_moved_to_it(tmp_path: Path) -> None:
    partition = open_partition(tmp_path)
    lead(partition, 0, 2)
    lead(partition, 2, 2)
    lead(partition, 5, 2)
    partition.log.increment_log_start_offset(3)
    lead(partition, 5, 1)
    assert checkpoint_text(tmp_path) == "0\n2\n2 3\n5 4\n"


def cache() -> EpochCache:
    return EpochCache([(0, 0), (2, 10), (5, 20)])


@pytest.mark.parametrize("start, entries", [
    (0, [(0, 0), (2, 10), (5, 20)]),
    (10, [(2, 10), (5, 20)]),
    (15, [(2, 15), (5, 20)]),
    (25, [(5, 25)]),
])
def test_truncate_from_start_keeps_the_entry_covering_the_new_start(
        start: int, entries: list[tuple[int, int]]) -> None:
    truncated = cache()
    assert truncated.truncate_from_start(start) == (entries != cache().entries)
    assert truncated.entries == entries


def test_an_epoch_truncated_from_the_start_ends_where_the_first_kept_one_starts() -> None:
    truncated = cache()
    truncated.truncate_from_start(15)
    assert truncated.end_offset_for(0, 30) == (0, 15)
    assert truncated.end_offset_for(2, 30) == (2, 20)
