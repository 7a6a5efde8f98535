"""Crash recovery: torn tails, corrupt batches, missing/corrupt indexes, temp and swap files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from logtest_util import NOW, SMALL, batch, crash, open_log, read_all
from pybroker.log.file_names import filename_prefix


def _log_with(tmp_path: Path, batches: int, records: int = 2) -> tuple[object, list[bytes]]:
    log = open_log(tmp_path)
    written = []
    for i in range(batches):
        b = batch(records, ts=NOW + i)
        log.append_as_leader(b, leader_epoch=0, now_ms=NOW)
        written.append(bytes(b))
    return log, written


def test_recovery_truncates_torn_tail(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log, written = _log_with(tmp_path, 5)
    crash(log)
    log_file = tmp_path / f"{filename_prefix(0)}.log"
    size = log_file.stat().st_size
    with open(log_file, "ab") as f:
        f.write(batch(3)[:40])  # half a batch: the write the crash interrupted
    log = open_log(tmp_path, clean_shutdown=False)
    assert log.log_end_offset == 10
    assert log_file.stat().st_size == size
    assert read_all(log) == written
    assert f"Truncated 40 bytes of invalid data from {log_file}" in caplog.text
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    assert log.log_end_offset == 11


def test_recovery_truncates_corrupt_batch_and_deletes_later_segments(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log, written = _log_with(tmp_path, 60)
    segments = log.segments
    assert len(segments) >= 4
    victim = segments[1]
    crash(log)
    # Flip one byte inside the third batch of the second segment: its CRC no longer matches.
    third = victim.base_offset + 4
    position = sum(len(b) for b in written[victim.base_offset // 2: third // 2])
    with open(victim.log_path, "r+b") as f:
        f.seek(position + 70)
        byte = f.read(1)
        f.seek(position + 70)
        f.write(bytes([byte[0] ^ 0xFF]))
    log = open_log(tmp_path, clean_shutdown=False, recovery_point=0)
    assert log.log_end_offset == third
    assert len(log.segments) == 2
    assert read_all(log) == written[: third // 2]
    assert "CRC mismatch" in caplog.text
    assert "which follows a corrupt segment" in caplog.text


def test_recovery_starts_at_the_segment_holding_the_recovery_point(tmp_path: Path) -> None:
    log, written = _log_with(tmp_path, 60)
    first, active = log.segments[0], log.segments[-1]
    crash(log)
    with open(first.log_path, "r+b") as f:  # damage below the recovery point goes unnoticed
        f.seek(100)
        f.write(b"\xff")
    log = open_log(tmp_path, clean_shutdown=False, recovery_point=active.base_offset)
    assert log.log_end_offset == 120
    assert os.path.getsize(log.segments[0].log_path) == first.size


def test_recovery_rebuilds_missing_index(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log, written = _log_with(tmp_path, 60)
    first = log.segments[0]
    entries = list(first.offset_index.iter_entries())
    time_entries = list(first.time_index.iter_entries())
    log.close()
    os.unlink(first.offset_index.path)
    os.unlink(first.time_index.path)
    log = open_log(tmp_path, clean_shutdown=True)
    assert "Could not find index files" in caplog.text
    rebuilt = log.segments[0]
    assert list(rebuilt.offset_index.iter_entries()) == entries
    assert list(rebuilt.time_index.iter_entries()) == time_entries
    assert read_all(log) == written


def test_recovery_rebuilds_corrupt_index_after_clean_shutdown(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log, written = _log_with(tmp_path, 60)
    path = log.segments[0].offset_index.path
    log.close()
    with open(path, "r+b") as f:
        f.write(b"\x7f\xff\xff\xff\x00\x00\x00\x01")  # first entry now larger than the second
    log = open_log(tmp_path, clean_shutdown=True)
    assert "corrupt index" in caplog.text
    log.segments[0].sanity_check()
    assert read_all(log) == written
    assert log.read(3, 1).slices is not None


def test_unclean_shutdown_with_preallocated_index_recovers_active_segment(tmp_path: Path) -> None:
    log, written = _log_with(tmp_path, 3)
    index_path = log.active_segment.offset_index.path
    crash(log)
    assert os.path.getsize(index_path) == SMALL.segment_index_bytes  # never trimmed
    log = open_log(tmp_path, clean_shutdown=False)
    assert log.log_end_offset == 6 and read_all(log) == written
    log.close()
    assert os.path.getsize(index_path) == log.segments[-1].offset_index.entries * 8


def test_clean_shutdown_skips_recovery(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log, written = _log_with(tmp_path, 30)
    log.close()
    caplog.clear()
    log = open_log(tmp_path, clean_shutdown=True)
    assert "Recovering" not in caplog.text
    assert log.recovery_point == log.log_end_offset == 60
    assert read_all(log) == written


def test_loader_deletes_leftover_temporary_files(tmp_path: Path) -> None:
    log, written = _log_with(tmp_path, 3)
    log.close()
    stray = ["00000000000000000500.log.deleted", "00000000000000000500.index.deleted",
             "00000000000000000000.log.cleaned", "leader-epoch-checkpoint.tmp",
             "00000000000000000900.index", "00000000000000000900.timeindex"]
    for name in stray:
        (tmp_path / name).write_bytes(b"junk")
    log = open_log(tmp_path, clean_shutdown=True)
    assert not set(stray) & set(os.listdir(tmp_path))
    assert read_all(log) == written


def test_loader_completes_interrupted_swap(tmp_path: Path) -> None:
    log, written = _log_with(tmp_path, 60)
    segments = log.segments
    log.close()
    # A cleaner wrote a replacement of segments 0 and 1 as one swap file, then crashed.
    replacement = b"".join(written[: segments[2].base_offset // 2])
    (tmp_path / f"{filename_prefix(0)}.log.swap").write_bytes(replacement)
    (tmp_path / f"{filename_prefix(0)}.index.swap").write_bytes(b"junk")
    log = open_log(tmp_path, clean_shutdown=True)
    assert [s.base_offset for s in log.segments] == [0] + [s.base_offset for s in segments[2:]]
    assert not any(n.endswith(".swap") for n in os.listdir(tmp_path))
    assert read_all(log) == written


def test_directory_copied_mid_write_recovers_all_segments_when_checkpoint_missing(tmp_path: Path) -> None:
    log, written = _log_with(tmp_path / "a", 40)
    log.flush()
    shutil.copytree(tmp_path / "a", tmp_path / "b")  # a snapshot of a live (unclosed) log
    log.close()
    copy = open_log(tmp_path / "b", clean_shutdown=False)
    assert read_all(copy) == written


def _cut_active_tail(log_file: Path, nbytes: int) -> None:
    with open(log_file, "r+b") as f:
        f.truncate(log_file.stat().st_size - nbytes)


def test_clean_shutdown_with_torn_active_segment_is_recovered_not_cut_to_base(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log, written = _log_with(tmp_path, 60)
    active = log.segments[-1]
    assert active.base_offset > 0 and active.offset_index.entries > 0
    active_path, end = Path(active.log_path), log.log_end_offset
    log.close()  # a clean shutdown: the recovery point is the log end
    _cut_active_tail(active_path, 30)  # the file loses the end of its last batch behind our back
    log = open_log(tmp_path, clean_shutdown=True, recovery_point=end)
    assert log.log_end_offset == end - 2  # only the torn batch is gone, not the whole segment
    assert read_all(log) == written[:-1]
    assert "Truncated" in caplog.text
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    assert read_all(log)[-1][:8] == (end - 2).to_bytes(8, "big")  # offsets continue, none reused


def test_clean_shutdown_with_garbage_after_last_batch_is_recovered(tmp_path: Path) -> None:
    log, written = _log_with(tmp_path, 60)
    active_path, end = Path(log.segments[-1].log_path), log.log_end_offset
    log.close()
    with open(active_path, "ab") as f:
        f.write(b"\x00" * 100)  # a tail the clean shutdown never wrote
    log = open_log(tmp_path, clean_shutdown=True, recovery_point=end)
    assert log.log_end_offset == end
    assert os.path.getsize(active_path) == sum(len(b) for b in written) - sum(
        len(b) for b in written[: log.segments[-1].base_offset // 2])
    log.append_as_leader(batch(1), leader_epoch=0, now_ms=NOW)
    assert read_all(log) == written + [read_all(log)[-1]]


def test_clean_shutdown_log_shorter_than_its_recovery_point_is_recovered_and_reported(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    log, written = _log_with(tmp_path, 60)
    active = log.segments[-1]
    active_path, end = Path(active.log_path), log.log_end_offset
    log.close()
    _cut_active_tail(active_path, len(written[-1]))  # a whole batch lost, the rest intact
    log = open_log(tmp_path, clean_shutdown=True, recovery_point=end)
    assert log.log_end_offset == end - 2
    assert read_all(log) == written[:-1]
    assert "below its checkpointed recovery point" in caplog.text


def test_partition_missing_from_the_hw_checkpoint_starts_at_its_log_start(tmp_path: Path) -> None:
    """Kafka's default for a missing HW checkpoint entry is 0, clamped to the log start: never the log end,
    which would expose records no replica set ever acknowledged (the leader's ISR rule raises it later)."""
    log, _ = _log_with(tmp_path, 10)
    crash(log)
    log = open_log(tmp_path, clean_shutdown=False, log_start_offset=4)
    assert log.log_end_offset == 20
    assert log.high_watermark == log.log_start_offset == 4
    reopened_with_entry = open_log(tmp_path, clean_shutdown=False, high_watermark=12)
    assert reopened_with_entry.high_watermark == 12
