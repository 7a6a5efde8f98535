"""Log compaction: what a pass keeps, when logs are chosen, crash safety and races with the loop."""

from __future__ import annotations

import dataclasses

import os
from pathlib import Path

import pytest

from logtest_util import NOW, crash, read_all
from pybroker.common.config import BrokerConfig, ConfigError
from pybroker.log import LogConfig, LogManager, PartitionLog
from pybroker.log.cleaner import CleaningJob
from pybroker.log.errors import InvalidLogConfig
from pybroker.log.file_names import filename_prefix
from pybroker.log.manager import CLEANER_OFFSET_CHECKPOINT
from pybroker.records.batch import RecordBatch, validate_batch
from pybroker.records.constants import Compression
from pybroker.records.record import Record, RecordInput, build_batch

RETENTION = 10_000
COMPACT = LogConfig(segment_bytes=1024, index_interval_bytes=64, segment_index_bytes=4096,
                    file_delete_delay_ms=0, retention_ms=-1, cleanup_policy="compact",
                    min_cleanable_dirty_ratio=0.01, delete_retention_ms=RETENTION)

Pairs = list[tuple[bytes | None, bytes | None]]


def keyed(pairs: Pairs, *, ts: int = NOW, compression: Compression = Compression.NONE, pid: int = -1,
          epoch: int = -1, seq: int = -1) -> bytearray:
    return bytearray(build_batch([RecordInput(k, v, timestamp=ts) for k, v in pairs], compression=compression,
                                 producer_id=pid, producer_epoch=epoch, base_sequence=seq))


def new_log(tmp_path: Path, config: LogConfig = COMPACT, topic: str = "t") -> tuple[LogManager, PartitionLog]:
    manager = LogManager([str(tmp_path)], config)
    return manager, manager.get_or_create_log(topic, 0, config, now_ms=NOW)


def append(log: PartitionLog, pairs: Pairs, **kwargs: object) -> int:
    """Append one batch, move the high watermark like an ISR of one, return its first offset."""
    info = log.append_as_leader(keyed(pairs, **kwargs), leader_epoch=0, now_ms=NOW)  # type: ignore[arg-type]
    log.high_watermark = log.log_end_offset
    return info.first_offset


def updates(log: PartitionLog, count: int, keys: int = 5) -> dict[bytes, tuple[int, bytes]]:
    """``count`` single-record batches cycling over ``keys`` keys; key -> (offset, value) of the last."""
    latest: dict[bytes, tuple[int, bytes]] = {}
    for i in range(count):
        key, value = f"k{i % keys}".encode(), f"value-{i}".encode()
        latest[key] = (append(log, [(key, value)]), value)
    return latest


def clean(manager: LogManager, now_ms: int = NOW) -> list[CleaningJob]:
    """One cleaner pass as the broker runs it, with the thread part run inline."""
    jobs = manager.plan_cleaning(now_ms)
    for job in jobs:
        job.run()
        assert job.error is None, job.error
        manager.finish_cleaning(job, now_ms)
    return jobs


def records(log: PartitionLog) -> list[Record]:
    return [r for raw in read_all(log) for r in RecordBatch(raw).records()]


def batches(log: PartitionLog) -> list[RecordBatch]:
    return [validate_batch(raw) for raw in read_all(log)]


def temp_files(path: Path) -> list[str]:
    return [n for n in os.listdir(path) if n.endswith((".cleaned", ".swap", ".deleted"))]


