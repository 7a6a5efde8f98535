"""Transactions in the log: last stable offset, markers, the ``.txnindex`` and its rebuild."""

from __future__ import annotations

import os
import struct

import crc32c
import pytest

from pybroker.log.errors import InvalidProducerEpochError, TransactionCoordinatorFencedError, UnknownProducerIdError
from pybroker.log.producer_snapshot import write_snapshot
from pybroker.log.producer_state import ProducerStateEntry
from pybroker.log.txn_index import AbortedTxn, TransactionIndex
from pybroker.records.record import RecordInput, build_batch
from pybroker.records.control import build_end_txn_marker
from tests.unit.log.logtest_util import NOW, open_log


def txn_batch(pid: int, seq: int, n: int = 2, epoch: int = 0) -> bytearray:
    records = [RecordInput(b"k", b"v", timestamp=NOW) for _ in range(n)]
    return bytearray(build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                                 is_transactional=True))


def marker(pid: int, commit: bool, epoch: int = 0, coordinator_epoch: int = 3) -> bytearray:
    return bytearray(build_end_txn_marker(commit, producer_id=pid, producer_epoch=epoch,
                                          coordinator_epoch=coordinator_epoch, timestamp=NOW))


def append(log, data: bytearray) -> int:
    info = log.append_as_leader(data, leader_epoch=0, now_ms=NOW)
    log.set_high_watermark(log.log_end_offset)
    return info.first_offset


def test_last_stable_offset_stops_at_the_oldest_open_transaction(tmp_path):
    log = open_log(tmp_path)
    append(log, txn_batch(1, 0))  # offsets 0-1, producer 1 opens
    append(log, txn_batch(2, 0))  # offsets 2-3, producer 2 opens
    assert log.high_watermark == 4 and log.last_stable_offset == 0
    append(log, marker(1, commit=True))  # offset 4
    assert log.last_stable_offset == 2
    append(log, marker(2, commit=True))  # offset 5
    assert log.last_stable_offset == log.high_watermark == 6
    log.close()


def test_a_marker_from_an_older_coordinator_epoch_is_fenced_and_not_written(tmp_path):
    log = open_log(tmp_path)
    append(log, txn_batch(1, 0))  # 0-1
    append(log, marker(1, commit=True, coordinator_epoch=5))  # 2
    append(log, txn_batch(1, 2))  # 3-4, the next transaction
    with pytest.raises(TransactionCoordinatorFencedError):
        append(log, marker(1, commit=False, coordinator_epoch=4))
    assert log.log_end_offset == 5 and log.last_stable_offset == 3
    append(log, marker(1, commit=False, coordinator_epoch=5))  # the current coordinator still may
    assert log.last_stable_offset == log.log_end_offset == 6
    log.close()


def test_abort_marker_is_indexed_in_kafka_format(tmp_path):
    log = open_log(tmp_path)
    append(log, txn_batch(7, 0))  # 0-1
    append(log, txn_batch(8, 0))  # 2-3, still open when 7 aborts
    append(log, marker(7, commit=False))  # 4
    assert log.collect_aborted(0, 5) == [AbortedTxn(7, 0, 4, 2)]
    data = open(os.path.join(tmp_path, "00000000000000000000.txnindex"), "rb").read()
    assert data == struct.pack(">hqqqq", 0, 7, 0, 4, 2)
    assert log.collect_aborted(5, 10) == []
    log.close()


def test_committed_transactions_are_not_indexed(tmp_path):
    log = open_log(tmp_path)
    append(log, txn_batch(7, 0))
    append(log, marker(7, commit=True))
    assert log.collect_aborted(0, 10) == []
    assert not os.path.exists(os.path.join(tmp_path, "00000000000000000000.txnindex"))
    log.close()


def test_reopen_rebuilds_open_transactions_and_the_index(tmp_path):
    log = open_log(tmp_path)
    append(log, txn_batch(7, 0))  # 0-1
    append(log, marker(7, commit=False))  # 2
    append(log, txn_batch(9, 0))  # 3-4, open
    log.close()
    os.unlink(os.path.join(tmp_path, "00000000000000000000.txnindex"))
    os.unlink(os.path.join(tmp_path, "00000000000000000005.snapshot"))  # no snapshot: full replay
    reopened = open_log(tmp_path, clean_shutdown=True, high_watermark=5)
    assert reopened.last_stable_offset == 3
    assert reopened.collect_aborted(0, 5) == [AbortedTxn(7, 0, 2, 3)]
    assert reopened.producer_state.get(9).current_txn_first_offset == 3
    reopened.close()


