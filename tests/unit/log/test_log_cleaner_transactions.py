"""Log compaction of transactional data (compactor rules 1, 6 and 7; cleaner's LSO bound)."""

from __future__ import annotations

import os
from pathlib import Path

from logtest_util import NOW, read_all
from test_log_cleaner import COMPACT, RETENTION, Pairs, append, batches, clean, new_log, updates
from pybroker.log import LogManager, PartitionLog
from pybroker.records.batch import RecordBatch
from pybroker.records.control import build_end_txn_marker
from pybroker.records.record import RecordInput, build_batch


def txn_append(log: PartitionLog, pid: int, seq: int, pairs: Pairs) -> int:
    """Append one transactional batch (epoch 0), move the high watermark past it, return its offset."""
    batch = build_batch([RecordInput(k, v, timestamp=NOW) for k, v in pairs], producer_id=pid,
                        producer_epoch=0, base_sequence=seq, is_transactional=True)
    info = log.append_as_leader(bytearray(batch), leader_epoch=0, now_ms=NOW)
    log.high_watermark = log.log_end_offset
    return info.first_offset


def end_txn(log: PartitionLog, pid: int, *, commit: bool, epoch: int = 0) -> int:
    """Append the COMMIT/ABORT marker of ``pid``'s open transaction; returns its offset."""
    marker = build_end_txn_marker(commit, producer_id=pid, producer_epoch=epoch, coordinator_epoch=0,
                                  timestamp=NOW)
    offset = log.append_as_leader(bytearray(marker), leader_epoch=0, now_ms=NOW).first_offset
    log.high_watermark = log.log_end_offset
    return offset


def values(log: PartitionLog) -> dict[bytes | None, list[bytes | None]]:
    """Key -> every value still in the log, in offset order (markers left out)."""
    found: dict[bytes | None, list[bytes | None]] = {}
    for rb in batches(log):
        if not rb.is_control:
            for r in rb.records():
                found.setdefault(r.key, []).append(r.value)
    return found


def markers(log: PartitionLog) -> dict[int, RecordBatch]:
    """Offset -> marker batch still in the log (emptied ones included)."""
    return {rb.base_offset: rb for rb in batches(log) if rb.is_control}


def reopen(path: Path, *, replay: bool) -> tuple[LogManager, PartitionLog]:
    """Open the shut-down log at ``path``; ``replay`` deletes its producer snapshots first."""
    for name in os.listdir(path / "t-0"):
        if replay and name.endswith(".snapshot"):
            os.unlink(path / "t-0" / name)
    manager = LogManager([str(path)], COMPACT)
    manager.startup(NOW, {"t": COMPACT})
    log = manager.get_log("t", 0)
    assert log is not None
    return manager, log


