"""PartitionLog: offsets, stamping, rolling, reads, timestamps, retention, truncation, flush."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from logtest_util import NOW, SMALL, batch, open_log, read_all
from pybroker.log import (
    LogConfig,
    OffsetOutOfRangeError,
    SliceUnavailableError,
    UnexpectedAppendOffsetError,
)
from pybroker.records.batch import RecordBatch, iter_batches, validate_batch


def test_append_assigns_offsets_and_stamps_leader_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = log.append_as_leader(batch(3), leader_epoch=7, now_ms=NOW)
    b = batch(2)
    second = log.append_as_leader(b, leader_epoch=8, now_ms=NOW)
    assert (first.first_offset, first.last_offset, second.first_offset, second.last_offset) == (0, 2, 3, 4)
    assert second.log_append_time == -1 and not second.duplicate
    rb = RecordBatch(b)  # stamped in place
    assert (rb.base_offset, rb.partition_leader_epoch) == (3, 8)
    validate_batch(b)
    assert log.log_end_offset == 5


def test_log_append_time_stamps_max_timestamp_and_keeps_crc_valid(tmp_path: Path) -> None:
    log = open_log(tmp_path, dataclasses.replace(SMALL, message_timestamp_type="LogAppendTime"))
    info = log.append_as_leader(batch(2, ts=5), leader_epoch=0, now_ms=NOW + 42)
    assert info.log_append_time == info.max_timestamp == NOW + 42
    stored = log.read(0, 1000).slices
    assert stored is not None
    rb = validate_batch(stored.read())
    assert rb.max_timestamp == NOW + 42 and rb.timestamp_type == 1
    assert [r.timestamp for r in rb.records()] == [NOW + 42, NOW + 42]


def test_roll_by_segment_bytes_and_ms(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, segment_bytes=500, segment_ms=60_000)
    log = open_log(tmp_path, config)
    size = len(batch(2))
    for _ in range(500 // size):
        log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) == 1
    log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)  # would pass 500 bytes
    assert [s.base_offset for s in log.segments] == [0, 2 * (500 // size)]
    assert all(s.size <= 500 for s in log.segments)
    # Time: the next batch carries a timestamp segment.ms after the segment's first batch.
    log.append_as_leader(batch(1, ts=NOW + 60_001), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) == 3
    # maybe_roll: wall-clock age of an idle active segment.
    assert not log.maybe_roll(NOW + 1000)
    assert log.maybe_roll(NOW + 60_001)
    assert len(log.segments) == 4 and log.active_segment.size == 0
    assert not log.maybe_roll(NOW + 10**9)  # an empty segment never rolls


def test_rolled_segment_indexes_are_trimmed(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for _ in range(30):
        log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    sealed, active = log.segments[0], log.active_segment
    assert os.path.getsize(sealed.offset_index.path) == sealed.offset_index.entries * 8
    assert os.path.getsize(sealed.time_index.path) == sealed.time_index.entries * 12
    assert os.path.getsize(active.offset_index.path) == SMALL.segment_index_bytes


def test_index_lookup_exact_across_many_small_segments(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, segment_bytes=300, index_interval_bytes=0)
    log = open_log(tmp_path, config)
    written = {}
    for i in range(200):
        n = 1 + i % 3
        b = batch(n)
        info = log.append_as_leader(b, leader_epoch=0, now_ms=NOW)
        written[info.first_offset] = (info.last_offset, bytes(b))
    assert len(log.segments) > 40
    log.close()
    log = open_log(tmp_path, config, clean_shutdown=True)
    for first, (last, data) in written.items():
        for offset in range(first, last + 1):
            got = log.read(offset, 1).slices
            assert got is not None and got.read() == data, offset


def test_read_returns_whole_batches_from_one_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    sizes = []
    for _ in range(30):
        b = batch(2)
        sizes.append(len(b))
        log.append_as_leader(b, leader_epoch=0, now_ms=NOW)
    log.set_high_watermark(60)
    second = log.segments[1].base_offset
    info = log.read(second - 2, 1 << 20)
    assert info.slices is not None
    batches = list(iter_batches(info.slices.read()))
    assert batches[-1].last_offset == second - 1  # stops at the segment end, like Kafka
    assert (info.log_start_offset, info.log_end_offset, info.high_watermark) == (0, 60, 60)
    partial = log.read(0, sizes[0] * 2 + 5).slices
    assert partial is not None and partial.size == sizes[0] * 2


def test_offset_out_of_range(tmp_path: Path) -> None:
    log = open_log(tmp_path, log_start_offset=0)
    for _ in range(3):
        log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    with pytest.raises(OffsetOutOfRangeError) as exc:
        log.read(7, 100)
    assert (exc.value.offset, exc.value.log_start, exc.value.log_end) == (7, 0, 6)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    empty = log.read(6, 100)  # LEO itself is valid and empty
    assert empty.slices is None and empty.log_end_offset == 6


def test_read_stops_at_max_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for _ in range(5):
        log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    sl = log.read(0, 1 << 20, max_offset=4).slices
    assert sl is not None and [b.base_offset for b in iter_batches(sl.read())] == [0, 2]
    assert log.read(4, 1 << 20, max_offset=4).slices is None


def test_time_index_lookup(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(60):
        log.append_as_leader(batch(3, ts=NOW + 100 * i, ts_step=10), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) > 2
    assert log.fetch_offset_by_timestamp(NOW + 100 * 45 + 15) == (45 * 3 + 2, NOW + 100 * 45 + 20)
    assert log.fetch_offset_by_timestamp(0) == (0, NOW)
    assert log.fetch_offset_by_timestamp(NOW + 10**6) is None
    assert log.fetch_offset_by_timestamp(-2) == (0, -1)
    assert log.fetch_offset_by_timestamp(-1) == (180, -1)
    assert log.latest_timestamp_offset() == (179, NOW + 5920)
    log.close()
    log = open_log(tmp_path, clean_shutdown=True)
    assert log.fetch_offset_by_timestamp(NOW + 100 * 45 + 15) == (137, NOW + 4520)
    assert log.latest_timestamp_offset() == (179, NOW + 5920)


def test_latest_timestamp_offset_finds_first_record_with_max_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert log.latest_timestamp_offset() == (-1, -1)
    log.append_as_leader(batch(3, ts=NOW + 50), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(batch(3, ts=NOW + 900, ts_step=-100), leader_epoch=0, now_ms=NOW)
    log.append_as_leader(batch(1, ts=NOW), leader_epoch=0, now_ms=NOW)
    assert log.latest_timestamp_offset() == (3, NOW + 900)


def test_retention_by_time_and_size_advances_log_start(tmp_path: Path) -> None:
    config = dataclasses.replace(SMALL, retention_ms=10_000)
    log = open_log(tmp_path, config)
    for i in range(40):
        log.append_as_leader(batch(2, ts=NOW + i * 1000), leader_epoch=0, now_ms=NOW)
    log.set_high_watermark(log.log_end_offset)
    segments = log.segments
    # Time: segments whose newest record is older than 10 s at NOW + 25 s.
    expected = [s for s in segments[:-1] if NOW + 25_000 - s.max_timestamp_so_far > 10_000]
    assert log.delete_old_segments(NOW + 25_000) == len(expected) > 0
    assert log.log_start_offset == log.segments[0].base_offset == segments[len(expected)].base_offset
    assert not any(os.path.exists(s.log_path) for s in expected)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    # Size: keep at most two segments' worth of bytes.
    log.update_config(dataclasses.replace(config, retention_ms=-1, retention_bytes=2 * segments[0].size))
    log.delete_old_segments(NOW + 25_000)
    assert log.size_in_bytes <= 2 * segments[0].size
    assert log.log_start_offset == log.segments[0].base_offset
    assert read_all(log)[-1] == read_all(log, log.log_end_offset - 2)[0]


def test_retention_never_passes_the_high_watermark(tmp_path: Path) -> None:
    log = open_log(tmp_path, dataclasses.replace(SMALL, retention_ms=0))
    for _ in range(40):
        log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    third = log.segments[2].base_offset
    log.set_high_watermark(third)
    assert log.delete_old_segments(NOW + 10**9) == 2
    assert log.log_start_offset == third


def test_retention_rolls_and_deletes_an_expired_active_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path, dataclasses.replace(SMALL, retention_ms=1000))
    log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    log.set_high_watermark(2)
    assert log.delete_old_segments(NOW + 5000) == 1
    assert [s.base_offset for s in log.segments] == [2]
    assert (log.log_start_offset, log.log_end_offset) == (2, 2)
    assert log.delete_old_segments(NOW + 10**9) == 0  # an empty active segment stays


def test_deleted_segment_slice_fails_cleanly_after_delete_delay(tmp_path: Path) -> None:
    log = open_log(tmp_path, dataclasses.replace(SMALL, retention_ms=0, file_delete_delay_ms=1000))
    for _ in range(30):
        log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    log.set_high_watermark(log.log_end_offset)
    taken = log.read(0, 1 << 20).slices
    assert taken is not None
    data = taken.read()
    log.delete_old_segments(NOW + 10)
    assert any(n.endswith(".log.deleted") for n in os.listdir(tmp_path))
    assert taken.read() == data  # within file.delete.delay.ms the slice still reads
    log.delete_old_segments(NOW + 2000)
    assert not any(n.endswith(".deleted") for n in os.listdir(tmp_path))
    with pytest.raises(SliceUnavailableError):
        taken.read()
    with pytest.raises(SliceUnavailableError):
        taken.fileno()


def test_truncate_to(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    written = []
    for _ in range(40):
        b = batch(2)
        log.append_as_leader(b, leader_epoch=0, now_ms=NOW)
        written.append(bytes(b))
    log.set_high_watermark(80)
    assert not log.truncate_to(80)
    third = log.segments[2].base_offset
    assert log.truncate_to(third + 4)  # batch boundary inside the third segment
    assert log.log_end_offset == third + 4 and log.high_watermark == third + 4
    assert len(log.segments) == 3
    assert log.truncate_to(third - 1)  # mid-batch: the whole batch goes
    assert log.log_end_offset == third - 2
    assert read_all(log) == written[: (third - 2) // 2]
    info = log.append_as_leader(batch(1), leader_epoch=1, now_ms=NOW)
    assert info.first_offset == third - 2
    log.close()
    log = open_log(tmp_path, clean_shutdown=True)
    assert log.log_end_offset == third - 1


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for _ in range(30):
        log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (1000, 1000, 1000)
    assert [s.base_offset for s in log.segments] == [1000]
    assert log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW).first_offset == 1000
    log.close()
    log = open_log(tmp_path, clean_shutdown=True)
    assert (log.log_start_offset, log.log_end_offset) == (1000, 1001)


def test_flush_advances_recovery_point_and_flush_messages_policy(tmp_path: Path) -> None:
    log = open_log(tmp_path, dataclasses.replace(SMALL, flush_messages=5))
    log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    assert log.recovery_point == 0 and log.unflushed_messages == 2
    log.append_as_leader(batch(3), leader_epoch=0, now_ms=NOW)
    assert log.recovery_point == 5
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    log.flush(up_to=5)
    assert log.recovery_point == 5
    log.flush()
    assert log.recovery_point == 6


def test_append_as_follower_keeps_offsets_and_checks_continuity(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    for _ in range(20):
        leader.append_as_leader(batch(2), leader_epoch=3, now_ms=NOW)
    data = b"".join(read_all(leader))
    follower = open_log(tmp_path / "follower")
    cut = data[: len(data) // 2 + 7]  # ends in the middle of a batch: ignored
    info = follower.append_as_follower(cut)
    assert info.first_offset == 0 and follower.log_end_offset == info.last_offset + 1
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(data)  # starts below the LEO
    rest = data[sum(len(b) for b in read_all(follower)):]
    follower.append_as_follower(rest)
    assert read_all(follower) == read_all(leader)
    assert len(follower.segments) == len(leader.segments)


def test_reopen_after_clean_close_keeps_offsets_and_data(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for _ in range(25):
        log.append_as_leader(batch(2), leader_epoch=0, now_ms=NOW)
    before = read_all(log)
    log.close()
    log = open_log(tmp_path, clean_shutdown=True, log_start_offset=0, high_watermark=30)
    assert log.log_end_offset == 50 and log.high_watermark == 30
    assert read_all(log) == before
    log.set_high_watermark(10**9)
    assert log.high_watermark == 50
