"""LogSegment: appends with sparse indexes, header-walking reads, timestamp search, truncation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from logtest_util import NOW, SMALL, batch
from pybroker.log import LogConfig, LogSegment
from pybroker.log.file_names import filename_prefix, offset_from_filename
from pybroker.records.batch import RecordBatch, iter_batches, set_base_offset


def _fill(seg: LogSegment, count: int, records: int = 2, *, start: int | None = None,
          ts_step: int = 10) -> list[bytes]:
    """Append ``count`` batches of ``records`` records with increasing timestamps."""
    written = []
    offset = seg.base_offset if start is None else start
    for i in range(count):
        b = batch(records, ts=NOW + i * 100, ts_step=ts_step)
        set_base_offset(b, 0, offset)
        rb = RecordBatch(b)
        seg.append(rb.last_offset, rb.max_timestamp, rb.last_offset, b)
        written.append(bytes(b))
        offset = rb.last_offset + 1
    return written


def _segment(tmp_path: Path, base: int = 0, config: LogConfig = SMALL) -> LogSegment:
    return LogSegment.open(str(tmp_path), base, config, created_ms=NOW, active=True)


def test_segment_files_are_named_by_20_digit_base_offset(tmp_path: Path) -> None:
    seg = _segment(tmp_path, 368769)
    assert sorted(os.listdir(tmp_path)) == [
        "00000000000000368769.index", "00000000000000368769.log", "00000000000000368769.timeindex"]
    assert filename_prefix(5) == "00000000000000000005"
    assert offset_from_filename("00000000000000368769.log.deleted") == 368769
    with pytest.raises(ValueError):
        offset_from_filename("leader-epoch-checkpoint")
    seg.close()


def test_append_adds_sparse_index_entries_keyed_by_largest_offset(tmp_path: Path) -> None:
    seg = _segment(tmp_path, 1000)
    written = _fill(seg, 20)
    sizes = [len(b) for b in written]
    assert seg.size == sum(sizes)
    assert seg.offset_index.entries > 0
    positions = [sum(sizes[:i]) for i in range(len(sizes))]
    for offset, position in seg.offset_index.iter_entries():
        i = positions.index(position)  # every entry points at a batch start...
        assert RecordBatch(written[i]).last_offset == 1000 + offset  # ...keyed by its last offset
    assert seg.next_offset == 1040


def test_read_returns_whole_batches(tmp_path: Path) -> None:
    seg = _segment(tmp_path)
    written = _fill(seg, 10)
    size = len(written[0])
    sl = seg.read(5, size * 3 + size // 2)  # offset 5 is inside the third batch (4..5)
    assert sl is not None
    assert sl.position == size * 2 and sl.size == size * 3
    assert sl.read() == b"".join(written[2:5])
    assert [rb.base_offset for rb in iter_batches(sl.read())] == [4, 6, 8]


def test_read_returns_one_oversized_batch_when_min_one_batch(tmp_path: Path) -> None:
    seg = _segment(tmp_path)
    written = _fill(seg, 3)
    sl = seg.read(0, 10)
    assert sl is not None and sl.read() == written[0]
    empty = seg.read(0, 10, min_one_batch=False)
    assert empty is not None and empty.size == 0


def test_read_stops_before_max_offset_and_past_end_returns_none(tmp_path: Path) -> None:
    seg = _segment(tmp_path)
    written = _fill(seg, 5)
    sl = seg.read(0, 1 << 20, max_offset=6)  # batches 0-1, 2-3, 4-5 end below 6
    assert sl is not None and sl.read() == b"".join(written[:3])
    assert seg.read(10, 1 << 20) is None


def test_find_offset_by_timestamp_returns_exact_record(tmp_path: Path) -> None:
    seg = _segment(tmp_path)
    _fill(seg, 30, records=3, ts_step=10)  # batch i: ts NOW+100i, +10, +20
    assert seg.find_offset_by_timestamp(NOW + 1510) == (46, NOW + 1510)  # batch 15, record 1
    assert seg.find_offset_by_timestamp(NOW + 1505) == (46, NOW + 1510)
    assert seg.find_offset_by_timestamp(NOW) == (0, NOW)
    assert seg.find_offset_by_timestamp(NOW + 10**6) is None
    assert seg.offset_of_max_timestamp() == (89, NOW + 2920)


def test_segment_recover_rebuilds_the_same_indexes(tmp_path: Path) -> None:
    seg = _segment(tmp_path)
    _fill(seg, 40)
    before = (list(seg.offset_index.iter_entries()), seg.next_offset)
    assert seg.recover(SMALL.max_message_bytes) == 0
    # Recovery indexes per batch; append indexes per append: with one batch per append they match.
    assert (list(seg.offset_index.iter_entries()), seg.next_offset) == before
    assert seg.time_index.entries > 0


def test_segment_truncate_to_removes_straddling_batch(tmp_path: Path) -> None:
    seg = _segment(tmp_path)
    written = _fill(seg, 10)
    removed = seg.truncate_to(7)  # batch 6-7 straddles: removed whole
    assert removed == sum(len(b) for b in written[3:])
    assert seg.next_offset == 6
    assert seg.size == sum(len(b) for b in written[:3])
    assert seg.offset_index.last_offset < 7


def test_should_roll_by_bytes_time_and_offset_overflow(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=300, segment_ms=1000)
    seg = _segment(tmp_path, 0, config)
    assert not seg.should_roll(10**6, NOW + 10**9, config)  # never roll an empty segment
    _fill(seg, 1)
    assert seg.should_roll(300, NOW, config)
    assert not seg.should_roll(10, NOW, config)
    assert seg.should_roll(10, NOW + 1001, config)  # wall clock since creation
    assert seg.should_roll(10, NOW, config, max_timestamp=NOW + 1011)  # record time since first batch (max ts NOW+10)
    assert seg.should_roll(10, NOW, config, max_offset=2**31 + 5)