def test_aborted_records_are_dropped_and_never_shadow_a_committed_value(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    txn_append(log, 1, 0, [(b"k", b"committed")])
    end_txn(log, 1, commit=True)
    txn_append(log, 1, 1, [(b"k", b"aborted"), (b"only-aborted", b"aborted")])
    end_txn(log, 1, commit=False)
    assert len(log.collect_aborted(0, log.log_end_offset)) == 1
    append(log, [(b"later", b"idempotent")], pid=1, epoch=0, seq=3)  # the aborted batch is not pid 1's last
    updates(log, 60)
    clean(manager)
    found = values(log)
    assert found[b"k"] == [b"committed"], "the aborted write neither survives nor removes the committed one"
    assert b"only-aborted" not in found
    assert log.collect_aborted(0, log.log_end_offset) == [], "no aborted data left, no index entry"


def test_committed_transactional_records_compact_like_any_other(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    append(log, [(b"k", b"plain-old")])
    first = txn_append(log, 2, 0, [(b"k", b"txn-new"), (b"j", b"txn-old")])
    end_txn(log, 2, commit=True)
    newest_j = append(log, [(b"j", b"plain-new")])
    txn_append(log, 2, 2, [(b"z", b"keeps pid 2's state")])
    end_txn(log, 2, commit=True)
    updates(log, 60)
    clean(manager)
    found = values(log)
    assert (found[b"k"], found[b"j"]) == ([b"txn-new"], [b"plain-new"])
    rebuilt = next(rb for rb in batches(log) if rb.base_offset == first)
    assert rebuilt.is_transactional and (rebuilt.producer_id, rebuilt.base_sequence) == (2, 0)
    assert [(r.offset, r.key) for r in rebuilt.records()] == [(first, b"k")]
    assert any(rb.base_offset == newest_j for rb in batches(log))


def test_markers_without_data_wait_for_their_delete_horizon_then_go(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    txn_append(log, 3, 0, [(b"k", b"superseded")])
    commit_marker = end_txn(log, 3, commit=True)
    txn_append(log, 3, 1, [(b"k", b"aborted")])
    abort_marker = end_txn(log, 3, commit=False)
    append(log, [(b"k", b"newer")])
    txn_append(log, 3, 2, [(b"last", b"keeps pid 3's state")])
    end_txn(log, 3, commit=True)
    updates(log, 60)
    clean(manager)
    found = markers(log)
    assert found[commit_marker].delete_horizon_ms == NOW + RETENTION
    assert found[abort_marker].delete_horizon_ms == NOW + RETENTION
    assert values(log)[b"k"] == [b"newer"]
    updates(log, 40)
    assert clean(manager, NOW + RETENTION - 1), "a pass before the horizon"
    assert {commit_marker, abort_marker} <= markers(log).keys()
    assert clean(manager, NOW + RETENTION), "the markers' horizon triggers a pass"
    assert not {commit_marker, abort_marker} & markers(log).keys()


def test_marker_of_a_transaction_with_surviving_data_has_no_horizon(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    txn_append(log, 4, 0, [(b"stays", b"committed")])
    marker = end_txn(log, 4, commit=True)
    updates(log, 60)
    before = bytes(markers(log)[marker].raw())
    clean(manager, NOW + RETENTION)
    assert bytes(markers(log)[marker].raw()) == before


def test_last_marker_of_a_producer_without_data_stays_as_an_empty_batch(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    marker = end_txn(log, 9, commit=False, epoch=4)  # an abort with nothing written here
    updates(log, 60)
    clean(manager)
    assert markers(log)[marker].delete_horizon_ms == NOW + RETENTION
    clean(manager, NOW + RETENTION)
    emptied = markers(log)[marker]
    assert emptied.records_count == 0 and (emptied.producer_id, emptied.producer_epoch) == (9, 4)
    manager.shutdown()
    reopened, log = reopen(tmp_path, replay=True)
    entry = log.producer_state.get(9)
    assert entry is not None and entry.epoch == 4, "the epoch that fences zombies survives"
    reopened.shutdown()


def test_nothing_at_or_after_the_last_stable_offset_is_cleaned(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    updates(log, 40)
    lso = txn_append(log, 5, 0, [(b"k0", b"open")])
    updates(log, 40)
    assert log.last_stable_offset == lso < log.high_watermark
    unstable = next(seg.base_offset for seg in reversed(log.segments) if seg.base_offset <= lso)
    untouched = [raw for raw in read_all(log) if RecordBatch(raw).base_offset >= unstable]
    clean(manager)
    assert [raw for raw in read_all(log) if RecordBatch(raw).base_offset >= unstable] == untouched
    head = [r.key for rb in batches(log) if rb.base_offset < unstable for r in rb.records()]
    assert len(head) == len(set(head)), "the stable head was cleaned"
    cleaner_offset = manager.cleaner_offset("t", 0)
    assert cleaner_offset is not None and cleaner_offset <= lso
    end_txn(log, 5, commit=False)
    latest = updates(log, 20)  # moves the aborted transaction's segment out of the active one
    clean(manager)
    assert b"open" not in values(log)[b"k0"] and latest[b"k0"][1] in values(log)[b"k0"]


def test_txnindex_keeps_the_entries_of_aborted_data_still_in_the_log(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    txn_append(log, 6, 0, [(b"a", b"aborted, pid 6's last batch")])
    kept_marker = end_txn(log, 6, commit=False)
    txn_append(log, 7, 0, [(b"b", b"aborted")])
    end_txn(log, 7, commit=False)
    append(log, [(b"c", b"pid 7 moves on")], pid=7, epoch=0, seq=1)
    updates(log, 60)
    clean(manager)
    (entry,) = log.collect_aborted(0, log.log_end_offset)
    assert (entry.producer_id, entry.first_offset, entry.last_offset) == (6, 0, kept_marker)
    emptied = next(rb for rb in batches(log) if rb.producer_id == 6 and not rb.is_control)
    assert emptied.records_count == 0 and emptied.is_transactional, "producer 6's state survives"
    assert markers(log)[kept_marker].delete_horizon_ms is None, "its marker stays with it"
    segment = next(seg for seg in log.segments if seg.txn_index.entries)
    assert segment.base_offset <= kept_marker
    assert [e.last_offset for e in segment.txn_index.entries] == [kept_marker]
    manager.shutdown()
    reopened, log = reopen(tmp_path, replay=False)
    assert log.collect_aborted(0, log.log_end_offset) == [entry]
    reopened.shutdown()


def test_cleaned_log_replays_to_no_open_transaction(tmp_path: Path) -> None:
    manager, log = new_log(tmp_path)
    txn_append(log, 8, 0, [(b"k", b"aborted")])
    end_txn(log, 8, commit=False)
    txn_append(log, 8, 1, [(b"k", b"committed")])
    end_txn(log, 8, commit=True)
    append(log, [(b"k", b"newest")], pid=8, epoch=0, seq=2)
    updates(log, 60)
    clean(manager)
    clean(manager, NOW + RETENTION)
    assert not any(rb.is_transactional for rb in batches(log)), "data and markers of both are gone"
    manager.shutdown()
    reopened, log = reopen(tmp_path, replay=True)
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == log.high_watermark
    entry = log.producer_state.get(8)
    assert entry is not None and entry.last_seq == 2
    reopened.shutdown()