def test_close_writes_a_snapshot_that_the_next_open_uses_instead_of_the_log(tmp_path):
    log = open_log(tmp_path)
    append(log, txn_batch(9, 0, n=3))  # 0-2, open
    log.close()
    path = os.path.join(tmp_path, "00000000000000000003.snapshot")
    data = open(path, "rb").read()
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 1) and crc == crc32c.crc32c(data[6:])
    producer_id, epoch, last_seq, last_offset, delta, _, _, txn_first = struct.unpack_from(">qhiqiqiq", data, 10)
    assert (producer_id, epoch, last_seq, last_offset, delta, txn_first) == (9, 0, 2, 2, 2, 0)

    reopened = open_log(tmp_path, clean_shutdown=True)
    entry = reopened.producer_state.get(9)
    assert entry is not None and entry.last_seq == 2 and entry.current_txn_first_offset == 0
    reopened.close()

    # A snapshot that differs from the log wins: the batches below it are not replayed.
    write_snapshot(str(tmp_path), 3, [ProducerStateEntry(42, 1, last_timestamp=NOW)])
    from_snapshot = open_log(tmp_path, clean_shutdown=True, high_watermark=3)
    assert set(from_snapshot.producer_state.producers) == {42}
    assert from_snapshot.last_stable_offset == 3
    from_snapshot.close()

    # After an unclean shutdown a snapshot above the recovery point is not trusted.
    write_snapshot(str(tmp_path), 3, [ProducerStateEntry(42, 1, last_timestamp=NOW)])
    after_crash = open_log(tmp_path, recovery_point=0)
    assert set(after_crash.producer_state.producers) == {9}
    after_crash.close()


def test_damaged_snapshot_is_deleted_and_the_log_replayed(tmp_path):
    log = open_log(tmp_path)
    append(log, txn_batch(9, 0))
    log.close()
    path = os.path.join(tmp_path, "00000000000000000002.snapshot")
    with open(path, "r+b") as f:
        f.seek(12)
        f.write(b"\xff")
    reopened = open_log(tmp_path, clean_shutdown=True)
    assert reopened.producer_state.get(9).current_txn_first_offset == 0
    assert reopened.last_stable_offset == 0
    reopened.close()


def test_snapshots_above_a_truncation_point_are_deleted(tmp_path):
    log = open_log(tmp_path)
    for seq in range(0, 60, 2):
        append(log, txn_batch(9, seq))  # small segments: every roll writes a snapshot
    rolled = [n for n in os.listdir(tmp_path) if n.endswith(".snapshot")]
    assert rolled
    log.truncate_to(4)
    assert all(int(n.split(".")[0]) <= 4 for n in os.listdir(tmp_path) if n.endswith(".snapshot"))
    log.close()


def test_truncation_drops_index_entries_at_or_after_the_offset(tmp_path):
    log = open_log(tmp_path)
    append(log, txn_batch(7, 0))  # 0-1
    append(log, marker(7, commit=False))  # 2
    log.truncate_to(2)
    assert log.collect_aborted(0, 10) == []
    log.close()


def test_marker_with_an_older_epoch_is_refused(tmp_path):
    log = open_log(tmp_path)
    append(log, txn_batch(7, 0, epoch=3))
    with pytest.raises(InvalidProducerEpochError):
        append(log, marker(7, commit=False, epoch=2))
    log.close()


def v2_marker(log, pid: int, commit: bool, epoch: int) -> int:
    """A marker of a transactions V2 transaction, as WriteTxnMarkers v2 with TransactionVersion 2 writes it."""
    info = log.append_as_leader(marker(pid, commit, epoch=epoch), leader_epoch=0, now_ms=NOW, transaction_version=2)
    log.set_high_watermark(log.log_end_offset)
    return info.first_offset


def test_a_v2_marker_must_carry_an_epoch_above_the_open_transactions(tmp_path):
    """KIP-1228: a V2 producer runs its next transaction at the epoch its last marker carried, so a late
    marker of that last transaction (at the same epoch) must not close the open one; as a legacy (V1)
    marker it would."""
    log = open_log(tmp_path)
    append(log, txn_batch(7, 0, epoch=3))  # 0-1: a transaction at epoch 3
    assert v2_marker(log, 7, commit=True, epoch=4) == 2  # its marker carries the bumped epoch
    assert v2_marker(log, 7, commit=True, epoch=4) == 3  # the coordinator's retry (its answer was lost) passes
    append(log, txn_batch(7, 0, epoch=4))  # 4-5: the next transaction, at the bumped epoch
    with pytest.raises(InvalidProducerEpochError, match="not above the current epoch 4"):
        v2_marker(log, 7, commit=True, epoch=4)  # a late marker of the transaction before
    with pytest.raises(InvalidProducerEpochError):
        v2_marker(log, 7, commit=False, epoch=3)
    assert log.log_end_offset == 6 and log.last_stable_offset == 4  # nothing written, still open
    assert v2_marker(log, 7, commit=False, epoch=5) == 6
    assert log.last_stable_offset == log.log_end_offset == 7
    assert log.collect_aborted(0, 7) == [AbortedTxn(7, 4, 6, 7)]
    log.close()


