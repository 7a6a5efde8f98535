"""OffsetIndex / TimeIndex: lookups, monotonic appends, truncation, trimming and sanity checks."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest

from pybroker.log import CorruptLogError, OffsetIndex, TimeIndex


def test_offset_index_lookup_on_empty_index_returns_base(tmp_path: Path) -> None:
    idx = OffsetIndex(str(tmp_path / "00000000000000000100.index"), 100, 4096, preallocate=True)
    assert idx.entries == 0
    assert idx.lookup(0) == (100, 0)
    assert idx.lookup(500) == (100, 0)
    assert os.path.getsize(idx.path) == 4096  # preallocated while active


def test_offset_index_lookup_returns_greatest_entry_at_or_below_target(tmp_path: Path) -> None:
    # 2000 entries: more than the 8 KiB warm section, so both search halves are exercised.
    idx = OffsetIndex(str(tmp_path / "a.index"), 1000, 8 * 4000, preallocate=True)
    keys = list(range(1003, 1003 + 2000 * 7, 7))
    for i, key in enumerate(keys):
        assert idx.append(key, 100 * (i + 1))
    rng = random.Random(7)
    for target in [0, 1000, 1002, 1003, 1004, keys[-1], keys[-1] + 100] + [rng.randrange(1000, 16000) for _ in range(300)]:
        below = [(k, 100 * (i + 1)) for i, k in enumerate(keys) if k <= target]
        assert idx.lookup(target) == (below[-1] if below else (1000, 0)), target


def test_offset_index_append_ignores_non_increasing_entries(tmp_path: Path) -> None:
    idx = OffsetIndex(str(tmp_path / "a.index"), 0, 4096, preallocate=True)
    assert idx.append(10, 100)
    assert not idx.append(10, 200)  # same offset
    assert not idx.append(5, 300)  # lower offset
    assert not idx.append(20, 100)  # same position
    assert idx.append(20, 200)
    assert idx.entries == 2 and idx.last_offset == 20


def test_offset_index_stops_at_full_without_raising(tmp_path: Path) -> None:
    idx = OffsetIndex(str(tmp_path / "a.index"), 0, 24, preallocate=True)
    assert [idx.append(i, i * 10) for i in (1, 2, 3, 4)] == [True, True, True, False]
    assert idx.is_full


def test_offset_index_truncate_to_drops_entries_at_or_above_offset(tmp_path: Path) -> None:
    idx = OffsetIndex(str(tmp_path / "a.index"), 0, 4096, preallocate=True)
    for off in (10, 20, 30, 40):
        idx.append(off, off * 10)
    idx.truncate_to(30)
    assert idx.entries == 2 and idx.last_offset == 20
    idx.truncate_to(25)
    assert idx.entries == 2
    idx.truncate_to(5)
    assert idx.entries == 0


def test_offset_index_trim_then_reopen_keeps_entries(tmp_path: Path) -> None:
    path = str(tmp_path / "a.index")
    idx = OffsetIndex(path, 50, 4096, preallocate=True)
    idx.append(60, 10)
    idx.append(70, 20)
    idx.close()
    assert os.path.getsize(path) == 16
    again = OffsetIndex(path, 50, 4096)
    assert again.entries == 2 and again.lookup(65) == (60, 10)
    again.sanity_check(log_size=100)
    with open(path, "rb") as f:  # on-disk format: int32 relative offset, int32 position
        assert f.read() == struct.pack(">iiii", 10, 10, 20, 20)


def test_index_sanity_check_rejects_torn_entry(tmp_path: Path) -> None:
    path = tmp_path / "a.index"
    path.write_bytes(struct.pack(">ii", 1, 10) + b"\x00\x00\x00")
    with pytest.raises(CorruptLogError, match="multiple"):
        OffsetIndex(str(path), 0, 4096).sanity_check()


def test_index_sanity_check_rejects_zero_filled_preallocated_tail(tmp_path: Path) -> None:
    path = tmp_path / "a.index"
    path.write_bytes(struct.pack(">ii", 1, 10) + bytes(64))  # what a crash leaves behind
    with pytest.raises(CorruptLogError, match="does not follow"):
        OffsetIndex(str(path), 0, 4096).sanity_check()


def test_index_sanity_check_rejects_position_beyond_log_end(tmp_path: Path) -> None:
    path = tmp_path / "a.index"
    path.write_bytes(struct.pack(">ii", 1, 500))
    with pytest.raises(CorruptLogError, match="beyond"):
        OffsetIndex(str(path), 0, 4096).sanity_check(log_size=100)


def test_time_index_lookup(tmp_path: Path) -> None:
    idx = TimeIndex(str(tmp_path / "a.timeindex"), 100, 4096, preallocate=True)
    assert idx.lookup(5) == (-1, 100)
    for ts, off in ((1000, 105), (2000, 110), (3000, 110), (4000, 130)):
        assert idx.maybe_append(ts, off)
    assert not idx.maybe_append(3500, 140)  # timestamps must grow
    assert idx.lookup(999) == (-1, 100)
    assert idx.lookup(1000) == (1000, 105)
    assert idx.lookup(2999) == (2000, 110)
    assert idx.lookup(10**12) == (4000, 130)
    idx.sanity_check()
    idx.truncate_to(110)  # both entries at offset 110 go
    assert idx.entries == 1 and idx.last_entry == (1000, 105)


def test_time_index_keeps_one_slot_for_the_final_roll_entry(tmp_path: Path) -> None:
    idx = TimeIndex(str(tmp_path / "a.timeindex"), 0, 36, preallocate=True)  # 3 slots
    assert idx.maybe_append(1, 1) and idx.maybe_append(2, 2)
    assert idx.is_full
    assert not idx.maybe_append(3, 3)
    assert idx.maybe_append(3, 3, skip_full_check=True)
    assert not idx.maybe_append(4, 4, skip_full_check=True)


def test_time_index_sanity_check_rejects_decreasing_timestamps(tmp_path: Path) -> None:
    path = tmp_path / "a.timeindex"
    path.write_bytes(struct.pack(">qiqi", 2000, 1, 1000, 2))
    with pytest.raises(CorruptLogError):
        TimeIndex(str(path), 0, 4096).sanity_check()


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_an_index_holds_no_descriptor_at_rest_and_its_entries_reach_the_file(tmp_path: Path) -> None:
    """Kafka's indexes are mapped with their files closed: a partition then costs one descriptor, its .log."""
    before = _open_descriptors()
    offsets = OffsetIndex(str(tmp_path / "a.index"), 0, 4096, preallocate=True)
    times = TimeIndex(str(tmp_path / "a.timeindex"), 0, 4096, preallocate=True)
    assert offsets.append(10, 100) and times.maybe_append(1000, 10)
    assert _open_descriptors() == before
    offsets.trim_to_valid_size()  # a resize opens the file only for as long as it takes
    offsets.preallocate()
    assert offsets.append(20, 200)
    offsets.flush()
    assert _open_descriptors() == before
    with open(offsets.path, "rb") as f:
        assert struct.unpack(">iiii", f.read(16)) == (10, 100, 20, 200)
    offsets.close()
    times.close()
    assert os.path.getsize(offsets.path) == 16 and os.path.getsize(times.path) == 12


def test_a_resize_that_cannot_open_the_file_leaves_the_index_usable(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    idx = OffsetIndex(str(tmp_path / "a.index"), 0, 4096, preallocate=True)
    assert idx.append(10, 100)

    def out_of_descriptors(*_args: object) -> int:
        raise OSError(24, "Too many open files")

    with monkeypatch.context() as patch:
        patch.setattr(os, "open", out_of_descriptors)
        with pytest.raises(OSError):
            idx.trim_to_valid_size()
    assert idx.lookup(15) == (10, 100) and idx.append(20, 200)  # still mapped at its old size