def test_cleaning_keeps_latest_value_per_key_with_original_offsets(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    latest = updates(log, 200)
    active_before = read_all(log, log.active_segment.base_offset)
    leo = log.log_end_offset
    assert len(clean(manager)) == 1
    cleanable_end = log.active_segment.base_offset
    kept = [(r.offset, r.key, r.value) for r in records(log) if r.offset < cleanable_end]
    last_below_end = {f"k{i % 5}".encode(): i for i in range(cleanable_end)}  # record i has offset i
    assert kept == sorted((i, key, f"value-{i}".encode()) for key, i in last_below_end.items())
    assert read_all(log, cleanable_end) == active_before, "the active segment is untouched"
    assert log.log_end_offset == leo
    assert temp_files(tmp_path / "t-0") == []
    offsets = [r.offset for r in records(log)]
    assert offsets == sorted(set(offsets))
    for key, (offset, value) in latest.items():
        fetched = RecordBatch(log.read(offset, 1 << 20).slices.read()).records()  # type: ignore[union-attr]
        assert (fetched[0].offset, fetched[0].value) == (offset, value), "index lookups hit the exact offset"


def test_cleaned_log_survives_reopen_with_same_records(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    updates(log, 120)
    clean(manager)
    before = records(log)
    manager.shutdown()
    reopened = LogManager([str(tmp_path)], COMPACT)
    reopened.startup(NOW, {"t": COMPACT})
    log = reopened.get_log("t", 0)
    assert log is not None and records(log) == before


def test_batch_whose_records_all_survive_is_copied_byte_for_byte(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    append(log, [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])
    original = read_all(log)[0]
    updates(log, 60, keys=3)  # other keys only: nothing in the first batch is superseded
    assert clean(manager)
    assert read_all(log)[0] == original


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_compressed_batches_are_filtered_and_recompressed_with_the_same_codec(tmp_path: Path,
                                                                           codec: Compression) -> None:
    manager, log = new_log(tmp_path)
    first = append(log, [(b"a", b"old-a"), (b"b", b"keep-b"), (b"c", b"old-c")], compression=codec)
    append(log, [(b"a", b"new-a"), (b"c", b"new-c")], compression=codec)
    updates(log, 60, keys=3)
    clean(manager)
    rebuilt = batches(log)[0]
    assert rebuilt.compression == codec
    assert rebuilt.base_offset == first and rebuilt.last_offset == first + 2, "offsets and lastOffsetDelta kept"
    assert [(r.offset, r.key, r.value) for r in rebuilt.records()] == [(first + 1, b"b", b"keep-b")]
    assert [(r.key, r.value) for r in batches(log)[1].records()] == [(b"a", b"new-a"), (b"c", b"new-c")]


def test_tombstone_kept_until_delete_retention_then_removed(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    append(log, [(b"gone", b"v1")])
    tombstone = append(log, [(b"gone", None)])
    updates(log, 60)
    clean(manager, NOW)
    kept = [b for b in batches(log) if any(r.key == b"gone" for r in b.records())]
    assert [r.offset for b in kept for r in b.records()] == [tombstone], "the value before it is gone"
    assert kept[0].has_delete_horizon and kept[0].delete_horizon_ms == NOW + RETENTION
    assert [r.timestamp for r in kept[0].records()] == [NOW], "timestamps survive the horizon base"
    assert manager.plan_cleaning(NOW + RETENTION - 1) == [], "nothing dirty, horizon not reached"
    clean(manager, NOW + RETENTION)
    assert all(r.key != b"gone" for r in records(log))


def test_min_compaction_lag_leaves_recent_segments_dirty(tmp_path: Path) -> None:
    config = dataclasses.replace(COMPACT, min_compaction_lag_ms=60_000)
    manager, log = new_log(tmp_path, config)
    updates(log, 100)
    before = read_all(log)
    assert manager.plan_cleaning(NOW + 30_000) == []
    assert read_all(log) == before
    assert clean(manager, NOW + 60_001)
    assert len(records(log)) < 100


def test_max_compaction_lag_cleans_a_log_below_the_dirty_ratio(tmp_path: Path) -> None:
    config = dataclasses.replace(COMPACT, min_cleanable_dirty_ratio=0.99,
                                 max_compaction_lag_ms=60_000)
    manager, log = new_log(tmp_path, config)
    for i in range(150):
        append(log, [(f"unique-{i}".encode(), b"v")])
    assert clean(manager), "a new log is all dirty"
    updates(log, 30)
    assert manager.plan_cleaning(NOW + 1_000) == [], "ratio below 0.99 and the lag not reached"
    removed = clean(manager, NOW + 60_001)[0].records_removed
    assert removed > 0


def test_active_segment_is_never_cleaned(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    for i in range(5):
        append(log, [(b"k", f"v{i}".encode())])
    assert len(log.segments) == 1
    assert manager.plan_cleaning(NOW) == []
    assert len(records(log)) == 5


def test_records_above_the_high_watermark_are_not_cleaned(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    updates(log, 100)
    log.high_watermark = log.segments[1].base_offset
    jobs = clean(manager)
    assert jobs and jobs[0].end_offset == log.segments[1].base_offset


def test_dirty_ratio_selects_the_dirtiest_log_and_skips_clean_enough_ones(tmp_path: Path) -> None:
    config = dataclasses.replace(COMPACT, min_cleanable_dirty_ratio=0.5)
    manager = LogManager([str(tmp_path)], config)
    slightly = manager.get_or_create_log("slightly", 0, config, now_ms=NOW)
    very = manager.get_or_create_log("very", 0, config, now_ms=NOW)
    updates(slightly, 150, keys=150)
    updates(very, 150)
    clean(manager)
    clean(manager)
    assert manager.plan_cleaning(NOW) == [], "both logs are clean"
    updates(slightly, 30)  # a little dirt next to many clean keys: ratio below 0.5
    updates(very, 150)
    jobs = manager.plan_cleaning(NOW, max_jobs=2)
    assert [job.log.topic for job in jobs] == ["very"]
    assert jobs[0].dirty_ratio > 0.5
    assert manager.plan_cleaning(NOW) == [], "a log with a job in flight is not planned twice"
    jobs[0].run()
    assert manager.finish_cleaning(jobs[0], NOW)


def test_small_cleaned_segments_are_grouped_into_one(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    updates(log, 200, keys=3)
    clean(manager)
    assert sum(1 for seg in log.segments if seg.size == 0) > 5, "the first pass empties most segments"
    updates(log, 30, keys=3)
    before = len(log.segments)
    job = clean(manager)[0]  # the empty segments now fit one group
    assert job.outputs[0].base_offset == 0 and job.outputs[0].count > 5
    assert len(log.segments) == before - job.outputs[0].count + 1
    assert len([r for r in records(log) if r.offset < log.active_segment.base_offset]) <= 3


def test_cleaned_segment_keeps_the_age_of_the_segments_it_replaces(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    updates(log, 200, keys=3)
    hour_ago = NOW - 3_600_000
    for seg in log.segments[:-1]:
        os.utime(seg.log_path, ns=(hour_ago * 1_000_000, hour_ago * 1_000_000))
    clean(manager)
    emptied = [seg for seg in log.segments[:-1] if seg.size == 0]
    assert emptied, "most segments lose every record"
    assert all(abs(seg.largest_timestamp - hour_ago) <= 1 for seg in emptied), "retention.ms still sees them as old"


def test_cleaner_checkpoint_written_and_read_back_after_restart(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    updates(log, 100)
    jobs = clean(manager)
    end = jobs[0].end_offset
    assert end == log.active_segment.base_offset
    lines = (tmp_path / CLEANER_OFFSET_CHECKPOINT).read_text().splitlines()
    assert lines == ["0", "1", f"t 0 {end}"]
    manager.shutdown()
    reopened = LogManager([str(tmp_path)], COMPACT)
    reopened.startup(NOW, {"t": COMPACT})
    assert reopened.cleaner_offset("t", 0) == end


def test_leftover_cleaned_files_are_deleted_at_recovery(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    updates(log, 100)
    before = records(log)
    jobs = manager.plan_cleaning(NOW)
    jobs[0].run()  # the crash comes before the swap
    assert any(n.endswith(".log.cleaned") for n in os.listdir(tmp_path / "t-0"))
    crash(log)
    reopened = LogManager([str(tmp_path)], COMPACT)
    reopened.startup(NOW, {"t": COMPACT})
    log = reopened.get_log("t", 0)
    assert log is not None and records(log) == before
    assert temp_files(tmp_path / "t-0") == []


@pytest.mark.parametrize("old_segments_deleted", [False, True])
def test_swap_file_is_completed_at_recovery(tmp_path: Path, old_segments_deleted: bool) -> None:
    manager, log = new_log(tmp_path)
    latest = updates(log, 100)
    jobs = manager.plan_cleaning(NOW)
    job = jobs[0]
    job.run()
    replaced = [seg.log_path for seg in job.segments]
    for out in job.outputs:  # the crash comes after the renames to .swap (and maybe the deletes)
        for path in out.paths:
            os.rename(path, path.removesuffix(".cleaned") + ".swap")
    if old_segments_deleted:
        for path in replaced:
            os.rename(path, path + ".deleted")
    crash(log)
    reopened = LogManager([str(tmp_path)], COMPACT)
    reopened.startup(NOW, {"t": COMPACT})
    log = reopened.get_log("t", 0)
    assert log is not None
    assert temp_files(tmp_path / "t-0") == []
    values = {r.key: (r.offset, r.value) for r in records(log)}
    assert values == latest
    assert len(records(log)) < 100
    for key, (offset, value) in latest.items():
        fetched = RecordBatch(log.read(offset, 1 << 20).slices.read()).records()  # type: ignore[union-attr]
        assert (fetched[0].offset, fetched[0].value) == (offset, value)
    for seg in log.segments:
        seg.sanity_check()


def test_swap_above_an_unfinished_cleaned_file_is_discarded_at_recovery(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    updates(log, 100)
    before = records(log)
    job = manager.plan_cleaning(NOW)[0]
    job.run()
    assert len(job.outputs) >= 2
    crash(log)
    # Crash while renaming: the higher output is a .swap, the lower one still .cleaned.
    for path in job.outputs[1].paths:
        os.rename(path, path.removesuffix(".cleaned") + ".swap")
    reopened = LogManager([str(tmp_path)], COMPACT)
    reopened.startup(NOW, {"t": COMPACT})
    log = reopened.get_log("t", 0)
    assert log is not None and records(log) == before
    assert temp_files(tmp_path / "t-0") == []


def test_retention_during_a_clean_discards_the_stale_result(tmp_path: Path) -> None:
    config = dataclasses.replace(COMPACT, cleanup_policy="compact,delete", retention_bytes=4096)
    manager, log = new_log(tmp_path, config)
    updates(log, 150)
    job = manager.plan_cleaning(NOW)[0]
    assert log.delete_old_segments(NOW) > 0  # on the loop, while the thread would be running
    after_retention = read_all(log)
    job.run()
    assert manager.finish_cleaning(job, NOW) is False
    assert read_all(log) == after_retention
    assert temp_files(tmp_path / "t-0") == []
    assert manager.cleaner_offset("t", 0) is None
    assert clean(manager), "the next pass cleans what retention left"


def test_truncation_during_a_clean_discards_the_stale_result(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    updates(log, 150)
    job = manager.plan_cleaning(NOW)[0]
    log.truncate_to(log.segments[2].base_offset + 1)  # cuts a planned segment in place
    after = read_all(log)
    job.run()
    assert manager.finish_cleaning(job, NOW) is False
    assert read_all(log) == after
    assert temp_files(tmp_path / "t-0") == []
    assert clean(manager), "a stale pass does not make the log uncleanable"


def test_appends_during_a_clean_are_kept(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    updates(log, 100)
    job = manager.plan_cleaning(NOW)[0]
    job.run()
    added = updates(log, 50)  # appends (and rolls) between the thread part and the swap
    assert manager.finish_cleaning(job, NOW)
    for key, (offset, value) in added.items():
        assert (offset, value) in {(r.offset, r.value) for r in records(log) if r.key == key}


def test_deleted_log_discards_the_result(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    updates(log, 100)
    job = manager.plan_cleaning(NOW)[0]
    job.run()
    manager.delete_log("t", 0)
    assert manager.finish_cleaning(job, NOW) is False


def test_compact_delete_applies_time_retention_but_pure_compact_does_not(tmp_path: Path) -> None:
    for policy, expect_deleted in (("compact", False), ("compact,delete", True)):
        config = dataclasses.replace(COMPACT, cleanup_policy=policy, retention_ms=1_000)
        manager = LogManager([str(tmp_path / policy)], config)
        log = manager.get_or_create_log("t", 0, config, now_ms=NOW)
        updates(log, 100)
        deleted = manager.run_retention(NOW + 10_000)
        assert (deleted > 0) is expect_deleted, policy


def test_last_batch_of_a_producer_is_kept_as_an_empty_batch(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    offset = append(log, [(b"k", b"idempotent")], pid=7, epoch=0, seq=0)
    append(log, [(b"k", b"overwritten")])
    updates(log, 80)
    clean(manager)
    empty = [b for b in batches(log) if b.producer_id == 7]
    assert len(empty) == 1 and empty[0].records_count == 0
    assert (empty[0].base_offset, empty[0].last_offset, empty[0].base_sequence) == (offset, offset, 0)
    manager.shutdown()
    reopened = LogManager([str(tmp_path)], COMPACT)
    reopened.startup(NOW, {"t": COMPACT})
    log = reopened.get_log("t", 0)
    assert log is not None
    entry = log.producer_state.get(7)
    assert entry is not None and entry.last_seq == 0, "producer state survives the clean and a restart"
    log.append_as_leader(keyed([(b"k", b"next")], pid=7, epoch=0, seq=1), leader_epoch=0, now_ms=NOW)


def test_batch_of_an_older_producer_batch_is_dropped_when_empty(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    append(log, [(b"k", b"first")], pid=7, epoch=0, seq=0)
    append(log, [(b"k", b"second")], pid=7, epoch=0, seq=1)
    updates(log, 80)
    clean(manager)
    mine = [b for b in batches(log) if b.producer_id == 7]
    assert [b.base_sequence for b in mine] == [1]


def test_keyless_records_are_kept(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    append(log, [(None, b"no-key"), (b"k", b"old")])
    append(log, [(b"k", b"new")])
    updates(log, 60)
    clean(manager)
    assert [(r.key, r.value) for r in batches(log)[0].records()] == [(None, b"no-key")]


def test_compaction_config_keys_parse_and_validate() -> None:
    config = LogConfig.from_topic_configs(LogConfig(), {
        "cleanup.policy": "compact,delete", "min.cleanable.dirty.ratio": "0.25",
        "delete.retention.ms": "5", "min.compaction.lag.ms": "10", "max.compaction.lag.ms": "20"})
    assert (config.min_cleanable_dirty_ratio, config.delete_retention_ms, config.min_compaction_lag_ms,
            config.max_compaction_lag_ms) == (0.25, 5, 10, 20)
    assert config.compact_enabled and config.delete_enabled
    assert config.max_segment_ms == 20, "the active segment rolls in time to honour the max lag"
    assert config.to_topic_configs()["min.cleanable.dirty.ratio"] == "0.25"
    with pytest.raises(InvalidLogConfig, match="min.cleanable.dirty.ratio"):
        LogConfig.from_topic_configs(LogConfig(), {"min.cleanable.dirty.ratio": "1.5"})
    with pytest.raises(InvalidLogConfig, match="min.compaction.lag.ms"):
        LogConfig.from_topic_configs(LogConfig(), {"min.compaction.lag.ms": "30", "max.compaction.lag.ms": "20"})


def test_broker_cleaner_keys_provide_the_topic_defaults() -> None:
    defaults = BrokerConfig({"log.cleaner.min.cleanable.ratio": "0.3",
                             "log.cleaner.delete.retention.ms": "7"}).topic_defaults()
    config = LogConfig.from_topic_configs(LogConfig(), defaults)
    assert (config.min_cleanable_dirty_ratio, config.delete_retention_ms) == (0.3, 7)
    assert (config.min_compaction_lag_ms, config.max_compaction_lag_ms) == (0, 2**63 - 1)
    broker = BrokerConfig({})
    assert (broker["log.cleaner.enable"], broker["log.cleaner.backoff.ms"], broker["log.cleaner.threads"],
            broker["log.cleaner.dedupe.buffer.size"]) == (True, 15000, 1, 134217728)
    with pytest.raises(ConfigError, match="log.cleaner.min.cleanable.ratio"):
        BrokerConfig({"log.cleaner.min.cleanable.ratio": "2"})


def test_stale_cleaned_files_do_not_leak_into_a_new_pass(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    updates(log, 100)
    garbage = tmp_path / "t-0" / f"{filename_prefix(0)}.index.cleaned"
    garbage.write_bytes(b"\x00\x00\x00\x05\x00\x00\x00\x07" * 50)
    clean(manager)
    for seg in log.segments:
        seg.sanity_check()