def test_a_legacy_marker_at_the_producers_epoch_closes_its_transaction(tmp_path):
    """V1 (TransactionVersion 0/1, WriteTxnMarkers v1): the marker carries the transaction's own epoch."""
    log = open_log(tmp_path)
    append(log, txn_batch(7, 0, epoch=4))
    assert log.append_as_leader(marker(7, commit=True, epoch=4), leader_epoch=0, now_ms=NOW,
                                transaction_version=1).first_offset == 2
    log.set_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset == 3
    log.close()


def test_index_search_stops_at_an_entry_stable_past_the_bound(tmp_path):
    index = TransactionIndex(str(tmp_path / "x.txnindex"))
    index.append(AbortedTxn(1, 0, 5, 6))
    index.append(AbortedTxn(2, 7, 9, 20))
    assert index.collect(0, 6) == ([AbortedTxn(1, 0, 5, 6)], True)
    assert index.collect(6, 30) == ([AbortedTxn(2, 7, 9, 20)], False)
    reopened = TransactionIndex(str(tmp_path / "x.txnindex"))
    assert reopened.entries == index.entries


def test_compaction_keeps_the_aborted_transactions_of_the_segments_it_replaces(tmp_path):
    from pybroker.log import LogConfig, LogManager

    config = LogConfig(segment_bytes=1024, index_interval_bytes=64, segment_index_bytes=4096, file_delete_delay_ms=0,
                       retention_ms=-1, cleanup_policy="compact", min_cleanable_dirty_ratio=0.01)
    manager = LogManager([str(tmp_path)], config)
    log = manager.get_or_create_log("t", 0, config, now_ms=NOW)
    append(log, txn_batch(7, 0))  # 0-1
    append(log, marker(7, commit=False))  # 2
    for i in range(60):
        append(log, bytearray(build_batch([RecordInput(b"k%d" % (i % 3), b"v" * 20, timestamp=NOW)])))
    jobs = manager.plan_cleaning(NOW)
    assert jobs
    for job in jobs:
        job.run()
        manager.finish_cleaning(job, NOW)
    assert log.segments[0].base_offset == 0 and len(log.segments) < 20
    assert log.collect_aborted(0, log.log_end_offset) == [AbortedTxn(7, 0, 2, 3)]
    manager.shutdown()


def test_transactional_batch_without_sequence_opens_its_transaction(tmp_path):
    """The coordinator's TxnOffsetCommit batches are transactional with sequence -1: they open a
    transaction like any other, so the LSO stops at them and an abort covers them in the .txnindex."""
    log = open_log(tmp_path)
    append(log, txn_batch(5, 0))  # 0-1: a committed transaction before
    append(log, marker(5, commit=True))  # 2
    first = append(log, txn_batch(7, -1))  # 3-4, no sequence
    assert log.last_stable_offset == first == 3
    append(log, marker(7, commit=False))  # 5
    assert log.last_stable_offset == log.high_watermark == 6
    assert log.collect_aborted(0, 6) == [AbortedTxn(7, 3, 5, 6)]
    log.close()
    reopened = open_log(tmp_path, recovery_point=0, high_watermark=6)  # replayed from the log
    assert reopened.collect_aborted(0, 6) == [AbortedTxn(7, 3, 5, 6)]
    reopened.close()


def test_a_transactional_batch_reusing_the_sequences_of_an_ended_transaction_is_refused(tmp_path):
    """Chaos rounds 7003 and 8013: librdkafka purged a batch of an aborted transaction that the broker
    had written (its answer never arrived) and sent the next transaction's records with the same epoch
    and sequence numbers. Answered as a duplicate, they were never written and the commit succeeded
    without them; refused as an unknown producer id, the client aborts and bumps its epoch."""
    log = open_log(tmp_path)
    append(log, txn_batch(7, 0, n=3))  # 0-2
    assert log.append_as_leader(txn_batch(7, 0, n=3), leader_epoch=0, now_ms=NOW).first_offset == 0  # a retry
    append(log, marker(7, commit=False))  # 3
    with pytest.raises(UnknownProducerIdError):
        log.append_as_leader(txn_batch(7, 0, n=3), leader_epoch=0, now_ms=NOW)
    assert log.log_end_offset == 4
    assert append(log, txn_batch(7, 3, n=3)) == 4  # the next sequence numbers open the next transaction
    log.close()
